"""``python -m benchmarks.run_all --profile quick|full [--only csv,tfrecord,balance,trainer,scaling,profile]``.

Runs the benchmark parts, writes ``benchmarks/results/latest.json`` (parts not run keep their last
results) and regenerates ``BENCHMARKS.md`` and the plots from it (``python -m benchmarks.report``).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks import balance, data, harness, images, scaling
from benchmarks.config import DEFAULT_PARTS, PARTS, PROFILES, Profile
from benchmarks.harness import PYTHON, Contender, Run, alternate, paired_ratio, run_process, summarize
from benchmarks.tfrecords import count_files
from shardprep import framing
from shardprep.formats import auto_unit_bytes

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
LATEST = os.path.join(RESULTS, "latest.json")
WORK = os.path.join(data.DATA_DIR, "work")


def log(message: str) -> None:
    print(message, flush=True)


def _fresh(path: str) -> Callable[[], None]:
    def prepare() -> None:
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(os.path.dirname(path.rstrip("/")), exist_ok=True)

    return prepare


def _manifest(folder: str) -> dict:
    with open(os.path.join(folder, "manifest.json")) as f:
        return json.load(f)


def _shard_counts(folder: str) -> list[int]:
    return [s["num_records"] for s in _manifest(folder)["splits"]["train"]["shards"]]


def _check_shardprep(folder: str, rows: int, shards: int) -> Callable[[Run], dict]:
    def check(run: Run) -> dict:
        counts = _shard_counts(folder)
        if sum(counts) != rows or len(counts) != shards or max(counts) - min(counts) > 1:
            raise RuntimeError(f"shardprep output in {folder}: {len(counts)} shards, {sum(counts)} records, spread "
                               f"{max(counts) - min(counts)}; expected {shards} shards of {rows} records, spread <= 1")
        return {"records": sum(counts), "shard_spread": max(counts) - min(counts)}

    return check


def _check_all(checks: Sequence[Callable[[Run], dict]]) -> Callable[[Run], dict]:
    """Every check of copies run at once; the first one's result."""
    def check(run: Run) -> dict:
        return [c(run) for c in checks][0]
    return check


def _check_files(paths: Callable[[], list[str]], rows: int, shards: int) -> Callable[[Run], dict]:
    def check(run: Run) -> dict:
        files = paths()
        counts = count_files(files)
        if sum(counts) != rows or len(counts) != shards:
            raise RuntimeError(f"{len(counts)} files holding {sum(counts)} records; expected {shards} files of {rows}")
        return {"records": sum(counts), "shard_spread": max(counts) - min(counts)}

    return check


def _check_bytes(path: str, expected: int) -> Callable[[Run], dict]:
    def check(run: Run) -> dict:
        size = os.path.getsize(path) if os.path.isfile(path) else data.dir_bytes(path, ("",))
        if size != expected:
            raise RuntimeError(f"{path} holds {size} bytes, expected {expected}")
        return {}

    return check


def _files(folder: str, prefix: str = "") -> Callable[[], list[str]]:
    return lambda: sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.startswith(prefix))


def _shardprep_cmd(inputs: str, output: str, shards: int, *extra: str) -> list[str]:
    return [PYTHON, "-m", "shardprep.run", "--input", inputs, "--output", output, "--num-shards", str(shards),
            "--overwrite", *extra]


def _throughput(summary: dict, mb: float, records: int) -> dict:
    out = dict(summary)
    out["mb_per_s"] = round(mb / summary["wall_s"], 2)
    out["records_per_s"] = round(records / summary["wall_s"], 1)
    return out


def _runs_json(runs: dict[str, list[Run]]) -> dict[str, list[dict]]:
    return {name: [r.to_json() for r in rs] for name, rs in runs.items()}


# --- 1. CSV -> tf.Example --------------------------------------------------------------------------


def part_csv(p: Profile, state: dict) -> dict:
    rows = p.csv_rows
    folder = data.csv_set(rows)
    files = data.csv_files(folder)
    nbytes = sum(os.path.getsize(f) for f in files)
    mb = nbytes / 1e6
    work = os.path.join(WORK, "csv")
    sp_out, nb_out, ps_out, cat_out = (os.path.join(work, n) for n in ("shardprep", "naive_beam", "plain", "cat"))
    n = p.num_shards
    contenders = [
        Contender("shardprep", _shardprep_cmd(os.path.join(folder, "*.csv"), sp_out, n),
                  prepare=_fresh(sp_out), check=_check_shardprep(sp_out, rows, n)),
        Contender("naive_beam", [PYTHON, "-m", "benchmarks.contenders.naive_beam", "--input",
                                 os.path.join(folder, "*.csv"), "--output", os.path.join(nb_out, "part"),
                                 "--num-shards", str(n)],
                  prepare=_fresh(nb_out), check=_check_files(_files(nb_out, "part-"), rows, n)),
        Contender("plain_script", [PYTHON, "-m", "benchmarks.contenders.plain_script",
                                   *[a for f in files for a in ("--input", f)], "--output", ps_out,
                                   "--num-shards", str(n)],
                  prepare=_fresh(ps_out), check=_check_files(_files(ps_out), rows, n)),
        Contender("cat", ["cat", *files, ">", cat_out], prepare=_fresh(cat_out), shell=True,
                  check=_check_bytes(cat_out, nbytes)),
    ]
    harness.warm(files)
    log(f"[csv] {rows} rows, {mb:.0f} MB in {len(files)} files -> {n} shards; {p.repeats} rounds")
    runs = alternate(contenders, p.repeats, log=log)
    data.adopt_plain(rows, ps_out)
    state["csv_shard_counts"] = _shard_counts(sp_out)
    state["csv_shardprep_runs"] = runs["shardprep"]
    state.setdefault("trainer_datasets", {})[rows] = _keep_dataset(sp_out, rows)
    summary = {name: _throughput(summarize(rs), mb, rows) for name, rs in runs.items()}
    sp = summary["shardprep"]
    ratios = {
        "speedup_vs_naive_beam": round(summary["naive_beam"]["wall_s"] / sp["wall_s"], 3),
        "speedup_vs_plain_script": round(summary["plain_script"]["wall_s"] / sp["wall_s"], 3),
        "fraction_of_cat": round(summary["cat"]["wall_s"] / sp["wall_s"], 4),
        "paired_speedup_vs_naive_beam": round(1 / paired_ratio(runs["shardprep"], runs["naive_beam"]), 3),
        "paired_speedup_vs_plain_script": round(1 / paired_ratio(runs["shardprep"], runs["plain_script"]), 3),
        "cpu_speedup_vs_naive_beam": round(summary["naive_beam"]["cpu_s"] / sp["cpu_s"], 3),
        "cpu_speedup_vs_plain_script": round(summary["plain_script"]["cpu_s"] / sp["cpu_s"], 3),
    }
    shutil.rmtree(work, ignore_errors=True)
    return {
        "dataset": {"rows": rows, "mb": round(mb, 1), "files_mb": [round(os.path.getsize(f) / 1e6, 1) for f in files],
                    "num_shards": n},
        "summary": summary,
        "ratios": ratios,
        "goals": [
            harness.goal("shardprep vs naive Beam (wall-time speed-up)", ratios["speedup_vs_naive_beam"], 3.0),
            harness.goal("shardprep vs plain script (wall-time speed-up)", ratios["speedup_vs_plain_script"], 1.0),
        ],
        "runs": _runs_json(runs),
    }


def _keep_dataset(output: str, rows: int) -> str:
    """Moves a shardprep output aside for later parts (trainer, balance), replacing an older one."""
    keep = os.path.join(data.DATA_DIR, f"shardprep-{rows}")
    shutil.rmtree(keep, ignore_errors=True)
    shutil.move(output, keep)
    return keep


def _dataset_for(rows: int, state: dict, shards: int) -> str:
    """A shardprep data set of ``csv_set(rows)``: from an earlier part of this invocation or made now."""
    known = state.setdefault("trainer_datasets", {})
    if rows in known:
        return known[rows]
    keep = os.path.join(data.DATA_DIR, f"shardprep-{rows}")
    try:
        if sum(_shard_counts(keep)) == rows and len(_shard_counts(keep)) == shards:
            known[rows] = keep
            return keep
    except (OSError, KeyError, ValueError):
        pass
    out = os.path.join(WORK, f"prep-{rows}")
    folder = data.csv_set(rows)
    run = run_process(_shardprep_cmd(os.path.join(folder, "*.csv"), out, shards))
    if run.returncode:
        raise RuntimeError(f"shardprep failed on {folder}:\n{run.tail}")
    known[rows] = _keep_dataset(out, rows)
    return known[rows]


# --- 2. TFRecord -> TFRecord -----------------------------------------------------------------------


def _tfdata_cmd(files: Sequence[str], output: str, shards: int) -> list[str]:
    """The batched plain tf.data script (issue 11's yardstick), TensorFlow's import included."""
    return [PYTHON, "-m", "benchmarks.contenders.tfdata_reshard", *(a for f in files for a in ("--input", f)),
            "--output", output, "--num-shards", str(shards)]


def _per_record(summary: dict, mb: float, rows: int) -> dict:
    out = _throughput(summary, mb, rows)
    out["us_per_record"] = round(1e6 * summary["wall_s"] / rows, 2)
    return out


def _schema_without_text(work: str) -> str:
    """A ``--schema`` file of the benchmark's features but ``text``: every record must be re-encoded."""
    features = data.set_features()
    del features["text"]
    path = os.path.join(work, "schema-without-text.json")
    os.makedirs(work, exist_ok=True)
    with open(path, "w") as f:
        json.dump(features, f)
    return path


def _first_record(src: str, dst: str) -> str:
    """Writes ``src``'s first TFRecord record, framed, to ``dst``."""
    with open(src, "rb") as f:
        record = next(framing.read_records(f))
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, "wb") as f:
        f.write(framing.frame(record))
    return dst


def part_tfrecord(p: Profile, state: dict) -> dict:
    """Two uneven TFRecord files -> 64 shards: shardprep (every core; one worker), the batched tf.data
    script and ``cp``; then the same records as one file, 2 worker processes vs 1 (the file is cut)."""
    rows = p.tfrecord_rows
    folder = data.tfrecord_set(rows)
    files = data.tfrecord_files(folder)
    nbytes = sum(os.path.getsize(f) for f in files)
    mb = nbytes / 1e6
    work = os.path.join(WORK, "tfrecord")
    sp_out, sp1_out, off_out, re_out, tf_out, cp_out, two_out, fixed_out = (os.path.join(work, n) for n in (
        "shardprep", "shardprep_1w", "no_statistics", "reencode", "tfdata", "cp", "two_at_once", "fixed_cost"))
    two = [os.path.join(two_out, f"copy-{i}") for i in range(2)]
    n = p.num_shards

    def prepare_dir(path: str) -> Callable[[], None]:
        def prepare() -> None:
            _fresh(path)()
            os.makedirs(path)
        return prepare

    pattern = os.path.join(folder, "*.tfrecord")
    contenders = [
        Contender("shardprep", _shardprep_cmd(pattern, sp_out, n), prepare=_fresh(sp_out),
                  check=_check_shardprep(sp_out, rows, n)),
        Contender("shardprep_1w", _shardprep_cmd(pattern, sp1_out, n, "--local-workers", "1"),
                  prepare=_fresh(sp1_out), check=_check_shardprep(sp1_out, rows, n)),
        # The statistics' cost (issue 36: on by default at every size)
        Contender("shardprep_no_statistics", _shardprep_cmd(pattern, off_out, n, "--statistics", "off"),
                  prepare=_fresh(off_out), check=_check_shardprep(off_out, rows, n)),
        # Every record re-encoded: a --schema that drops a field (the compiled reader, then the encoder)
        Contender("shardprep_reencode", _shardprep_cmd(pattern, re_out, n, "--schema", _schema_without_text(work)),
                  prepare=_fresh(re_out), check=_check_shardprep(re_out, rows, n)),
        # The machine's ceiling: two one-process runs at once, each into its own folder
        Contender("two_at_once", ["sh", "-c", " & ".join(shlex.join(_shardprep_cmd(pattern, o, n, "--local-workers", "1"))
                                                         for o in two) + "; wait"],
                  prepare=_fresh(two_out), check=_check_all([_check_shardprep(o, rows, n) for o in two])),
        # A run's fixed cost (Python, the imports, the plan, the commit): one record, one shard. One run
        # cannot overlap it, two at once overlap theirs: with the rest perfectly parallel (and two runs at
        # once as fast as one alone), the default reaches 1 - fixed / (2 x default) of the ceiling
        Contender("fixed_cost", _shardprep_cmd(_first_record(files[0], os.path.join(work, "one-record.tfrecord")),
                                               fixed_out, 1), prepare=_fresh(fixed_out), check=_check_shardprep(fixed_out, 1, 1)),
        Contender("tfdata_batched", _tfdata_cmd(files, tf_out, n), prepare=prepare_dir(tf_out),
                  check=_check_files(_files(tf_out, "part-"), rows, n)),
        Contender("cp", ["cp", *files, cp_out + "/"], prepare=prepare_dir(cp_out), check=_check_bytes(cp_out, nbytes)),
        # The disk's floor for storing the output durably, as shardprep stores shards (O_DIRECT, fsync):
        # the same bytes, one stream, nothing else done
        Contender("durable_write", ["sh", "-c", f"cat {' '.join(map(shlex.quote, files))} | dd of="
                                    f"{shlex.quote(os.path.join(cp_out, 'all'))} bs=4M iflag=fullblock oflag=direct "
                                    "conv=fsync status=none"],
                  prepare=prepare_dir(cp_out), check=_check_bytes(cp_out, nbytes)),
    ]
    harness.warm(files)
    log(f"[tfrecord] {rows} tf.Examples, {mb:.0f} MB in {len(files)} files -> {n} shards; {p.tfrecord_repeats} rounds")
    runs = alternate(contenders, p.tfrecord_repeats, log=log)
    fixed = summarize(runs.pop("fixed_cost"))
    summary = {name: _per_record(summarize(rs), mb, rows) for name, rs in runs.items()}

    # One file: cut into byte-range units, so two worker processes share it.
    one_dir = os.path.join(work, "one")
    os.makedirs(one_dir, exist_ok=True)
    one = os.path.join(one_dir, "all.tfrecord")
    with open(one, "wb") as out:
        for f in files:
            with open(f, "rb") as src:
                shutil.copyfileobj(src, out, 16 << 20)
    unit_mb = auto_unit_bytes(os.path.getsize(one)) / (1 << 20)  # the default --unit-mb, as a user gets it
    one_out2, one_out1 = (os.path.join(work, d) for d in ("one_2w", "one_1w"))
    one_contenders = [  # the flags: Beam's --direct_* size the local pool (shardprep.run_checks.direct_flags)
        Contender("one_file_2w", _shardprep_cmd(one, one_out2, n, "--direct_num_workers=2",
                                                "--direct_running_mode=multi_processing"),
                  prepare=_fresh(one_out2), check=_check_shardprep(one_out2, rows, n)),
        Contender("one_file_1w", _shardprep_cmd(one, one_out1, n, "--direct_num_workers=1"),
                  prepare=_fresh(one_out1), check=_check_shardprep(one_out1, rows, n)),
    ]
    harness.warm([one])
    log(f"[tfrecord] the same records as one {mb:.0f} MB file, units of {unit_mb:g} MiB (the default): 2 worker "
        "processes vs 1")
    one_runs = alternate(one_contenders, p.tfrecord_repeats, log=log)
    one_summary = {name: _per_record(summarize(rs), mb, rows) for name, rs in one_runs.items()}
    shutil.rmtree(work, ignore_errors=True)

    def speed(a: dict, b: str, c: str) -> float:
        return a[c]["wall_s"] / a[b]["wall_s"]

    vs_script, vs_script_1w = speed(summary, "shardprep", "tfdata_batched"), speed(summary, "shardprep_1w", "tfdata_batched")
    cut = speed(one_summary, "one_file_2w", "one_file_1w")
    fraction = summary["cp"]["wall_s"] / summary["shardprep"]["wall_s"]
    of_ceiling = summary["two_at_once"]["wall_s"] / (2 * summary["shardprep"]["wall_s"])  # MB/s / the ceiling's
    return {
        "dataset": {"rows": rows, "mb": round(mb, 1), "files_mb": [round(os.path.getsize(f) / 1e6, 1) for f in files],
                    "num_shards": n, "one_file_unit_mb": unit_mb},
        "summary": summary,
        "fixed_cost": fixed,
        "one_file": one_summary,
        "ratios": {"fraction_of_cp": round(fraction, 4), "vs_tfdata_batched": round(vs_script, 3),
                   "vs_tfdata_batched_1w": round(vs_script_1w, 3), "one_file_2w_vs_1w": round(cut, 3),
                   "default_of_ceiling": round(of_ceiling, 3),
                   "fixed_cost_estimate": round(1 - fixed["wall_s"] / (2 * summary["shardprep"]["wall_s"]), 3),
                   # the share of the default's time that storing its output durably takes alone: a
                   # phase after every record is parsed (a shard holds records of every unit)
                   "durable_write_of_default": round(summary["durable_write"]["wall_s"] / summary["shardprep"]["wall_s"], 3),
                   "no_statistics_vs_tfdata_batched": round(speed(summary, "shardprep_no_statistics", "tfdata_batched"), 3),
                   "reencode_vs_tfdata_batched": round(speed(summary, "shardprep_reencode", "tfdata_batched"), 3)},
        "goals": [
            harness.goal("shardprep (default) speed / batched tf.data script's", vs_script, 5.0),
            harness.goal("shardprep --local-workers 1 speed / batched tf.data script's", vs_script_1w, 1.0),
            harness.goal("shardprep (default) MB/s / two one-process runs at once (the machine's ceiling)", of_ceiling,
                         0.95),
            harness.goal("one file: 2 worker processes' speed / 1's (the file is cut)", cut, 1.6),
            harness.goal("shardprep peak memory, MB (whole process tree, PSS)", summary["shardprep"]["tree_pss_mb"], 500.0,
                  at_least=False, unit="MB"),
        ],
        "runs": _runs_json({**runs, **one_runs}),
    }


# --- 3. Balance ------------------------------------------------------------------------------------


def part_balance(p: Profile, state: dict) -> dict:
    rows = p.csv_rows
    folder = data.csv_set(rows)
    files = data.csv_files(folder)
    counts = state.get("csv_shard_counts") or _shard_counts(_dataset_for(rows, state, p.num_shards))
    methods = {
        "shardprep": counts,
        "beam_round_robin": balance.beam_round_robin(files, p.num_shards, split_bytes=1 << 20, seed=0),
        "hashed": balance.hashed(files, p.num_shards),
    }
    out: dict[str, Any] = {"dataset": {"rows": rows, "num_shards": p.num_shards}, "shard_counts": methods}
    if p.beam_dask_rows:
        out["beam_dask"] = _beam_on_dask(p.beam_dask_rows, p.num_shards)
    out["raw_files"] = balance.raw_counts(files)
    out["per_worker"] = balance.per_worker_table(
        {**methods, "raw_files": out["raw_files"]}, p.workers, batch=p.trainer_batch,
        exact={"shardprep"},
    )
    out["spread"] = {name: balance.spread(c) for name, c in {**methods, "raw_files": out["raw_files"]}.items()}
    out["batch"] = p.trainer_batch
    sp = out["spread"]["shardprep"]
    out["goals"] = [
        harness.goal("shardprep: records per shard, max - min", sp["max"] - sp["min"], 1, at_least=False, unit=""),
        harness.goal(f"shardprep: empty replica-steps for W in {list(p.workers)}",
              sum(r["empty_replica_steps"] for r in out["per_worker"]["shardprep"]), 0, at_least=False, unit=""),
    ]
    log("[balance] shard spread (max - min records): " +
        ", ".join(f"{k} {v['max'] - v['min']}" for k, v in out["spread"].items()))
    return out


def _beam_on_dask(rows: int, shards: int) -> dict:
    """The naive Beam job on the Dask runner (2 workers, 1 MB splits: many bundles): its real counts."""
    folder = data.csv_set(rows)
    out = os.path.join(WORK, "beam-dask")
    _fresh(out)()
    log(f"[balance] naive Beam job on the Dask runner, {rows} rows (slow: about a minute)")
    run = run_process([PYTHON, "-m", "benchmarks.contenders.naive_beam", "--input", os.path.join(folder, "*.csv"),
                       "--output", os.path.join(out, "part"), "--num-shards", str(shards), "--runner", "dask",
                       "--bundles", "64", "--split-mb", "1"])
    if run.returncode:
        return {"error": run.tail[-1500:]}
    counts = count_files(_files(out, "part-")())
    simulated = balance.beam_round_robin(data.csv_files(folder), shards, split_bytes=1 << 20, seed=0)
    shutil.rmtree(out, ignore_errors=True)
    return {"rows": rows, "counts": counts, "spread": balance.spread(counts), "wall_s": round(run.wall_s, 1),
            "simulated_spread": balance.spread(simulated)}


# --- 4. Trainer input ------------------------------------------------------------------------------


def part_trainer(p: Profile, state: dict) -> dict:
    rows = p.trainer_rows
    ds = _dataset_for(rows, state, p.num_shards)
    csv_folder = data.csv_set(rows)
    uneven = data.uneven_set(rows)
    b = p.trainer_batch
    out: dict[str, Any] = {"dataset": {"rows": rows, "per_replica_batch": b, "workers": 2}}
    # tf.data throughput of one worker.
    contenders = [
        Contender("shards", [PYTHON, "-m", "benchmarks.contenders.tfdata_read", "--mode", "shards", "--data", ds,
                             "--workers", "2", "--worker", "0", "--batch", str(b)], check=_tfdata_check),
        Contender("csv", [PYTHON, "-m", "benchmarks.contenders.tfdata_read", "--mode", "csv",
                          *[a for f in data.csv_files(csv_folder) for a in ("--input", f)], "--batch", str(b)],
                  check=_tfdata_check),
    ]
    log(f"[trainer] tf.data examples/s of one worker, batch {b}; {p.tfdata_repeats} rounds")
    runs = alternate(contenders, p.tfdata_repeats, log=log)
    rates = {name: statistics.median(r.extra["examples_per_s"] for r in rs) for name, rs in runs.items()}
    out["tfdata"] = {"examples_per_s": rates, "ratio_shards_vs_csv": round(rates["shards"] / rates["csv"], 3),
                     "runs": _runs_json(runs)}
    # Two workers training one epoch: shardprep shards vs the raw, uneven files.
    features = ",".join(f"f{j}" for j in range(8))
    out["training"] = {}
    for name, folder, extra, env in (
        ("shardprep", ds, [], {}),
        ("raw_uneven_files", uneven, ["--naive-files"], {"BENCH_ALLOW_UNEVEN": "1"}),
    ):
        model_dir = os.path.join(WORK, "trainer", name)
        _fresh(model_dir)()
        cmd = [PYTHON, "-m", "trainer.launch", "--workers", "2", "--module", "benchmarks.contenders.trainer_probe",
               "--", "--data", folder, "--model", "mlp", "--label", "label", "--features", features,
               "--per-replica-batch", str(b), "--epochs", "1", "--model-dir", model_dir, "--export", "none",
               "--log-every", "100000", *extra]
        run = run_process(cmd, env={**_env(), **env})
        if run.returncode:
            raise RuntimeError(f"trainer run {name} failed:\n{run.tail}")
        workers = []
        for w in range(2):
            with open(os.path.join(model_dir, "summary", f"worker-{w}.json")) as f:
                s = json.load(f)
            with open(os.path.join(model_dir, "timeline", f"worker-{w}.json")) as f:
                timeline = json.load(f)["steps"]
            workers.append({
                **{k: s.get(k) for k in ("steps", "examples", "empty_replica_steps", "input_wait_fraction",
                                         "input_wait_floor_fraction", "step_time_mean_s", "examples_per_second",
                                         "allreduce_fraction")},
                "timeline": timeline,
            })
        _compact_timelines(workers)
        out["training"][name] = {"wall_s": round(run.wall_s, 2), "workers": workers}
        log(f"[trainer] {name:>16s}: " + "; ".join(
            f"worker {i}: {w['steps']} steps, {w['empty_replica_steps']} empty, wait {w['input_wait_fraction']} "
            f"(floor {w['input_wait_floor_fraction']})"
            for i, w in enumerate(workers)))
    sp = out["training"]["shardprep"]["workers"]
    naive = out["training"]["raw_uneven_files"]["workers"]
    above = [w["input_wait_fraction"] - (w.get("input_wait_floor_fraction") or 0.0) for w in sp]
    out["goals"] = [
        harness.goal("input_wait_fraction (shardprep, worst worker)", max(w["input_wait_fraction"] for w in sp), 0.01,
              at_least=False, unit=""),
        harness.goal("input_wait_fraction above the iterator's floor (shardprep, worst worker)", max(above), 0.01,
              at_least=False, unit=""),
        harness.goal("empty_replica_steps (shardprep, all workers)", sum(w["empty_replica_steps"] for w in sp), 0,
              at_least=False, unit=""),
    ]
    out["naive_empty_replica_steps"] = sum(w["empty_replica_steps"] for w in naive)
    shutil.rmtree(os.path.join(WORK, "trainer"), ignore_errors=True)
    return out


def _compact_timelines(workers: list[dict], buckets: int = 60) -> None:
    """Replaces each worker's per-step list by runs of full/empty steps and per-bucket wait shares,
    on a clock shared by the workers (seconds from the first step's start)."""
    t0 = min(s[0] - s[2] for w in workers for s in w["timeline"])
    t1 = max(s[0] for w in workers for s in w["timeline"])
    width = (t1 - t0) / buckets or 1.0
    for w in workers:
        steps = w.pop("timeline")
        segments: list[list] = []
        wait = [0.0] * buckets
        busy = [0.0] * buckets
        count = [0] * buckets
        for i, (end, wait_s, step_s, examples) in enumerate(steps):
            start = end - step_s - t0
            kind = "empty" if examples is not None and sum(examples) == 0 else "full"
            if segments and segments[-1][2] == kind:
                segments[-1][1] = round(end - t0, 3)
                segments[-1][3] += 1
            else:
                segments.append([round(start, 3), round(end - t0, 3), kind, 1])
            if i == 0:
                continue  # the first step traces the function: kept out, as the trainer's own means do
            b = min(int(start / width), buckets - 1)
            wait[b] += wait_s or 0.0
            busy[b] += step_s
            count[b] += 1
        w["segments"] = segments
        w["buckets"] = {"width_s": round(width, 4), "steps": count,
                        "wait_fraction": [round(a / b, 4) if b else None for a, b in zip(wait, busy)]}


def _env() -> dict[str, str]:
    return harness._env()


def _tfdata_check(run: Run) -> dict:
    line = [x for x in run.extra.get("output", "").splitlines() if x.startswith("{")][-1]
    doc = json.loads(line)
    return {k: doc[k] for k in ("examples", "seconds", "examples_per_s", "setup_s")}


# --- 5. Scaling ------------------------------------------------------------------------------------


def part_scaling(p: Profile, state: dict) -> dict:
    n = p.num_shards
    points = []
    reused = state.get("csv_shardprep_runs") if p.csv_rows in p.scaling_rows else None
    cores = None
    if p.cores_repeats:  # issue 12: one process, every core, Dask; Parquet and JSON Lines (benchmarks.scaling)
        log(f"[scaling] one process, every core, Dask, Parquet, JSON Lines on {p.cores_rows} rows; "
            f"{p.cores_repeats} rounds")
        cores = scaling.compare(p.cores_rows, n, p.cores_repeats, log=log)
    for rows, repeats in ((p.tiny_rows, 1), *zip(p.scaling_rows, p.scaling_repeats)):
        folder = data.csv_set(rows)
        files = data.csv_files(folder)
        mb = sum(os.path.getsize(f) for f in files) / 1e6
        if rows == p.csv_rows and reused:
            runs, source = list(reused), "csv part"
        else:
            runs, source = [], "this part"
            out = os.path.join(WORK, "scaling", f"rows-{rows}")
            harness.warm(files)
            for _ in range(max(0, repeats - len(runs))):
                _fresh(out)()
                run = run_process(_shardprep_cmd(os.path.join(folder, "*.csv"), out, n))
                if run.returncode:
                    raise RuntimeError(f"shardprep failed on {rows} rows:\n{run.tail}")
                run.extra.pop("output", None)
                runs.append(run)
            shutil.rmtree(out, ignore_errors=True)
        s = summarize(runs)
        points.append({"rows": rows, "mb": round(mb, 1), **s, "s_per_mb": round(s["wall_s"] / mb, 5),
                       "cpu_s_per_mb": round(s["cpu_s"] / mb, 5), "runs_from": source,
                       "runs": [r.to_json() for r in runs]})
        log(f"[scaling] {rows:>9d} rows {mb:7.1f} MB: {s['wall_s']:7.2f} s wall, {s['cpu_s']:7.2f} s CPU, "
            f"{s['tree_rss_mb']:6.0f} MB peak RSS (median of {len(runs)})")
    shutil.rmtree(os.path.join(WORK, "scaling"), ignore_errors=True)
    sized = [pt for pt in points if pt["rows"] != p.tiny_rows]
    mid, big = sized[-2], sized[-1]
    per_mb = big["s_per_mb"] / mid["s_per_mb"]
    out = {
        "points": points,
        "per_mb_ratio_largest_vs_middle": round(per_mb, 3),
        "goals": [harness.goal(f"per-MB time at {big['mb']:.0f} MB / at {mid['mb']:.0f} MB", per_mb, 1.10, at_least=False)],
    }
    if cores:
        out["cores_and_formats"] = cores
        out["goals"] += cores["goals"]
    return out


# --- profile ---------------------------------------------------------------------------------------


def part_profile(p: Profile, state: dict) -> dict:
    from benchmarks import profile

    folder = data.csv_set(p.profile_rows)
    out = os.path.join(WORK, "profile")
    _fresh(out)()
    log(f"[profile] py-spy of shardprep on {p.profile_rows} rows")
    result = profile.profile_run(["--input", os.path.join(folder, "*.csv"), "--output", out, "--num-shards",
                                  str(p.num_shards), "--overwrite"])
    shutil.rmtree(out, ignore_errors=True)
    log(profile.format_table(result))
    result["rows"] = p.profile_rows
    return result


PART_FUNCS = {"csv": part_csv, "tfrecord": part_tfrecord, "balance": part_balance, "trainer": part_trainer,
              "scaling": part_scaling, "profile": part_profile, "images": images.part_images}


def _meta(profile: Profile) -> dict:
    def version(module: str) -> str | None:
        try:
            from importlib.metadata import version as v

            return v(module)
        except Exception:
            return None

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=harness.REPO, check=False).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                    text=True, cwd=harness.REPO, check=False).stdout.strip())
    except OSError:
        commit, dirty = "", False
    import psutil

    return {
        "profile": profile.name,
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit + ("+dirty" if dirty else ""),
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "apache_beam": version("apache-beam"),
        "tensorflow": version("tensorflow"),
        "load_average_start": harness.load_average(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run_all", description=__doc__.splitlines()[0])
    ap.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    ap.add_argument("--only", help=f"comma-separated parts: {','.join(PARTS)} (default: {','.join(DEFAULT_PARTS)}; "
                    "full adds profile)")
    ap.add_argument("--repeats", type=int, help="override the rounds of every comparison")
    ap.add_argument("--beam-dask-rows", type=int, help="also run the naive Beam job on the Dask runner on this many "
                    "rows, for Beam's real shard counts with many bundles (slow: about a minute per 50k rows)")
    ap.add_argument("--tfrecord-rows", type=int, help="override the TFRecord part's size (rows)")
    ap.add_argument("--image-sides", help="the images part's image sizes in px, comma-separated, the headline first "
                    "(default: benchmarks.images.SIDES, the 40 px demo pictures and 256 px photo-like JPEGs)")
    ap.add_argument("--results", default=LATEST, help="results JSON to update (default: %(default)s)")
    ap.add_argument("--no-report", action="store_true", help="do not regenerate BENCHMARKS.md and the plots")
    args = ap.parse_args(argv)
    only = args.only or ",".join(DEFAULT_PARTS + (("profile",) if args.profile == "full" else ()))
    parts = [x.strip() for x in only.split(",") if x.strip()]
    unknown = [x for x in parts if x not in PARTS]
    if unknown:
        ap.error(f"--only {','.join(unknown)}: expected parts among {','.join(PARTS)}")
    profile = PROFILES[args.profile]
    if args.repeats:
        import dataclasses

        profile = dataclasses.replace(profile, repeats=args.repeats, tfrecord_repeats=args.repeats,
                                      tfdata_repeats=args.repeats, cores_repeats=args.repeats)
    if args.tfrecord_rows:
        import dataclasses

        profile = dataclasses.replace(profile, tfrecord_rows=args.tfrecord_rows)
    if args.image_sides:
        import dataclasses

        profile = dataclasses.replace(profile, image_sides=tuple(int(x) for x in args.image_sides.split(",")))
    if args.beam_dask_rows is not None:
        import dataclasses

        profile = dataclasses.replace(profile, beam_dask_rows=args.beam_dask_rows)
    os.makedirs(RESULTS, exist_ok=True)
    results: dict[str, Any] = {}
    latest = args.results
    if os.path.exists(latest):
        with open(latest) as f:
            results = json.load(f)
    start = time.perf_counter()
    meta = _meta(profile)
    state: dict[str, Any] = {}
    for part in [x for x in PARTS if x in parts]:
        t0 = time.perf_counter()
        result = PART_FUNCS[part](profile, state)
        result["meta"] = {**meta, "seconds": round(time.perf_counter() - t0, 1),
                          "load_average_end": harness.load_average()}
        results[part] = result
        log(f"[{part}] done in {result['meta']['seconds']:.0f} s")
        with open(latest, "w") as f:
            json.dump(results, f, indent=1)
    shutil.rmtree(WORK, ignore_errors=True)
    results["meta"] = {**meta, "parts": parts, "seconds": round(time.perf_counter() - start, 1),
                       "load_average_end": harness.load_average()}
    with open(latest, "w") as f:
        json.dump(results, f, indent=1)
    log(f"[run] {', '.join(parts)} in {results['meta']['seconds']:.0f} s -> {os.path.relpath(latest)}")
    if not args.no_report and os.path.abspath(latest) == os.path.abspath(LATEST):
        from benchmarks import report

        report.main([])
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m benchmarks.report``: BENCHMARKS.md and the plots, from ``benchmarks/results/latest.json``.

Tables and plots come from the JSON only; the analysis (where the time goes, what bounds it, what
to change) is ``benchmarks/analysis.md``, included as written.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks import images, scaling

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
REPO = os.path.dirname(HERE)
OUT_MD = os.path.join(REPO, "BENCHMARKS.md")
ANALYSIS = os.path.join(HERE, "analysis.md")

COLORS = {"shardprep": "tab:green", "beam_round_robin": "tab:blue", "hashed": "tab:orange", "raw_files": "tab:gray"}
LABELS = {
    "shardprep": "shardprep (DirectRunner)",
    "naive_beam": "naive Beam job",
    "plain_script": "plain script",
    "cat": "`cat` (I/O bound)",
    "cp": "`cp` (I/O bound)",
    "beam_round_robin": "Beam `WriteToTFRecord(num_shards)`",
    "hashed": "hashed key ranges (TFDS)",
    "raw_files": "raw input files",
    "direct": "DirectRunner (1 process)",
    "direct_all_cores": "DirectRunner, every core (default)",
    "dask_2_workers": "Dask, 2 workers",
    "shardprep_reencode": "shardprep, `--schema` without `text` (every record re-encoded)",
    "shardprep_no_statistics": "shardprep, `--statistics off`",
}


def _label(name: str) -> str:
    return LABELS.get(name, name)


def _fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:,.{digits}f}"
    return str(x)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(":---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(_fmt(c) if not isinstance(c, str) else c for c in row) + " |" for row in rows]
    return out


def _goals(goals: Sequence[dict]) -> list[str]:
    rows = []
    for g in goals:
        op = ">=" if g["at_least"] else "<="
        unit = g.get("unit", "")
        rows.append([g["goal"], f"{op} {g['target']}{unit}", f"{g['value']:.3g}{unit}", "**met**" if g["met"] else "**not met**"])
    return _table(["goal", "target", "measured", ""], rows)


def _meta_line(meta: dict | None) -> str:
    if not meta:
        return ""
    return (f"_Profile `{meta.get('profile')}`, {meta.get('when')}, commit `{meta.get('commit')}`, "
            f"{meta.get('seconds', 0):.0f} s; load average {meta.get('load_average_start')} -> "
            f"{meta.get('load_average_end')} on {meta.get('cpus')} CPUs._")


# --- plots -----------------------------------------------------------------------------------------


def pyplot():  # noqa: ANN202  (matplotlib.pyplot, headless, the plots' font size)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 8, "figure.dpi": 100})
    return plt


def save_figure(plt, fig, name: str, folder: str = RESULTS) -> str:
    """Lays out, writes ``folder/name`` and closes the figure; returns the path."""
    fig.tight_layout()
    path = os.path.join(folder, name)
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_throughput(results: dict) -> str | None:
    csv, tfr = results.get("csv"), results.get("tfrecord")
    if not csv and not tfr:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, part, title in ((axes[0], csv, "CSV -> tf.Example, 64 shards"), (axes[1], tfr, "TFRecord -> 64 shards")):
        if not part:
            ax.set_visible(False)
            continue
        names = list(part["summary"])
        mb = part["dataset"]["mb"]
        values = [part["summary"][n]["mb_per_s"] for n in names]
        lo = [max(0.0, v - mb / part["summary"][n]["wall_max_s"]) for v, n in zip(values, names)]
        hi = [max(0.0, mb / part["summary"][n]["wall_min_s"] - v) for v, n in zip(values, names)]
        colors = ["tab:green" if n == "shardprep" else "tab:gray" for n in names]
        ax.barh([_label(n).replace("`", "") for n in names], values, xerr=[lo, hi], color=colors)
        ax.set_xscale("log")
        ax.set_xlabel("MB/s (median, whiskers: min-max; log scale)")
        ax.set_title(f"{title} ({mb:.0f} MB)")
        for y, v in enumerate(values):
            ax.text(v, y, f" {v:.1f}", va="center")
    return save_figure(plt, fig, "throughput.png")


def plot_balance(results: dict) -> str | None:
    bal = results.get("balance")
    if not bal:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    ax = axes[0]
    for name, counts in bal["shard_counts"].items():
        ax.plot(range(len(counts)), sorted(counts), label=_label(name).replace("`", ""), drawstyle="steps-mid",
                color=COLORS.get(name))
    ax.set_xlabel("shard (sorted by records)")
    ax.set_ylabel("records")
    ax.set_title(f"records per shard ({bal['dataset']['rows']:,} records, {bal['dataset']['num_shards']} shards)")
    ax.legend()
    ax = axes[1]
    for name, rows in bal["per_worker"].items():
        ws = [r["workers"] for r in rows if "fails" not in r]
        idle = [100 * r["idle_fraction"] for r in rows if "fails" not in r]
        ax.plot(ws, idle, marker="o", label=_label(name).replace("`", ""), color=COLORS.get(name))
        failed = [r["workers"] for r in rows if "fails" in r]
        if failed:
            ax.plot(failed, [0] * len(failed), "x", color=COLORS.get(name), markersize=8,
                    label="raw files: FILE sharding fails")
    ax.set_xscale("log", base=2)
    ax.set_xticks(bal["per_worker"]["shardprep"][0:] and [r["workers"] for r in bal["per_worker"]["shardprep"]])
    ax.get_xaxis().set_major_formatter(__import__("matplotlib").ticker.ScalarFormatter())
    ax.set_xlabel("workers W")
    ax.set_ylabel("% of replica-steps empty (idle)")
    ax.set_title(f"idle share per epoch, batch {bal['batch']} per worker")
    ax.legend(fontsize=7, loc="upper right")
    return save_figure(plt, fig, "balance.png")


def plot_timelines(results: dict) -> str | None:
    tr = results.get("trainer")
    if not tr or "training" not in tr:
        return None
    plt = pyplot()
    runs = dict(sorted(tr["training"].items(), key=lambda kv: kv[0] != "shardprep"))
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 1.3 + 0.9 * len(runs)), squeeze=False, sharex=True)
    for ax, (name, run) in zip(axes[:, 0], runs.items()):
        for i, w in enumerate(run["workers"]):
            full = [(a, b - a) for a, b, kind, _ in w["segments"] if kind == "full"]
            empty = [(a, b - a) for a, b, kind, _ in w["segments"] if kind == "empty"]
            ax.broken_barh(full, (i - 0.35, 0.7), color="tab:green")
            if empty:
                ax.broken_barh(empty, (i - 0.35, 0.7), color="tab:red")
            floor = w.get("input_wait_floor_fraction")
            ax.text(0, i + 0.42, f"{w['steps']} steps, {w['empty_replica_steps']} empty, input wait "
                    f"{100 * (w['input_wait_fraction'] or 0):.1f}%"
                    + (f" (floor {100 * floor:.1f}%)" if floor is not None else ""), fontsize=7)
        ax.set_yticks(range(len(run["workers"])), [f"worker {i}" for i in range(len(run["workers"]))])
        ax.set_ylim(-0.5, len(run["workers"]) - 0.2)
        ax.set_title(f"{name.replace('_', ' ')}: green = steps with data, red = empty steps", fontsize=8)
    axes[-1, 0].set_xlabel("seconds since the first step")
    return save_figure(plt, fig, "trainer_timelines.png")


def plot_scaling(results: dict, folder: str = RESULTS) -> str | None:
    """Re-shard time and peak memory against input size (``scaling.png`` in ``folder``; docs/make_charts.py too)."""
    sc = results.get("scaling")
    if not sc:
        return None
    plt = pyplot()
    pts = sc["points"]
    mb = [p["mb"] for p in pts]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    ax = axes[0]
    ax.plot(mb, [p["wall_s"] for p in pts], "o-", label="wall (median)")
    ax.plot(mb, [p["cpu_s"] for p in pts], "s--", label="CPU (median)")
    mid = [p for p in pts if p["mb"] > 2][-2] if len(pts) > 2 else pts[-1]
    ax.plot([0, max(mb)], [0, mid["s_per_mb"] * max(mb)], ":", color="gray", label="linear through the middle size")
    ax.set_xlabel("input MB")
    ax.set_ylabel("seconds")
    ax.set_title("re-shard time vs size (DirectRunner)")
    ax.legend()
    ax = axes[1]
    ax.plot(mb, [p["tree_rss_mb"] for p in pts], "o-", color="tab:purple")
    ax.set_xlabel("input MB")
    ax.set_ylabel("peak RSS, MB")
    ax.set_title("peak memory vs size")
    return save_figure(plt, fig, "scaling.png", folder)


def plot_profile(results: dict) -> str | None:
    pr = results.get("profile")
    if not pr:
        return None
    plt = pyplot()
    stages = pr["stages"][::-1]
    fig, ax = plt.subplots(figsize=(7, 0.25 * len(stages) + 1))
    ax.barh([s["stage"] for s in stages], [s["seconds"] for s in stages], color="tab:blue")
    for y, s in enumerate(stages):
        ax.text(s["seconds"], y, f" {100 * s['share']:.0f}%", va="center")
    ax.set_xlabel("seconds (py-spy samples of the main thread, wall clock)")
    ax.set_title(f"where one shardprep run's time goes ({pr.get('rows', 0):,} CSV rows)")
    return save_figure(plt, fig, "profile.png")


# --- markdown --------------------------------------------------------------------------------------


def _img(path: str | None) -> list[str]:
    if not path:
        return []
    rel = os.path.relpath(path, REPO)
    return [f"![{os.path.basename(path)}]({rel})", ""]


def section_summary(results: dict) -> list[str]:
    rows = []
    for part in ("csv", "tfrecord", "balance", "trainer", "scaling", "images"):
        for g in results.get(part, {}).get("goals", []):
            op = ">=" if g["at_least"] else "<="
            rows.append([part, g["goal"], f"{op} {g['target']}{g.get('unit', '')}",
                         f"{g['value']:.3g}{g.get('unit', '')}", "met" if g["met"] else "**not met**"])
    if not rows:
        return []
    return ["## Goals at a glance", "", *_table(["part", "goal", "target", "measured", ""], rows), ""]


def section_csv(results: dict, img: str | None) -> list[str]:
    part = results.get("csv")
    if not part:
        return []
    d, s, r = part["dataset"], part["summary"], part["ratios"]
    rows = [[_label(n), v["wall_s"], v["cpu_s"], v["mb_per_s"], v["records_per_s"], v["tree_rss_mb"], v["n"]]
            for n, v in s.items()]
    out = [
        "## 1. CSV to tf.Example re-shard", "",
        f"{d['rows']:,} rows, {d['mb']:.0f} MB in 3 files of {', '.join(f'{x:.0f}' for x in d['files_mb'])} MB "
        f"(8 float columns, an id, a label, a ~400-byte text column) to {d['num_shards']} shards. "
        "Each contender is its own process (imports included), alternating, median of "
        f"{next(iter(s.values()))['n']} rounds.", "",
        *_table(["contender", "wall s", "CPU s", "MB/s", "records/s", "peak RSS MB", "runs"], rows), "",
        f"Ratios (wall time): shardprep is **{r['speedup_vs_naive_beam']:.2f}x** the naive Beam job "
        f"(paired by round: {r['paired_speedup_vs_naive_beam']:.2f}x; CPU time: {r['cpu_speedup_vs_naive_beam']:.2f}x) "
        f"and **{r['speedup_vs_plain_script']:.2f}x** the plain script (paired: "
        f"{r['paired_speedup_vs_plain_script']:.2f}x; CPU: {r['cpu_speedup_vs_plain_script']:.2f}x); "
        f"it runs at {100 * r['fraction_of_cat']:.1f}% of `cat`'s throughput.", "",
        *_goals(part["goals"]), "", _meta_line(part.get("meta")), "",
    ]
    return out + _img(img)


def section_tfrecord(results: dict) -> list[str]:
    part = results.get("tfrecord")
    if not part:
        return []
    d, s = part["dataset"], part["summary"]

    def rows_of(summary: dict) -> list[list]:
        return [[_label(n), v["wall_s"], v["cpu_s"], v["mb_per_s"], v.get("us_per_record", "-"), v["tree_rss_mb"],
                 v.get("tree_pss_mb", "-"), v["n"]] for n, v in summary.items()]

    head = ["contender", "wall s", "CPU s", "MB/s", "us/record", "peak RSS MB", "peak PSS MB", "runs"]
    out = [
        "## 2. TFRecord to TFRecord re-shard", "",
        f"{d['rows']:,} existing tf.Examples (written by TensorFlow), {d['mb']:.0f} MB in 2 files of "
        f"{', '.join(f'{x:.0f}' for x in d['files_mb'])} MB, to {d['num_shards']} shards: shardprep (default: every "
        "core; and `--local-workers 1`), the batched plain script (`tf.data.TFRecordDataset(files).batch(4096)"
        ".as_numpy_iterator()`, 64 `tf.io.TFRecordWriter`s round-robin, TensorFlow's import included; "
        "`benchmarks/contenders/tfdata_reshard.py`) and `cp` of the same bytes.", "",
        *_table(head, rows_of(s)), "",
        f"shardprep reaches **{100 * part['ratios']['fraction_of_cp']:.1f}%** of `cp`'s throughput.", "",
    ]
    if "fixed_cost" in part:
        out += [f"A run's fixed cost (Python, the imports, the plan and the commit: shardprep on one record, to one "
                f"shard) is **{part['fixed_cost']['wall_s']:.2f} s**. One run cannot overlap it with its own work; two "
                "runs at once overlap theirs, one per core. If the rest of its work kept both cores busy, and two runs "
                "at once each went as fast as one alone, the default would reach 1 - fixed / (2 x default) of that "
                f"ceiling: **{part['ratios']['fixed_cost_estimate']:.3f}x** here, against "
                f"{part['ratios']['default_of_ceiling']:.3f}x measured.", ""]
    if "no_statistics_vs_tfdata_batched" in part["ratios"]:
        out += [f"Without the statistics (`--statistics off`; they are on by default) shardprep runs at "
                f"**{part['ratios']['no_statistics_vs_tfdata_batched']:.2f}x** the batched script's speed.", ""]
    if "reencode_vs_tfdata_batched" in part["ratios"]:
        out += [f"With every record re-encoded (a `--schema` that drops `text`: the compiled Example reader, "
                f"then the encoder) shardprep runs at **{part['ratios']['reencode_vs_tfdata_batched']:.2f}x** the "
                "batched script's speed by default.", ""]
    if "one_file" in part:
        out += [f"The same records as one {d['mb']:.0f} MB file (units of {d.get('one_file_unit_mb', 64):g} MiB), "
                "with the issue's flags, `--direct_num_workers=2 --direct_running_mode=multi_processing` (two processes of "
                "the local pool, as `--local-workers 2`, the default on this machine) vs `--direct_num_workers=1`:", "",
                *_table(head, rows_of(part["one_file"])), "",
                "Peak memory is that of the whole process tree, sampled every 50 ms in a round of its own (sampling "
                "takes CPU from the timed rounds: on 2 cores it slowed the two-process run by ~0.6 s): RSS sums every "
                "process's resident pages, so "
                "pages the pool processes share copy-on-write with the launcher they were forked from count once per process; PSS "
                "splits each shared page among the processes that map it (what the tree really holds).", ""]
    prof = part.get("profile")
    if prof:  # py-spy, added by hand from the commands it names (see BENCHMARKS.md)
        out += [f"py-spy profile, before (`{prof['before_commit']}`) and after, {prof['setup']}:", "",
                *_table(["where", "before s", "after s"], [[k, b, a] for k, b, a in prof["rows"]]), "",
                f"Command: `{prof['command']}`.", ""]
    return [*out, *_goals(part["goals"]), "", _meta_line(part.get("meta")), ""]


def section_balance(results: dict, img: str | None) -> list[str]:
    bal = results.get("balance")
    if not bal:
        return []
    rows = [[_label(n), v["shards"], v["min"], v["max"], v["max"] - v["min"], f"{100 * v['cv']:.2f}%"]
            for n, v in bal["spread"].items()]
    out = [
        "## 3. Balance", "",
        f"Records per shard for the {bal['dataset']['rows']:,}-row CSV set, {bal['dataset']['num_shards']} shards. "
        "shardprep: its manifest. Beam: `WriteToTFRecord(num_shards)`'s own `_RoundRobinKeyFn`, one bundle per "
        "1 MB input split (random start per bundle). Hashed: shard = range of a 128-bit key-hash space "
        "(TFDS's current Beam writer).", "",
        *_table(["assignment", "shards", "min", "max", "spread", "CV"], rows), "",
    ]
    if "beam_dask" in bal and "counts" in bal["beam_dask"]:
        bd = bal["beam_dask"]
        out += [f"The naive Beam job run for real on the Dask runner (2 workers, {bd['rows']:,} rows, 1 MB splits) "
                f"gave shards of {bd['spread']['min']} to {bd['spread']['max']} records (the simulation of the same "
                f"splits: {bd['simulated_spread']['min']} to {bd['simulated_spread']['max']}); it took "
                f"{bd['wall_s']:.0f} s.", ""]
    workers = [r["workers"] for r in bal["per_worker"]["shardprep"]]
    header = ["assignment", *[f"W={w}" for w in workers]]
    rows = []
    for name, table in bal["per_worker"].items():
        cells = []
        for r in table:
            if "fails" in r:
                cells.append("fails")
            else:
                lo, hi = min(r["steps"]), max(r["steps"])
                cells.append(f"{lo}-{hi} ({100 * r['idle_fraction']:.1f}%)" if lo != hi else f"{lo} (0%)")
        rows.append([_label(name), *cells])
    out += [
        f"Steps per epoch per worker (min-max over workers; in brackets the share of replica-steps that are "
        f"empty), per-worker batch {bal['batch']}. Other assignments: whole files per worker (w, w+W, ...), "
        "ceil(records/B) batches each, and TF steps every worker until the last runs dry. shardprep: the "
        "trainer's plan (file mode when W divides the shard count, exact record ranges otherwise).", "",
        *_table(header, rows), "", *_goals(bal.get("goals", [])), "", _meta_line(bal.get("meta")), "",
    ]
    return out + _img(img)


def section_trainer(results: dict, img: str | None) -> list[str]:
    tr = results.get("trainer")
    if not tr:
        return []
    d, t = tr["dataset"], tr["tfdata"]
    out = [
        "## 4. Trainer input", "",
        f"tf.data examples/s of one worker (parse included, batch {d['per_replica_batch']}): the trainer's own "
        f"pipeline over its shards (worker 0 of 2) **{t['examples_per_s']['shards']:,.0f}/s** vs "
        f"`tf.data.experimental.CsvDataset` over the raw CSV **{t['examples_per_s']['csv']:,.0f}/s** "
        f"(**{t['ratio_shards_vs_csv']:.2f}x**).", "",
        f"Two workers (MWMS on loopback, CPU), one epoch of {d['rows']:,} records, batch {d['per_replica_batch']} "
        "per replica, `mlp` on f0..f7:", "",
    ]
    rows = []
    for name, run in tr["training"].items():
        for i, w in enumerate(run["workers"]):
            floor = w.get("input_wait_floor_fraction")
            rows.append([name.replace("_", " "), i, w["steps"], w["examples"], w["empty_replica_steps"],
                         f"{100 * (w['input_wait_fraction'] or 0):.2f}%",
                         "-" if floor is None else f"{100 * floor:.2f}%", f"{1000 * (w['step_time_mean_s'] or 0):.2f}",
                         run["wall_s"]])
    out += _table(["input", "worker", "steps", "examples", "empty replica-steps", "input wait",
                   "wait floor (in-memory batch)", "step ms", "job wall s"], rows)
    out += ["", *_goals(tr["goals"]), "", _meta_line(tr.get("meta")), ""]
    return out + _img(img)


def section_scaling(results: dict, img: str | None) -> list[str]:
    sc = results.get("scaling")
    if not sc:
        return []
    rows = [[f"{p['rows']:,}", p["mb"], p["wall_s"], p["cpu_s"], f"{1000 * p['s_per_mb']:.1f}",
             f"{1000 * p['cpu_s_per_mb']:.1f}", p["tree_rss_mb"], p["n"]] for p in sc["points"]]
    out = [
        "## 5. Scaling", "",
        "shardprep on the DirectRunner at growing sizes (the smallest row is the start-up cost).", "",
        *_table(["rows", "MB", "wall s", "CPU s", "wall ms/MB", "CPU ms/MB", "peak RSS MB", "runs"], rows), "",
        f"Per-MB time at the largest size over that at the middle size: **{sc['per_mb_ratio_largest_vs_middle']:.2f}**.", "",
    ]
    cf = sc.get("cores_and_formats")
    if cf:
        pa = cf["pyarrow_parse_cpu_s"]
        out += [
            f"Every core, Dask and the other formats (issue 12; `python -m benchmarks.scaling`): {cf['rows']:,} rows, "
            f"{cf['mb']:.0f} MB of CSV in 3 files, and the same rows as one Parquet and one JSON Lines file, to "
            f"{cf['shards']} shards; contenders alternated, medians, and each ratio the median of the rounds' ratios "
            "(this machine's speed swings ~1.5x within minutes). CPU s: the whole process tree (pool processes, the "
            "Dask cluster the run starts); CPU s per GB sizes a bigger machine or cluster. Its CPU's ceiling: the "
            "speed-up the run's CPU s would allow if each of its workers' cores were busy from start to end (one "
            "process's wall time x workers / CPU s, per round, median); a run whose ceiling is under its goal needs "
            "less CPU, not more overlap. Two one-process runs at once (each into its own folder; its ratio counts both "
            "copies' work): what this machine's two cores give to two copies of the work that share nothing, the most "
            "any 2-worker run could reach here.", "",
            *scaling.table(cf), "",
            f"pyarrow's CSV parse alone (one thread, a fresh process): {cf['mb'] / pa['first_pass']:.0f} MB per CPU s on "
            f"its first pass, {cf['mb'] / pa['second_pass']:.0f} on a second; one process re-sharding: "
            f"{100 * cf['share_of_pyarrow_first_pass']:.0f}% and {100 * cf['share_of_pyarrow_second_pass']:.0f}% of "
            "those rates per CPU s.", "",
        ]
    else:
        out += ["(This profile skips the comparison of every core, Dask and the formats; `make bench` runs it.)", ""]
    out += [
        *_goals(sc["goals"]), "", _meta_line(sc.get("meta")), "",
    ]
    return out + _img(img)


def section_profile(results: dict, img: str | None) -> list[str]:
    pr = results.get("profile")
    if not pr:
        return []
    rows = [[s["stage"], s["seconds"], f"{100 * s['share']:.1f}%"] for s in pr["stages"]]
    return [
        "## Profile: where one run's time goes", "",
        f"py-spy (main thread, wall clock, idle included) of `python -m shardprep.run --local-workers 1` on "
        f"{pr.get('rows', 0):,} CSV rows, 64 shards: {pr['wall_s']:.1f} s under the profiler. One process runs "
        "every stage on its main thread; the statistics' counting thread is not sampled, and py-spy "
        "attaches after the process has started (some of the imports can go unsampled).", "",
        *_table(["stage", "seconds", "share"], rows), "", _meta_line(pr.get("meta")), "", *_img(img),
    ]


def render(results: dict) -> str:
    imgs = {
        "throughput": plot_throughput(results),
        "balance": plot_balance(results),
        "timelines": plot_timelines(results),
        "scaling": plot_scaling(results),
        "profile": plot_profile(results),
    }
    meta = results.get("meta", {})
    lines = [
        "# Benchmarks", "",
        "Generated by `python -m benchmarks.report` from `benchmarks/results/latest.json`; run them with "
        "`make bench-quick` (about 100 MB, under 3 minutes) or `make bench` (about 1 GB, under 20 minutes), or "
        "`python -m benchmarks.run_all --profile quick|full [--only csv,tfrecord,balance,trainer,scaling,profile]`.", "",
        "Every comparison runs its contenders in the same invocation, alternating (A, B, C, A, B, C, ...), each as "
        "its own process (imports included); tables show medians and ratios. The machine is shared and noisy: "
        "absolute times mean little, ratios more, CPU seconds a little more than wall seconds.", "",
        f"Machine: {meta.get('cpus')} CPUs, {meta.get('memory_gib')} GiB; Python {meta.get('python')}, "
        f"Beam {meta.get('apache_beam')}, TensorFlow {meta.get('tensorflow')}.", "",
        *section_summary(results),
        *section_csv(results, imgs["throughput"]),
        *section_tfrecord(results),
        *section_balance(results, imgs["balance"]),
        *section_trainer(results, imgs["timelines"]),
        *section_scaling(results, imgs["scaling"]),
        *images.section(results),
        *section_profile(results, imgs["profile"]),
    ]
    if os.path.exists(ANALYSIS):
        with open(ANALYSIS) as f:
            lines += [f.read().rstrip(), ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__.splitlines()[0])
    p.add_argument("--results", default=os.path.join(RESULTS, "latest.json"))
    p.add_argument("--output", default=OUT_MD)
    args = p.parse_args(argv)
    with open(args.results) as f:
        results = json.load(f)
    text = render(results)
    with open(args.output, "w") as f:
        f.write(text)
    print(f"[report] wrote {os.path.relpath(args.output)} and plots in {os.path.relpath(RESULTS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

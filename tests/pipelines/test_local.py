"""Every core by default: the worker-count choice, byte-identical shards for 1 and 2 worker
processes, one copy of the data in spill, and no spill left after a full disk or an interrupt."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines import engines, local
from shardprep import capacity, config, formats, manifest, run
from shardprep.errors import UsageError
from shardprep.graph import spill
from tests.conftest import ROOT, sample_rows, uneven_csvs, write_csv

MB = 1 << 20


@pytest.mark.parametrize("requested, input_bytes, units, cores, expected", [
    (None, MB // 2, 8, 16, 1),          # tiny input: all start-up, the pool would add CPU for nothing
    (None, 10 * MB, 8, 16, 8),          # small input: the pool parses while Beam is imported
    (None, 500 * MB, 1, 16, 1),         # one unit: nothing to share
    (None, 500 * MB, 8, 16, 8),         # at most one worker per unit
    (None, 500 * MB, 40, 16, 16),       # one per core
    (3, 1 * MB, 1, 16, 3),              # the flag wins
    (None, 20 * MB, None, 2, 2),        # units planned on the pool (a text run's store): one per core
    (None, MB // 2, None, 2, 1),        # ... unless the input is tiny
])
def test_plan_workers(requested, input_bytes, units, cores, expected):
    assert local.plan_workers(requested=requested, input_bytes=input_bytes, num_units=units, cores=cores) == expected


def test_plan_workers_refuses_zero():
    with pytest.raises(UsageError, match="--local-workers 0: expected 1 or more"):
        local.plan_workers(requested=0, input_bytes=0, num_units=1, cores=2)


def _raw(folder: Path) -> Path:
    uneven_csvs(folder, 3000)
    path = write_csv(folder / "part-9.csv", sample_rows(400, start=3000))
    with open(path, "a") as f:
        f.write("1,2,3\nx,0.1,0.2,0.3,1,more,extra\n")  # two dead letters
    return folder


def _contents(root: Path) -> dict:
    m = manifest.load(str(root))
    return {
        "shards": {s.path.split("/", 1)[1]: (s.crc32c, s.num_records) for sp in m.splits.values() for s in sp.shards},
        "rejected": [(root / p).read_bytes() for p in m.rejected.paths],
        "accounting": m.accounting,
    }


@pytest.mark.slow
def test_shards_identical_for_one_and_two_worker_processes(tmp_path, capsys):
    """Two splits (side input and GroupByKey across processes), dead letters and gzip: same bytes;
    the workers' log lines come back as plain lines, and each stage ends with one summary. Beam's
    own multi-processing flags get the same pool, not Beam's SDK workers."""
    raw = _raw(tmp_path / "raw")
    args = ["--input", f"{raw}/*.csv", "--num-shards", "3", "--split", "train=0.8,eval=0.2", "--unit-mb", "0.05",
            "--max-bad-records", "2", "--compression", "gzip"]
    got = {}
    for name, flags in {"1": ["--local-workers", "1"], "2": ["--local-workers", "2"],
                        "beam": ["--direct_running_mode=multi_processing", "--direct_num_workers", "2"]}.items():
        out = tmp_path / f"out-{name}"
        assert run.main([*args, "--output", str(out), *flags]) == 0
        got[name] = _contents(out)
        err = capsys.readouterr().err
        assert "Parse: 3402 records read (2 rejected)" in err and "WriteShards: 6 shards written" in err, err
        assert "Worker: severity" not in err and "semi_persistent_directory" not in err, err
        if name != "1":
            assert "direct runner: 2 worker processes" in err and "per-record path from record 1" in err, err
        assert not list(out.glob("run-*/spill")), "spill left after commit"
    assert got["1"]["accounting"].rejected == 2
    assert len(got["1"]["shards"]) == 6
    assert got["1"] == got["2"] == got["beam"]


@pytest.mark.slow
def test_batch_bounds_and_read_paths_do_not_change_the_shards(tmp_path, monkeypatch):
    """Parse's batch bounds (records, bytes) and WriteShards' two ways of reading a batch's records
    (a map of its file, or one read per record: ``spill.SPARSE``) change the work, never the
    bytes: batches of a few records, read one way then the other, give the shards, dead letters and
    accounting of batches as large as a unit."""
    raw = _raw(tmp_path / "raw")
    args = ["--input", f"{raw}/*.csv", "--num-shards", "40", "--split", "train=0.8,eval=0.2", "--unit-mb", "0.2",
            "--max-bad-records", "2", "--local-workers", "1"]
    assert run.main([*args, "--output", str(tmp_path / "whole")]) == 0
    made, real = [], config.ReshardConfig

    def small_batches(*a, **kw):  # what run.main builds, with batches of at most 7 records or 3,000 bytes
        made.append(1)
        return real(*a, **kw, batch_records=7, batch_bytes=3000)

    for name, sparse in (("read", 0), ("mapped", 10**9)):
        with monkeypatch.context() as patch:
            patch.setattr(config, "ReshardConfig", small_batches)
            patch.setattr(spill, "SPARSE", sparse)  # 0: every piece read record by record; 10**9: every piece mapped
            assert run.main([*args, "--output", str(tmp_path / name)]) == 0
        assert made, "the run did not build its config through config.ReshardConfig"
        assert _contents(tmp_path / name) == _contents(tmp_path / "whole"), name


@pytest.mark.slow
def test_a_spill_too_large_for_memory_is_reordered_into_the_same_shards(tmp_path, monkeypatch, capsys):
    """On a machine whose free memory cannot hold the spill, each batch is reordered by shard in
    spill (WriteShards then reads one piece per shard, never the same pages once per shard): same
    shards, dead letters and accounting as in place, with the pool and without."""
    raw = _raw(tmp_path / "raw")
    args = ["--input", f"{raw}/*.csv", "--num-shards", "3", "--split", "train=0.8,eval=0.2", "--unit-mb", "0.05",
            "--max-bad-records", "2"]
    assert run.main([*args, "--output", str(tmp_path / "in-place")]) == 0
    assert "may not stay" not in capsys.readouterr().err
    monkeypatch.setattr(capacity, "available_memory", lambda: 0)  # a machine with no memory to spare
    for workers in ("1", "2"):
        out = tmp_path / f"reordered-{workers}"
        assert run.main([*args, "--output", str(out), "--local-workers", workers]) == 0
        err = capsys.readouterr().err
        assert "may not stay in the page cache (0 MB of free memory): each batch is reordered" in err, err
        assert _contents(out) == _contents(tmp_path / "in-place")
        assert not list(out.glob("run-*/spill")), "spill left after commit"


def test_spill_estimate_counts_the_largest_copy_and_gzip():
    def file(name: str, size: int, fmt: str) -> formats.InputFile:
        return formats.InputFile(0, name, size, fmt, name.endswith(".gz"))

    tabular = capacity.RUN_SPACE_FACTOR // 2  # a tf.train.Example of short fields takes up to ~3x the CSV
    assert capacity.spill_bytes([file("a.csv", 100, "csv"), file("b.tfrecord", 50, "tfrecord")]) == 100 * tabular + 50
    assert capacity.spill_bytes([file("a.jsonl.gz", 100, "jsonl")]) == 400 * tabular
    assert capacity.spill_bytes([file("a.tfrecord.gz", 100, "tfrecord")]) == 400
    assert capacity.fits_in_memory(100, 200) and not capacity.fits_in_memory(101, 200) and capacity.fits_in_memory(1 << 40, None)


def test_the_spill_is_read_in_place_only_by_processes_of_this_machine():
    files = [formats.InputFile(0, "a.csv", 1000, "csv", False)]

    def here(runner: str, address: str | None = None) -> bool:
        return run._spill_in_place(engines.engine(runner).on_this_machine(engines.RunOptions(runner, dask_address=address)),
                                   files)

    assert here("direct") and here("dask") and here("beam")  # the local engine, a local cluster, Beam in process
    assert not here("dask", "10.0.0.1:8786")  # workers of other machines
    assert not here("dask", "tcp://scheduler.internal:8786")
    for address in ("127.0.0.1:8786", "tcp://127.0.0.1:41234", "tcp://localhost:8786", "tcp://[::1]:8786"):
        assert here("dask", address), address  # a scheduler on loopback: its workers are here
    assert not here("flink") and not here("dataflow")


def test_free_memory_is_bounded_by_the_cgroup_limit(tmp_path):
    """The probe reads the limit of the process's own memory cgroup (a container's), not only the machine's."""
    here = next((line.split(":", 2)[2].strip() for line in Path("/proc/self/cgroup").read_text().splitlines()
                 if line.split(":", 2)[1] == "memory"), None)
    group = Path(f"/sys/fs/cgroup/memory{here}/shardprep-test-{os.getpid()}") if here else None
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(256 << 20))
    except (AttributeError, OSError):
        pytest.skip("no cgroup v1 memory controller to create a group in here")
    try:
        probe = "from shardprep import capacity; print(capacity.available_memory())"
        enter = f"echo $$ > {group}/cgroup.procs && exec {sys.executable} -c '{probe}'"
        inside = subprocess.run(["sh", "-c", enter], capture_output=True, text=True, cwd=ROOT)
        if inside.returncode and "cgroup.procs" in inside.stderr:
            pytest.skip(f"cannot move a process into a memory cgroup here: {inside.stderr.strip()}")
        assert inside.returncode == 0, inside.stderr
        free = int(inside.stdout)
        machine = int(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                                     cwd=ROOT).stdout)
        assert 0 < free < 256 << 20 < machine
    finally:
        group.rmdir()


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (needs the right to mount: root in CI's container); resized with ``remount``."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _repetitive_parquet(path: Path, rows: int) -> Path:
    """Dictionary-coded columns: a few kB of Parquet that make ~90 bytes of tf.Example a row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"user_id": [i % 100 for i in range(rows)], "category": ["alpha", "beta"] * (rows // 2),
                             "score": [0.5] * rows}), path)
    return path


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_full_disk_removes_the_spill_and_says_how_much_space(fmt, tmp_path, small_disk, capsys):
    """The space the message names is enough for a rerun, also where the input's size says little
    (a 5 kB Parquet file making a 1.6 MB data set)."""
    raw = tmp_path / "raw"
    if fmt == "csv":
        write_csv(raw / "a.csv", sample_rows(8000))
    else:
        _repetitive_parquet(raw / "a.parquet", 20_000)
    out = small_disk / "ds"
    args = ["--input", f"{raw}/*.{fmt}", "--output", str(out), "--num-shards", "2", "--local-workers", "1"]
    assert run.main(args) == 1
    err = capsys.readouterr().err
    assert "no space left on the device" in err and "needs at most" in err, err
    leftovers = [p for p in out.rglob("*") if p.is_file()] if out.exists() else []
    assert leftovers == [], leftovers
    needed = float(re.search(r"needs at most ([\d,.]+) MB", err).group(1).replace(",", "")) * 1e6
    subprocess.run(["mount", "-o", f"remount,size={int(needed) + 64 * 1024}", str(small_disk)], check=True)
    assert run.main(args) == 0, capsys.readouterr().err  # the space the message named is enough for one run
    result = manifest.load(str(out))
    assert result.accounting.written == (8000 if fmt == "csv" else 20_000)
    data_set = sum(split.num_bytes for split in result.splits.values())
    assert needed <= 12 * data_set, (needed, data_set)  # and not wildly more (a bound: the worst case of these values)


@pytest.mark.slow
def test_sigint_removes_the_run_folder(tmp_path):
    """A real subprocess interrupted after its shards are written, before commit: nothing stays."""
    raw = tmp_path / "raw"
    write_csv(raw / "a.csv", sample_rows(2000))
    out = tmp_path / "ds"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SHARDPREP_TEST_DELAYS": "commit.assembled=60"}
    proc = subprocess.Popen([sys.executable, "-m", "shardprep.run", "--input", f"{raw}/*.csv", "--output", str(out),
                             "--num-shards", "2"], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list(out.glob("run-*/train/*.tfrecord")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert list(out.glob("run-*/spill/*.bin")), "the run should hold its spill while it waits before commit"
    time.sleep(3)  # the last shard is in place: let the run reach its wait before commit, where the test interrupts it
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert not list(out.glob("run-*")), sorted(str(p) for p in out.rglob("*"))
    shutil.rmtree(out, ignore_errors=True)

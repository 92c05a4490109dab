"""Every core by default: the worker-count choice, byte-identical shards for 1 and 2 worker
processes, one copy of the data in spill, and no spill left after a full disk or an interrupt."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, sample_rows, uneven_csvs, write_csv
from pipelines import local
from shardprep import manifest, run
from shardprep.errors import UsageError
from shardprep.graph import spill

MB = 1 << 20


@pytest.mark.parametrize("requested, input_bytes, units, cores, expected", [
    (None, MB // 2, 8, 16, 1),          # tiny input: all start-up, the pool would add CPU for nothing
    (None, 10 * MB, 8, 16, 8),          # small input: the pool parses while Beam is imported
    (None, 500 * MB, 1, 16, 1),         # one unit: nothing to share
    (None, 500 * MB, 8, 16, 8),         # at most one worker per unit
    (None, 500 * MB, 40, 16, 16),       # one per core
    (3, 1 * MB, 1, 16, 3),              # the flag wins
])
def test_plan_workers(requested, input_bytes, units, cores, expected):
    assert local.plan_workers(requested=requested, input_bytes=input_bytes, num_units=units, cores=cores) == expected


def test_plan_workers_refuses_zero():
    with pytest.raises(UsageError, match="--local-workers 0: expected 1 or more"):
        local.plan_workers(requested=0, input_bytes=0, num_units=1, cores=2)


def test_beam_flags_ask_for_beams_own_workers():
    assert local.workers_of(["--direct_running_mode=multi_processing", "--direct_num_workers=3"]) == 3
    assert local.workers_of(["--direct_num_workers=3"]) == 1  # in_memory mode: one process whatever the count


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
    the workers' log lines come back as plain lines, and each stage ends with one summary."""
    raw = _raw(tmp_path / "raw")
    args = ["--input", f"{raw}/*.csv", "--num-shards", "3", "--split", "train=0.8,eval=0.2", "--unit-mb", "0.05",
            "--max-bad-records", "2", "--compression", "gzip"]
    got = {}
    for workers in (1, 2):
        out = tmp_path / f"out-{workers}"
        assert run.main([*args, "--output", str(out), "--local-workers", str(workers)]) == 0
        got[workers] = _contents(out)
        err = capsys.readouterr().err
        assert "Parse: 3402 records read (2 rejected)" in err and "WriteShards: 6 shards written" in err, err
        assert "Worker: severity" not in err and "semi_persistent_directory" not in err, err
        if workers == 2:
            assert "direct runner: 2 worker processes" in err and "per-record path from record 1" in err, err
        assert not list(out.glob("run-*/spill")), "spill left after commit"
    assert got[1]["accounting"].rejected == 2
    assert len(got[1]["shards"]) == 6
    assert got[1] == got[2]


def test_reorder_keeps_one_copy_and_survives_a_retry(tmp_path):
    """Assign's spill step removes the parsed file once the sorted one exists; a retried bundle
    (parsed file gone) keeps the sorted file it finds."""
    records = [bytes([i]) * (i + 1) for i in range(5)]
    ends = np.cumsum([len(r) for r in records]).astype("<u8")
    parsed, ordered = tmp_path / "parsed.bin", tmp_path / "sorted.bin"
    parsed.write_bytes(b"".join(records))
    order = np.array([3, 0, 4, 1, 2])
    spill.reorder(str(parsed), str(ordered), ends, order)
    assert not parsed.exists()
    expected = b"".join(records[i] for i in order)
    assert ordered.read_bytes() == expected
    spill.reorder(str(parsed), str(ordered), ends, order)  # the retry
    assert ordered.read_bytes() == expected


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


def test_full_disk_removes_the_spill_and_says_how_much_space(tmp_path, small_disk, capsys):
    raw = tmp_path / "raw"
    write_csv(raw / "a.csv", sample_rows(8000))
    out = small_disk / "ds"
    args = ["--input", f"{raw}/*.csv", "--output", str(out), "--num-shards", "2", "--local-workers", "1"]
    assert run.main(args) == 1
    err = capsys.readouterr().err
    assert "no space left on the device" in err and "needs about" in err, err
    leftovers = [p for p in out.rglob("*") if p.is_file()] if out.exists() else []
    assert leftovers == [], leftovers
    size = (raw / "a.csv").stat().st_size
    subprocess.run(["mount", "-o", f"remount,size={spill.RUN_SPACE_FACTOR * size + MB}", str(small_disk)], check=True)
    assert run.main(args) == 0  # space for one run is enough
    assert manifest.load(str(out)).accounting.written == 8000


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


@pytest.mark.parametrize("values", [[], [0, 7, 2**32 - 1], [1, 2**32], [2**64 - 1]])
def test_shard_piece_arrays_take_four_bytes_where_they_fit(values):
    from shardprep.graph.elements import pack_uints, unpack_uints

    packed = pack_uints(np.array(values, dtype=np.uint64))
    assert unpack_uints(packed).tolist() == values
    assert len(packed) == 1 + (4 if max(values, default=0) < 2**32 else 8) * len(values)

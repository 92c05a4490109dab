"""Load: 2 million small records, and a few 50 MB records, re-sharded within memory; peak RSS measured.

Each run is a real ``python -m shardprep.run`` process; its peak RSS comes from ``os.wait4`` on that
one child (``RUSAGE_CHILDREN`` would mix in every earlier child of the test process).
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shardprep import manifest, verify
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

GiB = 1 << 30
SMALL_RECORDS = 2_000_000
BIG_RECORDS, BIG_MB = 4, 50


@dataclasses.dataclass(frozen=True)
class Measured:
    code: int
    seconds: float
    peak_rss: int  # bytes
    stderr: str


def measure(argv: list[str], log: Path) -> Measured:
    """Runs ``python -m shardprep.run argv`` and measures its wall time and peak RSS."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.monotonic()
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "shardprep.run", *argv], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return Measured(proc.returncode, time.monotonic() - start, usage.ru_maxrss * 1024, log.read_text())


def small_records(path: Path, n: int = SMALL_RECORDS) -> Path:
    """``n`` CSV rows of two small columns (about 15 bytes a row)."""
    rng = random.Random(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.write("id,x\n")
        for start in range(0, n, 100_000):
            f.writelines(f"{i},{rng.random():.5f}\n" for i in range(start, min(n, start + 100_000)))
    return path


def big_records(path: Path, n: int = BIG_RECORDS, mb: int = BIG_MB) -> Path:
    """``n`` JSON Lines records, each holding one string of ``mb`` MiB."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": i, "blob": chr(97 + i) * (mb << 20)}) + "\n")
    return path


def report(name: str, records: int, m: Measured) -> None:
    print(f"\nLOAD {name}: {records:,} records, {m.seconds:.1f} s, peak RSS {m.peak_rss / GiB:.2f} GiB")


def test_two_million_small_records(tmp_path) -> None:
    src = small_records(tmp_path / "in" / "small.csv")
    out = tmp_path / "ds"
    m = measure(["--input", str(src), "--output", str(out), "--num-shards", "16"], tmp_path / "log")
    report("small", SMALL_RECORDS, m)
    assert m.code == 0, m.stderr[-2000:]
    man = manifest.load(str(out))
    assert (man.accounting.read, man.accounting.written, man.accounting.rejected) == (SMALL_RECORDS, SMALL_RECORDS, 0)
    assert verify.verify(str(out))[0] == []
    assert m.peak_rss < 3 * GiB


def test_a_few_50_mb_records(tmp_path) -> None:
    src = big_records(tmp_path / "in" / "big.jsonl")
    out = tmp_path / "ds"
    m = measure(["--input", str(src), "--output", str(out), "--num-shards", "2"], tmp_path / "log")
    report("big", BIG_RECORDS, m)
    assert m.code == 0, m.stderr[-2000:]
    man = manifest.load(str(out))
    assert (man.accounting.read, man.accounting.written) == (BIG_RECORDS, BIG_RECORDS)
    assert max(s.num_bytes for s in man.splits["train"].shards) > 2 * (BIG_MB << 20)
    assert verify.verify(str(out))[0] == []
    assert m.peak_rss < 3 * GiB

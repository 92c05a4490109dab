"""A result computed once for the run (``graph.once``), in real processes racing on one folder: one
computes it, the others read its spilled bytes; a claimer that failed or vanished leaves the others
to compute it themselves."""
from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest

from shardprep.graph import once


def _compute(log: str) -> bytes:
    with open(log, "a") as f:  # one line per process that computed
        f.write(f"{os.getpid()}\n")
    time.sleep(0.3)  # long enough that the others find it claimed and wait
    return b"the result"


def _shared(url: str, log: str, queue) -> None:
    queue.put(once.shared(url, lambda: _compute(log), encode=bytes, decode=bytes))


def test_racing_processes_compute_it_once_and_all_get_it(tmp_path: Path) -> None:
    url, log = str(tmp_path / "spill" / "result.bin"), str(tmp_path / "computed.log")
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_shared, args=(url, log, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert results == [b"the result"] * 4
    assert len(Path(log).read_text().splitlines()) == 1
    # a later process (a retried task) reads it without computing
    assert once.shared(url, lambda: pytest.fail("computed again"), encode=bytes, decode=bytes) == b"the result"


def test_a_claimer_that_failed_or_vanished_leaves_the_others_to_compute_it(tmp_path: Path) -> None:
    url = str(tmp_path / "result.bin")

    def broken() -> bytes:
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        once.shared(url, broken, encode=bytes, decode=bytes)
    started = time.monotonic()
    assert once.shared(url, lambda: b"here", encode=bytes, decode=bytes) == b"here"  # the failure seen at once
    assert time.monotonic() - started < 5
    other = str(tmp_path / "other.bin")
    Path(other + ".claim").write_bytes(b"")  # claimed by a process killed before it spilled anything
    started = time.monotonic()
    assert once.shared(other, lambda: b"mine", encode=bytes, decode=bytes, wait_s=0.5) == b"mine"
    assert 0.5 <= time.monotonic() - started < 10
    assert Path(other).read_bytes() == b"mine"

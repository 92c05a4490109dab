"""The local pool (``shardprep.graph.pool``): the same outputs, counters and log lines as in line,
errors that fail the run, and an interrupt that leaves no run folder and no process behind."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

import apache_beam as beam
import psutil
import pytest
from apache_beam.pvalue import TaggedOutput
from apache_beam.testing.util import assert_that, equal_to

from conftest import ROOT, sample_rows, write_csv
from shardprep.graph.pool import Counter, local_pool, pooled


class Square(beam.DoFn):
    """Squares each number, counts them, says so in a log line, tags odd ones; adds the side input."""

    def __init__(self) -> None:
        self._seen = Counter("numbers_seen")

    def process(self, n: int, offset: list) -> object:
        self._seen.inc()
        logging.getLogger("shardprep").info("squared %d in process %d", n, os.getpid())
        yield TaggedOutput("odd", n) if n % 2 else n * n + sum(offset)


class Fail(beam.DoFn):
    def process(self, n: int) -> object:
        if n == 7:
            raise ValueError(f"element {n} is bad")
        yield n


def _square_pipeline(token: str | None) -> tuple[list, list, dict, list[str]]:
    got: dict = {}
    with beam.Pipeline() as p:
        numbers = p | beam.Create(list(range(40)))
        offset = p | "Offset" >> beam.Create([1000])
        out = numbers | beam.ParDo(pooled(Square(), token), beam.pvalue.AsList(offset)).with_outputs("odd", main="even")
        assert_that(out.even, equal_to([n * n + 1000 for n in range(0, 40, 2)]), label="even")
        assert_that(out.odd, equal_to(list(range(1, 40, 2))), label="odd")
    counters = {c.key.metric.name: c.committed for c in p.result.metrics().query()["counters"]}
    got["counters"] = counters
    return got


@pytest.mark.slow
def test_pool_gives_what_the_dofn_gives_in_line(caplog):
    caplog.set_level(logging.INFO, logger="shardprep")
    inline = _square_pipeline(None)
    with local_pool(2) as token:
        pooled_run = _square_pipeline(token)
    assert inline["counters"]["numbers_seen"] == pooled_run["counters"]["numbers_seen"] == 40
    pids = {int(r.getMessage().split()[-1]) for r in caplog.records if r.getMessage().startswith("squared")}
    assert os.getpid() in pids and len(pids) >= 2, pids  # in line here; then on the pool's processes
    assert sum(r.getMessage().startswith("squared") for r in caplog.records) == 80


def test_error_in_a_pool_process_fails_the_pipeline():
    with local_pool(2) as token, pytest.raises(Exception, match="element 7 is bad"):
        with beam.Pipeline() as p:
            _ = p | beam.Create(list(range(10))) | beam.ParDo(pooled(Fail(), token))


def test_unknown_pool_runs_in_line():
    """A Pooled step on a process without the pool (a remote worker) runs its DoFn there."""
    got = _square_pipeline("no-such-pool")
    assert got["counters"]["numbers_seen"] == 40


@pytest.mark.slow
def test_sigint_while_the_pool_parses(tmp_path):
    """Interrupted while pool processes parse: exit 130, no run folder, no pool process left."""
    raw = tmp_path / "raw"
    for i in range(4):
        write_csv(raw / f"part-{i}.csv", sample_rows(3000, start=3000 * i))
    out = tmp_path / "ds"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SHARDPREP_TEST_DELAYS": "pool.task=60"}
    proc = subprocess.Popen([sys.executable, "-m", "shardprep.run", "--input", f"{raw}/*.csv", "--output", str(out),
                             "--num-shards", "2", "--local-workers", "2"],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen: set[psutil.Process] = set()
    deadline = time.monotonic() + 120
    while len(seen) < 2 and time.monotonic() < deadline and proc.poll() is None:  # the 2 pool processes
        try:
            seen |= set(psutil.Process(proc.pid).children(recursive=True))
        except psutil.Error:
            pass
        time.sleep(0.1)
    time.sleep(2)  # the pool processes are in their delay, inside Parse
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert len(seen) >= 2, seen
    assert not list(out.glob("run-*")), sorted(str(p) for p in out.rglob("*"))
    time.sleep(1)
    assert not [p for p in seen if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], seen

"""The local pool (``shardprep.graph.pool``): the same outputs, counters and log lines as in line,
errors that fail the run, prefetched steps taken once (and computed afresh when they do not match),
pool processes that never import Beam, and an interrupt that leaves no run folder and no process
behind."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import apache_beam as beam
import psutil
import pytest
from apache_beam.pvalue import TaggedOutput
from apache_beam.testing.util import assert_that, equal_to

from conftest import ROOT, sample_rows, write_csv
from pipelines import local
from shardprep import config, formats, manifest, naming, planning, run
from shardprep.graph.dofns import pooled
from shardprep.graph.elements import Tagged
from shardprep.graph.pool import Counter, local_pool
from shardprep.graph.prefetch import Ahead, as_side_input, by_key, group_values, outputs_before


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


def _csvs(tmp_path: Path, files: int, rows: int) -> Path:
    raw = tmp_path / "raw"
    for i in range(files):
        write_csv(raw / f"part-{i}.csv", sample_rows(rows, start=rows * i))
    return raw


class Mark:
    """Beam-free work: leaves one file per element it processes (calls counted across processes);
    gives 10 n plus the side input's length, and n tagged "seen"."""

    def __init__(self, folder: str) -> None:
        self._folder = folder

    def process(self, n: int, *side: list) -> object:
        open(os.path.join(self._folder, f"{n}-{uuid.uuid4().hex}"), "w").close()
        yield n * 10 + sum(len(s) for s in side)
        yield Tagged("seen", n)


def _chain(first: str, second: str, token: str, elements: list[int]) -> None:
    """Two steps as in Reshard: the second takes the first's main outputs as an AsList side input."""
    with beam.Pipeline() as p:
        numbers = p | beam.Create(elements)
        one = numbers | "One" >> beam.ParDo(pooled(Mark(first), token)).with_outputs("seen", main="main")
        two = numbers | "Two" >> beam.ParDo(pooled(Mark(second), token), beam.pvalue.AsList(one.main)).with_outputs(
            "seen", main="main")
        assert_that(one.main, equal_to([n * 10 for n in elements]), label="one")
        assert_that(two.main, equal_to([n * 10 + len(elements) for n in elements]), label="two")
        assert_that(two.seen, equal_to(elements), label="seen")


@pytest.mark.slow
def test_prefetched_steps_are_taken_once_and_a_mismatch_is_computed_afresh(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    chain = [Ahead(Mark(str(first))), Ahead(Mark(str(second)), side=as_side_input)]
    with local_pool(2, prefetch=chain, elements=list(range(40))) as token:
        _chain(str(first), str(second), token, list(range(40)))  # 40 elements: tasks of 3 (graph.pool)
    assert len(list(first.iterdir())) == len(list(second.iterdir())) == 40  # each once: the prefetch was used
    for folder in (first, second):
        for f in folder.iterdir():
            f.unlink()
    with local_pool(2, prefetch=chain, elements=list(range(6))) as token:
        _chain(str(first), str(second), token, list(range(1, 7)))  # not what was prefetched
    assert len(list(first.iterdir())) == 12  # 6 prefetched, unused, and 6 computed for the pipeline's elements
    assert sorted(f.name.split("-")[0] for f in first.iterdir()).count("6") == 1


class Pairs:
    """Beam-free work over numbers: leaves a file per element (calls counted); gives (n % 3, n)."""

    def __init__(self, folder: str) -> None:
        self._folder = folder

    def process(self, n: int) -> object:
        open(os.path.join(self._folder, f"{n}-{uuid.uuid4().hex}"), "w").close()
        yield n % 3, n * 10
        yield n % 3, n * 10 + 1


class Total:
    """Beam-free work over a GroupByKey's (key, values): leaves a file per key; gives (key, values) as seen."""

    def __init__(self, folder: str) -> None:
        self._folder = folder

    def process(self, group: tuple) -> object:
        key, values = group
        open(os.path.join(self._folder, f"{key}-{uuid.uuid4().hex}"), "w").close()
        yield key, tuple(values)


@pytest.mark.slow
def test_a_chain_runs_ahead_through_outputs_and_groups_and_beam_takes_every_step(tmp_path):
    """The chain Reshard's pool runs ahead (``graph.work``): a step over the outputs of the one before,
    then one over those grouped by key. Beam's steps take every result
    (each element processed once), and the grouped step sees each key's values in one order
    (``group_values``)."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    numbers = list(range(30))
    chain = [Ahead(Mark(str(tmp_path))), Ahead(Pairs(str(first)), over=outputs_before),
             Ahead(Total(str(second)), over=by_key)]
    with local_pool(2, prefetch=chain, elements=numbers) as token:
        with beam.Pipeline() as p:
            marked = p | beam.Create(numbers) | "Mark" >> beam.ParDo(pooled(Mark(str(tmp_path)), token)).with_outputs(
                "seen", main="main")
            totals = (marked.main | "Pairs" >> beam.ParDo(pooled(Pairs(str(first)), token))
                      | beam.GroupByKey() | "Total" >> beam.ParDo(pooled(Total(str(second)), token)))
            tens = [n * 10 for n in numbers]
            expected = [(k, tuple(group_values([v for t in tens if t % 3 == k for v in (t * 10, t * 10 + 1)])))
                        for k in range(3)]
            assert_that(totals, equal_to(expected))
    assert len(list(first.iterdir())) == 30 and len(list(second.iterdir())) == 3  # each element once: all taken
    assert len([f for f in tmp_path.iterdir() if f.is_file()]) == 30


@pytest.mark.slow
def test_pool_processes_never_import_beam_and_parse_each_unit_once(tmp_path):
    """A command-line run: the pool forks before Beam is imported, and its first steps run ahead."""
    raw = _csvs(tmp_path, 4, 500)
    marks = tmp_path / "marks"
    marks.mkdir()
    code = textwrap.dedent(f"""
        import os, pickle, sys
        from shardprep.graph import pool
        real = pool.run_task
        def probe(task, **options):
            work = type(pickle.loads(task[1])).__name__
            with open(os.path.join({str(marks)!r}, str(os.getpid())), "a") as f:
                f.write(f"{{'apache_beam' in sys.modules}} {{work}} {{len(task[2])}}\\n")
            return real(task, **options)
        pool.run_task = probe
        sys.argv = ["shardprep.run", "--input", {str(raw / "*.csv")!r}, "--output", {str(tmp_path / "ds")!r},
                    "--num-shards", "2", "--local-workers", "2"]
        from shardprep.run import main
        sys.exit(main(lean=True))
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line.split() for f in marks.iterdir() for line in f.read_text().splitlines()]
    assert len(list(marks.iterdir())) >= 1 and lines
    assert {beam for beam, _, _ in lines} == {"False"}, lines
    parsed = sum(int(n) for _, work, n in lines if work == "Parse")
    assert parsed == 4, lines  # the 4 units, each parsed once: Beam's Parse step took the prefetched results
    assert {"CountRanges", "Parse", "Assign", "WriteShard"} <= {work for _, work, _ in lines}
    # Assign and WriteShards ran ahead too, and Beam took them: each batch assigned once, each shard written once
    assert sum(int(n) for _, work, n in lines if work == "WriteShard") == 2, lines
    assert sum(int(n) for _, work, n in lines if work == "Assign") == 4, lines  # a batch per unit (500 rows each)


@pytest.mark.slow
def test_a_failure_before_beam_runs_stops_the_pool_and_removes_what_it_spilled(tmp_path):
    """The pool parses ahead while the launcher imports Beam; if that (or the graph) fails, no
    pool process writes on, and the spill it wrote is gone."""
    raw = _csvs(tmp_path, 3, 3000)
    assert run.main(["--input", f"{raw}/*.csv", "--output", str(tmp_path / "template"), "--num-shards", "2"]) == 0
    files = formats.expand_inputs([f"{raw}/*.csv"], "auto")
    cfg = config.ReshardConfig(output=str(tmp_path / "ds"), run_id=naming.new_run_id(),
                               features=manifest.load(str(tmp_path / "template")).features,
                               sources=tuple((f.url, f.size) for f in files), splits=planning.parse_splits("train"),
                               num_shards=2)
    spilled = tmp_path / "ds" / cfg.run_id / "spill"
    with pytest.raises(RuntimeError, match="the graph failed"):
        with local.worker_pool(cfg, formats.plan_units(files, unit_bytes=1 << 20), runner="direct",
                               local_workers=2) as workers:
            assert workers.count == 2 and workers.pool
            deadline = time.monotonic() + 60
            while not (spilled.exists() and any(spilled.rglob("*"))) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert any(spilled.rglob("*")), "the prefetch spilled nothing"
            raise RuntimeError("the graph failed")
    time.sleep(0.5)
    assert not spilled.exists(), sorted(str(p) for p in spilled.rglob("*"))


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
def test_pool_processes_die_with_a_killed_launcher(tmp_path):
    """SIGKILL (the OOM killer's signal) of the launcher while its pool processes parse: none of them
    lives on to write into the run folder."""
    raw = _csvs(tmp_path, 4, 3000)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SHARDPREP_TEST_DELAYS": "pool.task=60"}
    proc = subprocess.Popen([sys.executable, "-m", "shardprep.run", "--input", f"{raw}/*.csv", "--output",
                             str(tmp_path / "ds"), "--num-shards", "2", "--local-workers", "2"],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: set[psutil.Process] = set()
    deadline = time.monotonic() + 120
    while len(seen) < 2 and time.monotonic() < deadline and proc.poll() is None:
        try:
            seen |= set(psutil.Process(proc.pid).children(recursive=True))
        except psutil.Error:
            pass
        time.sleep(0.1)
    assert len(seen) >= 2, seen
    proc.kill()
    proc.wait(30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and [p for p in seen if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]:
        time.sleep(0.1)
    assert not [p for p in seen if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], seen


@pytest.mark.slow
def test_sigint_while_the_pool_parses(tmp_path):
    """Interrupted while pool processes parse: exit 130, no run folder, no pool process left."""
    raw = _csvs(tmp_path, 4, 3000)
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


@pytest.mark.slow
def test_a_pool_process_killed_fails_the_run_instead_of_hanging(tmp_path):
    """One pool process SIGKILLed (as the OOM killer does) while the launcher lives: the run fails
    with a line that says so (exit 1), as any failed run keeps no spill and no shard, and leaves no
    process behind."""
    raw = _csvs(tmp_path, 4, 3000)
    out = tmp_path / "ds"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SHARDPREP_TEST_DELAYS": "pool.task=3"}
    proc = subprocess.Popen([sys.executable, "-m", "shardprep.run", "--input", f"{raw}/*.csv", "--output", str(out),
                             "--num-shards", "2", "--local-workers", "2"],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: list[psutil.Process] = []
    deadline = time.monotonic() + 120
    while len(seen) < 2 and time.monotonic() < deadline and proc.poll() is None:
        try:
            seen = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            pass
        time.sleep(0.1)
    assert len(seen) >= 2, seen
    seen[0].kill()
    _, err = proc.communicate(timeout=120)  # the task that process held is never answered: without the fix, a hang
    assert proc.returncode == 1, err
    assert "a worker process of the local pool died" in err and "Traceback" not in err, err
    assert not list(out.glob("run-*/spill")) and not list(out.rglob("*.tfrecord*")), sorted(map(str, out.rglob("*")))
    time.sleep(1)
    assert not [p for p in seen if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], seen

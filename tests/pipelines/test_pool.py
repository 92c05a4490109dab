"""The local pool (``pipelines.pool``) under the driver (``pipelines.driver``): the same
outputs, counters and log lines as in line, grouped input in one order, errors that fail the run,
a command-line run in which neither the launcher nor a pool process imports Beam, and an interrupt
or a killed process that leaves no run folder and no process behind."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from pipelines.driver import run_job
from pipelines.pool import SWITCH_INTERVAL_S, local_pool
from shardprep.graph.counting import Counter
from shardprep.graph.elements import Tagged
from shardprep.graph.tasks import helper, in_worker
from shardprep.job import BY_KEY, Job, Stage
from tests.conftest import ROOT, sample_rows, write_csv


class Square:
    """Squares each number, counts them, says so in a log line, tags odd ones; adds the side input."""

    def __init__(self) -> None:
        self._seen = Counter("numbers_seen")

    def process(self, n: int, offset: list) -> object:
        self._seen.inc()
        logging.getLogger("shardprep").info("squared %d in process %d", n, os.getpid())
        yield Tagged("odd", n) if n % 2 else n * n + sum(offset)


class Offset:
    def process(self, n: int) -> object:
        if n == 0:
            yield 1000


class Fail:
    def process(self, n: int) -> object:
        if n == 7:
            raise ValueError(f"element {n} is bad")
        yield n


class Pairs:
    def process(self, n: int) -> object:
        yield n % 3, n * 10
        yield n % 3, n * 10 + 1


class WhereAmI:
    """Says whether it runs in a pool's worker, and where its helper's calls run (``tasks.helper``, as
    the statistics' counting uses it)."""

    def process(self, n: int) -> object:
        beside = helper("test-helper")
        ran_on: list[int] = []
        beside.submit(lambda: ran_on.append(threading.get_ident()))
        beside.close()
        yield in_worker(), ran_on == [threading.get_ident()]


class Total:
    def process(self, group: tuple) -> object:
        key, values = group
        yield key, tuple(values)


def _job(*stages: Stage, inputs=tuple(range(40))) -> Job:
    return Job(tuple(stages), inputs, "", stages[-1].name)


def _csvs(tmp_path: Path, files: int, rows: int) -> Path:
    raw = tmp_path / "raw"
    for i in range(files):
        write_csv(raw / f"part-{i}.csv", sample_rows(rows, start=rows * i))
    return raw




@pytest.mark.slow
def test_pool_gives_what_in_line_gives(caplog):
    caplog.set_level(logging.INFO, logger="shardprep")
    job = _job(Stage("Offset", Offset(), over=("",)),
               Stage("Square", Square(), over=("",), side=("Offset",), tags=("odd",), heavy=True),
               Stage("Out", Pairs(), over=("Square",)))
    inline = run_job(job, None)
    with local_pool(2) as workers:
        pooled = run_job(job, workers)
    assert inline == pooled
    outputs, counters = pooled
    assert counters == {"numbers_seen": 40}
    assert outputs == [pair for n in range(0, 40, 2) for pair in Pairs().process(n * n + 1000)]
    pids = {int(r.getMessage().split()[-1]) for r in caplog.records if r.getMessage().startswith("squared")}
    assert os.getpid() in pids and len(pids) >= 3, pids  # in line here; then on the pool's 2 processes
    assert sum(r.getMessage().startswith("squared") for r in caplog.records) == 80


class Costed:
    """Says when it ran; costs its element (the driver submits the costliest first)."""

    @staticmethod
    def cost(n: int) -> int:
        return n

    def process(self, n: int) -> object:
        yield n, time.monotonic_ns()


def test_costliest_tasks_go_first_and_outputs_stay_in_element_order():
    job = _job(Stage("Costed", Costed(), over=("",), heavy=True), inputs=tuple(range(8)))  # a task each
    with local_pool(1) as workers:  # one process: tasks run in the order they were submitted
        outputs, _ = run_job(job, workers)
    assert [n for n, _ in outputs] == list(range(8))
    started = [t for _, t in outputs]
    assert started == sorted(started, reverse=True)  # 7 first, 0 last


@pytest.mark.slow
def test_grouped_input_is_the_same_whatever_the_processes_and_order():
    job = _job(Stage("Pairs", Pairs(), over=("",), heavy=True), Stage("Total", Total(), over=("Pairs",), group=BY_KEY,
                                                                      heavy=True))
    inline, _ = run_job(job, None)
    with local_pool(2) as workers:
        pooled, _ = run_job(job, workers)
        shuffled, _ = run_job(job._replace(inputs=tuple(reversed(job.inputs))), workers)
    assert inline == pooled == shuffled
    assert [key for key, _ in inline] == [0, 1, 2]
    assert inline[1] == (1, tuple(sorted(v for n in range(40) if n % 3 == 1 for v in (n * 10, n * 10 + 1))))


def test_error_in_a_pool_process_fails_the_run():
    with local_pool(2) as workers, pytest.raises(ValueError, match="element 7 is bad"):
        run_job(_job(Stage("Fail", Fail(), over=("",), heavy=True)), workers)


@pytest.mark.slow
def test_neither_the_launcher_nor_a_pool_process_imports_beam_and_each_unit_is_parsed_once(tmp_path):
    raw = _csvs(tmp_path, 4, 500)
    marks = tmp_path / "marks"
    marks.mkdir()
    code = textwrap.dedent(f"""
        import os, pickle, sys
        from pipelines import pool
        real = pool.run_task
        def probe(task):
            work = type(pickle.loads(task[1])).__name__
            with open(os.path.join({str(marks)!r}, str(os.getpid())), "a") as f:
                f.write(f"{{'apache_beam' in sys.modules}} {{work}} {{len(task[2])}}\\n")
            return real(task)
        pool.run_task = probe
        from shardprep.run import main
        rc = main(["--input", {str(raw / "*.csv")!r}, "--output", {str(tmp_path / "ds")!r}, "--num-shards", "2",
                   "--local-workers", "2"])
        print("launcher imported", sorted(m for m in ("apache_beam", "distributed") if m in sys.modules))
        sys.exit(rc)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "launcher imported []" in proc.stdout, proc.stdout
    lines = [line.split() for f in marks.iterdir() for line in f.read_text().splitlines()]
    assert len(list(marks.iterdir())) >= 1 and lines
    assert {beam for beam, _, _ in lines} == {"False"}, lines
    # the 4 small files are one unit (formats.grouping), parsed once, its records in one batch
    assert sum(int(n) for _, work, n in lines if work == "Parse") == 1, lines
    assert sum(int(n) for _, work, n in lines if work == "WriteShards") == 2, lines  # each shard written once
    assert sum(int(n) for _, work, n in lines if work == "Assign") == 1, lines


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


def test_a_pool_process_hands_the_gil_over_sooner_than_pythons_default():
    with local_pool(1) as workers:
        interval = workers.executor.submit(sys.getswitchinterval).result()
    assert interval == pytest.approx(SWITCH_INTERVAL_S) and interval < 0.005


def test_a_pool_worker_counts_in_line_and_one_process_on_a_thread_of_its_own():
    """The local pool runs one process per core: a helper thread there would take another worker's
    core, so the statistics are counted in line; the launcher running a stage itself has the second core."""
    job = _job(Stage("Where", WhereAmI(), over=("",), heavy=True), inputs=(1, 2, 3))
    assert run_job(job, None)[0] == [(False, False)] * 3
    with local_pool(2) as workers:
        assert run_job(job, workers)[0] == [(True, True)] * 3

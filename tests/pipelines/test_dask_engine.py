"""``--runner dask`` (``pipelines.dask_engine``) on real dask.distributed clusters (worker
processes; a scheduler and workers started as separate commands), against the local engine: the
job's heavy stages as tasks on the workers, with the spill read in place (a cluster of this
machine) or not (as for workers of other machines), byte-identical shards, interrupts that wait
for the tasks a worker began, and workers that never import Beam.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shardprep import manifest, run
from tests.conftest import ROOT, run_cli, sample_rows, uneven_csvs, write_csv

pytestmark = pytest.mark.slow

TWO_SPLITS = ["--workers", 2, "--split", "train=0.9,eval=0.1", "--unit-mb", 0.05]
DEAD_LETTERS = ["--num-shards", 3, "--split", "train=0.8,eval=0.2", "--unit-mb", 0.05, "--max-bad-records", 2,
                "--compression", "gzip"]


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0") as c:
        yield c.scheduler_address


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    """3 000 good rows in three very unequal CSV files (several work units each at --unit-mb 0.05)."""
    folder = tmp_path_factory.mktemp("raw")
    uneven_csvs(folder, 3000)
    return folder


@pytest.fixture(scope="module")
def raw_with_bad(raw, tmp_path_factory) -> Path:
    """The same files plus one holding 400 good rows and 2 bad ones."""
    folder = tmp_path_factory.mktemp("raw-bad")
    for f in raw.glob("*.csv"):
        shutil.copy(f, folder / f.name)
    path = write_csv(folder / "part-9.csv", sample_rows(400, start=3000))
    with open(path, "a") as f:  # at the end: text fields hold quoted newlines, a line in the middle may be inside one
        f.write("1,2,3\nx,0.1,0.2,0.3,1,more,extra\n")  # too few columns, too many
    return folder


def reshard(raw: Path, out: Path, *args) -> int:
    return run.main([str(a) for a in ("--input", f"{raw}/*.csv", "--output", out, *args)])


def contents(root: Path) -> dict[str, object]:
    """Everything that must not depend on the runner: every shard's crc32c, dead letters, accounting."""
    m = manifest.load(str(root))
    rejected = [(root / p).read_bytes() for p in m.rejected.paths]
    return {
        "shards": {s.path.split("/", 1)[1]: (s.crc32c, s.num_records) for sp in m.splits.values() for s in sp.shards},
        "rejected": rejected,
        "accounting": m.accounting,
        "sources": [(os.path.basename(s.uri), s.num_records, s.num_rejected) for s in m.sources],
        "by_reason": m.rejected.by_reason,
    }


@pytest.fixture(scope="module")
def direct(raw, raw_with_bad, tmp_path_factory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("direct")
    assert reshard(raw, out / "two-splits", *TWO_SPLITS) == 0
    assert reshard(raw_with_bad, out / "dead-letters", *DEAD_LETTERS) == 0
    return {"two-splits": contents(out / "two-splits"), "dead-letters": contents(out / "dead-letters")}


def _steps_run(client, out: Path, *args) -> list[str]:
    """The names of the tasks the cluster of ``client`` ran for ``reshard(out, *args)``."""
    from distributed import get_task_stream

    with get_task_stream(client=client) as stream:
        assert reshard(*args[:1], out, *args[1:]) == 0
    return [task["key"][0] if isinstance(task["key"], tuple) else task["key"] for task in stream.data]


@pytest.mark.parametrize("engine", ["spill in place", "spill not in place"])
@pytest.mark.parametrize("case", ["two-splits", "dead-letters"])
def test_dask_shards_are_byte_identical_to_direct_runner(case, engine, raw, raw_with_bad, direct, cluster, tmp_path,
                                                         monkeypatch):
    from distributed import Client

    from pipelines import dask_engine

    if engine == "spill not in place":  # as for a scheduler of another machine
        monkeypatch.setattr(dask_engine, "on_this_machine", lambda address: False)
    source, args = (raw, TWO_SPLITS) if case == "two-splits" else (raw_with_bad, DEAD_LETTERS)
    out = tmp_path / "ds"
    with Client(cluster, timeout=60) as client:
        tasks = _steps_run(client, out, source, *args, "--runner", "dask", "--dask-address", cluster)
    got = contents(out)
    assert got == direct[case]
    # CountRanges and Parse per unit, Assign per batch, WriteShards per shard: a few elements a task
    assert all(name.startswith("remote_task") for name in tasks), set(tasks)
    assert len(tasks) >= 4, tasks
    assert (not list(out.glob("run-*/spill"))) and not list(out.glob("**/sorted-*")), "spill left after commit"
    assert len(got["shards"]) == (4 if case == "two-splits" else 6)
    if case == "dead-letters":
        assert got["accounting"] == manifest.Accounting(read=3402, written=3400, rejected=2)
        assert len(got["rejected"]) == 1 and got["rejected"][0].count(b"\n") == 2


def test_dask_cli_starts_its_own_local_cluster(raw, direct, tmp_path):
    out = tmp_path / "ds"
    proc = run_cli("shardprep.run", "--input", f"{raw}/*.csv", "--output", out, *TWO_SPLITS,
                   "--runner", "dask", "--dask-workers", 2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "starting a Dask LocalCluster with 2 worker processes" in proc.stderr
    assert "[distributed" not in proc.stderr, proc.stderr[-3000:]  # its INFO chatter stays out of the output
    read = manifest.load(str(out)).accounting.read  # the stage summary, from the workers' counters
    assert f"Parse: {read} records read (0 rejected)" in proc.stderr and "2 worker processes, " in proc.stderr, proc.stderr
    assert contents(out) == direct["two-splits"]


def _faults_of_reused_blocks() -> int:
    """In a worker: the page faults of allocating, filling and freeing a 1 MB block 64 times."""
    import resource

    import numpy as np

    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for _ in range(64):
        block = np.ones(1 << 17)
        del block
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before


def test_a_worker_that_ran_a_task_reuses_the_memory_it_frees():
    """A Nanny starts its worker with ``MALLOC_TRIM_THRESHOLD_=65536``: 256 fresh pages for each
    1 MB block; a worker's first task of a pool (``shardprep.malloc``) restores glibc's limits in that process."""
    from distributed import Client, LocalCluster

    from pipelines import pool
    from pipelines.driver import run_job
    from shardprep.job import Job, Map, Stage

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0") as c:
        with Client(c.scheduler_address, timeout=60) as client:
            (before,) = client.run(_faults_of_reused_blocks).values()
            job = Job((Stage("Noop", Map(abs), over=("",), heavy=True),), (1, 2, 3), "", "Noop")
            with pool.executor_pool(client.get_executor(pure=False), 1, lambda: None) as workers:
                assert run_job(job, workers)[0] == [1, 2, 3]
            (after,) = client.run(_faults_of_reused_blocks).values()
    assert before > 64 * 128, before  # distributed's setting, as shipped
    assert after < 64 * 16, after


_OWN_CLUSTER = """
import json, os, signal, sys
from distributed import Client
from pipelines import dask_engine

with dask_engine.ahead(2) as address:
    with Client(address(), timeout=60) as client:
        run = lambda code: list(client.run(eval, code).values())  # a builtin: nothing of this script is imported
        print(json.dumps({
            "workers": len(client.scheduler_info()["workers"]),
            "beam": run("'apache_beam' in __import__('sys').modules"),
            "steps": run("'shardprep.graph.stages' in __import__('sys').modules"),
            "parent_is_launcher": [p == os.getpid() for p in run("__import__('os').getppid()")],
            "handlers": run("[int(__import__('signal').getsignal(s)) for s in (2, 15)]"),
            "blocked": run("sorted(__import__('signal').pthread_sigmask(0, []))"),
            "launcher_blocked": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        }))
"""


def test_a_runs_own_cluster_forks_its_workers_with_the_steps_imported_and_ctrl_c_left_to_the_launcher():
    """``pipelines.dask_engine.ahead``, in a fresh launcher: its workers are forked from it with the
    stages imported (no interpreter starts per worker), never import Beam, ignore SIGINT and end on
    SIGTERM (the launcher answers both); the launcher's own signal mask is untouched."""
    out = subprocess.run([sys.executable, "-c", _OWN_CLUSTER], env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=120, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"workers": 2, "beam": [False] * 2, "steps": [True] * 2, "parent_is_launcher": [True] * 2,
                   "handlers": [[int(signal.SIG_IGN), int(signal.SIG_DFL)]] * 2, "blocked": [[]] * 2,
                   "launcher_blocked": []}, got


@pytest.fixture(scope="module")
def separate_cluster(tmp_path_factory):
    """``dask scheduler`` and ``dask worker`` as separate processes on loopback: the shape of a
    cluster of machines (nothing shared with this process but the file system)."""
    folder = tmp_path_factory.mktemp("cluster")
    info = folder / "scheduler.json"
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(info)],
                              env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while not info.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(info.read_text())["address"]
        procs.append(subprocess.Popen([str(bin_dir / "dask"), "worker", address, "--nworkers", "2", "--nthreads", "1",
                                       "--host", "127.0.0.1", "--no-dashboard", "--local-directory", str(folder),
                                       "--preload", "pipelines.dask_worker"],  # as docs/scale-out.md's sizing says
                                      env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        from distributed import Client

        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        yield address
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(30)


def test_dask_cluster_of_separate_processes_gives_direct_runners_bytes(raw_with_bad, direct, separate_cluster,
                                                                       tmp_path):
    out = tmp_path / "ds"
    proc = run_cli("shardprep.run", "--input", f"{raw_with_bad}/*.csv", "--output", out, *DEAD_LETTERS,
                   "--runner", "dask", "--dask-address", separate_cluster)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert contents(out) == direct["dead-letters"]
    assert not list(out.glob("run-*/spill")), "spill left after commit"


def test_an_interrupt_waits_for_the_tasks_a_standing_clusters_workers_began(separate_cluster, tmp_path):
    """A task a worker has begun runs on after its future is cancelled (a thread cannot be stopped):
    the launcher waits for it (``pipelines.pool.remote_idle``) before it removes the run's folder, which
    a Parse under way wrote its spill into after the removal."""
    import signal

    from distributed import Client

    raw = tmp_path / "raw"
    for i in range(4):  # a unit each
        write_csv(raw / f"part-{i}.csv", sample_rows(300, start=300 * i))
    out = tmp_path / "ds"
    with Client(separate_cluster, timeout=60) as client:  # each of the workers' tasks sleeps first (faults.pause)
        client.run(eval, "__import__('os').environ.__setitem__('SHARDPREP_TEST_DELAYS', 'pool.task=2')")
        try:
            proc = subprocess.Popen([sys.executable, "-m", "shardprep.run", "--input", f"{raw}/*.csv", "--output",
                                     str(out), "--num-shards", "2", "--runner", "dask", "--dask-address",
                                     separate_cluster], env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 120
            while not list(out.glob("run-*/spill/parsed-*")):  # a unit parsed: the next ones are under way
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "Parse never wrote its spill"
                time.sleep(0.02)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)
            time.sleep(3)  # longer than a task's delay: what a task under way writes, it has written
        finally:
            client.run(eval, "__import__('os').environ.pop('SHARDPREP_TEST_DELAYS', None)")
    assert proc.returncode == 130, err
    assert err.splitlines()[-1] == "shardprep.run: interrupted", err
    assert not list(out.glob("run-*")), sorted(str(p) for p in out.rglob("*"))


def test_too_many_bad_records_commit_nothing_on_dask(raw_with_bad, cluster, tmp_path, capsys):
    out = tmp_path / "ds"
    assert reshard(raw_with_bad, out, "--num-shards", 2, "--unit-mb", 0.05, "--runner", "dask",
                   "--dask-address", cluster) == 1
    assert "2 bad records (more than --max-bad-records 0)" in capsys.readouterr().err
    assert not (out / "manifest.json").exists()
    (report,) = out.glob("run-*/report.json")
    assert json.loads(report.read_text())["accounting"] == {"read": 3402, "written": 3400, "rejected": 2}
    dead = [json.loads(line) for f in out.glob("run-*/rejected/*.jsonl") for line in f.read_text().splitlines()]
    assert sorted(d["reason"] for d in dead) == ["csv_columns", "csv_columns"]

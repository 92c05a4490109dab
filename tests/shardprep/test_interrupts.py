"""Interrupts and failures at any moment of a run: exit 130 and nothing left before the commit,
a committed data set after it.

An interrupt can reach the launcher while the commit step runs elsewhere (a Dask worker, a thread
of the direct runner). Before ``DIR/<run>/_outcome`` existed, the launcher removed the run folder
and the worker then wrote a manifest naming the removed shards. Also here: an interrupt once the
manifest is written must not turn a committed run into a failure. Who decides a run's fate, its
commit or the launcher's clean-up, is ``tests/shardprep/test_commit.py``'s."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shardprep import manifest, naming, verify
from tests.conftest import ROOT, sample_rows, write_csv

# The command, as for a Dask scheduler of another machine: no spill in place
_AS_IF_REMOTE = ("import sys; from pipelines import dask_engine; dask_engine.on_this_machine = lambda address: False; "
                 "from shardprep import run; sys.exit(run.main(sys.argv[1:]))")


def _launch(src: Path, out: Path, delays: str, *extra: str, remote: bool = False) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SHARDPREP_TEST_DELAYS": delays}
    command = ["-c", _AS_IF_REMOTE] if remote else ["-m", "shardprep.run"]
    return subprocess.Popen([sys.executable, *command, "--input", str(src), "--output", str(out),
                             "--num-shards", "2", *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_after_the_manifest_ends_the_run_committed(sig, tmp_path) -> None:
    src = write_csv(tmp_path / "in.csv", sample_rows(300))
    out = tmp_path / "ds"
    proc = _launch(src, out, "commit.written=3")
    _wait_for(out / naming.MANIFEST, proc)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert "interrupted after run" in stderr and "Traceback" not in stderr
    result = manifest.load(str(out))
    (run_id,) = result.run_ids
    assert (out / manifest.run_copy_path(run_id)).exists() and verify.verify(str(out))[0] == []


@pytest.mark.slow
def test_an_interrupt_handled_once_the_run_has_ended_leaves_it_committed(tmp_path) -> None:
    """Python runs a signal's handler when the main thread next runs Python code, which can be after
    the run's own handling has ended (a wait on a Dask worker's commit returned first): the command
    then ends committed, as for any interrupt after the manifest, not interrupted (exit 130)."""
    src = write_csv(tmp_path / "in.csv", sample_rows(300))
    out = tmp_path / "ds"
    proc = _launch(src, out, "run.finish=4")
    _wait_for(out / naming.MANIFEST, proc)
    time.sleep(1.5)  # the run has ended: the command reads its manifest back (delayed 4 s)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert "interrupted after run" in stderr and "Traceback" not in stderr, stderr
    assert verify.verify(str(out))[0] == []


@pytest.mark.slow
@pytest.mark.parametrize("remote", [True, False])
def test_sigterm_during_a_dask_runs_commit_never_names_removed_shards(remote, tmp_path) -> None:
    """The launcher is told to stop while the commit runs (in the launcher, whatever the cluster):
    the commit is withdrawn, nothing is left, exit 130; the same with the spill in place or not."""
    from distributed import LocalCluster

    src = write_csv(tmp_path / "in.csv", sample_rows(300))
    out = tmp_path / "ds"
    delays = "commit.checked=4"  # the workers have it too: a commit there would wait as long
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0",
                      env={"SHARDPREP_TEST_DELAYS": delays}) as cluster:
        proc = _launch(src, out, delays, "--runner", "dask", "--dask-address", cluster.scheduler_address,
                       remote=remote)
        deadline = time.monotonic() + 180
        while not list(out.glob(f"run-*/{naming.OUTCOME}")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the commit never claimed the run"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 130, stderr
    assert stderr.splitlines()[-1] == "shardprep.run: interrupted", stderr
    assert not (out / naming.MANIFEST).exists() and not list(out.glob("run-*")), list(out.iterdir())


def _processes_tagged(tag: str) -> list[str]:
    """The command lines of the processes whose environment holds ``tag`` (Linux)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and tag.encode() in (proc / "environ").read_bytes():
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # ended meanwhile, or not ours to read
            pass
    return found


@pytest.mark.slow
def test_ctrl_c_in_a_dask_run_stops_every_process_it_started(tmp_path) -> None:
    """Ctrl-C in a terminal reaches the whole process group: the launcher and its local cluster's
    workers (forked from it), here while the commit waits on a worker. Exit 130,
    one line, no run folder, and no process left."""
    src = write_csv(tmp_path / "in.csv", sample_rows(3000))
    out = tmp_path / "ds"
    tag = f"shardprep-test-{os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SHARDPREP_TEST_DELAYS": "commit.assembled=60", "SHARDPREP_TEST_TAG": tag}
    proc = subprocess.Popen([sys.executable, "-m", "shardprep.run", "--input", str(src), "--output", str(out),
                             "--num-shards", "2", "--runner", "dask", "--dask-workers", "2"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 180
    while len(list(out.glob("run-*/train/*.tfrecord"))) < 2:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the shards were never written"
        time.sleep(0.05)
    time.sleep(0.5)  # the commit is waiting on a worker
    assert len(_processes_tagged(tag)) >= 3  # the launcher and two workers (and a resource tracker)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1] == "shardprep.run: interrupted", stderr
    assert not list(out.glob("run-*")) and not (out / naming.MANIFEST).exists()
    deadline = time.monotonic() + 30
    while _processes_tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_tagged(tag) == []


def test_an_interrupt_python_swallowed_is_not_lost(tmp_path, monkeypatch) -> None:
    """Python ignores an exception raised where it runs a garbage collector callback (distributed
    installs one) or a __del__: the run went on, and a second Ctrl-C did nothing. Now a later signal
    raises again (not one right after the first: a double Ctrl-C), and a run that ends anyway ends as
    interrupted, its folder removed."""
    from shardprep import interrupts

    monkeypatch.setattr(interrupts, "SWALLOWED_AFTER_S", 0.2)
    root = tmp_path / "ds"
    raised = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.discarding_on_failure(str(root), "run-1"):
            (root / "run-1" / "spill").mkdir(parents=True)
            for delay in (0, 0, 0.3):  # swallowed; at once: only noted; later: raised (and swallowed here)
                time.sleep(delay)
                try:
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(0.5)  # the handler runs in this thread, and cuts the sleep short
                    raised.append(False)
                except KeyboardInterrupt:
                    raised.append(True)
    assert raised == [True, False, True]
    assert not (root / "run-1").exists()


def test_a_swallowed_interrupt_prints_no_traceback(tmp_path, monkeypatch) -> None:
    """Python reports an exception it ignores ("Exception ignored in: ...", its traceback) through
    ``sys.unraisablehook``: a KeyboardInterrupt there is this handler's, and is followed up; others
    are still reported."""
    from shardprep import interrupts

    class Drops:
        def __init__(self, error: BaseException) -> None:
            self.error = error

        def __del__(self) -> None:
            raise self.error

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: reported.append(info.exc_value))
    with interrupts.discarding_on_failure(str(tmp_path / "ds"), "run-1"):
        Drops(KeyboardInterrupt())
        Drops(ValueError("still reported"))
    assert [type(e) for e in reported] == [ValueError], reported


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM yet (``SigCgt`` in /proc: Linux)."""
    with open(f"/proc/{pid}/status") as f:
        caught = next(line for line in f if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


@pytest.mark.slow
@pytest.mark.parametrize("after_s", [0.0, 0.15, 0.4, 0.8, 1.5])
def test_sigterm_at_any_moment_of_start_up_exits_130_in_one_line(after_s, tmp_path) -> None:
    """From the first line of ``shardprep.run`` on (before that the interpreter itself starts): during
    the imports, flag and input checks, schema sampling, the lease, the pipeline's start."""
    src = write_csv(tmp_path / "in.csv", sample_rows(2000))
    out = tmp_path / "ds"
    proc = _launch(src, out, "")
    deadline = time.monotonic() + 60
    while not _catches_sigterm(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.002)
    time.sleep(after_s)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    if proc.returncode == 0:  # the run was done by then
        assert verify.verify(str(out))[0] == []
        return
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1] == "shardprep.run: interrupted", stderr
    assert not list(out.glob("run-*")) and not (out / naming.MANIFEST).exists()
    assert not [p.name for p in out.glob("_lease*")] if out.exists() else True


@pytest.mark.slow
def test_a_failed_dask_run_prints_one_line_and_leaves_nothing(tmp_path) -> None:
    """An input removed once the run is planned: the worker's task fails. The launcher stops the
    cluster before it removes the run's folder (its workers wrote spill after an earlier clean-up),
    and the workers' own log lines ("Compute Failed" and a traceback) stay silent."""
    srcs = [write_csv(tmp_path / f"in{i}.csv", sample_rows(3000, start=3000 * i)) for i in range(3)]
    out = tmp_path / "ds"
    proc = _launch(tmp_path / "in*.csv", out, "", "--runner", "dask", "--dask-workers", "2")
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "starting a Dask" in line:
            srcs[2].unlink()
    assert proc.wait(timeout=180) == 1, "".join(lines)
    assert lines[-1].startswith("shardprep.run: error: ") and str(srcs[2]) in lines[-1], lines
    assert all(line.startswith("[shardprep] ") for line in lines[:-1]), lines
    assert not out.exists() or sorted(p.name for p in out.iterdir()) == []

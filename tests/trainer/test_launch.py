"""The local launcher with TF-free stand-in workers: prefixes, failure reporting, Ctrl-C."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests import trainer_fixtures as fx
from trainer.launch import free_ports

LAUNCH = [sys.executable, "-m", "trainer.launch"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _pids(output: str) -> list[int]:
    return [int(line.rsplit(" ", 1)[1]) for line in output.splitlines() if line.startswith("[launch] worker ") and ": pid " in line]


def test_free_ports_are_distinct() -> None:
    ports = free_ports(8)
    assert len(set(ports)) == 8 and all(p > 0 for p in ports)


def test_failed_worker_is_named_and_the_others_stopped() -> None:
    start = time.monotonic()
    run = subprocess.run(
        [*LAUNCH, "--workers", "3", "--module", "trainer_fixtures", "--", "fail", "1", "3"],
        env=fx.worker_env(), capture_output=True, text=True, timeout=60, cwd=fx.REPO, check=False,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    out = run.stdout
    assert "[worker 1] fake worker 1: about to fail" in out
    assert "[launch] error: worker 1 failed (exit code 3)" in out
    assert "Last lines of worker 1:\n    fake worker 1 up\n    fake worker 1: about to fail" in out
    assert all(line.startswith(("[worker ", "[launch]", "    ")) for line in out.splitlines())
    # --restarts 1 (the default): the whole cluster started once more, then the same failure ends the launch
    assert out.count("[launch] restart 1 of 1: worker 1 exit code 3; restarting all 3 worker(s), which resume "
                     "from the last checkpoint") == 1
    assert out.count("[launch] error: worker 1 failed (exit code 3)") == 2 and len(_pids(out)) == 6
    assert time.monotonic() - start < 30  # the sleeping workers were stopped, not waited for
    assert not any(_alive(pid) for pid in _pids(out))


def test_ctrl_c_is_forwarded() -> None:
    proc = subprocess.Popen(
        [*LAUNCH, "--workers", "2", "--module", "trainer_fixtures", "--", "sleep"],
        env=fx.worker_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=fx.REPO,
    )
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if sum("up" in x and x.startswith("[worker") for x in lines) == 2:
            break
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=30)
    out = "".join(lines) + rest
    assert proc.returncode == 130, out
    assert "SIGINT: forwarding to the workers" in out
    assert not any(_alive(pid) for pid in _pids(out))
    after = out[out.index("SIGINT: forwarding"):].splitlines()[1:]  # the workers' shutdown noise stays hidden
    assert "Traceback" not in out and after == ["[launch] interrupted: all workers stopped"], out


def test_usage_errors_are_one_line() -> None:
    run = subprocess.run([*LAUNCH, "--workers", "2"], env=fx.worker_env(), capture_output=True, text=True, cwd=fx.REPO, check=False)
    assert run.returncode == 2 and run.stderr.strip() == "trainer.launch: error: give the trainer's arguments after '--'"
    run = subprocess.run([*LAUNCH, "--workers", "0", "--", "x"], env=fx.worker_env(), capture_output=True, text=True, cwd=fx.REPO, check=False)
    assert run.returncode == 2 and "--workers 0: expected at least 1" in run.stderr

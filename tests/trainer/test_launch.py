"""The local launcher with TF-free stand-in workers: prefixes, failure reporting, Ctrl-C."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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
    assert run.returncode == 2 and run.stderr.strip().startswith("trainer.launch: error: give the trainer's flags or a program after '--'")
    assert len(run.stderr.strip().splitlines()) == 1
    run = subprocess.run([*LAUNCH, "--workers", "0", "--", "x"], env=fx.worker_env(), capture_output=True, text=True, cwd=fx.REPO, check=False)
    assert run.returncode == 2 and "--workers 0: expected at least 1" in run.stderr


_PROGRAM = """
import json, os, sys, time
task = json.loads(os.environ["TF_CONFIG"])
index, workers = task["task"]["index"], task["cluster"]["worker"]
print("program", index, "of", len(workers), "args", sys.argv[1:], "tf_config", json.dumps(task), flush=True)
if sys.argv[1:2] == ["fail"] and index == int(sys.argv[2]):
    time.sleep(0.3)
    sys.exit(int(sys.argv[3]))
if sys.argv[1:2] in (["fail"], ["sleep"]):
    time.sleep(60)
"""


def _program(tmp_path: Path) -> str:
    path = tmp_path / "my_loop.py"
    path.write_text(_PROGRAM)
    return str(path)


def test_any_program_runs_on_every_worker_with_its_own_tf_config(tmp_path: Path) -> None:
    prog = _program(tmp_path)
    for form in (["python", prog], [prog]):  # 'python PROG' and a .py path: both on the launcher's interpreter
        run = subprocess.run([*LAUNCH, "--workers", "3", "--", *form, "--data", "x y"], env=fx.worker_env(),
                             capture_output=True, text=True, timeout=60, cwd=fx.REPO, check=False)
        assert run.returncode == 0, run.stdout + run.stderr
        lines = [line for line in run.stdout.splitlines() if "] program " in line]
        assert len(lines) == 3
        configs = {}
        for i in range(3):
            line = next(x for x in lines if x.startswith(f"[worker {i}] program {i} of 3 args ['--data', 'x y']"))
            configs[i] = json.loads(line.split(" tf_config ", 1)[1])
        assert all(c["task"] == {"type": "worker", "index": i} for i, c in configs.items())
        assert len({tuple(c["cluster"]["worker"]) for c in configs.values()}) == 1  # one cluster, three addresses
        assert len(set(configs[0]["cluster"]["worker"])) == 3
        assert "[launch] all 3 worker(s) finished" in run.stdout and "summary" not in run.stdout


def test_an_executable_on_path_runs_as_given(tmp_path: Path) -> None:
    run = subprocess.run([*LAUNCH, "--workers", "2", "--", "sh", "-c", 'echo "index in $TF_CONFIG"'], env=fx.worker_env(),
                         capture_output=True, text=True, timeout=60, cwd=fx.REPO, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert sum(line.startswith(f"[worker {i}] index in ") and f'"index": {i}' in line
               for i in range(2) for line in run.stdout.splitlines()) == 2


def test_a_failing_program_is_restarted_then_reported(tmp_path: Path) -> None:
    prog = _program(tmp_path)
    run = subprocess.run([*LAUNCH, "--workers", "2", "--", "python", prog, "fail", "1", "3"], env=fx.worker_env(),
                         capture_output=True, text=True, timeout=60, cwd=fx.REPO, check=False)
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert out.count("[launch] restart 1 of 1: worker 1 exit code 3; restarting all 2 worker(s), which start the "
                     "program again") == 1
    assert out.count("[launch] error: worker 1 failed (exit code 3)") == 2
    assert not any(_alive(pid) for pid in _pids(out))
    # exit 2 (a usage error: a restart would fail alike): reported once, never restarted
    run = subprocess.run([*LAUNCH, "--workers", "2", "--", "python", prog, "fail", "0", "2"], env=fx.worker_env(),
                         capture_output=True, text=True, timeout=60, cwd=fx.REPO, check=False)
    assert run.returncode == 1 and "restart" not in run.stdout and "worker 0 failed (exit code 2)" in run.stdout


def test_ctrl_c_reaches_a_program(tmp_path: Path) -> None:
    proc = subprocess.Popen([*LAUNCH, "--workers", "2", "--", "python", _program(tmp_path), "sleep"], env=fx.worker_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=fx.REPO)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if sum("] program " in x for x in lines) == 2:
            break
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=30)
    out = "".join(lines) + rest
    assert proc.returncode == 130 and "[launch] interrupted: all workers stopped" in out, out
    assert not any(_alive(pid) for pid in _pids(out))


def test_a_program_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    for words, says in ((["no-such-program-xyz"], "neither a trainer flag"), ([str(tmp_path / "gone.py")], "does not exist")):
        run = subprocess.run([*LAUNCH, "--workers", "2", "--", *words], env=fx.worker_env(), capture_output=True, text=True,
                             cwd=fx.REPO, check=False)
        assert run.returncode == 2 and says in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert "[launch]" not in run.stdout  # refused before any worker started

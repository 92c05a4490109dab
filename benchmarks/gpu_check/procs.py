"""Subprocesses of the GPU check: each logged to its own file, timed, and killed (its whole process
group) at its timeout, so a hung NCCL set-up or a stuck pipeline costs one part, not the check.

Log lines in the trainer's format (``2025-01-31 12:00:00,123 INFO message``) carry wall-clock
times; ``events`` reads them back so phases (strategy ready, first step) are timed from the spawn.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

__all__ = ["PYTHON", "REPO", "ProcResult", "child_env", "events", "first_event", "one_worker_tf_config", "run_logged"]

PYTHON = sys.executable
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) [A-Z]+ (.*)$")


@dataclasses.dataclass(frozen=True)
class ProcResult:
    """One finished (or killed) subprocess."""

    returncode: int | None  # None: killed at its timeout
    started: float  # time.time() at the spawn
    wall_s: float
    timeout_s: float
    log_path: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def text(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def failure(self) -> str:
        """One line: why it failed, with the last meaningful line of its output and where the log is."""
        if self.returncode is None:
            return f"timed out after {self.timeout_s:.0f} s (log: {self.log_path})"
        last = next((x.strip() for x in reversed(self.text().splitlines()) if x.strip()), "")
        return f"exit {self.returncode}: {last[:300]} (log: {self.log_path})"


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment, with the repository importable and unbuffered output, plus ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    env.update(extra or {})
    return env


def run_logged(cmd: Sequence[str], *, log_path: str, timeout_s: float, env: Mapping[str, str] | None = None) -> ProcResult:
    """Runs ``cmd`` from the repository root, stdout and stderr into ``log_path``; kills it at ``timeout_s``."""
    timeout_s = max(1.0, timeout_s)
    with open(log_path, "wb") as log:
        log.write(f"$ {shlex.join(cmd)}\n".encode())
        log.flush()
        started, t0 = time.time(), time.perf_counter()
        proc = subprocess.Popen(
            list(cmd), cwd=REPO, env=child_env(env), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            returncode: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            returncode = None
        except BaseException:  # Ctrl-C: take the child and its own children down with us
            _kill_group(proc)
            raise
    return ProcResult(returncode, started, time.perf_counter() - t0, timeout_s, log_path)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this check started for the child
    except ProcessLookupError:
        pass
    proc.wait()


def events(text: str) -> list[tuple[float, str]]:
    """(wall-clock time, message) of every line in the trainer's log format."""
    out = []
    for line in text.splitlines():
        m = _LOG_LINE.match(line)
        if m:
            stamp = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            out.append((stamp, m.group(2)))
    return out


def first_event(text: str, pattern: str, *, since: float) -> float | None:
    """Seconds from ``since`` to the first log line whose message matches ``pattern`` (None: none)."""
    rx = re.compile(pattern)
    return next((round(t - since, 3) for t, msg in events(text) if rx.search(msg)), None)


def one_worker_tf_config() -> str:
    """TF_CONFIG of a one-worker cluster on a free loopback port: MWMS then sets up its collectives
    (and, on a GPU, the NCCL communicator) as on a real cluster, not the single-process shortcut."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return json.dumps({"cluster": {"worker": [f"127.0.0.1:{port}"]}, "task": {"type": "worker", "index": 0}})

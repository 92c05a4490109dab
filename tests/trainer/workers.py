"""Runs W local MWMS worker processes of a program on loopback, each with its own ``TF_CONFIG``, and
reads their record-id logs (``input_worker.py``'s ``IdTap``): a helper of the trainer's multi-worker tests."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Sequence

from tests import trainer_fixtures as fx

__all__ = ["run_workers", "step_ids"]


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def run_workers(workers: int, argv: Sequence[str], *, env: dict[str, str], timeout: float = 240) -> list[str]:
    """Runs ``python argv...`` as ``workers`` MWMS workers; returns each one's output (asserting exit 0)."""
    addresses = [f"127.0.0.1:{p}" for p in _free_ports(workers)]
    procs = []
    for index in range(workers):
        tf_config = json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}})
        procs.append(subprocess.Popen([sys.executable, *argv], env=fx.worker_env(TF_CONFIG=tf_config, **env), cwd=fx.REPO,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=timeout)
            outputs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for index, (proc, out) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"worker {index} exited {proc.returncode}:\n{out[-3000:]}"
    return outputs


def step_ids(log: str, workers: int) -> list[list[list[int]]]:
    """``[step][worker]`` -> the record ids that worker trained on at that step (its ``log``'s lines in order);
    asserts that every worker took the same number of steps."""
    per_worker = []
    for w in range(workers):
        path = f"{log}-w{w}.ids"
        with open(path) as f:
            per_worker.append([[int(t) for t in line.strip().strip("[]").split()] for line in f if line.strip()])
    counts = [len(lines) for lines in per_worker]
    assert len(set(counts)) == 1, f"workers took different step counts: {counts}"
    return [[per_worker[w][s] for w in range(workers)] for s in range(counts[0])]


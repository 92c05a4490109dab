"""``python -m trainer.launch --workers W -- <trainer.train flags | program and its args>``: W real workers on loopback.

What follows ``--`` is either ``trainer.train``'s flags (its first word starts with ``-``: each worker
runs ``python -m trainer.train`` with them) or any program (any other first word: each worker runs it
as given, as ``torchrun`` does for PyTorch): ``python``/``python3`` as the first word, or a ``.py``
path, runs on the launcher's own interpreter; any other word is an executable found on ``PATH``
(``worker_command``). Picks free loopback ports, gives each worker its TF_CONFIG, prefixes every output line with the
worker's index, forwards Ctrl-C, and when one worker fails, stops the others and exits non-zero
naming the worker and showing its last lines; with ``--restarts N`` (default 1) it then restarts
the whole local cluster, which resumes from the chief's last checkpoint, as Kubeflow's TFJob
restarts a failed job's pods. On a machine without a GPU the workers' CUDA probing lines
(``failed call to cuInit``) are left out of the output (kept in the tails shown on failure). TF-free.
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO

from shardprep import cli
from shardprep.errors import UsageError
from trainer import run_table
from trainer.cluster import make_tf_config

__all__ = ["Launcher", "free_ports", "main", "worker_command"]

PROG = "trainer.launch"
TRAINER = "trainer.train"
_TAIL_LINES = 20
# What TensorFlow prints while it probes for CUDA on a machine without a GPU (before its log level applies).
_CPU_NOISE = re.compile(
    r"cudart_stub\.cc|cuda_platform\.cc.*cuInit|cuda_(dnn|fft|blas)\.cc.*Unable to register|"
    r"All log messages before absl::InitializeLog|computation_placer\.cc|TF-TRT Warning|"
    r"oneDNN custom operations are on|This TensorFlow binary is optimized to use available CPU"
)
_USAGE_EXIT = 2  # a worker's input/usage error (one line): a restart would fail alike


def has_gpu() -> bool:
    """Whether an NVIDIA device node exists (decided without importing TensorFlow)."""
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that were free a moment ago (the OS picks them)."""
    sockets, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in sockets:
            s.close()
    return ports


def worker_command(rest: Sequence[str], *, module: str | None = None) -> tuple[list[str], bool]:
    """The command every worker runs for the words after ``--``, and whether it is the trainer.

    ``module`` (a hidden flag, for tests): ``python -m module`` with all the words, as the trainer. Otherwise a first word starting with ``-`` is the trainer's flags; ``python``/``python3`` or a ``.py`` path runs
    on this interpreter (``sys.executable``); any other first word must be an executable on ``PATH``
    (``UsageError`` otherwise, before any worker starts).
    """
    if not rest:
        raise UsageError("give the trainer's flags or a program after '--' (e.g. -- --data DIR --label L, or "
                         "-- python my_loop.py ARGS)")
    first = rest[0]
    if module is not None:
        return [sys.executable, "-m", module, *rest], True
    if first.startswith("-"):
        return [sys.executable, "-m", TRAINER, *rest], True
    if first in ("python", "python3"):
        return [sys.executable, *rest[1:]], False
    if first.endswith(".py"):
        if not os.path.isfile(first):
            raise UsageError(f"{first!r} does not exist: give the program's path after '--'")
        return [sys.executable, *rest], False
    if shutil.which(first) is None:
        raise UsageError(f"{first!r} is neither a trainer flag (they start with '-') nor an executable on PATH")
    return list(rest), False


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Launcher:
    """Runs ``workers`` copies of ``command`` with per-worker TF_CONFIG, and watches them."""

    def __init__(self, *, workers: int, command: Sequence[str], env: dict[str, str] | None = None,
                 out: IO[str] = sys.stdout, grace_s: float = 10.0) -> None:
        if workers < 1:
            raise UsageError(f"--workers {workers}: expected at least 1")
        self.workers, self.command, self.out, self.grace_s = workers, list(command), out, grace_s
        self.env = dict(os.environ if env is None else env)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.tails = [collections.deque(maxlen=_TAIL_LINES) for _ in range(workers)]
        self._lock = threading.Lock()
        self._readers: list[threading.Thread] = []
        self.interrupted = False
        self.quiet_cuda = not has_gpu()
        self.failure: tuple[int, int] | None = None  # (worker, exit code) of the first failure

    def _print(self, line: str) -> None:
        with self._lock:
            self.out.write(line + "\n")
            self.out.flush()

    def _pump(self, index: int, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace").rstrip("\n")
            self.tails[index].append(line)
            if self.quiet_cuda and _CPU_NOISE.search(line):
                continue
            if not self.interrupted:  # after Ctrl-C the workers' gRPC/TF shutdown noise stays in their tails
                self._print(f"[worker {index}] {cli.safe(line)}")

    def start(self) -> None:
        addresses = [f"127.0.0.1:{p}" for p in free_ports(self.workers)]
        self._print(f"[launch] {self.workers} worker(s) on {', '.join(addresses)}")
        for i in range(self.workers):
            env = dict(self.env, TF_CONFIG=make_tf_config(addresses=addresses, index=i), PYTHONUNBUFFERED="1")
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            proc = subprocess.Popen(
                self.command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
            )
            self.procs.append(proc)
            self._print(f"[launch] worker {i}: pid {proc.pid}")
            reader = threading.Thread(target=self._pump, args=(i, proc.stdout), daemon=True)
            reader.start()
            self._readers.append(reader)

    def signal_all(self, sig: int) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass

    def stop_all(self) -> None:
        """SIGTERM to the workers still running, SIGKILL after the grace period."""
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        while any(p.poll() is None for p in self.procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.signal_all(signal.SIGKILL)
        for p in self.procs:
            p.wait()

    def wait(self) -> int:
        """Waits for all workers. Returns 0; or 1 after a failure (naming the worker that failed
        first and stopping the others); or 130 after an interrupt was forwarded."""
        exits: queue.Queue[tuple[int, int]] = queue.Queue()
        for i, proc in enumerate(self.procs):
            threading.Thread(target=lambda i=i, p=proc: exits.put((i, p.wait())), daemon=True).start()
        finished = 0
        while finished < len(self.procs):
            try:
                index, code = exits.get(timeout=0.2)
            except queue.Empty:
                continue
            finished += 1
            if code == 0:
                continue
            if self.interrupted:
                self.stop_all()
                self._drain()
                self._print("[launch] interrupted: all workers stopped")
                return 130
            self.failure = (index, code)
            self.stop_all()
            self._drain()
            tail = "\n".join(f"    {line}" for line in self.tails[index])
            self._print(
                f"[launch] error: worker {index} failed ({_describe_exit(code)}); stopped the other "
                f"workers. Last lines of worker {index}:\n{tail}"
            )
            return 1
        self._drain()
        if self.interrupted:
            self._print("[launch] interrupted: all workers stopped")
            return 130
        self._print(f"[launch] all {self.workers} worker(s) finished")
        return 0

    def _drain(self) -> None:
        for reader in self._readers:
            reader.join(timeout=5)


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        cut = argv.index("--")
        own, rest = argv[:cut], argv[cut + 1:]
    else:
        own, rest = argv, []
    p = argparse.ArgumentParser(
        prog=PROG, usage=f"python -m {PROG} --workers W [--restarts N] -- (<trainer.train flags> | <program> [ARGS])",
        description=__doc__.splitlines()[0],
        epilog="After '--': a first word starting with '-' is trainer.train's flags (each worker runs python -m "
               "trainer.train with them); any other first word is a program each worker runs as given, with its own "
               "TF_CONFIG: 'python' or 'python3' (the launcher's interpreter), a .py path, or an executable on PATH. "
               "Example: python -m trainer.launch --workers 3 -- python examples/custom_loop.py --data DIR",
    )
    p.add_argument("--workers", type=int, required=True, help="local worker processes")
    p.add_argument("--restarts", type=int, default=1,
                   help="after a worker dies, restart all workers up to this many times (the trainer resumes from its "
                        "last checkpoint; a program, from whatever it saved) (default: %(default)s; 0: never)")
    p.add_argument("--module", help=argparse.SUPPRESS)
    args = p.parse_args(own)
    if args.workers < 1:
        raise UsageError(f"--workers {args.workers}: expected at least 1")
    if args.restarts < 0:
        raise UsageError(f"--restarts {args.restarts}: expected 0 or more")
    command, is_trainer = worker_command(rest, module=args.module)
    current: list[Launcher] = []

    def forward(signum: int, frame: object) -> None:
        launcher = current[-1]
        launcher.interrupted = True
        launcher._print(f"[launch] {signal.Signals(signum).name}: forwarding to the workers")
        launcher.signal_all(signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    for attempt in range(args.restarts + 1):
        launcher = Launcher(workers=args.workers, command=command)
        current.append(launcher)
        launcher.start()
        code = launcher.wait()
        if code != 1 or launcher.failure is None or launcher.failure[1] == _USAGE_EXIT or attempt == args.restarts:
            break
        index, exit_code = launcher.failure
        resume = "which resume from the last checkpoint" if is_trainer else "which start the program again"
        launcher._print(f"[launch] restart {attempt + 1} of {args.restarts}: worker {index} {_describe_exit(exit_code)}; "
                        f"restarting all {args.workers} worker(s), {resume}")
    model_dir = run_table.model_dir_of(rest) if is_trainer else None
    if code == 0 and model_dir:
        try:
            run_table.print_report(run_table.read_summaries(model_dir, args.workers))
        except (OSError, ValueError, KeyError) as e:  # the run succeeded: a report it cannot read is only noted
            print(f"[launch] no summary table ({type(e).__name__}: {e})")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())

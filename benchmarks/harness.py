"""Runs contenders as subprocesses, alternating, and measures each run's wall time, CPU and memory.

Wall time is that of the whole process (imports included). CPU time and the largest single
process's peak RSS come from ``wait4`` (the child and every descendant it waited for: shardprep's
pool processes and a run's own Dask workers, all forked from the launcher); the peak of the
whole process tree's summed RSS and summed PSS (shared pages split among the processes that map
them, so a page forked copy-on-write counts once) come from psutil, polled. On a shared machine
CPU seconds move less than wall seconds, so both are kept.
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil

__all__ = ["Contender", "Run", "alternate", "compile_sources", "run_process", "summarize"]

PYTHON = sys.executable
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass
class Run:
    """One measured process."""

    wall_s: float
    cpu_s: float
    max_rss_mb: float  # the largest single process (wait4)
    tree_rss_mb: float  # the whole process tree, summed, at its peak (polled)
    tree_pss_mb: float  # the same in PSS: pages shared by forked processes counted once
    returncode: int
    tail: str = ""
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in dataclasses.asdict(self).items()}
        if not out["extra"]:
            out.pop("extra")
        if self.returncode == 0:
            out.pop("tail")
        return out


def compile_sources() -> None:
    """Writes the bytecode of this checkout's packages, as installing them does, so that a timed run
    measures the product rather than the compiling of its sources: where PYTHONDONTWRITEBYTECODE is
    set (this machine's sessions), every command compiled shardprep's modules again, 0.2 of the ~0.9
    CPU s a run spends in its launcher before its first task (BENCHMARKS.md, issue 33's section)."""
    import compileall

    for package in ("shardprep", "pipelines", "trainer", "benchmarks"):
        compileall.compile_dir(os.path.join(REPO, package), quiet=2)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("PYTHONHASHSEED", "0")
    return env


def _poll_tree(pid: int, stop: threading.Event, peak: list[float], interval: float = 0.05) -> None:
    """``peak``: [RSS, PSS] of the tree in MB, the largest sums seen."""
    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return
    while not stop.is_set():
        rss = pss = 0
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            break
        for proc in procs:
            try:
                info = proc.memory_full_info()
                rss, pss = rss + info.rss, pss + getattr(info, "pss", info.rss)
            except psutil.Error:
                pass
        peak[0], peak[1] = max(peak[0], rss / 2**20), max(peak[1], pss / 2**20)
        stop.wait(interval)


def run_process(cmd: Sequence[str], *, cwd: str = REPO, timeout: float = 3600, shell: bool = False,
                env: dict[str, str] | None = None, poll: bool = True) -> Run:
    """Runs ``cmd`` to completion and measures it; output is kept (its tail) only on failure.

    ``poll``: sample the process tree's memory (RSS, PSS) every 50 ms. Reading every process's
    ``smaps`` costs CPU the run then lacks: on 2 cores it took a 2-process re-shard from 3.09 to
    3.67 s (median of 4 alternating rounds; one process: no difference), so ``alternate`` times
    its rounds without it and measures memory in a round of its own.
    """
    start = time.perf_counter()
    if shell:  # quote every word but the redirections
        cmd = " ".join(c if c in (">", ">>", "<", "|") else shlex.quote(str(c)) for c in cmd)
    proc = subprocess.Popen(cmd, cwd=cwd, env=env or _env(), shell=shell,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    stop, peak = threading.Event(), [0.0, 0.0]
    poller = threading.Thread(target=_poll_tree if poll else lambda *_: None, args=(proc.pid, stop, peak), daemon=True)
    poller.start()
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: proc.stdout.read(65536), b"")), daemon=True)
    reader.start()
    deadline = start + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.01)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    stop.set()
    reader.join(timeout=5)
    poller.join(timeout=5)
    output = b"".join(chunks).decode(errors="replace")
    return Run(
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        max_rss_mb=usage.ru_maxrss / 1024,
        tree_rss_mb=peak[0],
        tree_pss_mb=peak[1],
        returncode=proc.returncode,
        tail=output[-3000:],
        extra={"output": output},
    )


@dataclasses.dataclass
class Contender:
    """One program of a comparison: how to run it, what to do before (untimed) and how to check it."""

    name: str
    cmd: Sequence[str]
    prepare: Callable[[], None] | None = None
    check: Callable[[Run], dict[str, Any]] | None = None
    shell: bool = False


def alternate(contenders: Sequence[Contender], repeats: int, *, log: Callable[[str], None] = print,
              timeout: float = 3600, memory_round: bool = True) -> dict[str, list[Run]]:
    """Runs A, B, C, A, B, C, ... ``repeats`` timed rounds, then one round that samples memory (its
    peaks are given to every run of the contender; its times are not kept: ``run_process``).
    Every run is checked and fails loudly. Without ``memory_round`` only ``max_rss_mb`` (wait4's
    largest single process) tells memory."""
    compile_sources()
    runs: dict[str, list[Run]] = {c.name: [] for c in contenders}
    for r in range(repeats + memory_round):
        timed = r < repeats
        for c in contenders:
            run = _checked(c, timeout, poll=not timed)
            if timed:
                runs[c.name].append(run)
                log(f"  round {r + 1}/{repeats} {c.name:>14s}: {run.wall_s:7.2f} s wall, {run.cpu_s:7.2f} s CPU")
                continue
            for kept in runs[c.name]:
                kept.tree_rss_mb, kept.tree_pss_mb = run.tree_rss_mb, run.tree_pss_mb
            log(f"  memory round {c.name:>14s}: {run.tree_rss_mb:6.0f} MB peak RSS, {run.tree_pss_mb:6.0f} MB peak PSS "
                "(process tree)")
    return runs


def _checked(c: Contender, timeout: float, *, poll: bool) -> Run:
    if c.prepare:
        c.prepare()
    run = run_process(c.cmd, shell=c.shell, timeout=timeout, poll=poll)
    if run.returncode != 0:
        raise RuntimeError(f"{c.name} failed (exit {run.returncode}): {' '.join(map(str, c.cmd))}\n{run.tail}")
    if c.check:
        run.extra.update(c.check(run))
    run.extra.pop("output", None)
    return run


def summarize(runs: Sequence[Run]) -> dict[str, Any]:
    """Medians (and spread) of a contender's runs."""
    walls = [r.wall_s for r in runs]
    return {
        "n": len(runs),
        "wall_s": round(statistics.median(walls), 3),
        "wall_min_s": round(min(walls), 3),
        "wall_max_s": round(max(walls), 3),
        "cpu_s": round(statistics.median(r.cpu_s for r in runs), 3),
        "max_rss_mb": round(max(r.max_rss_mb for r in runs), 1),
        "tree_rss_mb": round(max(r.tree_rss_mb for r in runs), 1),
        "tree_pss_mb": round(max(r.tree_pss_mb for r in runs), 1),
    }


def paired_ratio(a: Sequence[Run], b: Sequence[Run], attr: str = "wall_s") -> float:
    """Median over rounds of a_i / b_i: runs of one round saw the same machine load."""
    return round(statistics.median(getattr(x, attr) / getattr(y, attr) for x, y in zip(a, b)), 3)


def goal(name: str, value: float, target: float, *, at_least: bool = True, unit: str = "x") -> dict:
    """A goal of an issue, as BENCHMARKS.md reports it: met when ``value`` is at least (or at most) ``target``."""
    met = value >= target if at_least else value <= target
    return {"goal": name, "value": round(value, 3), "target": target, "at_least": at_least, "unit": unit, "met": met}


def warm(paths: Sequence[str]) -> None:
    """Reads the inputs once (untimed), so every contender starts with them in the page cache."""
    for path in paths:
        with open(path, "rb") as f:
            while f.read(16 << 20):
                pass


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]

"""``python -m benchmarks.dask_cpu``: where a Dask re-shard spends its CPU, process by process.

Starts a cluster as separate processes on loopback (``dask scheduler`` + ``dask worker --nworkers
N --nthreads 1``, the shape of a real cluster), waits until it is up (its start-up CPU is counted
apart), runs ``shardprep.run --runner dask --dask-address`` on the benchmark CSV, and reports the
CPU seconds (user + system) and page faults of the launcher, the scheduler, the nanny and each
worker during the run, with distributed's own per-task-prefix metrics (execute thread CPU per step,
transfers) and, with ``--timeline``, each worker's task thread use over the run (distributed's
task stream). A one-process DirectRunner run of the same input is measured in the same invocation
for the ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

import psutil

from benchmarks import data

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cpu(proc: psutil.Process) -> tuple[float, float, int]:
    """(user CPU s, system CPU s, minor page faults) of ``proc``."""
    t = proc.cpu_times()
    with open(f"/proc/{proc.pid}/stat") as f:
        faults = int(f.read().rsplit(")", 1)[1].split()[7])
    return t.user, t.system, faults


def _role(cmd: str, root: bool) -> str:
    if not root:
        return "worker" if "spawn_main" in cmd else "helper"
    return "scheduler" if " scheduler" in cmd else "worker" if "--no-nanny" in cmd else "dask worker (nanny)"


def _tree(root: psutil.Process) -> dict[int, tuple[str, tuple[float, float, int]]]:
    """``_cpu`` of ``root`` and its descendants, by pid, with a short role name."""
    out = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            out[proc.pid] = (_role(" ".join(proc.cmdline()), proc is root), _cpu(proc))
        except (psutil.NoSuchProcess, OSError):
            pass
    return out


def _cli(*args: str) -> tuple[float, float, str]:
    """Runs shardprep.run; returns (wall s, CPU s of it and its waited-for children, stderr tail)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "shardprep.run", *args], capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"shardprep.run failed:\n{proc.stderr[-3000:]}")
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), proc.stderr


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of every thread of this process, by Python thread name (run on each worker)."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = defaultdict(float)
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = names.get(int(tid), "(native)")
        out[name.split("-")[0] if name.startswith("Dask-") else name] += (int(fields[11]) + int(fields[12])) / tick
    return dict(out)


def _metrics(address: str) -> tuple[dict, dict, int]:
    from distributed import Client

    with Client(address, timeout=30) as client:
        metrics = client.run_on_scheduler(lambda dask_scheduler: {
            "|".join(map(str, k)): v for k, v in dask_scheduler.cumulative_worker_metrics.items()})
        tasks = client.run_on_scheduler(lambda dask_scheduler: (dask_scheduler.transition_counter, {
            name: sum(tp.state_counts.values()) for name, tp in dask_scheduler.task_prefixes.items()}))
        return metrics, client.run(_thread_cpu), tasks


def _start_task_stream(address: str) -> None:
    from distributed import Client

    def add(dask_scheduler):  # noqa: ANN001
        from distributed.diagnostics.task_stream import TaskStreamPlugin

        if "task-stream" not in dask_scheduler.plugins:
            dask_scheduler.add_plugin(TaskStreamPlugin(dask_scheduler, maxlen=100_000))

    with Client(address, timeout=30) as client:
        client.run_on_scheduler(add)


def _timeline(address: str, started: float, bucket: float = 0.25) -> list[str]:
    """Lines of a timeline of the run: per worker and ``bucket`` seconds since ``started`` (this
    machine's clock), the share of the bucket its task thread computed, and the step it mostly ran."""
    from distributed import Client

    with Client(address, timeout=30) as client:
        tasks = client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.plugins["task-stream"].buffer))
    busy: dict = defaultdict(lambda: defaultdict(float))
    step: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))
    end = 0.0
    for task in tasks:
        name = str(task["key"][0] if isinstance(task["key"], tuple) else task["key"]).rsplit("-", 1)[0]
        for ss in task["startstops"]:
            if ss["action"] != "compute":
                continue
            lo, hi = ss["start"] - started, ss["stop"] - started
            end = max(end, hi)
            b = int(lo // bucket)
            while b * bucket < hi:
                part = min(hi, (b + 1) * bucket) - max(lo, b * bucket)
                busy[task["worker"]][b] += part
                step[task["worker"]][b][name.replace("Reshard_", "")] += part
                b += 1
    workers = sorted(busy)
    lines = ["t s    " + "  ".join(f"worker {i}: busy, step" for i in range(len(workers)))]
    for b in range(int(end // bucket) + 1):
        cells = []
        for w in workers:
            top = max(step[w][b].items(), key=lambda kv: kv[1])[0] if step[w][b] else "-"
            cells.append(f"{busy[w][b] / bucket:4.0%} {top[:28]:<28}")
        lines.append(f"{b * bucket:5.2f}  " + "  ".join(cells))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.dask_cpu")
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--unit-mb", default="16")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-nanny", action="store_true")
    ap.add_argument("--quiet", action="store_true", help="the scheduler and workers with pipelines.dask_engine.QUIET")
    ap.add_argument("--preload", action="store_true",
                    help="dask worker --preload pipelines.dask_worker (a cluster for this bench only): the steps "
                    "imported at start-up")
    ap.add_argument("--skip-direct", action="store_true")
    ap.add_argument("--timeline", action="store_true", help="print each worker's task thread use in 0.25 s steps")
    args = ap.parse_args(argv)
    folder = data.csv_set(args.rows)
    inputs = os.path.join(folder, "*.csv")
    mb = data.dir_bytes(folder) / 1e6
    work = tempfile.mkdtemp(prefix="dask-cpu-")
    common = ["--input", inputs, "--num-shards", str(args.shards), "--unit-mb", args.unit_mb]
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "PYTHONPATH": REPO}
    if args.quiet:
        from pipelines.dask_engine import QUIET

        env.update({"DASK_" + key.upper().replace(".", "__").replace("-", "_"): str(value)
                    for key, value in QUIET.items()})
    info = os.path.join(work, "scheduler.json")
    procs = [subprocess.Popen([os.path.join(bin_dir, "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--dashboard-address", "127.0.0.1:0", "--scheduler-file", info],
                              env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        while not os.path.exists(info):
            time.sleep(0.1)
        time.sleep(0.2)
        address = json.load(open(info))["address"]
        procs.append(subprocess.Popen(
            [os.path.join(bin_dir, "dask"), "worker", address, "--nworkers", str(args.workers), "--nthreads", "1",
             "--host", "127.0.0.1", "--no-dashboard", "--local-directory", work,
             *(["--no-nanny"] if args.no_nanny else []),
             *(["--preload", "pipelines.dask_worker"] if args.preload else [])],
            env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        from distributed import Client

        with Client(address, timeout=60) as client:
            client.wait_for_workers(args.workers, timeout=120)
        time.sleep(1.0)
        roots = [psutil.Process(p.pid) for p in procs]
        if args.timeline:
            _start_task_stream(address)
        before = {pid: v for r in roots for pid, v in _tree(r).items()}
        started = time.time()
        wall, client_cpu, _ = _cli(*common, "--output", os.path.join(work, "dask"), "--runner", "dask",
                                      "--dask-address", address)
        after = {pid: v for r in roots for pid, v in _tree(r).items()}
        metrics, threads, tasks = _metrics(address)
        timeline = _timeline(address, started) if args.timeline else []
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(30)
    print(f"{args.rows:,} rows, {mb:.0f} MB of CSV, {args.shards} shards, --unit-mb {args.unit_mb}, "
          f"{args.workers} Dask workers ({'no nanny' if args.no_nanny else 'nanny'}"
          f"{', preloaded' if args.preload else ''}{', quiet' if args.quiet else ''}); load {os.getloadavg()[0]:.1f}")
    print(f"\n| process | start-up CPU s | run CPU s (user + system) | run page faults |\n|---|---|---|---|\n"
          f"| launcher (shardprep.run) | | {client_cpu:.1f} | |")
    total = client_cpu
    for pid, (role, (user, system, faults)) in sorted(after.items()):
        user0, system0, faults0 = before.get(pid, (role, (0.0, 0.0, 0)))[1]
        total += user + system - user0 - system0
        print(f"| {role} {pid} | {user0 + system0:.1f} | {user + system - user0 - system0:.1f} "
              f"({user - user0:.1f} + {system - system0:.1f}) | {faults - faults0:,} |")
    print(f"| **all** | | **{total:.1f}** ({total / (mb / 1000):.0f} CPU s per GB); wall {wall:.1f} s |")
    by = defaultdict(float)
    for key, value in metrics.items():
        parts = key.split("|")
        if parts[-1] == "seconds" and parts[-2] in ("thread-cpu", "thread-noncpu", "deserialize", "serialize",
                                                     "compress", "decompress", "network", "disk-read", "disk-write",
                                                     "other", "executor"):
            by["|".join(parts)] += value
    print("\nthreads (CPU s since start, start-up included):")
    for worker, per in threads.items():
        print("  " + worker + ": " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1])))
    print(f"scheduler transitions: {tasks[0]}; tasks by prefix: {tasks[1]}")
    print("\ndistributed's metrics (seconds):")
    for key, value in sorted(by.items(), key=lambda kv: -kv[1]):
        if value >= 0.05:
            print(f"  {value:7.2f}  {key}")
    if timeline:
        print("\ntimeline (seconds since the launcher started):\n" + "\n".join(timeline))
    if not args.skip_direct:
        wall1, cpu1, _ = _cli(*common, "--output", os.path.join(work, "one"), "--local-workers", "1")
        print(f"\none process: wall {wall1:.1f} s, CPU {cpu1:.1f} s ({cpu1 / (mb / 1000):.0f} CPU s per GB); "
              f"Dask wall {wall1 / wall:.2f}x one process, CPU {total / cpu1:.2f}x")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

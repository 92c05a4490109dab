"""The direct runner on one machine: how many worker processes, the memory free for the run's page
cache (``available_memory``), and readable lines from them; and where a run's workers start
(``worker_pool``: this pool, or a Dask cluster's workers, ``pipelines.dask_cluster``), and whether
Beam runs in this process (``beam_in_process``).

By default the re-shard uses every core this process may run on (``os.sched_getaffinity``): the
run stays in Beam's in-process DirectRunner and its working steps fan out to a pool of processes
forked from the launcher (``shardprep.graph.pool``), which costs a fraction of Beam's own
multi-processing mode (a fresh interpreter per SDK worker, every element through gRPC). The pool
starts before Beam is imported (``worker_pool``), and its processes begin CountRanges and Parse
at once, while the launcher imports Beam and builds the graph. Inputs under ``TINY_BYTES`` or of
a single work unit run in this process. The output does not depend on
the count: positions come from the counts side input, never from bundling or scheduling. A
stage's elements are dealt to the processes a few at a time, so a run balances when it has
several work units per process (``--unit-mb``).

Beam's own ``--direct_num_workers=N`` (with or without ``--direct_running_mode``) asks for N
workers, and gets N processes of this pool (``direct_flags``), not Beam's SDK worker processes:
each of those is a fresh interpreter that imports Beam and gets every element through gRPC, and
two of them took 1.31x one process's time on a 298 MB TFRecord file (issue 11).
"""
from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from shardprep import retention
from shardprep.config import ReshardConfig
from shardprep.errors import UsageError
from shardprep.formats import WorkUnit

__all__ = ["TINY_BYTES", "Workers", "available_memory", "beam_in_process", "direct_flags", "in_process_runner", "machine_cores",
           "plan_workers", "summarize", "worker_pool"]

# Below this, one process: the work is all start-up, and the pool adds ~0.3 CPU s for no wall time (3 files of 100
# rows: 1.72 s median either way). Above it the pool parses while Beam is imported: 2.5 MB of CSV in 3 files
# 4.2 -> 3.2 s, 20,000 small images (22 MB, 40 units) 3.4-5.9 -> 2.6-2.9 s (it was 64 MB before the pool forked
# ahead of Beam's import, when the images took 0.5 s longer with it).
TINY_BYTES = 1 << 20
_DIRECT_FLAGS = ("--direct_num_workers", "--direct_running_mode")
_MODES = ("in_memory", "multi_threading", "multi_processing")  # Beam's; each means this pool here
log = logging.getLogger("shardprep")


class Workers(NamedTuple):
    """A run's worker processes: how many, the token of the local pool that runs them (or None),
    and for a local Dask cluster, a function that waits for it and gives its scheduler address."""

    count: int
    pool: str | None = None
    dask_address: Callable[[], str] | None = None


@contextlib.contextmanager
def worker_pool(config: ReshardConfig, units: Sequence[WorkUnit], *, runner: str, local_workers: int | None,
                dask_address: str | None = None, dask_workers: int | None = None) -> Iterator[Workers]:
    """The run's worker processes: a local pool sized by ``plan_workers`` and started now, its first
    steps begun (``graph.pool``: prefetch); for ``--runner dask``, the cluster's workers as that pool
    (``beam_in_process``), or, for Beam's graph on the cluster, a local Dask cluster without an address;
    the local cluster of ``dask_workers`` (default: one per core) started now (``pipelines.dask_cluster``);
    or none.

    Beam need not be imported yet, and had better not be: the pool's processes then never load it,
    and a Dask cluster starts while this process imports it.
    """
    if runner == "dask":
        from pipelines import dask_cluster

        count = dask_workers or machine_cores()
        if beam_in_process(runner, config):
            with dask_cluster.pool(config, units, address=dask_address, workers=count) as token:
                yield Workers(0 if dask_address else count, token)
        elif dask_address is None:
            with dask_cluster.ahead(count, graph=True) as address:
                yield Workers(count, dask_address=address)
        else:
            yield Workers(0)
        return
    if runner != "direct":
        yield Workers(1)
        return
    count = plan_workers(requested=local_workers, input_bytes=sum(size for _, size in config.sources),
                         num_units=len(units), cores=machine_cores())
    if count == 1:
        yield Workers(1)
        return
    from shardprep.graph.pool import local_pool, stop
    from shardprep.graph.work import ahead

    log.info("direct runner: %d worker processes (--local-workers to choose)", count)
    with local_pool(count, prefetch=ahead(config), elements=list(units)) as token:
        try:
            yield Workers(count, token)
        except BaseException:  # a failed run, also before Beam ran (its import, the graph): no process writes
            # on, and what the pool spilled goes (pipelines.reshard removes the rest once Beam runs)
            stop(token)
            retention.discard_run(config.output, config.run_id, whole=False)
            raise


def beam_in_process(runner: str, config: ReshardConfig) -> bool:
    """Whether Beam runs the run's graph in this process (its FnApiRunner), the working steps on a
    pool: the direct runner's (``graph.pool``), or a Dask cluster's workers where the spill stays in
    place (``ReshardConfig.spill_in_place``: the cluster is of this machine, and what crosses between
    the steps is a few references per shard). Otherwise a Dask run's graph goes to the cluster whole
    (``pipelines.dask_runner``): without a spill in place, Assign gives a piece per batch and shard,
    a number no launcher should hold for a data set that needs several machines."""
    return runner == "direct" or (runner == "dask" and config.spill_in_place)


def in_process_runner(options: Any) -> Any:
    """Beam's FnApiRunner, the engine its DirectRunner picks for a batch job like this one, chosen here.

    The DirectRunner first tries its Prism runner, a binary it downloads from GitHub into the
    user's cache: on a machine without network that try costs ~0.3 s a run (a DNS failure, or a
    connection timeout behind a firewall), and on one with network the run would move to an engine
    this product is not built or tested on. Beam's ``--direct_*`` flags never reach it
    (``direct_flags``). The provision info is what the DirectRunner gives it.
    """
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. under taskset or a container's cpuset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def available_memory() -> int | None:
    """Bytes this process's page cache may grow by: the kernel's ``MemAvailable``, or less under the
    memory limit of its cgroup or of one above it (a container's page cache counts against its
    limit; reclaimable file pages count as free). None where unknown (not Linux)."""
    try:
        with open("/proc/meminfo") as f:
            free = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
        with open("/proc/self/cgroup") as f:
            groups = [line.rstrip("\n").split(":", 2) for line in f]
    except (OSError, StopIteration, ValueError):
        return None
    for _, controllers, path in groups:
        if controllers == "memory":  # cgroup v1
            free = min(free, _cgroup_room("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes",
                                          "memory.usage_in_bytes", "total_inactive_file"))
        elif controllers == "":  # cgroup v2
            free = min(free, _cgroup_room("/sys/fs/cgroup", path, "memory.max", "memory.current", "inactive_file"))
    return free


def _cgroup_room(root: str, path: str, limit: str, usage: str, inactive: str) -> int:
    """The room left under the tightest memory limit of cgroup ``path`` and the groups above it, in
    the hierarchy mounted at ``root`` (no limit, or no such group: unbounded)."""
    room, parts = 1 << 62, [p for p in path.split("/") if p]
    for depth in range(len(parts), -1, -1):
        folder = "/".join([root, *parts[:depth]])
        try:
            with open(f"{folder}/{limit}") as a, open(f"{folder}/{usage}") as b, open(f"{folder}/memory.stat") as c:
                cap, used = int(a.read()), int(b.read())  # "max" (cgroup v2, no limit): ValueError
                stat = dict(line.split() for line in c)
        except (OSError, ValueError):
            continue
        room = min(room, max(0, cap - used + int(stat.get(inactive, 0))))
    return room


def plan_workers(*, requested: int | None, input_bytes: int, num_units: int, cores: int) -> int:
    """Pool processes for the direct runner: ``requested`` if given, else one per core for
    inputs worth it (at most one per work unit), else 1 (no pool)."""
    if requested is not None:
        if requested < 1:
            raise UsageError(f"--local-workers {requested}: expected 1 or more (e.g. --local-workers {cores})")
        return requested
    if num_units <= 1 or input_bytes < TINY_BYTES:
        return 1
    return max(1, min(cores, num_units))


def direct_flags(args: Sequence[str], local_workers: int | None) -> tuple[int | None, list[str]]:
    """The direct runner's process count, and the Beam flags left once Beam's own ``--direct_*`` flags
    are taken out of ``args``: ``--direct_num_workers=N`` is ``--local-workers N`` (0: one per core, as
    in Beam), whatever ``--direct_running_mode`` says; the pool runs them, never Beam's SDK workers."""
    rest: list[str] = []
    values: dict[str, str] = {}
    items = iter(args)
    for arg in items:
        name, eq, value = arg.partition("=")
        if name not in _DIRECT_FLAGS:
            rest.append(arg)
            continue
        values[name] = value if eq else next(items, "")
    mode = values.get("--direct_running_mode", "in_memory")
    if mode not in _MODES:
        raise UsageError(f"--direct_running_mode {mode!r}: expected one of {', '.join(_MODES)}")
    if "--direct_num_workers" not in values:
        return local_workers, rest
    text = values["--direct_num_workers"]
    if not text.isdigit():
        raise UsageError(f"--direct_num_workers {text!r}: expected a count (e.g. --direct_num_workers={machine_cores()})")
    count = int(text) or machine_cores()
    if local_workers is not None and local_workers != count:
        raise UsageError(f"--local-workers {local_workers} and --direct_num_workers={text} ask for different process "
                         "counts: give one of them")
    return count, rest


def summarize(result: object, config: ReshardConfig, *, workers: int, seconds: float) -> None:
    """One line per stage from the run's counters (the runner process sums every worker's); a
    runner without metrics (Dask) gets the same Parse line from the committed manifest."""
    try:
        counters = {c.key.metric.name: c.committed for c in result.metrics().query()["counters"]}  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - no metrics here: the manifest's accounting says the same
        counters = _manifest_counters(config)
    if not counters:
        return
    records, rejected = counters.get("records_read", 0), counters.get("records_rejected", 0)
    mb = counters.get("bytes_encoded", 0) / 1e6
    where = f"{workers} worker process{'' if workers == 1 else 'es'}, " if workers else ""  # 0: a cluster's, unknown
    log.info("Parse: %d records read (%d rejected), %.1f MB encoded; %s%.1f s, %.1f MB/s",
             records, rejected, mb, where, seconds, mb / max(seconds, 1e-9))
    if "shards_written" in counters:
        log.info("WriteShards: %d shards written", counters["shards_written"])


def _manifest_counters(config: ReshardConfig) -> dict[str, int]:
    """The counters ``summarize`` prints, from the manifest of this run; {} where it committed nothing."""
    from shardprep import manifest
    from shardprep.errors import ManifestError

    try:
        result = manifest.load(config.output)
    except ManifestError:
        return {}
    if config.run_id not in result.run_ids:
        return {}
    shards = [s for split in result.splits.values() for s in split.shards]
    return {"records_read": result.accounting.read, "records_rejected": result.accounting.rejected,
            "bytes_encoded": sum(s.num_bytes for s in shards), "shards_written": len(shards)}

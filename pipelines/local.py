"""The direct runner on one machine: how many worker processes, and readable lines from them.

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

Beam's own flags still choose Beam's engine: with ``--direct_running_mode=multi_processing
--direct_num_workers=N`` Beam starts its SDK worker processes and no pool runs. Those workers
send their log records to the runner process, which logs them under Beam's
``local_job_service`` logger as protobuf dumps; ``WorkerLogs`` turns this product's records back
into plain lines of the ``shardprep`` logger and drops the workers' start-up chatter.
"""
from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from shardprep import retention
from shardprep.config import ReshardConfig
from shardprep.errors import UsageError
from shardprep.formats import WorkUnit

__all__ = ["TINY_BYTES", "WorkerLogs", "Workers", "in_process_runner", "install_worker_logs", "machine_cores",
           "plan_workers", "remove_worker_logs", "summarize", "worker_pool", "workers_of"]

# Below this, one process: the work is all start-up, and the pool adds ~0.3 CPU s for no wall time (3 files of 100
# rows: 1.72 s median either way). Above it the pool parses while Beam is imported: 2.5 MB of CSV in 3 files
# 4.2 -> 3.2 s, 20,000 small images (22 MB, 40 units) 3.4-5.9 -> 2.6-2.9 s (it was 64 MB before the pool forked
# ahead of Beam's import, when the images took 0.5 s longer with it).
TINY_BYTES = 1 << 20
_DIRECT_FLAGS = ("--direct_num_workers", "--direct_running_mode")
_FORWARDER = "apache_beam.runners.portability.local_job_service"
log = logging.getLogger("shardprep")


class Workers(NamedTuple):
    """A run's worker processes: how many, the token of the local pool that runs them (or None), and
    whether they are Beam's own SDK workers (its ``--direct_*`` multi-processing flags)."""

    count: int
    pool: str | None = None
    beam: bool = False


@contextlib.contextmanager
def worker_pool(config: ReshardConfig, units: Sequence[WorkUnit], *, runner: str, beam_args: Sequence[str],
                local_workers: int | None) -> Iterator[Workers]:
    """The run's worker processes: Beam's own (its ``--direct_*`` flags), or a local pool sized by
    ``plan_workers`` and started now, its first steps begun (``graph.pool``: prefetch), or none.

    Beam need not be imported yet, and had better not be: the pool's processes then never load it.
    """
    if runner != "direct":
        yield Workers(1)
        return
    beam_workers = workers_of(beam_args)
    if beam_workers > 1:  # Beam's own multi-processing mode
        yield Workers(beam_workers, beam=True)
        return
    count = plan_workers(requested=local_workers, input_bytes=sum(size for _, size in config.sources),
                         num_units=len(units), cores=machine_cores())
    if count == 1:
        yield Workers(1)
        return
    from shardprep.graph.parse import first_steps
    from shardprep.graph.pool import local_pool, stop

    log.info("direct runner: %d worker processes (--local-workers to choose)", count)
    with local_pool(count, prefetch=first_steps(config), elements=list(units)) as token:
        try:
            yield Workers(count, token)
        except BaseException:  # a failed run, also before Beam ran (its import, the graph): no process writes
            # on, and what the pool spilled goes (pipelines.reshard removes the rest once Beam runs)
            stop(token)
            retention.discard_run(config.output, config.run_id, whole=False)
            raise


def in_process_runner(options: Any) -> Any:
    """Beam's FnApiRunner, the engine its DirectRunner picks for a batch job like this one, chosen here.

    The DirectRunner first tries its Prism runner, a binary it downloads from GitHub into the
    user's cache: on a machine without network that try costs ~0.3 s a run (a DNS failure, or a
    connection timeout behind a firewall), and on one with network the run would move to an engine
    this product is not built or tested on. The FnApiRunner still reads Beam's ``--direct_*`` flags
    (``--direct_running_mode=multi_processing``). The provision info is what the DirectRunner gives it.
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


def workers_of(args: Sequence[str]) -> int:
    """The SDK worker processes Beam's own direct-runner flags ask for (1 unless multi_processing)."""
    flags = dict(a[2:].split("=", 1) for a in args if a.startswith(_DIRECT_FLAGS) and "=" in a)
    if flags.get("direct_running_mode") != "multi_processing":
        return 1
    count = flags.get("direct_num_workers", "1")
    return int(count) if count.isdigit() else 1


class WorkerLogs(logging.Filter):
    """On Beam's log forwarder: re-logs worker records of this product as ``shardprep`` lines,
    keeps other workers' errors, and drops the rest (start-up warnings of every worker)."""

    def filter(self, record: logging.LogRecord) -> bool:
        entry = _entry(record)
        if entry is None:
            return True
        if "/shardprep/" in entry.log_location or "/pipelines/" in entry.log_location:
            if log.isEnabledFor(record.levelno):
                log.log(record.levelno, "%s", entry.message)
            return False
        return record.levelno >= logging.ERROR


def _entry(record: logging.LogRecord) -> Any:
    """The worker's ``LogEntry`` that Beam's forwarder logged as text, or None."""
    if not (isinstance(record.args, tuple) and len(record.args) == 1 and isinstance(record.args[0], str)):
        return None
    from apache_beam.portability.api import beam_fn_api_pb2
    from google.protobuf import text_format

    try:
        return text_format.Parse(record.args[0], beam_fn_api_pb2.LogEntry())
    except text_format.ParseError:
        return None


def install_worker_logs() -> tuple[WorkerLogs, int]:
    """Puts a ``WorkerLogs`` filter on Beam's forwarder, opened to every level so that this
    product's records reach it; ``remove_worker_logs`` undoes it when the run ends."""
    forwarder = logging.getLogger(_FORWARDER)
    flt, level = WorkerLogs(), forwarder.level
    forwarder.addFilter(flt)
    forwarder.setLevel(logging.DEBUG)
    return flt, level


def remove_worker_logs(installed: tuple[WorkerLogs, int]) -> None:
    forwarder = logging.getLogger(_FORWARDER)
    forwarder.removeFilter(installed[0])
    forwarder.setLevel(installed[1])


def summarize(result: object, *, workers: int, seconds: float) -> None:
    """One line per stage from the run's counters (the runner process sums every worker's)."""
    try:
        counters = {c.key.metric.name: c.committed for c in result.metrics().query()["counters"]}  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - runners without metrics (Dask) get no summary
        return
    records, rejected = counters.get("records_read", 0), counters.get("records_rejected", 0)
    mb = counters.get("bytes_encoded", 0) / 1e6
    log.info("Parse: %d records read (%d rejected), %.1f MB encoded; %d worker process%s, %.1f s, %.1f MB/s",
             records, rejected, mb, workers, "" if workers == 1 else "es", seconds, mb / max(seconds, 1e-9))
    if "shards_written" in counters:
        log.info("WriteShards: %d shards written", counters["shards_written"])

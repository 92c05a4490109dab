"""The engines that run the re-shard job (``shardprep.job``), chosen once by ``--runner``: the one
place runner names are known.

- ``direct`` (the default): this machine's processes (``pipelines.local``), no Beam;
- ``dask``: the job's stages as tasks on a Dask cluster's workers (``pipelines.dask_engine``), no Beam;
- ``beam``: the Beam graph built from the same job on Beam's own in-process runner, for checking
  the graph that ``dataflow`` (Google Cloud Dataflow) and ``flink`` / ``spark`` / ``portable``
  (Beam's portable runners) run (``pipelines.beam_graph``).

An engine's module is imported only when chosen: a local run never imports Beam or Dask.
"""
from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from shardprep import capacity
from shardprep.config import ReshardConfig
from shardprep.errors import RunError
from shardprep.formats import WorkUnit

if TYPE_CHECKING:
    from shardprep.job import Plan

__all__ = ["RUNNERS", "Engine", "RunOptions", "engine", "run"]

log = logging.getLogger("shardprep")

_BEAM = "pipelines.beam_graph", "BeamEngine"
_ENGINES = {  # runner name -> (module, class, its arguments)
    "direct": ("pipelines.local", "LocalEngine", {}),
    "dask": ("pipelines.dask_engine", "DaskEngine", {}),
    "beam": (*_BEAM, {"runner": "FnApiRunner", "in_process": True}),  # not DirectRunner: it tries Prism first
    "dataflow": (*_BEAM, {"runner": "DataflowRunner", "dataflow": True}),
    "flink": (*_BEAM, {"runner": "FlinkRunner"}),
    "spark": (*_BEAM, {"runner": "SparkRunner"}),
    "portable": (*_BEAM, {"runner": "PortableRunner"}),
}
RUNNERS = tuple(_ENGINES)
HELP = ("direct: this machine's cores, no Beam; dask: a Dask cluster (a local one, or --dask-address); beam: the "
        "Beam graph on Beam's own in-process runner (to check it); dataflow: Google Cloud Dataflow; "
        "flink|spark|portable: Beam's portable runners (--flink_master, --spark_master_url, --job_endpoint)")


class RunOptions(NamedTuple):
    """How the run is executed: the engine's name and the flags any engine reads."""

    runner: str = "direct"
    local_workers: int | None = None
    dask_address: str | None = None
    dask_workers: int | None = None
    beam_args: tuple[str, ...] = ()  # arguments shardprep does not know, for Beam's PipelineOptions


class Engine(Protocol):
    plans_on_workers: bool  # a ``Plan``'s first step runs where the job's stages run (else in the launcher, before them)

    def checked(self, options: RunOptions) -> RunOptions:
        """``options`` with the engine's flags read from ``beam_args``, the rest refused (UsageError)."""

    def on_this_machine(self, options: RunOptions) -> bool:
        """Whether every worker runs on this machine (the spill may then be read in place: ``graph.spill``)."""

    def run(self, config: ReshardConfig, units: Sequence[WorkUnit], options: RunOptions, plan: Plan | None = None) -> bool:
        """Runs the job to its commit; False when nothing ran (a Dataflow ``--dry_run=True``). ``plan``
        (``shardprep.job.Plan``): the config and units come from it, its first step run on the
        engine's workers where they are this process's or a cluster's, else in this process."""


def engine(runner: str) -> Engine:
    module, name, kwargs = _ENGINES[runner]
    return getattr(importlib.import_module(module), name)(**kwargs)


def run(config: ReshardConfig, units: Sequence[WorkUnit], options: RunOptions, plan: Plan | None = None) -> bool:
    """Runs the re-shard on ``options.runner``'s engine (``plan``: its units planned there, ``Engine.run``);
    a full disk is one line that says how much room it needs."""
    planned = list(units)
    configs = [config]  # a text run's, once its store is built: the store's counts bound its instances
    free = capacity.free_space(config.output)

    def remembered(run_stage: Callable[[Any, list], list]) -> tuple[ReshardConfig, list]:
        cfg, planned[:] = plan(run_stage)  # type: ignore[misc]
        configs.append(cfg)
        _log_bound(cfg, planned)
        return cfg, planned

    if plan is None:
        _log_bound(config, planned)
    try:
        return engine(options.runner).run(config, units, options, remembered if plan is not None else None)
    except BaseException as e:  # the caller removes the run's folder (shardprep.interrupts)
        if not capacity.out_of_space(e):
            raise
        raise RunError(_full_disk(configs[-1], planned, free, store_only=plan is not None and len(configs) == 1)) from e


def _log_bound(config: ReshardConfig, units: Sequence[WorkUnit]) -> None:
    try:
        bound = capacity.space_bound(config, units)
    except Exception as e:  # noqa: BLE001 - a log line only: the run goes on
        log.debug("no bound of the run's disk space: %s", e)
        return
    log.info("this run writes at most %.1f MB under %s at once (%s bytes: %s)", bound.total / 1e6, config.output,
             f"{bound.total:,}", bound.describe())


def _full_disk(config: ReshardConfig, units: Sequence[WorkUnit], free: int | None, *, store_only: bool) -> str:
    """The one line of a full disk: at most how much room the run needs (``capacity.space_bound``, an
    upper bound of what it holds at once under its output), and how much was free when it started."""
    input_bytes = sum(size for _, size in config.sources)
    if store_only:  # a text run whose document store filled the disk: its instances are bounded once it is built
        need = f"its document store alone needs at most {capacity.text_store_bound(config, units) / 1e6:,.1f} MB"
    else:
        need = f"this run needs at most {capacity.space_needed(config, units) / 1e6:,.1f} MB"
    had = f"; {free / 1e6:,.1f} MB were free when it started" if free is not None else ""
    return (f"no space left on the device of {config.output}: {need} free there (spill, shards, indexes and dead "
            f"letters at once, for {input_bytes / 1e6:,.1f} MB of input){had}; its files were removed; free space or "
            f"choose another --output and rerun")

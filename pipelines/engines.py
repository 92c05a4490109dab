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

    def remembered(run_stage: Callable[[Any, list], list]) -> tuple[ReshardConfig, list]:
        cfg, planned[:] = plan(run_stage)  # type: ignore[misc]
        return cfg, planned

    try:
        return engine(options.runner).run(config, units, options, remembered if plan is not None else None)
    except BaseException as e:  # the caller removes the run's folder (shardprep.interrupts)
        if not capacity.out_of_space(e):
            raise
        input_bytes = sum(size for _, size in config.sources)
        raise RunError(
            f"no space left on the device of {config.output}: this run needs about "
            f"{capacity.space_needed(planned) / 1e6:,.1f} MB free there (its shards plus one copy of them in spill, for "
            f"{input_bytes / 1e6:,.1f} MB of input); its files were removed; free space or choose another "
            f"--output and rerun") from e

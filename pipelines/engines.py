"""The engines that run the re-shard job (``shardprep.job``), chosen once by ``--runner``: the one
place runner names are known.

- ``direct`` (the default): this machine's processes (``pipelines.local``), no Beam;
- ``dask``: the job's stages as tasks on a Dask cluster's workers (``pipelines.dask_engine``), no Beam;
- ``beam``: the Beam graph built from the same job on Beam's own in-process runner, for checking
  the graph that ``dataflow`` (Google Cloud Dataflow) and ``flink`` / ``spark`` / ``portable``
  (Beam's portable runners) run (``pipelines.beam_graph``).

An engine's module is imported only when chosen: a local run never imports Beam or Dask. The
launcher (``shardprep.submit``) builds and stages the job; an engine only runs it.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from shardprep.job import Job

__all__ = ["HELP", "RUNNERS", "Engine", "RunOptions", "engine"]

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
    """Runs a job (``shardprep.job.Job``) that the launcher built and staged (``shardprep.submit``):
    its stages, its workers, its counters (``graph.counting.Sink``); it builds nothing of the job."""

    def checked(self, options: RunOptions) -> RunOptions:
        """``options`` with the engine's flags read from ``beam_args``, the rest refused (UsageError)."""

    def on_this_machine(self, options: RunOptions) -> bool:
        """Whether every worker runs on this machine (the spill may then be read in place: ``graph.spill``)."""

    def runs(self, options: RunOptions) -> bool:
        """Whether ``run`` runs the job (False: it only builds its graph, a Dataflow ``--dry_run=True``;
        the launcher then stages nothing)."""

    def run(self, job: Job, options: RunOptions) -> bool:
        """Runs ``job`` to its commit; False when nothing ran (``runs``)."""


def engine(runner: str) -> Engine:
    """The engine of runner name ``runner`` (one of ``RUNNERS``), its module imported now."""
    module, name, kwargs = _ENGINES[runner]
    return getattr(importlib.import_module(module), name)(**kwargs)

"""Preloaded, after ``pipelines.dask_worker``, by the workers of a local Dask cluster that runs
Beam's graph (``pipelines.local.beam_in_process``: not), and imported by the fork server they are
forked from (``pipelines.dask_cluster``): Beam without the cloud connectors this product never uses
(``pipelines.startup``: ~0.6 s less of each worker's start-up) and Beam's Dask runner with this
product's translation. Only for that cluster, which runs nothing else: a worker of a shared cluster
may run another Beam job that needs the connectors, so ``dask worker`` takes ``--preload
pipelines.dask_runner`` (README).
"""
from pipelines import startup

startup.import_beam("dask", lean=True)

import pipelines.dask_runner  # noqa: E402,F401  (after the lean import of Beam)
import shardprep.graph.reshard  # noqa: E402,F401

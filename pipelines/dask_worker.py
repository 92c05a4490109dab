"""Imported by the fork server the workers of a run's local Dask cluster are forked from, and
preloaded by each (``pipelines.dask_cluster``; then already imported).

It imports, before a worker joins the cluster, what the run's tasks need: Beam without the
cloud connectors this product never uses (``pipelines.startup``: ~0.6 s less of each worker's
start-up), Beam's Dask runner with this product's translation, and the steps. Only for that
cluster, which runs nothing else: a worker of a shared cluster may run another Beam job that needs
the connectors, so ``dask worker`` takes ``--preload pipelines.dask_runner`` (README).
"""
from pipelines import startup

startup.import_beam("dask", lean=True)

import pipelines.dask_runner  # noqa: E402,F401  (after the lean import of Beam)
import shardprep.graph.reshard  # noqa: E402,F401

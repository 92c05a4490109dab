"""Preloaded by each worker of a Dask cluster the run uses (``pipelines.dask_engine``): the stages'
work and the pool's task functions (``pipelines.pool``, ``shardprep.graph.tasks``), none of which imports Beam. Workers
of a cluster of your own take ``--preload pipelines.dask_worker`` (docs/scale-out.md, "Sizing a
Dask cluster")."""
import signal

import pipelines.pool  # noqa: F401
import shardprep.job  # noqa: F401


def dask_setup(worker: object) -> None:
    """In a worker forked from a run's launcher (``dask_engine.ahead``: SIGINT and SIGTERM arrive
    blocked, the launcher's handlers installed): Ctrl-C is the launcher's to answer, SIGTERM ends
    the worker. A worker of a cluster of your own keeps its signals as they are."""
    launcher = {signal.SIGINT, signal.SIGTERM}
    if not launcher <= signal.pthread_sigmask(signal.SIG_BLOCK, []):
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, launcher)

"""Imported by the fork server the workers of a run's local Dask cluster are forked from, and
preloaded by each (``pipelines.dask_cluster``; then already imported).

It imports, before a worker joins the cluster, what the run's tasks need: the steps' work and the
pool's task functions (``shardprep.graph.pool``), none of which imports Beam. Where the launcher
runs Beam's graph (``pipelines.local.beam_in_process``) that is all a worker runs; where the graph
goes to the cluster, ``pipelines.dask_graph_worker`` adds Beam.
"""
import shardprep.graph.parse  # noqa: F401
import shardprep.graph.pool  # noqa: F401
import shardprep.graph.ranges  # noqa: F401
import shardprep.graph.stages  # noqa: F401

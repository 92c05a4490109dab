"""Imported by the fork server the workers of a run's local Dask cluster are forked from, and
preloaded by each (``pipelines.dask_cluster``; then already imported): the stages' work and the
pool's task functions (``shardprep.graph.pool``), none of which imports Beam. Workers of a
cluster of your own take ``--preload pipelines.dask_worker`` (docs/scale-out.md, "Sizing a Dask cluster")."""
import shardprep.graph.pool  # noqa: F401
import shardprep.job  # noqa: F401

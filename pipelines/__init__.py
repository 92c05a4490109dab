"""Beam job entry points: runner set-up (DirectRunner, Dask, Dataflow) around shardprep transforms."""

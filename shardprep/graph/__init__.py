"""The re-shard's stages, Beam-free: their element types (``elements``), the Parse step (``parse``),
the later steps (``stages``), the spill files between them (``spill``), the staged units
(``units``), what a worker process runs for a task of one (``tasks``) and where the stages' counts
go (``counting``). ``shardprep.job`` wires them into the job every engine runs (``pipelines.engines``;
the processes that run them: ``pipelines.pool``).

The package imports none of them, and none imports Beam."""

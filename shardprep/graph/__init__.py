"""The re-shard's stages, Beam-free: their element types (``elements``), the Parse step (``parse``),
the later steps (``stages``), the spill files between them (``spill``), the staged units
(``units``), and the worker processes that run them (``pool``). ``shardprep.job`` wires them into
the job every engine runs (``pipelines.engines``).

The package imports none of them, and none imports Beam."""

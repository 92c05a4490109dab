"""The re-shard as a Beam graph: ``Reshard`` (``reshard``), its element types (``elements``), the
Parse step (``parse``), the later steps (``stages``), the spill files between them (``spill``), and
where their work runs (``dofns``: Beam's side; ``pool``: the local processes).

The package imports none of them: the steps' work modules never import Beam, and the pool's
processes load only those (``graph.pool``)."""

"""The re-shard as a Beam graph: ``Reshard`` (``reshard``), its element types (``elements``), the
Parse step (``parse``), the later steps (``stages``) and the spill files between them (``spill``)."""
from __future__ import annotations

from shardprep.graph.reshard import Reshard

__all__ = ["Reshard"]

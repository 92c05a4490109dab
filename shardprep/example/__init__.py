"""tf.train.Example bytes in pure Python (no TensorFlow): the pipeline's hot path.

``wire`` (varints, Feature messages, entry prefixes), ``encoder`` (a row -> Example, generic),
``generated`` (a row encoder compiled per scalar schema), ``decoder`` (Example -> values) and
``columnar`` (a batch of columns -> framed TFRecords with numpy). Every encoder gives the same
bytes for the same row. TFRecord framing lives in ``shardprep.framing``.
"""
from __future__ import annotations

from shardprep.example.decoder import decode_example
from shardprep.example.encoder import example_encoder
from shardprep.example.wire import RecordError, scalar_entry_prefix, scalar_runs

__all__ = ["RecordError", "decode_example", "example_encoder", "scalar_entry_prefix", "scalar_runs"]

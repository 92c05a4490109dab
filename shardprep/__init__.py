"""shardprep: exactly balanced, globally shuffled TFRecord shards with a manifest.

TensorFlow-free on purpose: Dataflow workers run this package without it.
"""
from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]

"""The trainer's user-facing errors, within the product's one hierarchy (``shardprep.errors``).

A ``TrainerError`` is a ``UsageError``: the entry points (through ``shardprep.cli.main``) print it
as one line and exit 2. A run that started and failed is a ``shardprep.errors.RunError`` (exit 1).
"""
from __future__ import annotations

from shardprep.errors import UsageError

__all__ = ["CheckpointError", "TrainerError"]


class TrainerError(UsageError):
    """A setting, cluster, data set or checkpoint that cannot work; the message says what to do."""


class CheckpointError(TrainerError):
    """Checkpoints that do not fit this model, or workers that do not agree on the state to resume from."""

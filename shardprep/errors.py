"""The one error hierarchy of every command (re-shard, verify, inspect, trainer).

``UsageError`` and its subclasses are problems the user fixes by changing the command line or the
input: the CLI prints one line and exits 2. ``RunError`` is a run that started and failed: exit 1.
Anything else is unexpected: exit 1 with the last line of its message (traceback with --verbose).
An interrupt exits 130. ``shardprep.cli.main`` is the only place that maps errors to exit codes.
"""
from __future__ import annotations

__all__ = ["DamagedInput", "InputError", "ManifestError", "PlanError", "RunError", "SchemaError", "ShardprepError", "UsageError"]


class ShardprepError(Exception):
    """Base of every error the product raises on purpose; its message says what to do."""


class UsageError(ShardprepError, ValueError):
    """A flag, a setting or an input the user can fix: exit 2."""


class InputError(UsageError):
    """Input files that cannot be found, told apart or read as the format says."""


class DamagedInput(InputError):
    """An input file whose own integrity data (a page CRC, a gzip trailer) shows damage: never
    committed, and never taken for a file merely too short to sample."""


class SchemaError(UsageError):
    """A schema that cannot be inferred, loaded or applied."""


class PlanError(UsageError):
    """A shard count, worker count or split that cannot be planned."""


class ManifestError(UsageError):
    """A manifest that is missing, malformed or does not match its shards."""


class RunError(ShardprepError, RuntimeError):
    """A run that started and failed (nothing committed): exit 1."""

"""The trainer's user-facing errors: the entry points print them as one line, no traceback."""
from __future__ import annotations

__all__ = ["TrainerError"]


class TrainerError(ValueError):
    """A setting, cluster, data set or checkpoint that cannot work; the message says what to do."""

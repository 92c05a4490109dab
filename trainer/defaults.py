"""The settings a user may leave out, chosen from the data set: model, batch, epochs, model folder.

TF-free and pure over the manifest's numbers, so every worker chooses alike before any collective.

- ``--model``: ``image`` when the data set has a scalar string ``image/encoded``, else ``mlp``.
- ``--per-replica-batch``: about ``STEPS_PER_EPOCH_AIM`` steps per epoch (records / replicas / 32),
  clamped to [``MIN_BATCH``, ``MAX_BATCH``], then lowered while that leaves more than
  ``MAX_LEFT_OUT`` of the records out of every epoch (the tail that fills no full batch); a worker
  with fewer records than ``MIN_BATCH`` gets a batch of all its records.
- ``--epochs``: enough for ``TARGET_STEPS`` steps in all (at least one epoch): small data sets are
  not starved of steps, large ones get one full pass.
- ``--model bert`` with no GPU visible (``bert_cpu_batch``, ``bert_cpu_steps``): the batch at most ``BERT_CPU_BATCH`` and,
  when neither ``--epochs`` nor ``--steps-per-epoch`` is given, one epoch of at most
  ``BERT_CPU_STEPS`` steps: a demo that ends in minutes, not hours (a GPU run keeps the rules above).
- ``--model-dir``: ``model-<name of the --data folder>`` in the current folder.
- default features: ``identifier_like`` string columns (distinct values in at least
  ``IDENTIFIER_SHARE`` of the records: a name or date per row) are left out (``trainer.features``).
"""
from __future__ import annotations

import posixpath
from collections.abc import Mapping

from shardprep import planning
from shardprep.schema import FeatureSpec

__all__ = [
    "BERT_CPU_BATCH", "BERT_CPU_STEPS", "IDENTIFIER_SHARE", "MAX_BATCH", "MAX_LEFT_OUT", "MIN_BATCH", "STEPS_PER_EPOCH_AIM",
    "TARGET_STEPS", "bert_cpu_batch", "bert_cpu_steps", "choose_batch", "choose_epochs", "choose_model", "default_model_dir", "identifier_like",
]

TARGET_STEPS = 300  # training steps in all when --epochs is left out
STEPS_PER_EPOCH_AIM = 32  # steps per epoch the default batch aims at
MIN_BATCH, MAX_BATCH = 8, 256  # default per-replica batch bounds
MAX_LEFT_OUT = 0.02  # share of the records the default batch may leave out of an epoch
IDENTIFIER_SHARE = 0.9  # distinct values / records at or above which a string column is an identifier
IDENTIFIER_MIN_RECORDS = 20  # below this many records no column is called an identifier
BERT_CPU_BATCH = 32  # --model bert without a GPU: default per-replica batch at most this
BERT_CPU_STEPS = TARGET_STEPS  # --model bert without a GPU: default steps per epoch at most this (one epoch)


def default_model_dir(data: str) -> str:
    """``model-<name>`` in the current folder, ``<name>`` the last part of ``--data``."""
    name = posixpath.basename(data.rstrip("/").split("://", 1)[-1]) or "data"
    return f"model-{name}"


def choose_model(features: Mapping[str, FeatureSpec]) -> str:
    """``image`` for a data set of images (a scalar string ``image/encoded``), else ``mlp``."""
    image = features.get("image/encoded")
    return "image" if image is not None and image.dtype == "string" and image.shape == () else "mlp"


def choose_batch(worker_plan: planning.WorkerPlan, *, local_replicas: int) -> int:
    """The default per-replica batch for the records the workers of ``worker_plan`` hold (module docstring)."""
    workers = len(worker_plan.pieces)
    total = sum(worker_plan.records(w) for w in range(workers))
    fewest = min(worker_plan.records(w) for w in range(workers))
    if fewest < MIN_BATCH * local_replicas:
        return max(1, fewest // local_replicas)
    aim = total // (workers * local_replicas * STEPS_PER_EPOCH_AIM)
    batch = max(MIN_BATCH, min(MAX_BATCH, aim, fewest // local_replicas))

    def left_out(b: int) -> float:
        return (total - worker_plan.steps_per_epoch(b * local_replicas) * b * local_replicas * workers) / total

    fitting = [b for b in range(MIN_BATCH, batch + 1) if left_out(b) <= MAX_LEFT_OUT]
    return max(fitting) if fitting else min(range(MIN_BATCH, batch + 1), key=left_out)


def bert_cpu_batch(batch: int) -> int:
    """``--model bert`` with no GPU visible: the default per-replica ``batch`` at most ``BERT_CPU_BATCH``."""
    return min(batch, BERT_CPU_BATCH)


def bert_cpu_steps(steps_per_epoch: int | None, epochs: int | None) -> int | None:
    """``--model bert`` with no GPU visible: ``--steps-per-epoch`` as given, or ``BERT_CPU_STEPS`` when neither
    it nor ``--epochs`` is given (the epochs then come to one: ``choose_epochs``)."""
    return BERT_CPU_STEPS if steps_per_epoch is None and epochs is None else steps_per_epoch


def choose_epochs(steps_per_epoch: int) -> int:
    """Epochs for about ``TARGET_STEPS`` steps in all, at least one."""
    return max(1, -(-TARGET_STEPS // max(1, steps_per_epoch)))


def identifier_like(features: Mapping[str, FeatureSpec], statistics: Mapping[str, dict]) -> list[str]:
    """Scalar string features whose distinct values number ``IDENTIFIER_SHARE`` of their records or more."""
    found = []
    for name, spec in sorted(features.items()):
        stats = statistics.get(name, {})
        count, distinct = stats.get("count", 0), stats.get("distinct")
        if spec.dtype == "string" and spec.shape == () and distinct is not None and count >= IDENTIFIER_MIN_RECORDS \
                and distinct >= IDENTIFIER_SHARE * count:
            found.append(name)
    return found

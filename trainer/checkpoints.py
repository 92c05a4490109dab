"""Checkpoints, resume and the final export, in TF's documented multi-worker pattern.

Every worker saves (saving may read synchronized variables, which is a collective), but only the
chief writes to ``model_dir``; the others write to their own temporary folders, deleted at the end.
Every worker restores from the chief's folder, and the workers check that they restored the same
step before training on.
"""
from __future__ import annotations

import logging
import shutil
import tempfile

import keras
import tensorflow as tf

from shardprep import naming
from trainer.refusals import CheckpointError

__all__ = ["CheckpointError", "Checkpoints", "export_model", "gather_ints"]

log = logging.getLogger(__name__)


class Checkpoints:
    """Model, optimizer and global step; ``restore`` returns the step to continue from. The controller's
    ``trainer.controller.CheckpointSaver``: ``save(step)`` and ``close()``."""

    def __init__(
        self,
        *,
        model_dir: str,
        is_chief: bool,
        worker_index: int,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        max_to_keep: int = 3,
    ) -> None:
        self.shared_dir = naming.join(model_dir, "checkpoints")
        self.is_chief = is_chief
        self.write_dir = self.shared_dir if is_chief else tempfile.mkdtemp(prefix=f"trainer-worker{worker_index}-ckpt-")
        # Outside any strategy scope: a plain host variable, the same on every worker by construction.
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=self.step)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, self.write_dir, max_to_keep=max_to_keep if is_chief else 1
        )
        self.saved_step: int | None = None

    def restore(self, strategy: tf.distribute.Strategy) -> int:
        """Restores the chief's latest checkpoint, if any, on every worker; returns its step."""
        latest = tf.train.latest_checkpoint(self.shared_dir)
        if latest:
            try:
                self.checkpoint.restore(latest).assert_existing_objects_matched()
            except (AssertionError, ValueError, tf.errors.OpError) as e:
                raise CheckpointError(
                    f"checkpoint {latest} does not fit this model ({str(e).splitlines()[0][:200]}): "
                    f"use a new --model-dir, or the model settings it was trained with"
                ) from None
            log.info("restored %s: resuming at step %d", latest, int(self.step))
        step = self.saved_step = int(self.step)
        seen = gather_ints(strategy, step)
        if len(set(seen)) != 1:
            raise CheckpointError(
                f"workers restored different steps {seen}: every worker must read the chief's "
                f"checkpoints in {self.shared_dir} (a shared --model-dir)"
            )
        return step

    def save(self, step: int) -> None:
        """Saves at global step ``step`` unless that step is already saved (or restored)."""
        if step == self.saved_step:
            return
        self.step.assign(step)
        path = self.manager.save(checkpoint_number=step)
        self.saved_step = step
        if self.is_chief:
            log.info("checkpoint saved at step %d: %s", step, path)

    def close(self) -> None:
        if not self.is_chief:
            shutil.rmtree(self.write_dir, ignore_errors=True)


def gather_ints(strategy: tf.distribute.Strategy, value: int) -> list[int]:
    """``value`` from every replica of the cluster, in replica order (one all-gather)."""

    def replica_fn() -> tf.Tensor:
        mine = tf.constant([value], tf.int64)
        return tf.distribute.get_replica_context().all_gather(mine, axis=0)

    result = strategy.run(tf.function(replica_fn))
    return [int(v) for v in strategy.experimental_local_results(result)[0].numpy()]


def export_model(model: keras.Model, *, model_dir: str, is_chief: bool, worker_index: int, fmt: str) -> str | None:
    """Exports the trained model (chief: ``model_dir/export/``; others: a temp folder, removed)."""
    if fmt == "none":
        return None
    base = naming.join(model_dir, "export") if is_chief else tempfile.mkdtemp(prefix=f"trainer-worker{worker_index}-export-")
    tf.io.gfile.makedirs(base)
    path = naming.join(base, "model.keras" if fmt == "keras" else "saved_model")
    if fmt == "keras":
        model.save(path)
    else:
        model.export(path, format="tf_saved_model", verbose=False)
    if not is_chief:
        shutil.rmtree(base, ignore_errors=True)
        return None
    log.info("exported the final model to %s", path)
    return path

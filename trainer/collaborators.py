"""The controller's evaluator and exporter in a training job, built from one worker's ``Session``.

``SplitEvaluator`` scores ``--eval-split`` (``trainer.scoring``: at most ``--eval-records`` records, one all-reduce);
``ModelExporter`` writes the final model (``trainer.checkpoints.export_model``), the label vocabulary
beside it and, on the chief, the model card ``trainer.evaluate`` reads (``trainer.model_card``).
``evaluator_for`` and ``exporter_for`` are what ``trainer.worker`` wires into ``trainer.controller.Controller``.
"""
from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from trainer import eta, labels, model_card, scoring
from trainer.checkpoints import export_model
from trainer.cluster import ClusterInfo
from trainer.objective import Objective
from trainer.preflight import InputPlan
from trainer.session import Session
from trainer.settings import TrainConfig

__all__ = ["ModelExporter", "SplitEvaluator", "evaluator_for", "exporter_for"]


class SplitEvaluator:
    """Scores ``plan`` (an eval split's plan) with ``model``: each worker its own records, in batches of
    ``batch_size``, the first ``max_batches`` of them (None: all); ``train_mean`` the regression baseline
    (``trainer.scoring.evaluate``)."""

    def __init__(self, *, strategy: tf.distribute.Strategy, model: keras.Model, plan: InputPlan, worker: int,
                 batch_size: int, classification: bool, objective: Objective, train_mean: float | None = None,
                 max_batches: int | None = None) -> None:
        self.strategy, self.model, self.plan, self.worker = strategy, model, plan, worker
        self.batch_size, self.classification, self.objective, self.train_mean = batch_size, classification, objective, train_mean
        self.max_batches = max_batches

    def evaluate(self, step: int) -> dict[str, Any]:
        """The totals over every worker (the same on each); ``step`` is the global step the model is at."""
        return scoring.evaluate(
            self.strategy, self.model, self.plan, worker=self.worker, batch_size=self.batch_size,
            classification=self.classification, train_mean=self.train_mean, objective=self.objective,
            max_batches=self.max_batches,
        )


class ModelExporter:
    """``--export`` of ``model`` into ``config.model_dir/export/`` (the chief; others export to a temporary
    folder, removed), with the label vocabulary beside it and the model card (chief only)."""

    def __init__(self, *, model: keras.Model, config: TrainConfig, plan: InputPlan, cluster: ClusterInfo) -> None:
        self.model, self.config, self.plan, self.cluster = model, config, plan, cluster

    def export(self, step: int) -> str | None:
        """The exported model's URL on the chief, else None; ``step`` is the global step the model is at."""
        config, plan, cluster = self.config, self.plan, self.cluster
        exported = export_model(self.model, model_dir=config.model_dir, is_chief=cluster.is_chief,
                                worker_index=cluster.worker_index, fmt=config.export)
        if exported and plan.label_vocabulary:  # the exported model outputs ids: their string values beside it
            labels.write_vocabulary(exported, config.label, plan.label_vocabulary)
        if exported and cluster.is_chief:  # what trainer.evaluate needs to score another data set
            model_card.write_card(config.model_dir, model_card.card_of(config, plan, exported))
        return exported


def evaluator_for(ses: Session) -> SplitEvaluator | None:
    """The session's ``--eval-split`` evaluator (at most ``--eval-records`` records); None without an eval split."""
    if ses.eval_plan is None:
        return None
    batch_size = ses.plan.per_worker_batch
    return SplitEvaluator(
        strategy=ses.strategy, model=ses.model, plan=ses.eval_plan, worker=ses.worker,
        batch_size=batch_size, classification=ses.classification, objective=ses.objective,
        train_mean=ses.plan.statistics.get(ses.config.label, {}).get("mean"),
        max_batches=eta.eval_batches_cap(ses.config.eval_records, workers=ses.eval_plan.num_workers, batch_size=batch_size),
    )


def exporter_for(ses: Session) -> ModelExporter:
    """The session's exporter (``--export none`` writes nothing)."""
    return ModelExporter(model=ses.model, config=ses.config, plan=ses.plan, cluster=ses.cluster)

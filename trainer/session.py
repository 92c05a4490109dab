"""One worker's training session: the connected strategy, the model and what the summary reports.

``open_session`` runs after pre-flight: it stages this worker's shards, sets the precision,
connects the workers (the first collective), builds the model and optimizer under the strategy and
times one all-reduce of the gradients. ``write_job_summary`` writes ``model_dir/summary/worker-<i>.json``
with the fields of DESIGN section 7. Shared by ``trainer.worker`` and the per-file benchmark baseline.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

import keras
import tensorflow as tf

from trainer import metrics, models, staging, strategy
from trainer.cluster import ClusterInfo
from trainer.objective import BertPretraining, Classification, Objective, objective_for
from trainer.preflight import InputPlan
from trainer.settings import TrainConfig

__all__ = ["Session", "open_session", "write_job_summary"]

log = logging.getLogger(__name__)


class Session(NamedTuple):
    """What every stage after pre-flight works with, on this worker."""

    config: TrainConfig
    cluster: ClusterInfo
    plan: InputPlan  # staged, when --stage-dir is given
    eval_plan: InputPlan | None
    strategy: tf.distribute.Strategy
    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    policy: str
    loss_scale: bool
    learning_rate: float
    classification: bool
    allreduce_s: float
    objective: Objective  # the loss and the accuracies counted (trainer.objective)

    @property
    def worker(self) -> int:
        return self.cluster.worker_index

    @property
    def replicas(self) -> int:
        return self.strategy.num_replicas_in_sync

    @property
    def local_replicas(self) -> int:
        return self.replicas // self.cluster.num_workers


def open_session(
    config: TrainConfig,
    *,
    cluster: ClusterInfo,
    plan: InputPlan,
    eval_plan: InputPlan | None,
    shards: Sequence[int],
    gpus: int,
) -> Session:
    """Stages ``shards`` of ``plan`` (and this worker's eval shards), connects, builds the model."""
    worker = cluster.worker_index
    if config.stage_dir:
        plan = staging.stage_shards(plan, shards=list(shards), stage_dir=config.stage_dir)
        if eval_plan is not None:
            eval_plan = staging.stage_shards(
                eval_plan, shards=[p.shard for p in eval_plan.pieces(worker)], stage_dir=config.stage_dir
            )
    policy, loss_scale = strategy.set_precision(config.mixed_precision, gpus=gpus)
    strat = strategy.make_strategy(cluster=cluster, communication=config.communication, gpus=gpus)
    learning_rate = config.learning_rate * (strat.num_replicas_in_sync if config.scale_lr else 1)
    classification = plan.feature_spec[config.label].dtype != "float32"
    num_classes = plan.num_classes or max(config.num_classes or 2, len(plan.feature_spec[config.label].names))
    objective = objective_for(classification)
    with strat.scope():
        if plan.bert is not None:
            model, objective = _bert_model(plan)
        else:
            model = models.build_model(
                config.model,
                features={name: plan.feature_spec[name] for name in plan.inputs},
                label=config.label,
                num_classes=num_classes if classification else None,
                statistics=plan.statistics,
            )
        optimizer = keras.optimizers.Adam(_schedule(config, plan, learning_rate))
        if loss_scale:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)
    log.info(
        "model %s: %d parameters, %s, learning rate %g%s",
        model.name, model.count_params(), policy, learning_rate, " (scaled by replicas)" if config.scale_lr else "",
    )
    allreduce_s = strategy.time_allreduce(strat, [tuple(v.shape) for v in model.trainable_variables])
    log.info("one all-reduce of the %d gradient tensors takes %.2f ms", len(model.trainable_variables), 1e3 * allreduce_s)
    return Session(
        config, cluster, plan, eval_plan, strat, model, optimizer, policy, loss_scale, learning_rate, classification,
        allreduce_s, objective,
    )


def _schedule(config: TrainConfig, plan: InputPlan, learning_rate: float) -> Any:
    """``--model image``: a cosine decay over the run's steps (``trainer.image_model``); else the constant rate."""
    if config.model != "image" or not config.epochs:
        return learning_rate
    from trainer.image_model import learning_rate_schedule

    total = config.epochs * plan.steps_per_epoch
    log.info("--model image: learning rate warms up to %g, then a cosine decay over %d steps", learning_rate, total)
    return learning_rate_schedule(learning_rate, total_steps=total)


def _bert_model(plan: InputPlan) -> tuple[keras.Model, Objective]:
    """``--model bert``: the model of the plan's task, its encoder restored for ``--init-from``."""
    from trainer import bert

    task = plan.bert
    assert task is not None
    spec = plan.feature_spec
    model = bert.build_bert(task, sequence_length=spec["input_ids"].shape[0],
                            predictions=spec["masked_lm_positions"].shape[0] if task.pretraining else 0)
    if task.init_from:
        bert.restore_encoder(model, task)
    return model, BertPretraining() if task.pretraining else Classification()


def write_job_summary(
    session: Session,
    meter: metrics.Meter,
    *,
    start_step: int,
    final_step: int,
    scores: dict[str, Any],
    exported: str | None,
    data_mode: str,
    input_mode: str = "manifest",
) -> dict[str, Any]:
    """Writes and logs this worker's summary; returns it. ``scores``: the evaluator's (``eval_*``); a
    string label's vocabulary is added after them as ``label_vocabulary``."""
    s, plan, worker = session, session.plan, session.worker
    summary = {
        **meter.summary(allreduce_s=s.allreduce_s),
        "worker": worker,
        "num_workers": s.cluster.num_workers,
        "replicas": s.replicas,
        "data_mode": data_mode,
        "input_mode": input_mode,
        "loop": s.config.loop,
        "start_step": start_step,
        "global_step": final_step,
        "steps_per_epoch": plan.steps_per_epoch,
        "global_batch": plan.global_batch,
        "dropped_records_per_epoch": plan.dropped_records,
        "precision": s.policy,
        "learning_rate": s.learning_rate,
        "export": exported,
        **scores,
        **({"label_vocabulary": list(plan.label_vocabulary)} if plan.label_vocabulary else {}),
    }
    url = metrics.write_summary(s.config.model_dir, worker, summary)
    log.info(
        "worker %d done: %d steps (global step %d), %d examples, %d empty replica-steps, input wait %s "
        "(floor %s), summary %s",
        worker, summary["steps"], final_step, summary["examples"], summary["empty_replica_steps"],
        summary["input_wait_fraction"], summary["input_wait_floor_fraction"], url,
    )
    return summary

"""One training job on this worker: plan, connect, build, restore, train, export, summarize.

Everything that can refuse (settings, manifest, plan, files) runs before the strategy connects the
workers, so a bad job fails on every worker in seconds, identically, instead of after set-up.
"""
from __future__ import annotations

import logging
from typing import Any, NamedTuple

from shardprep import manifest
from trainer import preflight, resume
from trainer.cluster import ClusterInfo
from trainer.config import ConfigError, TrainConfig, global_batch_size
from trainer.features import input_features

__all__ = ["JobPlan", "plan_job", "run_job"]

log = logging.getLogger(__name__)


class JobPlan(NamedTuple):
    """What pre-flight settles for a job: the training input, the eval input, the resume identity."""

    train: preflight.InputPlan
    eval: preflight.InputPlan | None
    identity: dict[str, Any]


def plan_job(config: TrainConfig, *, cluster: ClusterInfo, local_replicas: int) -> JobPlan:
    """The input plans every worker computes alike from the manifest, before any collective."""
    num_replicas = cluster.num_workers * local_replicas
    global_batch = global_batch_size(config, num_replicas=num_replicas)
    m = manifest.load(config.data)
    inputs = input_features(config.model, m.features, label=config.label, requested=config.features)
    plan = preflight.plan_input(
        root=config.data,
        split=config.split,
        label=config.label,
        inputs=inputs,
        num_workers=cluster.num_workers,
        per_worker_batch=global_batch // cluster.num_workers,
        steps_cap=config.steps_per_epoch,
        data_manifest=m,
    )
    log.info("input plan: %s", plan.describe())
    if plan.steps_per_epoch < plan.full_steps_per_epoch:
        log.info("--steps-per-epoch caps the epoch at %d of %d full steps", plan.steps_per_epoch, plan.full_steps_per_epoch)
    log.info(
        "every worker takes %d full batches per epoch; %d of %d records (%.2f%%) are left out of each epoch",
        plan.steps_per_epoch, plan.dropped_records, plan.num_records, 100 * plan.dropped_records / plan.num_records,
    )
    identity = resume.plan_identity(plan, data_manifest=m, shuffle_buffer=config.shuffle_buffer, seed=config.seed)
    return JobPlan(plan, _plan_eval(config, cluster=cluster, data_manifest=m, inputs=inputs), identity)


def _plan_eval(
    config: TrainConfig, *, cluster: ClusterInfo, data_manifest: manifest.Manifest, inputs: tuple[str, ...]
) -> preflight.InputPlan | None:
    """Every record of ``--eval-split``, shared among the workers (no batch to fill: nothing dropped)."""
    name = config.eval_split
    if name is None:
        return None
    if name not in data_manifest.splits:
        raise preflight.InputError(
            f"--eval-split {name!r} is not in the data set at {config.data} (it has {', '.join(sorted(data_manifest.splits))})"
        )
    records = data_manifest.splits[name].num_records
    if records < cluster.num_workers:
        raise preflight.InputError(
            f"--eval-split {name!r} has {records} records, fewer than the {cluster.num_workers} workers: "
            f"every worker scores a share; use a larger split, or leave --eval-split out"
        )
    if name == config.split:
        log.warning("--eval-split %r is the training split: the eval numbers measure fit, not generalization", name)
    return preflight.plan_input(
        root=config.data, split=name, label=config.label, inputs=inputs, num_workers=cluster.num_workers,
        per_worker_batch=1, data_manifest=data_manifest,
    )


def run_job(config: TrainConfig, *, cluster: ClusterInfo) -> dict[str, Any]:
    """Runs the job on this worker; returns the summary it wrote to ``model_dir/summary/``."""
    import keras

    from trainer import checkpoints as ckpt_lib
    from trainer import data, evaluate, fit, idlog, loop, metrics, models, staging, strategy

    gpus = strategy.local_gpus()
    plan, eval_plan, identity = plan_job(config, cluster=cluster, local_replicas=max(1, gpus))
    worker = cluster.worker_index
    naive = config.input_mode == "naive-files"
    if not naive:
        resume.check_resume(config.model_dir, identity, is_chief=cluster.is_chief)
    if config.stage_dir:
        mine = data.naive_shards(plan, worker) if naive else [p.shard for p in plan.pieces(worker)]
        plan = staging.stage_shards(plan, shards=mine, stage_dir=config.stage_dir)
        if eval_plan is not None:
            eval_plan = staging.stage_shards(
                eval_plan, shards=[p.shard for p in eval_plan.pieces(worker)], stage_dir=config.stage_dir
            )
    policy, loss_scale = strategy.set_precision(config.mixed_precision, gpus=gpus)
    strat = strategy.make_strategy(cluster=cluster, communication=config.communication, gpus=gpus)
    replicas = strat.num_replicas_in_sync
    learning_rate = config.learning_rate * (replicas if config.scale_lr else 1)
    classification = plan.feature_spec[config.label]["dtype"] == "int64"
    with strat.scope():
        model = models.build_model(
            config.model,
            features={name: plan.feature_spec[name] for name in plan.inputs},
            label=config.label,
            num_classes=config.num_classes if classification else None,
        )
        optimizer = keras.optimizers.Adam(learning_rate)
        if loss_scale:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)
    log.info(
        "model %s: %d parameters, %s, learning rate %g%s",
        model.name, model.count_params(), policy, learning_rate, " (scaled by replicas)" if config.scale_lr else "",
    )
    checkpoints = None
    start_step = 0
    total_steps = config.epochs * plan.steps_per_epoch
    local_replicas = strat.num_replicas_in_sync // cluster.num_workers
    if not naive:
        checkpoints = ckpt_lib.Checkpoints(
            model_dir=config.model_dir, is_chief=cluster.is_chief, worker_index=worker, model=model, optimizer=optimizer
        )
        start_step = checkpoints.restore(strat)
        if start_step > total_steps:
            raise ConfigError(
                f"the checkpoint in {config.model_dir} is at step {start_step}, past this job's {total_steps} "
                f"steps ({config.epochs} epochs x {plan.steps_per_epoch}): use a new --model-dir or more --epochs"
            )
    allreduce_s = strategy.time_allreduce(strat, [tuple(v.shape) for v in model.trainable_variables])
    log.info("one all-reduce of the %d gradient tensors takes %.2f ms", len(model.trainable_variables), 1e3 * allreduce_s)
    meter = metrics.Meter()
    progress = metrics.Progress(
        enabled=cluster.is_chief,
        total_steps=config.epochs * data.naive_steps_per_epoch(plan, local_replicas=local_replicas) if naive else total_steps,
        global_batch=plan.global_batch,
        every=config.log_every,
        logdir=None if naive else f"{config.model_dir.rstrip('/')}/tensorboard",
    )
    settings = loop.LoopSettings(
        start_step=start_step,
        total_steps=total_steps,
        steps_per_epoch=plan.steps_per_epoch,
        checkpoint_every=config.checkpoint_every,
        classification=classification,
    )

    def batches(step: int) -> Any:
        return data.distribute(
            strat, plan, start_step=step, shuffle_buffer=config.shuffle_buffer, seed=config.seed, with_ids=config.record_ids
        )

    if config.loop == "custom":
        step_fn = loop.make_train_step(
            strategy=strat, model=model, optimizer=optimizer, global_batch=plan.global_batch,
            classification=classification, loss_scale=loss_scale,
        )
    if naive:
        final_step = loop.run_naive(
            strategy=strat, step_fn=step_fn, epoch_batches=lambda: data.distribute(strat, plan, naive=True),
            epochs=config.epochs, meter=meter, progress=progress, classification=classification,
        )
    elif config.loop == "custom":
        id_log = idlog.IdLog(config.model_dir, worker) if config.record_ids else None
        final_step = loop.run_custom(
            strategy=strat, step_fn=step_fn, batches=batches, settings=settings,
            meter=meter, progress=progress, checkpoints=checkpoints, probe=data.floor_probe(strat, plan), id_log=id_log,
        )
        if id_log is not None:
            id_log.close()
    else:
        final_step = fit.run_fit(
            strategy=strat, model=model, optimizer=optimizer, batches=batches, settings=settings,
            batch_spec=data.batch_spec(plan, plan.global_batch // replicas),
            meter=meter, progress=progress, checkpoints=checkpoints,
        )
    progress.close()
    scores: dict[str, Any] = {}
    if eval_plan is not None:
        scores = evaluate.evaluate(
            strat, model, eval_plan, worker=worker, batch_size=plan.per_worker_batch, classification=classification
        )
    exported = ckpt_lib.export_model(
        model, model_dir=config.model_dir, is_chief=cluster.is_chief, worker_index=worker, fmt=config.export
    )
    if checkpoints is not None:
        checkpoints.close()
    summary = {
        **meter.summary(allreduce_s=allreduce_s),
        "worker": worker,
        "num_workers": cluster.num_workers,
        "replicas": replicas,
        "data_mode": "file" if naive else plan.mode,
        "input_mode": config.input_mode,
        "loop": config.loop,
        "start_step": start_step,
        "global_step": final_step,
        "steps_per_epoch": plan.steps_per_epoch,
        "global_batch": plan.global_batch,
        "dropped_records_per_epoch": plan.dropped_records,
        "precision": policy,
        "learning_rate": learning_rate,
        "export": exported,
        **scores,
    }
    url = metrics.write_summary(config.model_dir, worker, summary)
    log.info(
        "worker %d done: %d steps (global step %d), %d examples, %d empty replica-steps, input wait %s "
        "(floor %s), summary %s",
        worker, summary["steps"], final_step, summary["examples"], summary["empty_replica_steps"],
        summary["input_wait_fraction"], summary["input_wait_floor_fraction"], url,
    )
    return summary

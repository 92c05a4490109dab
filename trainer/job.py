"""One training job on this worker: plan, connect, build, restore, train, export, summarize.

Everything that can refuse (settings, manifest, plan, files) runs before the strategy connects the
workers, so a bad job fails on every worker in seconds, identically, instead of after set-up.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from shardprep import manifest
from shardprep.schema import schema_from_json
from trainer import labels, preflight, resume
from trainer.cluster import ClusterInfo
from trainer.config import ConfigError, TrainConfig, global_batch_size
from trainer.features import input_features

if TYPE_CHECKING:
    from trainer.controller import StepRunner
    from trainer.metrics import Meter
    from trainer.session import Session

__all__ = ["JobPlan", "plan_job", "run_job"]

log = logging.getLogger(__name__)


class JobPlan(NamedTuple):
    """What pre-flight settles for a job: the training input, the eval input, the resume identity."""

    train: preflight.InputPlan
    eval: preflight.InputPlan | None
    identity: dict[str, Any]
    run_id: str | None = None  # the data set run trained on: a resume pins it (``resume.pinned_run``)


def plan_job(config: TrainConfig, *, cluster: ClusterInfo, local_replicas: int) -> JobPlan:
    """The input plans every worker computes alike from the manifest, before any collective."""
    num_replicas = cluster.num_workers * local_replicas
    global_batch = global_batch_size(config, num_replicas=num_replicas)
    m = manifest.load(config.data)
    pinned = resume.pinned_run(config.model_dir, config.data)  # a resume keeps the data run it started on
    if pinned and pinned not in m.run_ids:  # a re-shard committed since: that run's own manifest
        newer = ",".join(sorted(m.run_ids))
        m = manifest.load(config.data, run_id=pinned)
        log.info("resuming on data set run %s (pinned by the checkpoints in %s), not the newer %s", pinned,
                 config.model_dir, newer)
    statistics = m.statistics.get(config.split, {})
    inputs = input_features(config.model, schema_from_json(m.features), label=config.label, requested=config.features,
                            statistics=statistics)
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
    label = labels.resolve_label(config.label, plan.feature_spec[config.label], statistics, num_classes=config.num_classes)
    plan = dataclasses.replace(plan, num_classes=label.num_classes, label_vocabulary=label.vocabulary)
    log.info("input plan: %s; %s", plan.describe(), label.describe(config.label))
    if plan.steps_per_epoch < plan.full_steps_per_epoch:
        log.info("--steps-per-epoch caps the epoch at %d of %d full steps", plan.steps_per_epoch, plan.full_steps_per_epoch)
    log.info(
        "every worker takes %d full batches per epoch; %d of %d records (%.2f%%) are left out of each epoch",
        plan.steps_per_epoch, plan.dropped_records, plan.num_records, 100 * plan.dropped_records / plan.num_records,
    )
    identity = resume.plan_identity(plan, data_manifest=m, shuffle_buffer=config.shuffle_buffer, seed=config.seed)
    eval_plan = _plan_eval(config, cluster=cluster, data_manifest=m, inputs=inputs)
    eval_plan = eval_plan and dataclasses.replace(eval_plan, num_classes=label.num_classes, label_vocabulary=label.vocabulary)
    if config.model == "image":  # data.parser decodes image/encoded to this size
        plan = dataclasses.replace(plan, image_size=config.image_size)
        eval_plan = eval_plan and dataclasses.replace(eval_plan, image_size=config.image_size)
    runs = sorted(m.run_ids)
    return JobPlan(plan, eval_plan, identity, runs[0] if len(runs) == 1 else None)


def _plan_eval(
    config: TrainConfig, *, cluster: ClusterInfo, data_manifest: manifest.Manifest, inputs: tuple[str, ...]
) -> preflight.InputPlan | None:
    """Every record of ``--eval-split``, shared among the workers (no batch to fill: nothing dropped)."""
    name = config.eval_split
    if name is None:
        return None
    if name not in data_manifest.splits:
        raise preflight.DataSetError(
            f"--eval-split {name!r} is not in the data set at {config.data} (it has {', '.join(sorted(data_manifest.splits))})"
        )
    records = data_manifest.splits[name].num_records
    if records < cluster.num_workers:
        raise preflight.DataSetError(
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
    from trainer import checkpoints as ckpt_lib
    from trainer import controller, metrics, session, strategy

    gpus = strategy.local_gpus()
    plan, eval_plan, identity, run_id = plan_job(config, cluster=cluster, local_replicas=max(1, gpus))
    resume.check_resume(config.model_dir, identity, is_chief=cluster.is_chief, run_id=run_id, data=config.data)
    if config.verify_records:  # before the strategy connects: a damaged shard stops this worker before step 1
        started = time.monotonic()
        read = preflight.verify_records(plan, cluster.worker_index)
        log.info("--verify-records: %d records of this worker's shards read, CRCs sound (%.1f s)", read,
                 time.monotonic() - started)
    ses = session.open_session(
        config, cluster=cluster, plan=plan, eval_plan=eval_plan, shards=[p.shard for p in plan.pieces(cluster.worker_index)],
        gpus=gpus,
    )
    checkpoints = ckpt_lib.Checkpoints(
        model_dir=config.model_dir, is_chief=cluster.is_chief, worker_index=ses.worker, model=ses.model,
        optimizer=ses.optimizer,
    )
    total_steps = config.epochs * ses.plan.steps_per_epoch
    start_step = checkpoints.restore(ses.strategy)
    if start_step > total_steps:
        raise ConfigError(
            f"the checkpoint in {config.model_dir} is at step {start_step}, past this job's {total_steps} "
            f"steps ({config.epochs} epochs x {ses.plan.steps_per_epoch}): use a new --model-dir or more --epochs"
        )
    meter = metrics.Meter()
    progress = metrics.Progress(
        enabled=cluster.is_chief, total_steps=total_steps, global_batch=ses.plan.global_batch, every=config.log_every,
        logdir=f"{config.model_dir.rstrip('/')}/tensorboard",
    )
    settings = controller.LoopSettings(start_step, total_steps, ses.plan.steps_per_epoch, config.checkpoint_every)
    runner = _make_runner(ses, meter)
    try:
        result = controller.Controller(
            session=ses, settings=settings, meter=meter, progress=progress, checkpoints=checkpoints
        ).run(runner)
    finally:
        runner.close()
    return session.write_job_summary(
        ses, meter, start_step=start_step, final_step=result.final_step, scores=result.scores, exported=result.exported,
        data_mode=ses.plan.mode,
    )


def _make_runner(ses: Session, meter: Meter) -> StepRunner:
    """The step runner ``--loop`` names: the custom ``strategy.run`` step, or Keras ``fit``."""
    from trainer import data, fit, idlog, loop

    config, strat, plan = ses.config, ses.strategy, ses.plan

    def batches(step: int) -> Any:
        return data.distribute(
            strat, plan, start_step=step, shuffle_buffer=config.shuffle_buffer, seed=config.seed, with_ids=config.record_ids
        )

    if config.loop == "fit":
        return fit.FitRunner(
            strategy=strat, model=ses.model, optimizer=ses.optimizer, batches=batches, meter=meter,
            batch_spec=data.batch_spec(plan, plan.global_batch // ses.replicas), classification=ses.classification,
        )
    step_fn = loop.make_train_step(
        strategy=strat, model=ses.model, optimizer=ses.optimizer, global_batch=plan.global_batch,
        classification=ses.classification, loss_scale=ses.loss_scale,
    )
    return loop.CustomRunner(
        strategy=strat, step_fn=step_fn, batches=batches, meter=meter, classification=ses.classification,
        probe=data.floor_probe(strat, plan), id_log=idlog.IdLog(config.model_dir, ses.worker) if config.record_ids else None,
    )

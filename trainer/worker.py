"""One training job on this worker: plan, connect, build, restore, train, export, summarize.

Everything that can refuse (settings, manifest, plan, files) runs before the strategy connects the
workers, so a bad job fails on every worker in seconds, identically, instead of after set-up.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from shardprep import manifest, planning, versions
from shardprep.schema import FeatureSpec, schema_from_json
from trainer import bert_task, defaults, elastic, labels, preflight, resume
from trainer.cluster import ClusterInfo
from trainer.features import input_features
from trainer.settings import AUTO, ConfigError, TrainConfig, global_batch_size

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
    config: TrainConfig | None = None  # the job's settings with the defaults chosen (``trainer.defaults``)


def plan_job(config: TrainConfig, *, cluster: ClusterInfo, local_replicas: int, on_cpu: bool = False) -> JobPlan:
    """The input plans every worker computes alike from the manifest, before any collective.

    Settings left out (``--model``, the batch, ``--epochs``) are chosen here from the manifest and
    logged in one line; ``JobPlan.config`` holds them. ``on_cpu`` (no GPU visible): ``--model bert``'s
    defaults are a short run's (``trainer.defaults.bert_cpu_batch``, ``bert_cpu_steps``).
    """
    num_replicas = cluster.num_workers * local_replicas
    given = config
    m = versions.load(config.data, version=config.data_version)
    pinned = resume.pinned_run(config.model_dir, config.data)  # a resume keeps the data run it started on
    if pinned and pinned != m.head_run:  # a re-shard or an append committed since: that run's own manifest
        newer = m.head_run
        m = manifest.load(config.data, run_id=pinned)
        log.info("resuming on data set run %s (pinned by the checkpoints in %s), not the newer %s", pinned,
                 config.model_dir, newer)
    statistics = m.statistics.get(config.split, {})
    features = schema_from_json(m.features)
    if config.model == AUTO:
        config = dataclasses.replace(config, model=defaults.choose_model(features))
    bert = None
    if config.model == "bert":
        bert = bert_task.bert_task(m.text, data=config.data, size=config.bert_size, init_from=config.init_from,
                                   label=config.label)
        config = dataclasses.replace(config, label=bert.label, num_classes=config.num_classes or len(bert.labels) or None)
        inputs = bert.inputs
        log.info("%s", bert.describe())
    else:
        inputs = input_features(config.model, features, label=config.label, requested=config.features,
                                statistics=statistics, excluded=config.exclude_features)
    m, unlabelled = _label_view(config, m, features.get(config.label))
    if config.per_replica_batch is None and config.global_batch is None:
        split = m.splits.get(config.split)  # an unknown split: pre-flight refuses it below
        batch = defaults.choose_batch(planning.plan_workers([s.num_records for s in split.shards], cluster.num_workers),
                                      local_replicas=local_replicas) if split else defaults.MIN_BATCH
        config = dataclasses.replace(config, per_replica_batch=defaults.bert_cpu_batch(batch) if bert and on_cpu else batch)
    if bert is not None and on_cpu:
        config = dataclasses.replace(config, steps_per_epoch=defaults.bert_cpu_steps(config.steps_per_epoch, config.epochs))
    global_batch = global_batch_size(config, num_replicas=num_replicas)
    plan = preflight.plan_input(
        root=config.data,
        split=config.split,
        label=config.label,
        inputs=inputs,
        num_workers=cluster.num_workers,
        per_worker_batch=global_batch // cluster.num_workers,
        steps_cap=config.steps_per_epoch,
        data_manifest=m,
        targets=bert.targets if bert else (),
    )
    if bert is not None:
        plan = dataclasses.replace(plan, bert=bert)
    if unlabelled:
        plan = _skipping(plan, features[config.label], unlabelled)
    if config.epochs is None:
        config = dataclasses.replace(config, epochs=defaults.choose_epochs(plan.steps_per_epoch))
    chosen = _describe_defaults(given, config, plan)
    if chosen:
        log.info("%s", chosen)
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
    eval_plan = _plan_eval(config, cluster=cluster, data_manifest=m, inputs=inputs, targets=plan.targets)
    if eval_plan is not None and unlabelled:  # evaluation skips the records without a label too
        eval_plan = dataclasses.replace(eval_plan, feature_spec={**eval_plan.feature_spec, config.label: features[config.label]})
    eval_plan = eval_plan and dataclasses.replace(eval_plan, num_classes=label.num_classes, label_vocabulary=label.vocabulary)
    if config.model == "image":  # data.parser decodes image/encoded to this size
        plan = dataclasses.replace(plan, image_size=config.image_size, augment=config.augment)
        eval_plan = eval_plan and dataclasses.replace(eval_plan, image_size=config.image_size)
    return JobPlan(plan, eval_plan, identity, m.head_run or None, config)


def _label_view(config: TrainConfig, m: manifest.Manifest, spec: FeatureSpec | None) -> tuple[manifest.Manifest, int]:
    """The manifest as pre-flight should plan it, and how many training records lack the label.

    A label some records lack is refused, offering ``--skip-missing-label``; with that flag the
    label is planned as present (``trainer.data`` filters out the records without it) and the count
    comes back: the split's statistics, else the data set's own count (an upper bound).
    """
    if spec is None or not spec.nullable:
        return m, 0
    missing = int(m.statistics.get(config.split, {}).get(config.label, {}).get("missing", spec.missing))
    if not config.skip_missing_label:
        raise preflight.DataSetError(
            f"--label {config.label!r} is missing in {spec.missing:,} record(s) of the data set at {config.data}: add "
            f"--skip-missing-label to train on the records that have it (or re-run your `shardprep.run` command with "
            f"`--required {config.label} --max-bad-records {spec.missing} --overwrite` added, so that they become dead "
            "letters)"
        )
    present = dict(m.features)
    present[config.label] = dataclasses.replace(spec, nullable=False, missing=0).to_json()
    return dataclasses.replace(m, features=present), missing


def _skipping(plan: preflight.InputPlan, label_spec: FeatureSpec, unlabelled: int) -> preflight.InputPlan:
    """``plan`` with the records lacking the label skipped: equal full batches on every worker still proven.

    Which worker holds the ``unlabelled`` records is not known before reading, so each worker is
    counted as if all of them fell on it: ``min over workers (records - unlabelled) // batch`` full
    batches is then a number every worker can take.
    """
    w = plan.worker_plan
    full = min(max(0, w.records(i) - unlabelled) for i in range(plan.num_workers)) // plan.per_worker_batch
    if full == 0:
        raise preflight.DataSetError(
            f"split {plan.split!r}: with {unlabelled} record(s) lacking --label {plan.label!r} skipped, a worker may "
            f"have fewer than one per-worker batch of {plan.per_worker_batch}: use a smaller batch or fewer workers"
        )
    log.info("--skip-missing-label: %d of %d records of split %r lack label %r and are skipped; every worker is "
             "planned as if all of them were its own (%d full batches each)", unlabelled, plan.num_records, plan.split,
             plan.label, full)
    return dataclasses.replace(
        plan, feature_spec={**plan.feature_spec, plan.label: label_spec}, full_steps_per_epoch=full,
        steps_per_epoch=min(plan.steps_per_epoch, full),
    )


def _describe_defaults(given: TrainConfig, config: TrainConfig, plan: preflight.InputPlan) -> str:
    """One line naming the settings chosen for the user (``trainer.defaults``), empty if none were."""
    parts = []
    if given.model == AUTO:
        parts.append(f"--model {config.model} (from the features)")
    if given.per_replica_batch is None and given.global_batch is None:
        parts.append(f"--per-replica-batch {config.per_replica_batch} (for {plan.num_records} records, "
                     f"{plan.dropped_records} left out per epoch)")
    if given.steps_per_epoch is None and config.steps_per_epoch is not None:
        parts.append(f"--steps-per-epoch {config.steps_per_epoch} (--model bert with no GPU visible: a short run; "
                     "--steps-per-epoch N or --epochs N for more)")
    if given.epochs is None:
        parts.append(f"--epochs {config.epochs} ({plan.steps_per_epoch} steps each, "
                     f"{config.epochs * plan.steps_per_epoch} in all)")
    if given.model_dir == defaults.default_model_dir(given.data):
        parts.append(f"--model-dir {config.model_dir}")
    if not parts:
        return ""
    return f"defaults chosen: {'; '.join(parts)}; learning rate {config.learning_rate:g}"


def _plan_eval(
    config: TrainConfig, *, cluster: ClusterInfo, data_manifest: manifest.Manifest, inputs: tuple[str, ...],
    targets: tuple[str, ...] = (),
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
        per_worker_batch=1, data_manifest=data_manifest, targets=targets,
    )


def run_job(config: TrainConfig, *, cluster: ClusterInfo,
            then: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Runs the job on this worker; returns the summary it wrote to ``model_dir/summary/``.

    ``then(summary)`` runs once the summary is written, while the job's input iterators are still held
    (``trainer.train`` ends the worker process there: releasing them can wait for tf.data's threads)."""
    from trainer import checkpoints as ckpt_lib
    from trainer import collaborators, controller, eta, metrics, session, strategy

    gpus = strategy.local_gpus()
    plan, eval_plan, identity, run_id, config = plan_job(config, cluster=cluster, local_replicas=max(1, gpus),
                                                         on_cpu=gpus == 0)
    saved = resume.saved_identity(config.model_dir)
    plan, identity = _elastic_cap(plan, identity, saved)
    resume.check_resume(config.model_dir, identity, is_chief=cluster.is_chief, run_id=run_id, data=config.data)
    order = resume.epoch_order(config.model_dir, saved) or elastic.EpochOrder.start(plan.num_workers)
    old_plans = {w: preflight.replan(plan, w) for _, w in order.segments if w != plan.num_workers}
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
    if plan.bert is not None and plan.bert.pretraining and cluster.is_chief:  # what --init-from rebuilds
        bert_task.write_bert_config(config.model_dir, plan.bert)
    total_steps = config.epochs * ses.plan.steps_per_epoch
    start_step = checkpoints.restore(ses.strategy)
    if start_step > total_steps:
        raise ConfigError(
            f"the checkpoint in {config.model_dir} is at step {start_step}, past this job's {total_steps} "
            f"steps ({config.epochs} epochs x {ses.plan.steps_per_epoch}): use a new --model-dir or more --epochs"
        )
    handover = elastic.handover(order, start_step=start_step, steps_per_epoch=plan.steps_per_epoch,
                                workers=plan.num_workers)
    if handover is not None:
        log.info("elastic resume: epoch %d was started by %d worker(s); its last %d steps are dealt to these %d "
                 "(every record of the epoch once), then each worker reads its own records", handover.epoch,
                 handover.old_workers, plan.steps_per_epoch - handover.done, plan.num_workers)
    if cluster.is_chief:
        resume.write_epoch_order(config.model_dir, order.resumed(
            start_step=start_step, steps_per_epoch=plan.steps_per_epoch, workers=plan.num_workers))
    meter = metrics.Meter()
    progress = metrics.Progress(
        enabled=cluster.is_chief, total_steps=total_steps, global_batch=ses.plan.global_batch, every=config.log_every,
        logdir=f"{config.model_dir.rstrip('/')}/tensorboard",
    )
    settings = controller.LoopSettings(start_step, total_steps, ses.plan.steps_per_epoch, config.checkpoint_every)
    if cluster.is_chief:
        log.info("%s", eta.plan_line(start_step=start_step, total_steps=total_steps,
                                     steps_per_epoch=ses.plan.steps_per_epoch, global_batch=ses.plan.global_batch))
    clock = eta.StepClock(start_step=start_step, total_steps=total_steps, on_cpu=gpus == 0, enabled=cluster.is_chief)
    runner = _make_runner(ses, meter, start_step=start_step, handover=handover,
                          old_plan=old_plans.get(handover.old_workers) if handover else None)
    try:
        result = controller.Controller(
            runner=runner, settings=settings, progress=progress, checkpoints=checkpoints,
            evaluator=collaborators.evaluator_for(ses), exporter=collaborators.exporter_for(ses), meter=meter,
            strategy=ses.strategy, eta=clock,
        ).run()
    finally:
        runner.close()
    summary = session.write_job_summary(
        ses, meter, start_step=start_step, final_step=result.final_step, scores=result.scores, exported=result.exported,
        data_mode=ses.plan.mode,
    )
    if then is not None:
        then(summary)
    return summary


def _elastic_cap(plan: preflight.InputPlan, identity: dict[str, Any],
                 saved: dict[str, Any] | None) -> tuple[preflight.InputPlan, dict[str, Any]]:
    """A resume with another worker count keeps the checkpoints' steps per epoch when this count's plan gives
    more (``resume`` refuses fewer); a label some records lack (``--skip-missing-label``) is refused: which
    records remain is known only by reading them, so the old workers' streams cannot be replayed."""
    if saved is None or saved.get("num_workers") in (None, plan.num_workers):
        return plan, identity
    if plan.feature_spec[plan.label].nullable:
        raise preflight.DataSetError(
            f"the checkpoints were saved with {saved['num_workers']} workers: a resume with {plan.num_workers} cannot "
            "skip records without a label (--skip-missing-label) exactly; resume with the same worker count"
        )
    steps = saved.get("steps_per_epoch")
    if isinstance(steps, int) and 1 <= steps < plan.steps_per_epoch:
        plan = dataclasses.replace(plan, steps_per_epoch=steps)
        identity = {**identity, "steps_per_epoch": steps}
    return plan, identity


def _make_runner(ses: Session, meter: Meter, *, start_step: int = 0, handover: elastic.Handover | None = None,
                 old_plan: preflight.InputPlan | None = None) -> StepRunner:
    """The step runner ``--loop`` names: the custom ``strategy.run`` step, or Keras ``fit``. ``handover``: the
    input that starts at ``start_step`` finishes an epoch ``old_plan``'s workers started (``trainer.elastic``)."""
    from trainer import data, fit, idlog, loop

    config, strat, plan = ses.config, ses.strategy, ses.plan

    def batches(step: int) -> Any:
        here = handover if step == start_step else None
        return data.distribute(
            strat, plan, start_step=step, shuffle_buffer=config.shuffle_buffer, seed=config.seed, with_ids=config.record_ids,
            handover=here, old_plan=old_plan if here else None,
        )

    if config.loop == "fit":
        return fit.FitRunner(
            strategy=strat, model=ses.model, optimizer=ses.optimizer, batches=batches, meter=meter,
            batch_spec=data.batch_spec(plan, plan.global_batch // ses.replicas), objective=ses.objective,
        )
    step_fn = loop.make_train_step(
        strategy=strat, model=ses.model, optimizer=ses.optimizer, global_batch=plan.global_batch,
        objective=ses.objective, loss_scale=ses.loss_scale,
    )
    return loop.CustomRunner(
        strategy=strat, step_fn=step_fn, batches=batches, meter=meter,
        probe=data.floor_probe(strat, plan), id_log=idlog.IdLog(config.model_dir, ses.worker) if config.record_ids else None,
    )

"""The naive per-file baseline the trainer is measured against (benchmark code, not the product).

Worker w of W reads whole shards w, w+W, ... whether or not W divides N, in plain batches with no
equalisation: TF keeps every worker stepping until the one with the most data runs dry, feeding
empty batches to the others. The summary (same fields as the trainer's, ``input_mode``
"naive-files") counts those ``empty_replica_steps``. Everything but the input and the runner is
the trainer's own: pre-flight, session, controller, summary. No checkpoints, no resume.

``python -m trainer.launch --workers W --module benchmarks.naive_trainer -- <trainer.train args>``
(``--loop custom`` only: it measures every replica step).
"""
from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import tensorflow as tf

from shardprep import cli
from trainer import collaborators, data, loop, metrics, session, strategy, train, worker
from trainer.cluster import ClusterInfo, parse_tf_config
from trainer.controller import Controller, LoopSettings
from trainer.loop import OnStep
from trainer.preflight import InputPlan
from trainer.settings import ConfigError, TrainConfig

__all__ = ["NaiveRunner", "check_config", "main", "naive_shards", "naive_steps_per_epoch", "run_naive_job"]

PROG = "benchmarks.naive_trainer"
INPUT_MODE = "naive-files"
log = logging.getLogger(__name__)


def check_config(config: TrainConfig) -> None:
    """Refuses what the baseline cannot measure."""
    if config.loop != "custom":
        raise ConfigError(f"{PROG} runs only with --loop custom (it measures every replica step)")


def naive_shards(plan: InputPlan, worker: int) -> list[int]:
    """Shards a naive per-file split gives ``worker``: w, w+W, ... whether or not W divides N."""
    return list(range(worker, len(plan.shard_urls), plan.num_workers))


def naive_steps_per_epoch(plan: InputPlan, *, local_replicas: int) -> int:
    """Steps of one naive epoch: TF steps every worker until the one with the most data runs dry."""
    per_replica = plan.per_worker_batch // local_replicas
    batches = [
        -(-sum(plan.shards[s].num_records for s in naive_shards(plan, w)) // per_replica) for w in range(plan.num_workers)
    ]
    return -(-max(batches) // local_replicas)


def naive_batches(plan: InputPlan, *, worker: int, batch_size: int) -> tf.data.Dataset:
    """One epoch of the naive case: this worker's whole files, plain batches, no equalisation."""
    files = [plan.shard_urls[s] for s in naive_shards(plan, worker)]
    ds = tf.data.TFRecordDataset(tf.constant(files, tf.string), compression_type=data.compression_type(plan))
    ds = ds.batch(batch_size).map(data.parser(plan), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE).with_options(data.options())


def distribute_naive(strat: tf.distribute.Strategy, plan: InputPlan) -> tf.distribute.DistributedDataset:
    """One naive epoch, distributed (finite: one epoch per iterator)."""
    per_replica = plan.global_batch // strat.num_replicas_in_sync

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return naive_batches(plan, worker=context.input_pipeline_id, batch_size=per_replica)

    return strat.distribute_datasets_from_function(dataset_fn, options=data.input_options())


class NaiveRunner:
    """Each epoch runs until every worker's own files are exhausted (a fresh iterator per epoch)."""

    def __init__(self, *, strategy: tf.distribute.Strategy, step_fn: loop.StepFn,
                 epoch_batches: Callable[[], Any], meter: metrics.Meter, classification: bool) -> None:
        self.strategy, self.step_fn, self.epoch_batches = strategy, step_fn, epoch_batches
        self.meter, self.classification = meter, classification

    def run_epoch(self, *, epoch: int, start: int, stop: int, on_step: OnStep) -> int:
        iterator: Iterator[Any] = iter(self.epoch_batches())
        step = start
        while (result := loop.timed_step(self.strategy, self.step_fn, iterator, self.meter, self.classification)) is not None:
            step += 1
            on_step(step, result.loss)
        log.info("naive input: epoch %d ended after %d steps in all", epoch + 1, step)
        if step != stop:
            log.warning("naive input: epoch %d ran %d steps, %d were expected", epoch + 1, step - start, stop - start)
        return stop

    def close(self) -> None:
        """Nothing to release."""


def run_naive_job(config: TrainConfig, *, cluster: ClusterInfo) -> dict[str, Any]:
    """The trainer's job with the naive input; returns the summary written to ``model_dir/summary/``."""
    check_config(config)
    gpus = strategy.local_gpus()
    plan, eval_plan = worker.plan_job(config, cluster=cluster, local_replicas=max(1, gpus))[:2]
    ses = session.open_session(
        config, cluster=cluster, plan=plan, eval_plan=eval_plan, shards=naive_shards(plan, cluster.worker_index),
        gpus=gpus,
    )
    steps_per_epoch = naive_steps_per_epoch(ses.plan, local_replicas=ses.local_replicas)
    total = config.epochs * steps_per_epoch
    meter = metrics.Meter()
    progress = metrics.Progress(
        enabled=cluster.is_chief, total_steps=total, global_batch=ses.plan.global_batch, every=config.log_every, logdir=None
    )
    step_fn = loop.make_train_step(
        strategy=ses.strategy, model=ses.model, optimizer=ses.optimizer, global_batch=ses.plan.global_batch,
        classification=ses.classification, loss_scale=ses.loss_scale,
    )
    runner = NaiveRunner(
        strategy=ses.strategy, step_fn=step_fn, epoch_batches=lambda: distribute_naive(ses.strategy, ses.plan),
        meter=meter, classification=ses.classification,
    )
    result = Controller(
        runner=runner, settings=LoopSettings(0, total, steps_per_epoch), progress=progress,
        evaluator=collaborators.evaluator_for(ses), exporter=collaborators.exporter_for(ses), meter=meter,
        strategy=ses.strategy,
    ).run()
    return session.write_job_summary(
        ses, meter, start_step=0, final_step=result.final_step, scores=result.scores, exported=result.exported,
        data_mode="file", input_mode=INPUT_MODE,
    )


def _main(argv: Sequence[str] | None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout, force=True)
    for noisy in ("tensorflow", "absl"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    config = train.config_from_args(train.build_parser(PROG).parse_args(argv))
    check_config(config)
    cluster = parse_tf_config(os.environ.get("TF_CONFIG"))
    with train.tf_errors_as_run_errors():
        run_naive_job(config, cluster=cluster)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())

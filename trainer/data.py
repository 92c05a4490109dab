"""tf.data input from an ``InputPlan``: each worker reads only its own pieces, exactly
``steps_per_epoch`` full batches per epoch, through ``distribute_datasets_from_function``.

The per-worker stream is deterministic (ordered interleave, shuffle seeded by epoch), so a resumed
job can skip the batches of the current epoch it already trained on and see no example twice.
``floor_probe`` is the same distributed input over one in-memory batch: what a ``next()`` costs
when no input pipeline is involved at all (see ``metrics``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

import trainer.elastic as elastic
import trainer.image_input as image_input
from shardprep import fs, manifest
from shardprep.schema import FeatureSpec
from trainer.features import MISSING_INT64
from trainer.labels import out_of_range_message
from trainer.preflight import InputPlan

__all__ = [
    "batch_spec", "compression_type", "dataset_fn", "distribute", "epoch_positions", "eval_batches", "floor_probe",
    "handover_batches", "input_options", "options", "parser", "parse_spec", "record_ids", "worker_batches",
    "worker_positions", "worker_records",
]

_DTYPES = {"int64": tf.int64, "float32": tf.float32, "string": tf.string}
_MAX_CYCLE = 8
# Remote shards are read in parallel, their records crossing the interleave's threads in blocks
# (one record at a time costs more CPU than the read itself). Local shards are read in turn on one
# thread: a parallel interleave's threads alone slow every training step on a small worker.
_READ_BLOCK = 64


def parse_spec(features: Mapping[str, FeatureSpec]) -> dict[str, Any]:
    """``tf.io.parse_example`` spec from the manifest's features: fixed shapes dense, [-1] ragged."""
    spec: dict[str, Any] = {}
    for name, feature in features.items():
        dtype = _DTYPES[feature.dtype]
        if feature.shape == (-1,):
            spec[name] = tf.io.RaggedFeature(dtype)
        elif feature.nullable:  # a record may leave it out (a missing value): it reads as ``_empty``
            spec[name] = tf.io.FixedLenFeature(list(feature.shape), dtype, default_value=_empty(feature))
        else:
            spec[name] = tf.io.FixedLenFeature(list(feature.shape), dtype)
    return spec


def _empty(feature: FeatureSpec) -> Any:
    """The value of a missing nullable feature: NaN for floats, ``MISSING_INT64`` for integers (``mlp`` imputes
    both), or empty strings."""
    value: Any = {"string": b"", "float32": float("nan"), "int64": MISSING_INT64}[feature.dtype]
    for size in reversed(feature.shape):
        value = [value] * size
    return value


def batch_spec(plan: InputPlan, batch_size: int) -> tuple[dict[str, Any], tf.TensorSpec]:
    """The (features, label) spec of one parsed batch of ``batch_size``."""
    spec = {
        name: tf.TensorSpec([batch_size, *f.shape], _DTYPES[f.dtype])
        if f.shape != (-1,)
        else tf.RaggedTensorSpec([batch_size, None], _DTYPES[f.dtype])
        for name, f in plan.feature_spec.items()
    }
    if plan.image_size:  # decoded by image_input.preprocess
        del spec[image_input.ENCODED]
        spec[image_input.IMAGE] = tf.TensorSpec([batch_size, plan.image_size, plan.image_size, 3], tf.float32)
    label = spec.pop(plan.label)
    label = tf.TensorSpec(label.shape[:1], tf.int64 if plan.label_vocabulary else label.dtype)  # [batch, 1] reads as [batch]
    if plan.targets:
        return spec, {plan.label: label, **{name: spec.pop(name) for name in plan.targets}}
    return spec, label


def compression_type(plan: InputPlan) -> str:
    """``TFRecordDataset``'s ``compression_type`` for the plan's shards."""
    return "GZIP" if plan.compression == "gzip" else ""


def worker_records(plan: InputPlan, worker: int, *, parallel: bool | None = None) -> tf.data.Dataset:
    """Serialized records of ``worker``'s (shard, skip, take) pieces, in a fixed interleaved order.

    A nullable label in the plan (``--skip-missing-label``): the records without it are left out.

    ``parallel``: read the pieces in parallel (default: when some of them are remote).
    """
    compression = compression_type(plan)

    def read(path: tf.Tensor, first: tf.Tensor, skip: tf.Tensor, take: tf.Tensor) -> tf.data.Dataset:
        return tf.data.TFRecordDataset(path, compression_type=compression).skip(skip).take(take)

    ds = _interleave(plan, worker, read, parallel=parallel)
    label = plan.feature_spec[plan.label]
    if label.nullable:  # --skip-missing-label (trainer.worker planned the batches for the records that remain)
        ds = ds.filter(_has(plan.label, _DTYPES[label.dtype]))
    return ds


def worker_positions(plan: InputPlan, worker: int, *, parallel: bool | None = None) -> tf.data.Dataset:
    """The global positions (int64: manifest shard order, then record order) of the records ``worker_records``
    yields, in the same order, read from no file: interleave and shuffle do not look at what they move."""

    def read(path: tf.Tensor, first: tf.Tensor, skip: tf.Tensor, take: tf.Tensor) -> tf.data.Dataset:
        return tf.data.Dataset.range(first + skip, first + skip + take)

    return _interleave(plan, worker, read, parallel=parallel)


def _interleave(plan: InputPlan, worker: int, read: Callable[..., tf.data.Dataset], *,
                parallel: bool | None) -> tf.data.Dataset:
    """``read(path, first position of the shard, skip, take)`` of each of ``worker``'s pieces, interleaved."""
    pieces = plan.pieces(worker)
    firsts = [0]
    for shard in plan.shards:
        firsts.append(firsts[-1] + shard.num_records)
    paths = tf.constant([plan.shard_urls[p.shard] for p in pieces], tf.string)
    starts = tf.constant([firsts[p.shard] for p in pieces], tf.int64)
    skips = tf.constant([p.skip for p in pieces], tf.int64)
    takes = tf.constant([p.take for p in pieces], tf.int64)
    pieces_ds = tf.data.Dataset.from_tensor_slices((paths, starts, skips, takes))
    cycle = min(len(pieces), _MAX_CYCLE)
    if parallel is None:
        parallel = not all(fs.is_local(plan.shard_urls[p.shard]) for p in pieces)
    if cycle == 1 or not parallel:
        ds = pieces_ds.interleave(read, cycle_length=cycle)  # one record of each piece in turn
    else:
        ds = pieces_ds.interleave(  # blocks of _READ_BLOCK records of each piece in turn
            lambda *piece: read(*piece).batch(_READ_BLOCK),
            cycle_length=cycle,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        ).unbatch()
    return ds


def _has(name: str, dtype: tf.DType) -> Callable[[tf.Tensor], tf.Tensor]:
    """True for a serialized Example that holds feature ``name``."""
    spec = {name: tf.io.VarLenFeature(dtype)}
    return lambda serialized: tf.size(tf.io.parse_single_example(serialized, spec)[name].values) > 0


def record_ids(serialized: tf.Tensor) -> tf.Tensor:
    """A 63-bit hash of each serialized record: an id for ``--debug-record-ids`` that needs no id feature."""
    return tf.strings.to_hash_bucket_fast(serialized, (1 << 63) - 1)


def parser(plan: InputPlan, *, with_ids: bool = False, training: bool = True) -> Callable[[tf.Tensor], tuple[Any, ...]]:
    """Parses a batch; with ``plan.image_size``, also decodes its images (``plan.augment`` when ``training``)."""
    spec = parse_spec(plan.feature_spec)

    def parse(serialized: tf.Tensor) -> tuple[Any, ...]:
        # One vectorized parse per batch, not one per record.
        features = tf.io.parse_example(serialized, spec)
        if plan.image_size:
            features = image_input.preprocess(features, plan.image_size, training=training, augment=plan.augment)
        label = features.pop(plan.label)
        label = _label(plan, tf.reshape(label, [-1]) if label.shape.rank == 2 else label, training=training)
        if plan.targets:  # the objective scores these too (trainer.objective.BertPretraining)
            label = {plan.label: label, **{name: features.pop(name) for name in plan.targets}}
        return (features, label, record_ids(serialized)) if with_ids else (features, label)

    return parse


def _label(plan: InputPlan, label: tf.Tensor, *, training: bool) -> tf.Tensor:
    """Class ids: a string label through the vocabulary; in training, an id outside [0, num_classes) stops the
    job naming --num-classes; in evaluation, unseen strings and such ids become -1 (counted, not scored)."""
    if plan.label_vocabulary:
        vocabulary = tf.constant(plan.label_vocabulary)
        hits = tf.equal(tf.expand_dims(label, -1), vocabulary)  # [batch, vocabulary]: a small vocabulary, no table
        return tf.where(tf.reduce_any(hits, -1), tf.argmax(tf.cast(hits, tf.int32), -1), tf.constant(-1, tf.int64))
    if not plan.num_classes or label.dtype != tf.int64:
        return label
    inside = tf.logical_and(label >= 0, label < plan.num_classes)
    if not training:
        return tf.where(inside, label, tf.constant(-1, tf.int64))
    check = tf.debugging.Assert(tf.reduce_all(inside), [out_of_range_message(plan.label, plan.num_classes)])
    with tf.control_dependencies([check]):
        return tf.identity(label)


def options() -> tf.data.Options:
    """Per-worker dataset options: TF must not shard what the plan already assigned."""
    options = tf.data.Options()
    # The plan already gave this worker its own records: TF must not shard them again.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return options


def input_options() -> tf.distribute.InputOptions:
    """Distributed-input options: batches are fetched to the device ahead of the step."""
    return tf.distribute.InputOptions(experimental_fetch_to_device=True)


def epoch_shuffle(ds: tf.data.Dataset, buffer: int, *, seed: int, epoch: tf.Tensor) -> tf.data.Dataset:
    """``ds`` shuffled in an order fixed by ``(seed, epoch)``, so that a resumed job replays it.

    Blocks of ``buffer`` records are permuted by stateless ops keyed by the epoch, then mixed across
    blocks by a buffer shuffle with a fixed seed. The epoch is never an op seed: TF compares op
    seeds to 0 in Python, which fails for a tensor once a model sets ``tf.random.set_seed(0)``.
    """
    key = tf.stack([tf.constant(seed, tf.int64), tf.cast(epoch, tf.int64)])

    def permute(block: tf.Tensor, records: tf.Tensor) -> tf.Tensor:
        return tf.random.experimental.stateless_shuffle(records, seed=tf.random.experimental.stateless_fold_in(key, block))

    ds = ds.batch(buffer).enumerate().map(permute).unbatch()
    return ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=False)


def epoch_positions(plan: InputPlan, worker: int, *, epoch: int, shuffle_buffer: int, seed: int,
                    parallel: bool | None = None) -> np.ndarray:
    """The global positions of the records ``worker`` trains on in ``epoch`` (``steps_per_epoch`` per-worker
    batches), in its stream's order, replayed without reading a record (``trainer.elastic``)."""
    ds = worker_positions(plan, worker, parallel=parallel)
    if shuffle_buffer:
        ds = epoch_shuffle(ds, shuffle_buffer, seed=seed, epoch=tf.constant(epoch, tf.int64))
    ds = ds.take(plan.steps_per_epoch * plan.per_worker_batch).batch(1 << 16)
    return np.concatenate([np.zeros(0, np.int64), *ds.as_numpy_iterator()])


def handover_batches(old: InputPlan, new: InputPlan, handover: elastic.Handover, *, worker: int, batch_size: int,
                     shuffle_buffer: int, seed: int) -> tf.data.Dataset:
    """Serialized per-replica batches of ``batch_size`` for ``worker`` of ``new`` over the rest of the epoch
    that ``old``'s workers started (``trainer.elastic``): ``old.steps_per_epoch - handover.done`` steps."""
    streams = [epoch_positions(old, w, epoch=handover.epoch, shuffle_buffer=shuffle_buffer, seed=seed)
               for w in range(old.num_workers)]
    mine = elastic.deal(streams, global_batch=old.global_batch, start=handover.done, stop=old.steps_per_epoch,
                        workers=new.num_workers, worker=worker)
    split = manifest.SplitInfo(old.num_records, sum(s.num_bytes for s in old.shards), old.shards)

    def batches() -> Iterator[Any]:
        for chunk in elastic.read_positions(old.root, split, mine, compression=old.compression, split_name=old.split,
                                            chunk=batch_size * 64):
            for i in range(0, len(chunk), batch_size):
                yield chunk[i:i + batch_size]

    ds = tf.data.Dataset.from_generator(batches, output_signature=tf.TensorSpec([batch_size], tf.string))
    return ds.apply(tf.data.experimental.assert_cardinality(len(mine) // batch_size))


def worker_batches(
    plan: InputPlan,
    *,
    worker: int,
    batch_size: int,
    batches_per_epoch: int,
    start_epoch: int = 0,
    skip_batches: int = 0,
    shuffle_buffer: int = 0,
    seed: int = 0,
    with_ids: bool = False,
    stop_epoch: int | None = None,
    head: tf.data.Dataset | None = None,
) -> tf.data.Dataset:
    """Stream of parsed ``(features, label)`` batches, ``batches_per_epoch`` per epoch.

    Starts at ``start_epoch``, ``skip_batches`` into it, after the serialized batches of ``head`` (an
    elastic resume's rest of an epoch: ``handover_batches``). ``stop_epoch`` None: infinite, so that a
    loop counting its steps needs no per-step cross-worker check for exhausted inputs; else it ends
    before ``stop_epoch``. ``with_ids`` adds each record's ``record_ids`` as a third element.
    """
    records = worker_records(plan, worker)

    def epoch(index: tf.Tensor) -> tf.data.Dataset:
        ds = records
        if shuffle_buffer:
            ds = epoch_shuffle(ds, shuffle_buffer, seed=seed, epoch=index)
        ds = ds.batch(batch_size, drop_remainder=True).take(batches_per_epoch)
        return ds.skip(tf.where(index == start_epoch, tf.constant(skip_batches, tf.int64), 0))

    if stop_epoch is None:
        ds = tf.data.Dataset.counter(start_epoch).flat_map(epoch)
        cardinality = tf.data.INFINITE_CARDINALITY
    else:
        ds = tf.data.Dataset.range(start_epoch, max(start_epoch, stop_epoch)).flat_map(epoch)
        cardinality = max(0, (stop_epoch - start_epoch) * batches_per_epoch - skip_batches)
    if head is not None:
        ds = head.concatenate(ds)
        if stop_epoch is not None:
            cardinality += int(head.cardinality())
    ds = ds.apply(tf.data.experimental.assert_cardinality(cardinality))
    ds = ds.map(parser(plan, with_ids=with_ids), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE).with_options(options())


def eval_batches(plan: InputPlan, *, worker: int, batch_size: int) -> tf.data.Dataset:
    """One pass over ``worker``'s records of ``plan``, the last batch partial (evaluation)."""
    ds = worker_records(plan, worker).batch(batch_size)
    return ds.map(parser(plan, training=False), num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def dataset_fn(
    plan: InputPlan,
    *,
    num_replicas: int,
    start_step: int = 0,
    stop_step: int | None = None,
    shuffle_buffer: int = 0,
    seed: int = 0,
    with_ids: bool = False,
    handover: elastic.Handover | None = None,
    old_plan: InputPlan | None = None,
) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """The ``distribute_datasets_from_function`` function of ``plan`` from global step ``start_step`` on.

    Each local replica receives its own per-replica batches in turn, so an epoch is
    ``steps_per_epoch * local replicas`` per-replica batches on every worker. ``stop_step`` None: endless;
    else it must end an epoch. ``handover`` (with ``old_plan``, the plan of the workers that started the
    epoch): the rest of that epoch is dealt from their streams (``trainer.elastic``).
    """
    per_replica = plan.global_batch // num_replicas
    local_replicas = num_replicas // plan.num_workers
    start_epoch, done = divmod(start_step, plan.steps_per_epoch)
    stop_epoch = None
    if stop_step is not None:
        stop_epoch, rest = divmod(stop_step, plan.steps_per_epoch)
        if rest:
            raise ValueError(f"stop step {stop_step} does not end an epoch of {plan.steps_per_epoch} steps")
    if handover is not None:
        if old_plan is None or handover.epoch != start_epoch:
            raise ValueError("a handover needs the old plan, at the epoch the input starts in")
        start_epoch, done = start_epoch + 1, 0

    def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
        if context.num_input_pipelines != plan.num_workers:
            raise ValueError(
                f"the strategy has {context.num_input_pipelines} input pipelines, the plan {plan.num_workers} workers"
            )
        head = None
        if handover is not None and old_plan is not None:
            head = handover_batches(old_plan, plan, handover, worker=context.input_pipeline_id, batch_size=per_replica,
                                    shuffle_buffer=shuffle_buffer, seed=seed)
        return worker_batches(
            plan,
            worker=context.input_pipeline_id,
            batch_size=per_replica,
            batches_per_epoch=plan.steps_per_epoch * local_replicas,
            start_epoch=start_epoch,
            skip_batches=done * local_replicas,
            shuffle_buffer=shuffle_buffer,
            seed=seed,
            with_ids=with_ids,
            stop_epoch=stop_epoch,
            head=head,
        )

    return make


def distribute(
    strategy: tf.distribute.Strategy,
    plan: InputPlan,
    *,
    start_step: int = 0,
    shuffle_buffer: int = 0,
    seed: int = 0,
    with_ids: bool = False,
    handover: elastic.Handover | None = None,
    old_plan: InputPlan | None = None,
    stop_step: int | None = None,
) -> tf.distribute.DistributedDataset:
    """The distributed input of ``plan`` from global step ``start_step`` on (``dataset_fn``)."""
    make = dataset_fn(plan, num_replicas=strategy.num_replicas_in_sync, start_step=start_step, stop_step=stop_step,
                      shuffle_buffer=shuffle_buffer, seed=seed, with_ids=with_ids, handover=handover, old_plan=old_plan)
    return strategy.distribute_datasets_from_function(make, options=input_options())


def floor_probe(strategy: tf.distribute.Strategy, plan: InputPlan) -> Iterator[Any]:
    """An endless iterator over one real batch held in memory, distributed exactly like the input.

    Its ``next()`` is the distributed iterator's own cost with nothing to read or parse: the floor
    of the input wait that no input pipeline can go below.
    """
    per_replica = plan.global_batch // strategy.num_replicas_in_sync

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        one = worker_batches(plan, worker=context.input_pipeline_id, batch_size=per_replica, batches_per_epoch=1)
        return one.take(1).cache().repeat().prefetch(1)

    probe = iter(strategy.distribute_datasets_from_function(dataset_fn, options=input_options()))
    next(probe)  # starts the pipeline and fills the cache, outside any timing
    return probe

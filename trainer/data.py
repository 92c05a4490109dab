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

import tensorflow as tf

from shardprep import fs
from shardprep.schema import FeatureSpec
from trainer import image_input
from trainer.features import MISSING_INT64
from trainer.labels import out_of_range_message
from trainer.preflight import InputPlan

__all__ = [
    "batch_spec", "compression_type", "distribute", "eval_batches", "floor_probe", "input_options", "options", "parser", "parse_spec",
    "record_ids", "worker_batches", "worker_records",
]

_DTYPES = {"int64": tf.int64, "float32": tf.float32, "string": tf.string}
_MAX_CYCLE = 8
# Remote shards are read in parallel, their records crossing the interleave's threads in blocks:
# one record at a time cost about 10 us each (0.7-1.0 ms of CPU per batch of 64, three times the
# read itself). Local shards are read in turn on one thread: on a 2-core worker the parallel
# interleave's threads alone made every training step about 2 ms (20%) slower.
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
    pieces = plan.pieces(worker)
    paths = tf.constant([plan.shard_urls[p.shard] for p in pieces], tf.string)
    skips = tf.constant([p.skip for p in pieces], tf.int64)
    takes = tf.constant([p.take for p in pieces], tf.int64)
    compression = compression_type(plan)

    def read(path: tf.Tensor, skip: tf.Tensor, take: tf.Tensor) -> tf.data.Dataset:
        return tf.data.TFRecordDataset(path, compression_type=compression).skip(skip).take(take)

    pieces_ds = tf.data.Dataset.from_tensor_slices((paths, skips, takes))
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
    label = plan.feature_spec[plan.label]
    if label.nullable:  # --skip-missing-label (trainer.job planned the batches for the records that remain)
        ds = ds.filter(_has(plan.label, _DTYPES[label.dtype]))
    return ds


def _has(name: str, dtype: tf.DType) -> Callable[[tf.Tensor], tf.Tensor]:
    """True for a serialized Example that holds feature ``name``."""
    spec = {name: tf.io.VarLenFeature(dtype)}
    return lambda serialized: tf.size(tf.io.parse_single_example(serialized, spec)[name].values) > 0


def record_ids(serialized: tf.Tensor) -> tf.Tensor:
    """A 63-bit hash of each serialized record: an id for ``--debug-record-ids`` that needs no id feature."""
    return tf.strings.to_hash_bucket_fast(serialized, (1 << 63) - 1)


def parser(plan: InputPlan, *, with_ids: bool = False, training: bool = True) -> Callable[[tf.Tensor], tuple[Any, ...]]:
    """Parses a batch; with ``plan.image_size``, also decodes its images (random crop/flip when ``training``)."""
    spec = parse_spec(plan.feature_spec)

    def parse(serialized: tf.Tensor) -> tuple[Any, ...]:
        # One vectorized parse per batch, not one per record.
        features = tf.io.parse_example(serialized, spec)
        if plan.image_size:
            features = image_input.preprocess(features, plan.image_size, training=training)
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
) -> tf.data.Dataset:
    """Endless stream of parsed ``(features, label)`` batches, ``batches_per_epoch`` per epoch.

    Starts at ``start_epoch``, ``skip_batches`` into it. Infinite on purpose: the loop counts its
    steps, and TF then needs no per-step cross-worker check for exhausted inputs. ``with_ids`` adds
    each record's ``record_ids`` as a third element.
    """
    records = worker_records(plan, worker)

    def epoch(index: tf.Tensor) -> tf.data.Dataset:
        ds = records
        if shuffle_buffer:
            ds = epoch_shuffle(ds, shuffle_buffer, seed=seed, epoch=index)
        ds = ds.batch(batch_size, drop_remainder=True).take(batches_per_epoch)
        return ds.skip(tf.where(index == start_epoch, tf.constant(skip_batches, tf.int64), 0))

    ds = tf.data.Dataset.counter(start_epoch).flat_map(epoch)
    ds = ds.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    ds = ds.map(parser(plan, with_ids=with_ids), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE).with_options(options())


def eval_batches(plan: InputPlan, *, worker: int, batch_size: int) -> tf.data.Dataset:
    """One pass over ``worker``'s records of ``plan``, the last batch partial (evaluation)."""
    ds = worker_records(plan, worker).batch(batch_size)
    return ds.map(parser(plan, training=False), num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def distribute(
    strategy: tf.distribute.Strategy,
    plan: InputPlan,
    *,
    start_step: int = 0,
    shuffle_buffer: int = 0,
    seed: int = 0,
    with_ids: bool = False,
) -> tf.distribute.DistributedDataset:
    """The distributed input of ``plan`` from global step ``start_step`` on.

    Each local replica receives its own per-replica batches in turn, so an epoch is
    ``steps_per_epoch * local replicas`` per-replica batches on every worker.
    """
    per_replica = plan.global_batch // strategy.num_replicas_in_sync
    local_replicas = strategy.num_replicas_in_sync // plan.num_workers
    start_epoch, done = divmod(start_step, plan.steps_per_epoch)

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        if context.num_input_pipelines != plan.num_workers:
            raise ValueError(
                f"the strategy has {context.num_input_pipelines} input pipelines, the plan {plan.num_workers} workers"
            )
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
        )

    return strategy.distribute_datasets_from_function(dataset_fn, options=input_options())


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

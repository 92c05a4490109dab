"""The input of your own MWMS training loop: each worker's exactly balanced batches of a shardprep data set.

    import trainer.input
    inp = trainer.input.open("gs://bucket/ds", label="label", global_batch_size=256, seed=7, epochs=3)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer, input=inp.state)   # the input's position
    for batch in inp.distribute(strategy, start_step=int(optimizer.iterations)):   # ends after 3 epochs
        strategy.run(train_step, args=batch)

``open`` reads the manifest and proves, before TensorFlow is imported and before any collective, that
every worker gets the same number of full batches (``steps_per_epoch``) for this worker count (from
``TF_CONFIG``, or ``num_workers=``); any worker count works, over any shard count (range mode). A
batch is ``(features dict, label)`` parsed by the manifest's schema (images decoded with
``image_size=``; gzip shards read as such). An epoch ends; ``epochs=None`` repeats for ever.

Resumes: ``start_step`` is the global step to go on from. ``inp.state`` (a checkpointable object, put
it in your ``tf.train.Checkpoint``) keeps what a resume must match (data set, split, global batch,
steps per epoch, shuffle, seed: another one is refused with ``ResumeError``) and which worker count
started each epoch, so a job checkpointed mid-epoch with W workers may resume with another W' that
divides the global batch: the rest of that epoch is dealt exactly (``trainer.elastic``).

Keras ``fit`` under MWMS: ``inp.fit(model, strategy, ...)`` (one ``fit`` call per epoch, from any
step) or ``with inp.keras_fit_scope(model, strategy): model.fit(...)``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any

import trainer.labels as labels
import trainer.preflight as preflight
import trainer.resume as resume
from shardprep import versions
from shardprep.schema import schema_from_json
from trainer.cluster import parse_tf_config
from trainer.elastic import EpochOrder, Handover, handover
from trainer.preflight import DataSetError, InputPlan
from trainer.refusals import TrainerError
from trainer.resume import ResumeError
from trainer.settings import AUGMENTS, DEFAULT_AUGMENT

__all__ = ["DataSetError", "Input", "ResumeError", "open"]

_IMAGE = "image/encoded"


@dataclasses.dataclass
class Input:
    """One split of a data set, planned for ``num_workers`` workers (made by ``open``)."""

    plan: InputPlan
    identity: dict[str, Any]
    shuffle: int
    seed: int
    epochs: int | None
    stage_dir: str | None = None
    _order: EpochOrder | None = dataclasses.field(default=None, repr=False)
    _state: Any = dataclasses.field(default=None, repr=False)

    @property
    def steps_per_epoch(self) -> int:
        return self.plan.steps_per_epoch

    @property
    def num_workers(self) -> int:
        return self.plan.num_workers

    @property
    def global_batch_size(self) -> int:
        return self.plan.global_batch

    @property
    def per_worker_batch_size(self) -> int:
        return self.plan.per_worker_batch

    @property
    def total_steps(self) -> int | None:
        """Steps of all ``epochs``; None when the input repeats for ever."""
        return None if self.epochs is None else self.epochs * self.steps_per_epoch

    @property
    def num_classes(self) -> int | None:
        """Classes of the label (a string label: its vocabulary's size); None: a float32 regression target."""
        return self.plan.num_classes

    @property
    def label_vocabulary(self) -> tuple[str, ...]:
        """A string label's values: the label a batch holds is the id, the position in this tuple."""
        return self.plan.label_vocabulary

    def describe(self) -> str:
        return self.plan.describe()

    @property
    def state(self) -> Any:
        """A ``tf.train.Checkpoint``-able object holding the input's identity and epoch order (imports TF)."""
        if self._state is None:
            self._state = _make_state(self)
        return self._state

    def order(self) -> EpochOrder:
        """Which worker count started which epoch, as restored (``state``) or this run's count throughout."""
        return self._order or EpochOrder.start(self.num_workers)

    def _start(self, start_step: int) -> Handover | None:
        """Records this run's worker count in the epoch order; the handover a resume at ``start_step`` needs."""
        order = self.order()
        found = handover(order, start_step=start_step, steps_per_epoch=self.steps_per_epoch, workers=self.num_workers)
        self._order = order.resumed(start_step=start_step, steps_per_epoch=self.steps_per_epoch, workers=self.num_workers)
        return found

    def _steps(self, start_step: int, epoch: int | None) -> tuple[int, int | None]:
        spe = self.steps_per_epoch
        if epoch is None:
            stop = self.total_steps
        else:
            start_step, stop = max(start_step, epoch * spe), (epoch + 1) * spe
        if start_step < 0 or (stop is not None and start_step > stop):
            raise ValueError(f"start step {start_step} outside [0, {stop}]")
        return start_step, stop

    def dataset_fn(self, input_context: Any, *, start_step: int = 0, epoch: int | None = None,
                   with_ids: bool = False) -> Any:
        """This worker's ``tf.data.Dataset`` for ``strategy.distribute_datasets_from_function``: per-replica
        batches from global step ``start_step`` to the end (of ``epoch`` when given, else of ``epochs``).
        ``with_ids``: a third element, each record's 63-bit id (``trainer.data.record_ids``)."""
        import trainer.data as data

        start, stop = self._steps(start_step, epoch)
        found = self._start(start)
        plan = self._staged(input_context.input_pipeline_id)
        replicas = input_context.num_replicas_in_sync
        make = data.dataset_fn(plan, num_replicas=replicas, start_step=start, stop_step=stop, shuffle_buffer=self.shuffle,
                               seed=self.seed, with_ids=with_ids, handover=found,
                               old_plan=preflight.replan(self.plan, found.old_workers) if found else None)
        return make(input_context)

    def distribute(self, strategy: Any, *, start_step: int = 0, epoch: int | None = None, with_ids: bool = False) -> Any:
        """The distributed dataset for ``strategy`` (``dataset_fn`` on every worker); iterate it, or pass it to
        ``model.fit`` with ``steps_per_epoch``."""
        import trainer.data as data

        if strategy.num_replicas_in_sync % self.num_workers or self.global_batch_size % strategy.num_replicas_in_sync:
            raise DataSetError(f"global batch {self.global_batch_size} does not divide among the strategy's "
                               f"{strategy.num_replicas_in_sync} replicas on {self.num_workers} workers")
        return strategy.distribute_datasets_from_function(
            lambda context: self.dataset_fn(context, start_step=start_step, epoch=epoch, with_ids=with_ids),
            options=data.input_options(),
        )

    def batch_spec(self, strategy: Any) -> Any:
        """The (features, label) ``tf.TensorSpec``s of one per-replica batch."""
        import trainer.data as data

        return data.batch_spec(self.plan, self.global_batch_size // strategy.num_replicas_in_sync)

    def keras_fit_scope(self, model: Any, strategy: Any) -> contextlib.AbstractContextManager[None]:
        """Inside it, ``model.fit`` works under multi-worker MWMS (two Keras 3 bugs worked around; see
        ``trainer.keras_compat``); harmless on one worker."""
        import trainer.keras_compat as keras_compat

        return keras_compat.multi_worker_fit(model, strategy, self.batch_spec(strategy))

    def fit(self, model: Any, strategy: Any, *, start_step: int = 0, callbacks: Sequence[Any] = (),
            verbose: int = 0) -> list[Any]:
        """Keras ``fit`` from ``start_step`` to the end of ``epochs``, one call per epoch (so that a mid-epoch
        resume runs only the rest of its epoch); ``model`` compiled under ``strategy.scope()``. Returns the
        ``History`` of each call."""
        if self.total_steps is None:
            raise ValueError("fit needs a finite input: open it with epochs=N")
        histories = []
        step = start_step
        while step < self.total_steps:
            epoch = step // self.steps_per_epoch
            stop = (epoch + 1) * self.steps_per_epoch
            with self.keras_fit_scope(model, strategy):
                histories.append(model.fit(self.distribute(strategy, start_step=step, epoch=epoch), epochs=1,
                                           steps_per_epoch=stop - step, callbacks=list(callbacks), verbose=verbose))
            step = stop
        return histories

    def _staged(self, worker: int) -> InputPlan:
        if not self.stage_dir:
            return self.plan
        import trainer.staging as staging

        return staging.stage_shards(self.plan, shards=[p.shard for p in self.plan.pieces(worker)],
                                    stage_dir=self.stage_dir)

    def _restore(self, text: str) -> None:
        """The state of a checkpoint: refused when its identity differs from this input's."""
        try:
            doc = json.loads(text)
            saved, order = doc["identity"], EpochOrder.from_json(json.dumps({"segments": doc["segments"]}))
        except (ValueError, KeyError, TypeError, TrainerError) as e:
            raise ResumeError(f"the checkpoint's input state is damaged ({type(e).__name__})") from None
        steps = saved.get("steps_per_epoch")
        if saved.get("num_workers") != self.num_workers and isinstance(steps, int) and 1 <= steps < self.steps_per_epoch:
            # another worker count giving more full steps: the epoch keeps the checkpoint's length
            self.plan = dataclasses.replace(self.plan, steps_per_epoch=steps)
            self.identity = {**self.identity, "steps_per_epoch": steps}
        changes = resume.plan_changes(saved, self.identity)
        if changes:
            raise ResumeError(
                f"the checkpoint was saved under another input ({'; '.join(changes)}): resuming would map its step to "
                "the wrong records; start a new checkpoint folder, or open the input as it was"
            )
        if saved.get("global_batch", self.global_batch_size) % self.num_workers:
            raise ResumeError(f"global batch {self.global_batch_size} does not divide among {self.num_workers} workers")
        self._order = order

    def _serialize(self) -> str:
        return json.dumps({"identity": self.identity, "segments": [list(s) for s in self.order().segments]},
                          sort_keys=True)


def _make_state(inp: Input) -> Any:
    import tensorflow as tf

    class InputState(tf.train.experimental.PythonState):
        """The input's identity and epoch order in a ``tf.train.Checkpoint`` (restored: checked, adopted)."""

        def serialize(self) -> str:
            return inp._serialize()

        def deserialize(self, string_value: Any) -> None:
            inp._restore(string_value.decode() if isinstance(string_value, bytes) else str(string_value))

    return InputState()


def open(  # noqa: A001 - the front door's verb, as tfds.load / grain.load
    data_dir: str,
    *,
    label: str,
    global_batch_size: int,
    split: str = "train",
    features: Sequence[str] | None = None,
    seed: int = 0,
    shuffle: int = 1024,
    epochs: int | None = 1,
    steps_per_epoch: int | None = None,
    num_workers: int | None = None,
    num_classes: int | None = None,
    image_size: int = 0,
    augment: str = DEFAULT_AUGMENT,
    stage_dir: str | None = None,
    data_version: int | None = None,
) -> Input:
    """Plans ``split`` of the data set at ``data_dir`` (a folder or URL holding manifest.json) for ``num_workers``
    workers (default: ``TF_CONFIG``'s, else 1), refusing with ``DataSetError`` (one line) a data set, label or
    batch that cannot give every worker the same number of full batches. TF-free.

    ``features``: the features a batch holds besides the label (default: all). ``shuffle``: records in each
    worker's shuffle buffer, reshuffled every epoch from ``seed`` (0: file order). ``steps_per_epoch``: a cap.
    ``image_size``: decode ``image/encoded`` to ``image`` of that square size, its training batches changed as
    ``augment`` says (``none``, ``crop``, ``crop,flip``: ``trainer.image_input``; never flip digits, text, signs
    or logos). ``stage_dir``: copy each
    worker's shards there first (for stores TensorFlow cannot read). ``data_version``: read that kept manifest
    version of an appended data set (default: the current one)."""
    if num_workers is None:
        num_workers = parse_tf_config(os.environ.get("TF_CONFIG")).num_workers
    if global_batch_size < 1 or global_batch_size % num_workers:
        raise DataSetError(f"global_batch_size {global_batch_size} does not divide among {num_workers} workers")
    if epochs is not None and epochs < 1:
        raise DataSetError(f"epochs {epochs}: expected 1 or more, or None to repeat")
    m = versions.load(data_dir, version=data_version)
    schema = schema_from_json(m.features)
    inputs = tuple(features) if features is not None else tuple(n for n in schema if n != label)
    plan = preflight.plan_input(root=data_dir, split=split, label=label, inputs=inputs, num_workers=num_workers,
                                per_worker_batch=global_batch_size // num_workers, steps_cap=steps_per_epoch,
                                data_manifest=m)
    if label in schema and schema[label].dtype != "float32":
        info = labels.resolve_label(label, schema[label], plan.statistics, num_classes=num_classes)
        plan = dataclasses.replace(plan, num_classes=info.num_classes, label_vocabulary=info.vocabulary)
    if image_size:
        if _IMAGE not in plan.feature_spec:
            raise DataSetError(f"image_size {image_size}: the input holds no {_IMAGE!r} feature to decode")
        if augment not in AUGMENTS:
            raise DataSetError(f"augment {augment!r}: expected one of {', '.join(AUGMENTS)}")
        plan = dataclasses.replace(plan, image_size=image_size, augment=augment)
    identity = resume.plan_identity(plan, data_manifest=m, shuffle_buffer=shuffle, seed=seed)
    return Input(plan=plan, identity=identity, shuffle=shuffle, seed=seed, epochs=epochs, stage_dir=stage_dir)


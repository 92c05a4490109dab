"""Pre-flight: what every worker reads and for how many steps, decided from the manifest alone.

TF-free and collective-free, so every worker reaches the same verdict (and the same refusal) before
the strategy connects the workers. The arithmetic is ``shardprep.planning``'s; this module adds the
checks a training job needs: label and features exist, every shard is present at its recorded size
(locally: a regular file inside the data set folder, ``shardprep.members``), and every worker gets at
least one full batch.
"""
from __future__ import annotations

import collections
import dataclasses
import posixpath
import sys
from collections.abc import Mapping, Sequence

from shardprep import fs, manifest, members, naming, planning
from shardprep.schema import FeatureSpec, schema_from_json
from trainer.bert_task import BertTask
from trainer.refusals import TrainerError
from trainer.settings import DEFAULT_AUGMENT

__all__ = ["DataSetError", "InputPlan", "check_shards", "plan_input", "replan", "verify_records"]


class DataSetError(TrainerError):
    """The data set cannot feed this job; the message says why and what to change."""


@dataclasses.dataclass(frozen=True)
class InputPlan:
    """One split read by ``num_workers`` workers, ``steps_per_epoch`` full batches each."""

    root: str
    split: str
    compression: str
    shards: tuple[manifest.ShardInfo, ...]
    shard_urls: tuple[str, ...]
    worker_plan: planning.WorkerPlan
    feature_spec: Mapping[str, FeatureSpec]
    inputs: tuple[str, ...]
    label: str
    per_worker_batch: int
    steps_per_epoch: int
    full_steps_per_epoch: int
    image_size: int = 0  # --model image: ``data.parser`` decodes image/encoded to this size (trainer.image_input)
    augment: str = DEFAULT_AUGMENT  # --augment: how ``data.parser`` changes training images (trainer.image_input)
    statistics: Mapping[str, dict] = dataclasses.field(default_factory=dict)  # feature -> the manifest's stats of the split
    num_classes: int | None = None  # set by trainer.worker (trainer.labels); None: the session decides from the label's dtype
    label_vocabulary: tuple[str, ...] = ()  # a string label's values: id = position (trainer.labels)
    targets: tuple[str, ...] = ()  # features scored beside the label (BERT's masked_lm_ids ...): labels become a dict
    bert: BertTask | None = None  # --model bert: the encoder and its task (trainer.bert_task)

    def __post_init__(self) -> None:
        if not 1 <= self.steps_per_epoch <= self.full_steps_per_epoch:
            raise DataSetError(f"steps per epoch {self.steps_per_epoch} outside [1, {self.full_steps_per_epoch}]")
        if len(self.shard_urls) != len(self.shards):
            raise DataSetError("shard_urls and shards differ in length")

    @property
    def num_workers(self) -> int:
        return len(self.worker_plan.pieces)

    @property
    def mode(self) -> str:
        return self.worker_plan.mode

    @property
    def global_batch(self) -> int:
        return self.per_worker_batch * self.num_workers

    @property
    def num_records(self) -> int:
        return sum(s.num_records for s in self.shards)

    @property
    def dropped_records(self) -> int:
        """Records of the split no worker reads in an epoch (the tail, plus any --steps-per-epoch cap)."""
        return self.num_records - self.steps_per_epoch * self.global_batch

    def pieces(self, worker: int) -> tuple[planning.Piece, ...]:
        return self.worker_plan.pieces[worker]

    def describe(self) -> str:
        counts = sorted({self.worker_plan.records(w) for w in range(self.num_workers)})
        return (
            f"split {self.split!r}: {self.num_records} records in {len(self.shard_urls)} shards, "
            f"{self.num_workers} worker(s) in {self.mode} mode ({'/'.join(map(str, counts))} records each); "
            f"{self.steps_per_epoch} steps per epoch of {self.per_worker_batch} per worker "
            f"(global batch {self.global_batch}); {self.dropped_records} records dropped per epoch"
        )


def plan_input(
    *,
    root: str,
    split: str,
    label: str,
    inputs: Sequence[str],
    num_workers: int,
    per_worker_batch: int,
    steps_cap: int | None = None,
    data_manifest: manifest.Manifest | None = None,
    check_files: bool = True,
    targets: Sequence[str] = (),
) -> InputPlan:
    """Plans the input of every worker, refusing a data set that cannot feed the job.

    ``targets``: features the objective scores beside ``label`` (``InputPlan.targets``)."""
    m = data_manifest if data_manifest is not None else manifest.load(root)
    problems = manifest.problems(m)
    if problems:
        raise DataSetError(
            f"manifest at {root} is unsound ({'; '.join(problems)}): re-create the data set with shardprep.run"
        )
    if split not in m.splits:
        raise DataSetError(f"--split {split!r} is not in the data set at {root} (it has {', '.join(sorted(m.splits))})")
    features = schema_from_json(m.features)
    known = ", ".join(sorted(features))
    if label not in features:
        raise DataSetError(f"--label {label!r} is not a feature of the data set at {root} (features: {known})")
    label_spec = features[label]
    if label_spec.shape not in ((), (1,)):  # [1]: one value per record, as BERT's label_ids (read as a scalar)
        raise DataSetError(
            f"--label {label!r} is {label_spec.dtype} of shape {list(label_spec.shape)}: expected a scalar int64 "
            f"(class id), string (class name, through the manifest's statistics) or float32 (regression target)"
        )
    if label_spec.nullable:
        raise DataSetError(
            f"--label {label!r} is missing in {label_spec.missing:,} record(s) of the data set at {root}: re-shard with "
            f"`shardprep.run ... --required {label} --max-bad-records {label_spec.missing}` so that rows without a "
            "label become dead letters"
        )
    missing = [f for f in (*inputs, *targets) if f not in features]
    if missing:
        raise DataSetError(f"feature(s) {', '.join(map(repr, missing))} not in the data set at {root} (features: {known})")
    if not inputs:
        raise DataSetError("the model takes no input features: name some with --features")
    shards = m.splits[split].shards
    shards = tuple(shards[i] for i in planning.reading_order([s.path for s in shards], m.seed))  # generations mixed
    records = tuple(s.num_records for s in shards)
    try:
        worker_plan = planning.plan_workers(records, num_workers)
        full_steps = worker_plan.steps_per_epoch(per_worker_batch)
    except planning.PlanError as e:
        raise DataSetError(str(e)) from None
    if full_steps == 0:
        fewest = min(worker_plan.records(w) for w in range(num_workers))
        raise DataSetError(
            f"split {split!r} has {sum(records)} records: the worker with the fewest gets {fewest}, fewer "
            f"than one per-worker batch of {per_worker_batch} (global batch {per_worker_batch * num_workers} "
            f"over {num_workers} workers), so no worker could take a full step; use a smaller batch, "
            f"fewer workers, or more data"
        )
    if check_files:
        check_shards(root, shards, split=split)
    return InputPlan(
        root=root,
        split=split,
        compression=m.compression,
        shards=tuple(shards),
        shard_urls=tuple(naming.join(root, s.path) for s in shards),
        worker_plan=worker_plan,
        feature_spec={name: features[name] for name in (*inputs, *targets, label)},
        inputs=tuple(inputs),
        targets=tuple(targets),
        label=label,
        per_worker_batch=per_worker_batch,
        steps_per_epoch=min(full_steps, steps_cap) if steps_cap else full_steps,
        full_steps_per_epoch=full_steps,
        statistics=m.statistics.get(split, {}),
    )


def replan(plan: InputPlan, num_workers: int) -> InputPlan:
    """``plan`` read by ``num_workers`` workers: the same global batch and steps per epoch (an elastic resume's
    other side, ``trainer.elastic``); refused when the global batch does not divide or a worker falls short."""
    if plan.global_batch % num_workers:
        raise DataSetError(f"global batch {plan.global_batch} does not divide among {num_workers} workers: an elastic "
                           f"resume keeps the global batch; use a worker count that divides it")
    try:
        worker_plan = planning.plan_workers([s.num_records for s in plan.shards], num_workers)
        full = worker_plan.steps_per_epoch(plan.global_batch // num_workers)
    except planning.PlanError as e:
        raise DataSetError(str(e)) from None
    if full < plan.steps_per_epoch:
        raise DataSetError(
            f"with {num_workers} workers an epoch of split {plan.split!r} has {full} full steps of global batch "
            f"{plan.global_batch}, fewer than the {plan.steps_per_epoch} the checkpoints were saved with: resume with "
            "another worker count"
        )
    return dataclasses.replace(plan, worker_plan=worker_plan, per_worker_batch=plan.global_batch // num_workers,
                               full_steps_per_epoch=full)


def check_shards(root: str, shards: Sequence[manifest.ShardInfo], *, split: str = "") -> None:
    """Refuses a missing shard or one whose size differs from the manifest; locally also one that is
    not a regular file inside ``root`` (``shardprep.members``: a FIFO would block TensorFlow's read,
    a link could leave the data set), on object stores an entry that is not a file (one listing per
    folder). ``split``: the shards' split, for the manifest field named in a refusal."""
    if fs.is_local(root):
        for i, shard in enumerate(shards):
            try:
                size = members.resolve_member(root, shard.path, field=f"splits.{split or '*'}.shards[{i}].path",
                                              cap=sys.maxsize).size
            except FileNotFoundError:
                size = None
            _check_size(root, shard, size)
        return
    by_folder: dict[str, list[manifest.ShardInfo]] = collections.defaultdict(list)
    for shard in shards:
        by_folder[posixpath.dirname(shard.path)].append(shard)
    for folder, in_folder in by_folder.items():
        filesystem, path = fs.filesystem(naming.join(root, folder))
        try:
            listing = filesystem.ls(path, detail=True)
        except FileNotFoundError:
            listing = []
        sizes = {posixpath.basename(str(e["name"]).rstrip("/")): e.get("size") for e in listing
                 if e.get("type", "file") == "file"}
        for shard in in_folder:
            size = sizes.get(posixpath.basename(shard.path))
            _check_size(root, shard, None if size is None else int(size))


def _check_size(root: str, shard: manifest.ShardInfo, size: int | None) -> None:
    """Refuses a shard that is missing (``size`` None) or not the manifest's size."""
    if size is None:
        raise DataSetError(
            f"shard {naming.join(root, shard.path)} listed in the manifest is missing: the data set "
            f"is incomplete; run `python -m shardprep.verify {root}` or re-create it"
        )
    if size != shard.num_bytes:
        raise DataSetError(
            f"shard {naming.join(root, shard.path)} is {size} bytes, the manifest says "
            f"{shard.num_bytes}: the file was changed or copied incompletely; run "
            f"`python -m shardprep.verify {root}`"
        )


def verify_records(plan: InputPlan, worker: int) -> int:
    """``--verify-records``: reads every record of ``worker``'s shards with its CRCs before the first
    step; a broken one is a DataSetError naming the shard and the offset. Returns the records read."""
    from shardprep import framing, shard_reader

    count = 0
    for index in sorted({p.shard for p in plan.pieces(worker)}):
        shard, url = plan.shards[index], plan.shard_urls[index]
        where = " of the decompressed stream" if plan.compression != "none" else ""
        try:
            with shard_reader.open_shard(plan.root, shard.path, limit=shard.num_bytes,
                                         field=f"splits.{plan.split}.shards[{index}].path") as stream:
                for _ in shard_reader.records(stream, compression=plan.compression):
                    count += 1
        except framing.CorruptRecordError as e:
            raise DataSetError(
                f"--verify-records: shard {url} is damaged at byte {e.offset}{where} (record {e.index}, {e.reason}): "
                f"run `python -m shardprep.verify {plan.root}` or re-create the data set"
            ) from None
        except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
            raise DataSetError(f"--verify-records: shard {url} cannot be read ({e})") from None
    return count

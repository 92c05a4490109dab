"""The trainer's settings: one frozen dataclass that refuses bad values before any worker starts."""
from __future__ import annotations

import dataclasses

from trainer.bert_task import BERT_SIZES
from trainer.refusals import TrainerError

__all__ = ["AUGMENTS", "AUTO", "COMMUNICATIONS", "DEFAULT_AUGMENT", "EVAL_RECORDS", "EXPORTS", "LOOPS", "PRECISIONS", "ConfigError", "TrainConfig", "global_batch_size"]

AUTO = "auto"  # --model left out: chosen from the data set's features (trainer.defaults)

LOOPS = ("custom", "fit")
COMMUNICATIONS = ("auto", "nccl", "ring")
PRECISIONS = ("off", "auto", "float16", "bfloat16")
EXPORTS = ("keras", "savedmodel", "none")
AUGMENTS = ("none", "crop", "crop,flip")  # --augment: training images' random changes (trainer.image_input)
DEFAULT_AUGMENT = "crop"  # a shift keeps any class; a mirror does not (digits, text, signs, logos)
EVAL_RECORDS = 10_000  # --eval-records default: records of --eval-split scored at most (None: every one)


class ConfigError(TrainerError):
    """A setting that cannot work, named with what to use instead."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything ``trainer.train`` needs; flags map one to one (``--per-replica-batch`` ...).

    ``model`` ``AUTO``, no batch and ``epochs`` None: chosen from the data set by ``trainer.worker``
    (``trainer.defaults``) before anything runs.
    """

    data: str
    model: str
    label: str
    model_dir: str
    epochs: int | None
    data_version: int | None = None  # --data-version N: that kept manifest version (default: the current one)
    per_replica_batch: int | None = None
    global_batch: int | None = None
    split: str = "train"
    features: tuple[str, ...] = ()
    exclude_features: tuple[str, ...] = ()  # --exclude-features: left out of the default features
    skip_missing_label: bool = False  # records without the label are skipped (trainer.data), not refused
    num_classes: int | None = None  # None: from the label (trainer.labels)
    loop: str = "custom"
    communication: str = "auto"
    learning_rate: float = 1e-3
    scale_lr: bool = False
    mixed_precision: str = "off"
    steps_per_epoch: int | None = None
    checkpoint_every: int = 0
    shuffle_buffer: int = 1024  # per-worker records, reshuffled every epoch (trainer.data)
    seed: int = 0
    stage_dir: str | None = None
    log_every: int = 50
    export: str = "keras"
    eval_split: str | None = None
    eval_records: int | None = EVAL_RECORDS  # --eval-records N (None: --eval-records all, every record)
    record_ids: bool = False  # --debug-record-ids (trainer.idlog)
    verify_records: bool = False  # --verify-records (trainer.preflight.verify_records)
    image_size: int = 64  # --model image: decoded, resized and cropped to this square size
    augment: str = DEFAULT_AUGMENT  # --model image: random changes to training images (trainer.image_input)
    bert_size: str | None = None  # --model bert: tiny, mini, small, base (None: the --init-from run's, else mini)
    init_from: str | None = None  # --model bert on classification shards: a pre-training run's --model-dir

    def __post_init__(self) -> None:
        if self.per_replica_batch is not None and self.global_batch is not None:
            raise ConfigError("give one of --per-replica-batch B or --global-batch G (or neither: chosen from the data)")
        for name in ("per_replica_batch", "global_batch", "steps_per_epoch"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"--{name.replace('_', '-')} {value}: expected at least 1")
        if self.epochs is not None and self.epochs < 1:
            raise ConfigError(f"--epochs {self.epochs}: expected at least 1")
        if self.image_size < 8:
            raise ConfigError(f"--image-size {self.image_size}: expected at least 8 pixels")
        for name in ("checkpoint_every", "shuffle_buffer", "log_every"):
            if getattr(self, name) < 0:
                raise ConfigError(f"--{name.replace('_', '-')} {getattr(self, name)}: expected 0 or more")
        if self.num_classes is not None and self.num_classes < 2:
            raise ConfigError(f"--num-classes {self.num_classes}: a classifier needs at least 2 classes")
        if not self.learning_rate > 0:
            raise ConfigError(f"--learning-rate {self.learning_rate}: expected a positive number")
        for name, allowed in (
            ("loop", LOOPS),
            ("communication", COMMUNICATIONS),
            ("mixed_precision", PRECISIONS),
            ("export", EXPORTS),
            ("augment", AUGMENTS),
        ):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"--{name.replace('_', '-')} {getattr(self, name)!r}: expected one of {', '.join(allowed)}")
        if not self.label and self.model != "bert":
            raise ConfigError("--label is required: the feature to predict (only --model bert takes it from the data set)")
        if self.model != "bert" and (self.bert_size or self.init_from):
            raise ConfigError("--bert-size and --init-from go with --model bert")
        if self.model == "bert" and (self.features or self.exclude_features):
            raise ConfigError("--model bert reads BERT's own features: leave --features and --exclude-features out")
        if self.bert_size is not None and self.bert_size not in BERT_SIZES:
            raise ConfigError(f"--bert-size {self.bert_size!r}: expected one of {', '.join(BERT_SIZES)}")
        if self.features and self.exclude_features:
            raise ConfigError("give --features or --exclude-features, not both: --exclude-features trims the default features")
        if self.label in self.features:
            raise ConfigError(f"--features names the label {self.label!r}: a model cannot take its own label as input")
        if not self.data or not self.model_dir:
            raise ConfigError("--data and --model-dir must not be empty")
        if self.eval_records is not None and self.eval_records < 1:
            raise ConfigError(f"--eval-records {self.eval_records}: expected at least 1, or all")
        if self.eval_split is not None and not self.eval_split:
            raise ConfigError("--eval-split must not be empty: name a split of the data set, or leave the flag out")
        if self.record_ids and (self.loop != "custom" or "://" in self.model_dir):
            raise ConfigError("--debug-record-ids runs only with --loop custom, manifest input and a local --model-dir path")


def global_batch_size(config: TrainConfig, *, num_replicas: int) -> int:
    """The global batch, refusing one that the replicas cannot share equally."""
    assert config.per_replica_batch is not None or config.global_batch is not None, "batch not chosen (trainer.worker)"
    if config.per_replica_batch is not None:
        return config.per_replica_batch * num_replicas
    assert config.global_batch is not None
    if config.global_batch % num_replicas:
        lower = config.global_batch // num_replicas * num_replicas
        options = " or ".join(str(g) for g in (lower, lower + num_replicas) if g > 0)
        raise ConfigError(
            f"--global-batch {config.global_batch} does not divide among {num_replicas} replicas: every "
            f"replica needs the same batch; use --global-batch {options}, or --per-replica-batch"
        )
    return config.global_batch

"""``--model bert``: what the data set's manifest says the BERT job is, decided before any collective.

TF-free. The manifest's ``"text"`` entry (``shardprep.run --task``) names the task: on
``bert-pretraining`` shards the model reads ``input_ids``, ``input_mask``, ``segment_ids`` and
``masked_lm_positions`` and is scored on ``masked_lm_ids`` (weighted by ``masked_lm_weights``) and
``next_sentence_labels``; on ``text-classification`` shards it reads the first three and predicts
``label_ids`` (classes: the manifest's ``text.labels``). The vocabulary size and the sequence
length come from the manifest. A pre-training run writes ``bert.json`` into its model folder (size,
vocabulary size and digest, sequence length), which ``--init-from`` reads to rebuild the same encoder
and to refuse classification shards made with another vocabulary.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath
from typing import Any, NamedTuple

from shardprep import fs, members, naming
from trainer.refusals import TrainerError

__all__ = [
    "BERT_CONFIG", "BERT_SIZES", "CLASSIFICATION", "DEFAULT_SIZE", "PRETRAINING", "BertError", "BertSize", "BertTask",
    "bert_task", "read_bert_config", "vocab_digest", "write_bert_config",
]

PRETRAINING, CLASSIFICATION = "bert-pretraining", "text-classification"  # shardprep.text.spec's task names
BERT_CONFIG = "bert.json"  # in a pre-training run's --model-dir: what --init-from rebuilds


class BertSize(NamedTuple):
    layers: int
    hidden: int
    heads: int

    @property
    def intermediate(self) -> int:
        return 4 * self.hidden  # BERT's feed-forward width


# Google's BERT miniatures (google-research/bert, "Well-Read Students Learn Better") and BERT-Base.
BERT_SIZES = {"tiny": BertSize(2, 128, 2), "mini": BertSize(4, 256, 4), "small": BertSize(4, 512, 8),
              "base": BertSize(12, 768, 12)}
DEFAULT_SIZE = "mini"
VOCAB_CAP = 64 << 20  # a vocabulary's most bytes where the manifest records none (BERT's own: 0.2 MiB)
PRETRAINING_INPUTS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")
PRETRAINING_TARGETS = ("masked_lm_ids", "masked_lm_weights")  # scored with the label next_sentence_labels
PRETRAINING_LABEL = "next_sentence_labels"
CLASSIFIER_INPUTS = ("input_ids", "input_mask", "segment_ids")
CLASSIFIER_LABEL = "label_ids"


class BertError(TrainerError):
    """A BERT job that cannot work on this data set (or from this --init-from run)."""


@dataclasses.dataclass(frozen=True)
class BertTask:
    """The encoder to build and what it is trained for."""

    task: str  # PRETRAINING or CLASSIFICATION
    size: str
    vocab_size: int
    max_seq_length: int  # the encoder's positions (an --init-from encoder's, which may exceed the data's)
    vocab_sha256: str
    labels: tuple[str, ...] = ()  # classification: label_ids i is labels[i]
    init_from: str | None = None  # a pre-training run's --model-dir

    @property
    def dims(self) -> BertSize:
        return BERT_SIZES[self.size]

    @property
    def pretraining(self) -> bool:
        return self.task == PRETRAINING

    @property
    def inputs(self) -> tuple[str, ...]:
        return PRETRAINING_INPUTS if self.pretraining else CLASSIFIER_INPUTS

    @property
    def targets(self) -> tuple[str, ...]:
        """Features scored beside the label (``InputPlan.targets``)."""
        return PRETRAINING_TARGETS if self.pretraining else ()

    @property
    def label(self) -> str:
        return PRETRAINING_LABEL if self.pretraining else CLASSIFIER_LABEL

    def describe(self) -> str:
        d = self.dims
        what = "masked-LM + next-sentence pre-training" if self.pretraining else f"classifier over {len(self.labels)} labels"
        start = f", encoder from {self.init_from}" if self.init_from else ""
        return (f"BERT-{self.size} ({d.layers} layers, hidden {d.hidden}, {d.heads} heads), vocabulary {self.vocab_size}, "
                f"{self.max_seq_length} positions: {what}{start}")

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "vocab_size": self.vocab_size, "max_seq_length": self.max_seq_length,
                "vocab_sha256": self.vocab_sha256}


def vocab_digest(data: str, text: dict[str, Any]) -> str:
    """sha256 of the data set's vocabulary file, the manifest's ``text.vocab`` (``DIR/<run>/vocab.txt``,
    or ``DIR/vocab.txt`` in older data sets), read through ``shardprep.members``: a regular file inside
    the data set, at most its recorded ``vocab_num_bytes`` (older manifests: ``VOCAB_CAP``)."""
    return hashlib.sha256(members.read_member(data, text["vocab"], field="text.vocab", size=text.get("vocab_num_bytes"),
                                              cap=VOCAB_CAP)).hexdigest()


def bert_task(text: dict[str, Any] | None, *, data: str, size: str | None, init_from: str | None,
              label: str) -> BertTask:
    """The job from the manifest's ``text`` entry and the flags; refuses what cannot work, naming the fix."""
    if not text or text.get("task") not in (PRETRAINING, CLASSIFICATION):
        raise BertError(f"--model bert trains on BERT's features: the data set at {data} was not made by "
                        f"`shardprep.run --task {PRETRAINING}` or `--task {CLASSIFICATION}` (its manifest has no text task)")
    task = text["task"]
    expected = PRETRAINING_LABEL if task == PRETRAINING else CLASSIFIER_LABEL
    if label and label != expected:
        raise BertError(f"--label {label!r}: --model bert on {task} shards predicts {expected!r}; leave --label out")
    digest = vocab_digest(data, text)
    seq = int(text["max_seq_length"])
    if init_from is not None:
        if task != CLASSIFICATION:
            raise BertError("--init-from starts a classifier from a pre-training run: it takes text-classification shards")
        start = read_bert_config(init_from)
        if size is not None and size != start["size"]:
            raise BertError(f"--bert-size {size}: the run in {init_from} pre-trained BERT-{start['size']}; "
                            "leave --bert-size out")
        if start["vocab_sha256"] != digest:
            raise BertError(f"the vocabulary of {data} differs from the one {init_from} was pre-trained on: make the "
                            f"classification shards with `--vocab` given that run's data set's vocab.txt")
        if int(start["max_seq_length"]) < seq:
            raise BertError(f"the data set's sequences have {seq} positions, the encoder of {init_from} "
                            f"{start['max_seq_length']}: re-shard with `--max-seq-length {start['max_seq_length']}`")
        size, seq = start["size"], int(start["max_seq_length"])
    return BertTask(task, size or DEFAULT_SIZE, int(text["vocab_size"]), seq, digest,
                    tuple(text.get("labels", ())), init_from)


def _config_url(model_dir: str) -> str:
    return naming.join(model_dir, BERT_CONFIG)


def write_bert_config(model_dir: str, task: BertTask) -> str:
    """Writes ``model_dir/bert.json`` (the chief of a pre-training run); returns its URL."""
    url = _config_url(model_dir)
    with fs.write_atomic(url) as f:
        f.write(json.dumps(task.to_json(), indent=1, sort_keys=True).encode() + b"\n")
    return url


def read_bert_config(model_dir: str) -> dict[str, Any]:
    """The ``bert.json`` of a pre-training run's model folder, checked."""
    url = _config_url(model_dir)
    try:
        with fs.open_file(url) as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise BertError(f"--init-from {model_dir}: no {BERT_CONFIG} there; name the --model-dir of a "
                        "`--model bert` pre-training run") from None
    except (OSError, ValueError) as e:
        raise BertError(f"--init-from {model_dir}: {posixpath.basename(url)} cannot be read ({e})") from None
    if not isinstance(doc, dict) or doc.get("size") not in BERT_SIZES or not {"vocab_size", "max_seq_length",
                                                                               "vocab_sha256"} <= set(doc):
        raise BertError(f"--init-from {model_dir}: {BERT_CONFIG} is not a BERT configuration this trainer wrote")
    return doc

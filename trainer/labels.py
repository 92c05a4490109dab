"""What the label is: class ids, strings mapped to class ids through a vocabulary, or a regression target.

TF-free, decided in pre-flight from the manifest alone so every worker reaches the same verdict.
``--num-classes`` defaults to the label's class names, the string label's vocabulary size, or
``max(label) + 1`` from the manifest's statistics (else 2); with statistics a label outside
``[0, num_classes)`` is refused here, without them the input pipeline refuses the first batch that
holds one (``trainer.data``), naming the flag either way. A string label's vocabulary is the
training split's values sorted (stable ids); values of another split that training never saw are
counted by evaluation, not crashed on (``trainer.scoring``). Another data set's class ids
(``trainer.evaluate``) are mapped to the model's by class NAME (``map_by_name``), never by position.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from shardprep.schema import FeatureSpec
from trainer.refusals import TrainerError

__all__ = ["DEFAULT_NUM_CLASSES", "LabelError", "LabelInfo", "class_names", "map_by_name", "out_of_range_message",
           "resolve_label", "write_vocabulary"]

DEFAULT_NUM_CLASSES = 2  # an int64 label with neither class names nor statistics


class LabelError(TrainerError):
    """A label the job cannot train on as asked; the message names the flag to change."""


class LabelInfo(NamedTuple):
    """``num_classes`` None: regression; ``vocabulary``: a string label's values, id = position."""

    num_classes: int | None
    vocabulary: tuple[str, ...] = ()
    range_checked: bool = False  # statistics proved every training label in [0, num_classes)

    def describe(self, label: str) -> str:
        if self.num_classes is None:
            return f"label {label!r}: regression target (float)"
        if self.vocabulary:
            shown = ", ".join(self.vocabulary[:10]) + (", ..." if len(self.vocabulary) > 10 else "")
            return f"label {label!r}: {self.num_classes} classes from its string values ({shown})"
        return f"label {label!r}: {self.num_classes} classes (class ids)"


def out_of_range_message(label: str, num_classes: int) -> str:
    """The one message for a class id outside ``[0, num_classes)`` (pre-flight and the input pipeline)."""
    return (
        f"--label {label!r} holds a class id outside [0, {num_classes}): --num-classes {num_classes} is too small "
        f"(or the label is not a class id); pass --num-classes with the number of classes"
    )


def resolve_label(label: str, spec: FeatureSpec, statistics: Mapping[str, dict], *,
                  num_classes: int | None) -> LabelInfo:
    """The label's meaning from its spec and the training split's ``statistics``; ``num_classes`` is the flag."""
    stats = statistics.get(label, {})
    if spec.dtype == "float32":
        return LabelInfo(None)
    if spec.dtype == "string":
        return _vocabulary(label, stats, num_classes)
    floor = max(DEFAULT_NUM_CLASSES, len(spec.names))  # the class names in the manifest count even past the flag
    if "max" not in stats:
        return LabelInfo(max(num_classes, len(spec.names)) if num_classes is not None else floor)
    lo, hi = int(stats["min"]), int(stats["max"])
    resolved = max(num_classes, len(spec.names)) if num_classes is not None else max(floor, hi + 1)
    if lo < 0 or hi >= resolved:
        raise LabelError(f"{out_of_range_message(label, resolved)} (the training split's labels run from {lo} to {hi})")
    return LabelInfo(resolved, range_checked=True)


def _vocabulary(label: str, stats: Mapping[str, object], num_classes: int | None) -> LabelInfo:
    top = stats.get("top")
    if not isinstance(top, list):
        raise LabelError(
            f"--label {label!r} is a string: its class ids come from the manifest's vocabulary, which this data "
            "set lacks; re-run your `shardprep.run` command with `--statistics --overwrite` added"
        )
    vocabulary = tuple(sorted(str(value) for value, _ in top))
    distinct = int(stats.get("distinct", len(vocabulary)))  # type: ignore[call-overload]
    if stats.get("distinct_capped") or distinct > len(vocabulary):
        raise LabelError(
            f"--label {label!r} has {distinct} distinct values, more than the {len(vocabulary)} the manifest lists: "
            f"re-run your `shardprep.run` command with `--statistics --stats-top-k {distinct} --overwrite` added (or use a "
            "class-id label)"
        )
    if len(vocabulary) < 2:
        raise LabelError(f"--label {label!r} has {len(vocabulary)} distinct value(s) in training: a classifier needs 2")
    if num_classes is not None and num_classes != len(vocabulary):
        raise LabelError(
            f"--num-classes {num_classes} differs from the {len(vocabulary)} values of the string label {label!r}: "
            "leave --num-classes out"
        )
    return LabelInfo(len(vocabulary), vocabulary, range_checked=True)


def class_names(spec: FeatureSpec, text: Mapping[str, object] | None, label: str) -> tuple[str, ...]:
    """A data set's names of its class ids: the label's schema names (images, TFDS), else a text-classification
    run's ``text.labels`` for BERT's ``label_ids``; empty when the ids have no names."""
    if spec.names:
        return tuple(spec.names)
    labels = (text or {}).get("labels")
    if label == "label_ids" and isinstance(labels, list):
        return tuple(str(x) for x in labels)
    return ()


def map_by_name(model: tuple[str, ...], data: tuple[str, ...], *, where: str) -> tuple[int, ...] | None:
    """Another data set's class ids as the model's: ``result[i]`` is the model's id of the data set's class ``i``
    (None: the same ids, nothing to map).

    The data set's names must all be the model's (a subset: a test set of some classes is scored by
    name); a name the model lacks, or names on one side only, is refused (``LabelError``): ids are never
    matched by position across two data sets. ``where``: the data set, for the message."""
    if not model and not data:
        return None  # plain class ids on both sides: the user's own ids, no names to check
    if not data:
        raise LabelError(f"{where}: its label has no class names, the model's are {_shown(model)}: cannot tell its "
                         "ids mean the same classes; prepare it with shardprep.run --labels-from <the training data set>")
    if not model:
        raise LabelError(f"{where}: its label has class names ({_shown(data)}), the model was trained on ids without "
                         "names: cannot tell its ids mean the same classes")
    unknown = [n for n in data if n not in model]
    if unknown:
        raise LabelError(f"{where}: its class names differ from the model's: {_shown(tuple(unknown))} not among the "
                         f"model's {_shown(model)}")
    if model[:len(data)] == data:
        return None
    return tuple(model.index(n) for n in data)


def _shown(names: tuple[str, ...]) -> str:
    return ", ".join(map(repr, names[:10])) + (f", ... ({len(names)} in all)" if len(names) > 10 else "")


def write_vocabulary(export_url: str, label: str, vocabulary: tuple[str, ...]) -> str:
    """Writes ``labels.json`` beside the exported model: output index ``i`` is ``vocabulary[i]``."""
    import json
    import posixpath

    from shardprep import fs

    url = posixpath.join(posixpath.dirname(export_url.rstrip("/")), "labels.json")
    with fs.write_atomic(url) as f:
        f.write(json.dumps({"label": label, "vocabulary": list(vocabulary)}, indent=1).encode())
    return url

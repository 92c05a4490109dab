"""``MODEL_DIR/export/model.json``: what a trained model reads and what its output ids mean.

Written by the chief beside the exported model at the end of training; read by
``python -m trainer.evaluate`` to score another data set with the model's own label mapping
(``trainer.labels.map_by_name``), never by position. TF-free.
"""
from __future__ import annotations

import dataclasses
import json
import posixpath
from typing import TYPE_CHECKING, Any

from shardprep import fs, naming
from trainer.refusals import TrainerError

if TYPE_CHECKING:
    from trainer.preflight import InputPlan
    from trainer.settings import TrainConfig

__all__ = ["CARD", "CardError", "ModelCard", "card_of", "read_card", "write_card"]

CARD = "export/model.json"
_VERSION = 1


class CardError(TrainerError):
    """A model folder without a readable card (exit 2)."""


@dataclasses.dataclass(frozen=True)
class ModelCard:
    """A trained model's contract.

    ``kind``: ``class_ids`` (an int64 label), ``class_names`` (a string label, mapped through
    ``classes``), ``regression`` or ``targets`` (BERT pre-training). ``classes``: the class names,
    output id ``i`` is ``classes[i]`` (empty: the label's ids had no names). ``export``: the model's
    path relative to the model folder."""

    label: str
    kind: str
    num_classes: int | None
    classes: tuple[str, ...]
    inputs: tuple[str, ...]
    model: str
    image_size: int
    data: str
    export: str
    train_mean: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"version": _VERSION, **dataclasses.asdict(self), "classes": list(self.classes), "inputs": list(self.inputs)}


def card_of(config: TrainConfig, plan: InputPlan, exported: str) -> ModelCard:
    """The card of a finished job: its settings, its input plan and the exported model's URL."""
    spec = plan.feature_spec[config.label]
    if plan.targets:
        kind = "targets"
    elif spec.dtype == "float32":
        kind = "regression"
    else:
        kind = "class_names" if plan.label_vocabulary else "class_ids"
    classes = plan.label_vocabulary or spec.names or (plan.bert.labels if plan.bert is not None else ())
    relative = posixpath.relpath(exported, config.model_dir.rstrip("/")) if fs.is_local(exported) else \
        exported[len(config.model_dir.rstrip("/")) + 1:]
    mean = plan.statistics.get(config.label, {}).get("mean")
    return ModelCard(config.label, kind, plan.num_classes, tuple(classes), tuple(plan.inputs), config.model,
                     plan.image_size, config.data, relative, None if mean is None else float(mean))


def write_card(model_dir: str, card: ModelCard) -> str:
    url = naming.join(model_dir, CARD)
    with fs.write_atomic(url) as f:
        f.write((json.dumps(card.to_json(), indent=1, sort_keys=True) + "\n").encode())
    return url


def read_card(model_dir: str) -> ModelCard:
    """The card of the model trained in ``model_dir``; ``CardError`` naming what to do when there is none."""
    url = naming.join(model_dir, CARD)
    try:
        doc = json.loads(fs.read_bytes(url))
    except FileNotFoundError:
        raise CardError(f"--model-dir {model_dir}: no {CARD} (a finished trainer.train run writes it beside the "
                        "exported model; a run from before it was added: train again)") from None
    except ValueError as e:
        raise CardError(f"{url} is not valid JSON ({e})") from None
    if doc.pop("version", None) != _VERSION:
        raise CardError(f"{url}: unknown version (expected {_VERSION})")
    try:
        return ModelCard(**{**doc, "classes": tuple(doc["classes"]), "inputs": tuple(doc["inputs"])})
    except (TypeError, KeyError) as e:
        raise CardError(f"{url} is not a model card ({e})") from None

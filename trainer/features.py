"""Which manifest features a model reads, and which kind of model ``--model`` names.

TF-free, so pre-flight needs no TensorFlow. ``model_kind`` is the one place that reads ``--model``:
``trainer.models`` builds by the kind it returns.
"""
from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from shardprep.schema import FeatureSpec
from trainer.defaults import identifier_like
from trainer.refusals import TrainerError

__all__ = ["BUILTIN_MODELS", "MISSING_INT64", "USER_MODEL", "ModelError", "input_features", "model_kind", "user_model_fn"]

log = logging.getLogger(__name__)
Features = Mapping[str, FeatureSpec]
NUMERIC = ("int64", "float32")
BUILTIN_MODELS = ("mlp", "text", "image", "bert")
USER_MODEL = "user"  # the kind of ``--model module:function``
MISSING_INT64 = -(2**63)  # a nullable int64 left out of a record reads as this (trainer.data); mlp imputes it


class ModelError(TrainerError):
    """A model that cannot be built from this data set."""


def model_kind(name: str) -> str:
    """``mlp``, ``text``, ``image``, ``bert`` or ``USER_MODEL``; refuses any other ``--model``."""
    if name in BUILTIN_MODELS:
        return name
    if ":" in name:
        return USER_MODEL
    raise ModelError(f"--model {name!r} is unknown: use mlp, text, image, bert, or module:function for your own model")


def _is_numeric(spec: FeatureSpec) -> bool:
    return spec.dtype in NUMERIC and -1 not in spec.shape


def user_model_fn(spec: str) -> Callable[..., Any]:
    """The function named by ``--model module:function``."""
    module_name, _, fn_name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), fn_name)
    except (ImportError, AttributeError, ValueError) as e:
        raise ModelError(f"--model {spec}: cannot load {fn_name!r} from module {module_name!r} ({e})") from None
    if not callable(fn):
        raise ModelError(f"--model {spec}: {fn_name!r} is not a function")
    return fn


def _is_categorical(spec: FeatureSpec) -> bool:
    return spec.dtype == "string" and spec.shape == ()


def input_features(name: str, features: Features, *, label: str, requested: Sequence[str] = (),
                   statistics: Mapping[str, dict] | None = None, excluded: Sequence[str] = ()) -> tuple[str, ...]:
    """The features the model reads: ``requested``, or all that model ``name`` can use less ``excluded``.

    ``mlp`` takes fixed-shape numbers, and scalar strings as categories: by default those the
    training split's ``statistics`` count (a named one without statistics is hashed), less the
    identifier-like ones (``trainer.defaults.identifier_like``: one log line names them).
    """
    for flag, names in (("--features", requested), ("--exclude-features", excluded)):
        for f in names:
            if f not in features:
                raise ModelError(f"{flag} names {f!r}, not a feature of the data set ({', '.join(sorted(features))})")
    candidates = [f for f in (requested or sorted(features)) if f != label and f not in excluded]
    kind = model_kind(name)
    if kind == "mlp":
        bad = [f for f in requested if not (_is_numeric(features[f]) or _is_categorical(features[f]))]
        if bad:
            raise ModelError(f"--model mlp takes fixed-shape numeric and scalar string features; {', '.join(bad)} are not")
        counted = statistics or {}
        chosen = [f for f in candidates if _is_numeric(features[f]) or (
            _is_categorical(features[f]) and (requested or "distinct" in counted.get(f, {})))]
        if not requested:
            ids = identifier_like({f: features[f] for f in chosen}, counted)
            if ids:
                shown = ", ".join(f"{f} ({counted[f]['distinct']} values in {counted[f]['count']} records)" for f in ids)
                log.info("left out of the default features as identifier-like (a value per record, which a model "
                         "memorises): %s; name them in --features to use them", shown)
                chosen = [f for f in chosen if f not in ids]
    elif kind == "text":
        chosen = [f for f in candidates if features[f].dtype == "string"][: None if requested else 1]
        bad = [f for f in requested if features[f].dtype != "string" or features[f].shape != ()]
        if bad:
            raise ModelError(f"--model text takes scalar string features; {', '.join(bad)} are not")
    elif kind == "image":
        image = features.get("image/encoded")
        if image is None or image.dtype != "string" or image.shape != () or set(requested) - {"image/encoded"}:
            raise ModelError("--model image reads the scalar string feature image/encoded (shardprep.run --format images)")
        chosen = ["image/encoded"]
    else:
        user_model_fn(name)
        chosen = candidates
    if not chosen:
        raise ModelError(f"--model {name}: the data set has no feature it can use (features: {', '.join(sorted(features))})")
    return tuple(chosen)

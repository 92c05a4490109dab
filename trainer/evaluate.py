"""``python -m trainer.evaluate --model-dir RUN --data OTHER [--split S]``: score another data set with a trained model.

Reads the model's card (``RUN/export/model.json``, ``trainer.model_card``) and its exported Keras
model, and scores every record of the split once (``trainer.scoring``, the same as ``--eval-split``).
Class ids are taken by class NAME (``trainer.labels.map_by_name``): a data set whose class names are
the model's, or some of them (a test set of a few classes), is scored with the model's ids; one with a
class the model lacks, or with ids that have no names while the model's have, is refused in one line
(exit 2); never matched by position. A string label maps through the model's own vocabulary. Runs in
one process, or on the workers of ``trainer.launch`` (each scores its share; one all-reduce adds them).
Prints the scores as one JSON line last.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from shardprep import cli, manifest, naming
from shardprep.schema import schema_from_json
from trainer import labels, preflight
from trainer.cluster import parse_tf_config
from trainer.model_card import ModelCard, read_card

__all__ = ["EvalSetup", "main", "plan_scoring"]

PROG = "trainer.evaluate"
log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class EvalSetup:
    """What scoring another data set needs, settled before TensorFlow: the plan and the label mapping."""

    card: ModelCard
    plan: preflight.InputPlan
    label_map: tuple[int, ...] | None  # the data set's class id i is the model's label_map[i]; None: the same ids
    mapping: str  # one line saying how labels are matched


def _split(m: manifest.Manifest, given: str | None, data: str) -> str:
    if given is not None:
        if given not in m.splits:
            raise preflight.DataSetError(f"--split {given!r} is not in the data set at {data} (it has "
                                         f"{', '.join(sorted(m.splits))})")
        return given
    if "test" in m.splits or len(m.splits) == 1:
        return "test" if "test" in m.splits else next(iter(m.splits))
    raise preflight.DataSetError(f"the data set at {data} has splits {', '.join(sorted(m.splits))}: name one with --split")


def plan_scoring(*, model_dir: str, data: str, split: str | None, num_workers: int = 1) -> EvalSetup:
    """The card, the plan of ``data``'s split and its label mapping; refuses (``TrainerError``, exit 2) a data
    set the model cannot score: another label, missing inputs, class names that differ."""
    card = read_card(model_dir)
    if card.kind == "targets":
        raise labels.LabelError(f"--model-dir {model_dir}: a pre-training model (several targets): trainer.evaluate "
                                "scores classifiers and regressions")
    m = manifest.load(data)
    name = _split(m, split, data)
    features = schema_from_json(m.features)
    spec = features.get(card.label)
    if spec is None:
        raise labels.LabelError(f"the data set at {data} has no feature {card.label!r}, the model's label")
    missing = [f for f in card.inputs if f not in features]
    if missing:
        raise preflight.DataSetError(f"the data set at {data} lacks the model's input feature(s) {', '.join(missing)}")
    where = f"the data set at {data}"
    label_map, vocabulary = None, ()
    if card.kind == "regression":
        if spec.dtype != "float32":
            raise labels.LabelError(f"{where}: label {card.label!r} is {spec.dtype}, the model predicts a float32 target")
        mapping = "regression target"
    elif card.kind == "class_names":
        if spec.dtype != "string":
            raise labels.LabelError(f"{where}: label {card.label!r} is {spec.dtype}, the model's is a string (class names)")
        top = m.statistics.get(name, {}).get(card.label, {}).get("top")
        if isinstance(top, list):
            labels.map_by_name(card.classes, tuple(sorted(str(v) for v, _ in top)), where=where)  # refuses another name
        vocabulary = card.classes
        mapping = f"string labels mapped through the model's {len(card.classes)} class names"
    else:
        if spec.dtype != "int64":
            raise labels.LabelError(f"{where}: label {card.label!r} is {spec.dtype}, the model's is a class id (int64)")
        data_names = labels.class_names(spec, m.text, card.label)
        label_map = labels.map_by_name(card.classes, data_names, where=where)
        mapping = ("class ids as given (no class names on either side)" if not card.classes else
                   "class ids matched by name: the same names in the same order" if label_map is None else
                   f"class ids mapped by name to the model's ({', '.join(f'{n}: {i}->{j}' for i, (n, j) in enumerate(zip(data_names, label_map)))})")
    plan = preflight.plan_input(root=data, split=name, label=card.label, inputs=card.inputs, num_workers=num_workers,
                                per_worker_batch=1, data_manifest=m)
    plan = dataclasses.replace(plan, num_classes=card.num_classes, label_vocabulary=vocabulary, image_size=card.image_size)
    return EvalSetup(card, plan, label_map, mapping)


def _main(argv: Sequence[str] | None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0].split(": ", 1)[1])
    p.add_argument("--model-dir", required=True, help="a finished trainer.train run (its export/ holds the model and model.json)")
    p.add_argument("--data", required=True, help="the data set to score (a folder or URL holding manifest.json)")
    p.add_argument("--split", help="split to score (default: test, or the data set's only split)")
    p.add_argument("--batch", type=int, default=256, help="records per batch on each worker (default: %(default)s)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout, force=True)
    for noisy in ("tensorflow", "absl"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.batch < 1:
        raise preflight.DataSetError(f"--batch {args.batch}: expected at least 1")
    cluster = parse_tf_config(os.environ.get("TF_CONFIG"))
    setup = plan_scoring(model_dir=args.model_dir, data=args.data, split=args.split, num_workers=cluster.num_workers)
    log.info("scoring split %r of %s (%d records) with the model of %s; label %r: %s", setup.plan.split, args.data,
             setup.plan.num_records, args.model_dir, setup.card.label, setup.mapping)
    from trainer.train import tf_errors_as_run_errors

    with tf_errors_as_run_errors():
        scores = _score(setup, model_dir=args.model_dir, cluster=cluster, batch=args.batch)
    print(json.dumps({"model_dir": args.model_dir, "data": args.data, **scores}, sort_keys=True), flush=True)
    return 0


def _score(setup: EvalSetup, *, model_dir: str, cluster: Any, batch: int) -> dict[str, Any]:
    import keras

    from trainer import scoring, strategy

    card = setup.card
    if not card.export.endswith(".keras"):
        raise labels.LabelError(f"--model-dir {model_dir}: its model was exported as {card.export}; trainer.evaluate "
                                "reads --export keras models")
    if card.model == "bert":
        import keras_hub  # noqa: F401 - registers the encoder's layers for loading
    strat = strategy.make_strategy(cluster=cluster, communication="auto", gpus=strategy.local_gpus())
    model = keras.models.load_model(naming.join(model_dir, card.export), compile=False)
    return scoring.evaluate(strat, model, setup.plan, worker=cluster.worker_index, batch_size=batch,
                            classification=card.kind != "regression", train_mean=card.train_mean,
                            label_map=setup.label_map)


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())

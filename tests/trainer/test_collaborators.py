"""``trainer.collaborators``: the job's evaluator scores every eval record once; its exporter writes the model
and the card ``trainer.evaluate`` reads. In process, on a one-CPU MirroredStrategy; the same
objects run under MWMS with several workers in test_e2e and test_tabular_training."""
from __future__ import annotations

import dataclasses
import os

import keras
import pytest
import tensorflow as tf

from tests import trainer_fixtures as fx
from trainer import collaborators, model_card, worker
from trainer.cluster import ClusterInfo
from trainer.controller import Evaluator, Exporter
from trainer.models import build_model
from trainer.objective import objective_for
from trainer.settings import TrainConfig


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory):
    root = str(tmp_path_factory.mktemp("collab") / "ds")
    fx.make_dataset(root, rows=200, num_shards=2, eval_fraction=0.2)
    config = TrainConfig(data=root, model="mlp", label="label", model_dir=str(tmp_path_factory.mktemp("run")),
                         epochs=1, per_replica_batch=8, eval_split="eval")
    plan = worker.plan_job(config, cluster=ClusterInfo(), local_replicas=1)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model = build_model("mlp", features={n: plan.train.feature_spec[n] for n in plan.train.inputs}, label="label",
                            num_classes=plan.train.num_classes, statistics=plan.train.statistics)
    return plan, model, strategy


def test_the_evaluator_scores_every_eval_record_once(planned):
    plan, model, strategy = planned
    evaluator = collaborators.SplitEvaluator(
        strategy=strategy, model=model, plan=plan.eval, worker=0, batch_size=16,
        classification=True, objective=objective_for(True),
    )
    assert isinstance(evaluator, Evaluator)
    scores = evaluator.evaluate(0)
    assert scores["eval_examples"] == plan.eval.num_records == 40
    assert 0.0 <= scores["eval_accuracy"] <= 1.0 and scores["eval_loss"] > 0


def test_the_exporter_writes_the_model_and_its_card_on_the_chief(planned):
    plan, model, strategy = planned
    config = plan.config
    exporter = collaborators.ModelExporter(model=model, config=config, plan=plan.train, cluster=ClusterInfo())
    assert isinstance(exporter, Exporter)
    exported = exporter.export(5)
    assert exported == os.path.join(config.model_dir, "export", "model.keras") and os.path.exists(exported)
    card = model_card.read_card(config.model_dir)
    assert card.label == "label" and card.inputs == tuple(plan.train.inputs)
    restored = keras.models.load_model(exported)
    assert restored.count_params() == model.count_params()


def test_export_none_writes_nothing(planned, tmp_path):
    plan, model, strategy = planned
    config = dataclasses.replace(plan.config, model_dir=str(tmp_path / "m"), export="none")
    exporter = collaborators.ModelExporter(model=model, config=config, plan=plan.train, cluster=ClusterInfo())
    assert exporter.export(1) is None and not (tmp_path / "m").exists()


def test_the_evaluator_stops_after_max_batches_and_the_job_wires_eval_records(planned):
    """Issue 58: --eval-records caps --eval-split (each worker its first batches); all scores every record."""
    plan, model, strategy = planned
    evaluator = collaborators.SplitEvaluator(
        strategy=strategy, model=model, plan=plan.eval, worker=0, batch_size=16,
        classification=True, objective=objective_for(True), max_batches=1,
    )
    assert evaluator.evaluate(0)["eval_examples"] == 16
    assert plan.config.eval_records == 10_000  # the default: this 40-record split is scored whole

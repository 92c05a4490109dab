"""In-process checks: one-line CLI refusals before any collective, models, metrics, helpers."""
from __future__ import annotations

import json
import logging
import math
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from shardprep.schema import FeatureSpec
from tests import trainer_fixtures as fx
from trainer import train
from trainer.features import ModelError, input_features
from trainer.idlog import IdLog, log_path, read_log
from trainer.metrics import Meter
from trainer.models import build_model
from trainer.resume import plan_changes
from trainer.strategy import heartbeat, resolve_communication


@pytest.fixture(scope="module")
def small_ds(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = str(tmp_path_factory.mktemp("small") / "ds")
    fx.make_dataset(root, rows=300, num_shards=3)
    return root


def _cli(monkeypatch, capsys, args: list[str], tf_config: dict | str | None = None) -> tuple[int, str]:
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config if isinstance(tf_config, str) else json.dumps(tf_config))
    code = train.main(args)
    err = capsys.readouterr().err
    return code, err


def _args(data: str, tmp_path, *extra: str) -> list[str]:
    return ["--data", data, "--model", "mlp", "--label", "label", "--epochs", "1", "--model-dir", str(tmp_path / "m"), *extra]


THREE = {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]}, "task": {"type": "worker", "index": 2}}


@pytest.mark.parametrize(
    "extra, tf_config, message",
    [
        (["--per-replica-batch", "8"], "{oops", "TF_CONFIG is not valid JSON"),
        (["--global-batch", "100"], THREE, "--global-batch 100 does not divide among 3 replicas; every replica needs the same batch; use --global-batch 99 or 102"),
        (["--per-replica-batch", "100"], THREE, "the worker with the fewest gets 90, fewer than one per-worker batch of 100 (global batch 300 over 3 workers)"),
        (["--per-replica-batch", "8", "--label", "nope"], None, "--label 'nope' is not a feature of the data set"),
        (["--per-replica-batch", "8", "--features", "x0,zz"], None, "--features names 'zz', not a feature"),
        (["--per-replica-batch", "8", "--model", "text", "--features", "x0"], None, "--model text takes scalar string features; x0 are not"),
        (["--per-replica-batch", "8", "--model", "resnet"], None, "--model 'resnet' is unknown"),
        (["--per-replica-batch", "8", "--model", "no_such_mod:fn"], None, "cannot load 'fn' from module 'no_such_mod'"),
        (["--per-replica-batch", "8", "--split", "test"], None, "--split 'test' is not in the data set"),
        (["--per-replica-batch", "8", "--epochs", "0"], None, "--epochs 0: expected at least 1"),
        (["--per-replica-batch", "8", "--eval-split", "test"], None, "--eval-split 'test' is not in the data set"),
        (["--per-replica-batch", "8", "--debug-record-ids", "--loop", "fit"], None, "--debug-record-ids runs only with --loop custom"),
    ],
)
def test_refusals_are_one_line_before_any_collective(monkeypatch, capsys, tmp_path, small_ds, extra, tf_config, message) -> None:
    code, err = _cli(monkeypatch, capsys, _args(small_ds, tmp_path, *extra), tf_config)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("trainer.train: error: ") and message.replace(";", ":") in err.replace(";", ":")


def test_eval_split_smaller_than_the_cluster_is_one_line(monkeypatch, capsys, tmp_path) -> None:
    root = str(tmp_path / "tiny")
    fx.make_dataset(root, rows=40, num_shards=3, eval_fraction=0.05)  # 2 eval records
    code, err = _cli(monkeypatch, capsys, _args(root, tmp_path, "--per-replica-batch", "1", "--eval-split", "eval"), THREE)
    assert code == 2 and err.count("\n") == 1
    assert "--eval-split 'eval' has 2 records, fewer than the 3 workers" in err


def test_no_manifest_is_one_line(monkeypatch, capsys, tmp_path) -> None:
    code, err = _cli(monkeypatch, capsys, _args(str(tmp_path / "empty"), tmp_path, "--per-replica-batch", "8"))
    assert code == 2 and err.count("\n") == 1 and "no manifest at" in err and "shardprep.run" in err


@pytest.mark.parametrize(
    "model, requested, expected",
    [
        ("mlp", (), ("x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7")),
        ("mlp", ("x3", "x1"), ("x3", "x1")),
        ("text", (), ("text",)),
        ("tests.trainer_fixtures:small_model", ("x0",), ("x0",)),
    ],
)
def test_input_features(model: str, requested: tuple[str, ...], expected: tuple[str, ...]) -> None:
    assert input_features(model, fx.FEATURES, label="label", requested=requested) == expected


def test_input_features_refusals() -> None:
    with pytest.raises(ModelError, match="--model text takes scalar string features; x0 are not"):
        input_features("text", fx.FEATURES, label="label", requested=("x0",))
    with pytest.raises(ModelError, match="no feature it can use"):
        input_features("text", {"label": fx.FEATURES["label"], "x0": fx.FEATURES["x0"]}, label="label")


def test_text_model_hashes_ngrams_and_saves(tmp_path) -> None:
    model = build_model("text", features={"text": fx.FEATURES["text"]}, label="label", num_classes=3)
    out = model({"text": tf.constant(["dark rainy day", "", "Bright sunny"])})
    assert out.shape == (3, 3) and out.dtype == tf.float32
    path = str(tmp_path / "t.keras")
    model.save(path)
    again = keras.saving.load_model(path)
    np.testing.assert_allclose(again({"text": tf.constant(["dark rainy day"])}), out[:1], rtol=1e-6)


def test_mlp_regression_takes_int_and_vector_features() -> None:
    features = {"a": FeatureSpec("int64"), "v": FeatureSpec("float32", (3,))}
    model = build_model("mlp", features=features, label="y", num_classes=None)
    out = model({"a": tf.constant([1, 2], tf.int64), "v": tf.ones([2, 3])})
    assert out.shape == (2, 1)


def test_meter_counts_what_reached_the_step() -> None:
    meter = Meter()
    meter.record(wait_s=5.0, step_s=9.0, loss=2.0, replica_examples=[4, 4], correct=1)  # warm-up: untimed
    meter.record(wait_s=0.1, step_s=0.4, loss=1.5, replica_examples=[4, 0], correct=3)
    meter.record(wait_s=0.1, step_s=0.6, loss=1.0, replica_examples=[0, 0], correct=0)
    s = meter.summary(allreduce_s=0.1)
    assert (s["steps"], s["examples"], s["empty_replica_steps"], s["replica_steps"]) == (3, 12, 3, 6)
    assert s["input_wait_fraction"] == 0.2 and s["step_time_mean_s"] == 0.5 and s["allreduce_fraction"] == 0.2
    assert (s["first_loss"], s["final_loss"], s["accuracy"]) == (2.0, 1.0, round(4 / 12, 4))
    assert math.isclose(s["examples_per_second"], 12 / 10.0)


def test_meter_floor_probes_are_kept_out_of_the_wait() -> None:
    meter = Meter()
    meter.record(wait_s=1.0, step_s=2.0, loss=1.0, replica_examples=[2])  # warm-up: untimed
    meter.record(wait_s=0.2, step_s=1.0, loss=1.0, replica_examples=[2])
    meter.record(wait_s=0.0, step_s=1.0, loss=1.0, replica_examples=[2], floor_s=0.1)  # warm after the probe
    meter.record(wait_s=0.4, step_s=1.0, loss=1.0, replica_examples=[2])
    s = meter.summary(allreduce_s=None)
    assert (s["input_wait_fraction"], s["input_wait_s"]) == (0.3, 0.3)
    assert (s["input_wait_floor_fraction"], s["input_wait_floor_s"]) == (0.1, 0.1) and s["step_time_mean_s"] == 1.0
    assert Meter().summary(allreduce_s=None)["input_wait_floor_fraction"] is None


@pytest.mark.parametrize(
    "change, message",
    [
        ({"num_workers": 4, "per_worker_batch": 8}, ""),  # another worker count, the same global batch: elastic
        ({"per_worker_batch": 8, "steps_per_epoch": 60},
         "global batch (--per-replica-batch x replicas / --global-batch) 32 -> 16; steps per epoch (--steps-per-epoch) "
         "30 -> 60"),
        ({"data": "created B run r2"}, "data set (--data) created A run r1 -> created B run r2"),
        ({"seed": 1, "split": "eval"}, "split (--split) train -> eval; --seed 0 -> 1"),
        ({"new_field": 1}, "new_field ? -> 1"),
    ],
)
def test_plan_changes_name_what_changed(change: dict, message: str) -> None:
    saved = {"data": "created A run r1", "split": "train", "split_records": 960, "num_workers": 2, "per_worker_batch": 16,
             "steps_per_epoch": 30, "shuffle_buffer": 0, "seed": 0}
    assert plan_changes(saved, saved) == []
    assert "; ".join(plan_changes(saved, {**saved, **change})) == message


def test_id_log_cuts_a_half_written_line(tmp_path) -> None:
    log = IdLog(str(tmp_path), 1)
    log.write(step=0, epoch=0, ids=[5, 6])
    log.close()
    path = log_path(str(tmp_path), 1, 0)
    with open(path, "a") as f:
        f.write("1 7 8")  # a kill mid-line
    assert read_log(path) == [(0, [5, 6])]
    again = IdLog(str(tmp_path), 1)
    again.write(step=1, epoch=0, ids=[7, 9])
    again.write(step=2, epoch=1, ids=[1, 2])
    again.close()
    assert read_log(path) == [(0, [5, 6]), (1, [7, 9])] and read_log(log_path(str(tmp_path), 1, 1)) == [(2, [1, 2])]


def test_allreduce_warning_only_over_enough_steps(caplog) -> None:
    from trainer.metrics import ALLREDUCE_WARN_MIN_STEPS

    for steps, warned in ((3, False), (ALLREDUCE_WARN_MIN_STEPS + 2, True)):
        meter = Meter()
        for _ in range(steps):
            meter.record(wait_s=0.0, step_s=0.01, loss=1.0, replica_examples=[1])
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert meter.summary(allreduce_s=0.005)["allreduce_fraction"] == 0.5
        assert ("all-reduce of the gradients takes 50% of a step" in caplog.text) is warned, steps


def test_communication_choice(caplog) -> None:
    with caplog.at_level(logging.WARNING):
        assert resolve_communication("nccl", gpus=0) == "ring"
    assert "--communication nccl asked for, but this worker has no GPU" in caplog.text
    assert [resolve_communication(c, gpus=g) for c, g in (("auto", 0), ("auto", 2), ("ring", 2), ("nccl", 1))] == [
        "ring", "nccl", "ring", "nccl"]


def test_heartbeat_logs_while_waiting(caplog) -> None:
    with caplog.at_level(logging.INFO), heartbeat("joining", every_s=0.05):
        time.sleep(0.3)
    beats = [r.message for r in caplog.records if "still waiting" in r.message]
    assert len(beats) >= 2 and beats[0].startswith("joining: still waiting after")
    assert caplog.records[-1].message.startswith("joining: done in")


def test_keras_compat_private_names_exist_and_are_restored() -> None:
    """Fails loudly when a Keras upgrade moves the private names ``trainer.keras_compat`` patches."""
    from trainer import keras_compat

    tf_trainer = keras_compat.check_private_names()  # raises RuntimeError naming what moved
    original = tf_trainer.reduce_per_replica
    strategy = tf.distribute.get_strategy()
    model = build_model("mlp", features={"a": FeatureSpec("float32")}, label="y", num_classes=2)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    spec = ({"a": tf.TensorSpec([4], tf.float32)}, tf.TensorSpec([4], tf.int64))
    with keras_compat.multi_worker_fit(model, strategy, spec):
        assert tf_trainer.reduce_per_replica is not original
        assert model._maybe_symbolic_build() is None
        history = model.fit(tf.data.Dataset.from_tensors(({"a": tf.zeros([4])}, tf.zeros([4], tf.int64))), verbose=0, shuffle=False)
        assert len(history.history["loss"]) == 1
    assert tf_trainer.reduce_per_replica is original  # undone: nothing patched process-wide
    assert "_maybe_symbolic_build" not in vars(model)


def test_mlp_imputes_missing_integers_like_floats() -> None:
    """A nullable int64 left out of a record reads as MISSING_INT64 (trainer.data): imputed with the mean plus a
    missing indicator, not taken as 0."""
    from trainer.data import parse_spec
    from trainer.features import MISSING_INT64

    features = {"n": FeatureSpec("int64", (), nullable=True, missing=1), "x": FeatureSpec("float32")}
    parsed = tf.io.parse_example(
        [tf.train.Example(features=tf.train.Features(feature={
            **({"n": tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))} if v is not None else {}),
            "x": tf.train.Feature(float_list=tf.train.FloatList(value=[0.0]))})).SerializeToString() for v in (4, None, 0)],
        parse_spec(features))
    assert parsed["n"].numpy().tolist() == [4, MISSING_INT64, 0]
    model = build_model("mlp", features=features, label="y", num_classes=2,
                        statistics={"n": {"mean": 10.0, "std": 2.0}, "x": {"mean": 0.0, "std": 1.0}})
    imputed = keras.Model(model.inputs, [model.get_layer("impute_n").output, model.get_layer("missing_n").output])(parsed)
    assert imputed[0].numpy().ravel().tolist() == [4.0, 10.0, 0.0]  # the mean where missing; a real 0 stays 0
    assert imputed[1].numpy().ravel().tolist() == [0.0, 1.0, 0.0]


def test_identifier_like_strings_and_exclude_features_leave_the_defaults(caplog) -> None:
    features = {"name": FeatureSpec("string"), "colour": FeatureSpec("string"), "x": FeatureSpec("float32"),
                "y": FeatureSpec("int64")}
    stats = {"name": {"count": 100, "distinct": 97}, "colour": {"count": 100, "distinct": 3}, "x": {"count": 100}}
    with caplog.at_level(logging.INFO, logger="trainer.features"):
        assert input_features("mlp", features, label="y", statistics=stats) == ("colour", "x")
    assert [r.getMessage() for r in caplog.records if "identifier-like" in r.getMessage()] == [
        "left out of the default features as identifier-like (a value per record, which a model memorises): "
        "name (97 values in 100 records); name them in --features to use them"]
    assert input_features("mlp", features, label="y", statistics=stats, requested=("name", "x")) == ("name", "x")
    assert input_features("mlp", features, label="y", statistics=stats, excluded=("x",)) == ("colour",)
    with pytest.raises(ModelError, match="--exclude-features names 'zz', not a feature"):
        input_features("mlp", features, label="y", statistics=stats, excluded=("zz",))


@pytest.mark.parametrize(
    "shards, workers, local, batch, epochs",
    [
        ([172, 172], 2, 1, 8, 15),  # 344 rows (the quickstart): 21 steps per epoch, 8 records left out
        ([50_000] * 4, 2, 1, 256, 1),  # large: the biggest batch, one full pass (390 steps)
        ([6, 6], 2, 1, 6, 300),  # fewer records than a batch of 8: one batch of all of them
        ([1000, 1000, 1000], 3, 2, 15, 10),
    ],
)
def test_default_batch_and_epochs(shards: list[int], workers: int, local: int, batch: int, epochs: int) -> None:
    from shardprep import planning
    from trainer import defaults

    plan = planning.plan_workers(shards, workers)
    assert defaults.choose_batch(plan, local_replicas=local) == batch
    steps = plan.steps_per_epoch(batch * local)
    assert (sum(shards) - steps * batch * local * workers) / sum(shards) <= defaults.MAX_LEFT_OUT or batch == defaults.MIN_BATCH
    assert defaults.choose_epochs(steps) == epochs


def test_default_model_and_model_dir() -> None:
    from trainer import defaults

    assert defaults.choose_model({"image/encoded": FeatureSpec("string"), "image/class/label": FeatureSpec("int64")}) == "image"
    assert defaults.choose_model({"x": FeatureSpec("float32")}) == "mlp"
    assert defaults.default_model_dir("gs://b/data/penguins/") == "model-penguins"
    assert defaults.default_model_dir("ds") == "model-ds"

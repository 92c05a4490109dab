"""``python -m trainer.evaluate``: a trained model scores another data set by class NAME, or refuses it (issue 54 item 5).

Real processes on real data sets made by ``shardprep.run``: a model trained on three image classes
(circle, square, stripes), and a test set holding only square and stripes, prepared apart (its own
ids 0 and 1) and with ``--labels-from`` (the training set's ids 1 and 2).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shardprep import run
from tests import trainer_fixtures as fx
from trainer import model_card
from trainer.demo_images import write_images

LABEL = "image/class/label"


def _cli(module: str, *args: object, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], env=fx.worker_env(), capture_output=True,
                          text=True, timeout=timeout, cwd=fx.REPO, check=False)


def _scores(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("evaluate")
    write_images(str(folder / "raw_train"), per_class=80, size=24, formats=("png",))
    write_images(str(folder / "raw_test"), per_class=30, size=24, seed=7, formats=("png",))
    shutil.rmtree(folder / "raw_test" / "circle")
    images = ["--format", "images", "--num-shards", "1"]
    assert run.main(["--input", str(folder / "raw_train"), *images, "--output", str(folder / "train_ds"),
                     "--split", "train=0.8,eval=0.2"]) == 0
    assert run.main(["--input", str(folder / "raw_test"), *images, "--output", str(folder / "test_apart"),
                     "--split", "test=1"]) == 0
    assert run.main(["--input", str(folder / "raw_test"), *images, "--output", str(folder / "test_shared"),
                     "--split", "test=1", "--labels-from", str(folder / "train_ds")]) == 0
    proc = _cli("trainer.train", "--data", folder / "train_ds", "--label", LABEL, "--image-size", 16, "--eval-split",
                "eval", "--model-dir", folder / "run", "--epochs", 8, "--per-replica-batch", 16)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return folder


def test_the_card_names_the_models_classes(trained):
    card = model_card.read_card(str(trained / "run"))
    assert (card.label, card.kind, card.classes, card.num_classes) == (LABEL, "class_ids", ("circle", "square", "stripes"), 3)
    assert card.inputs == ("image/encoded",) and card.image_size == 16 and card.export == "export/model.keras"


def test_the_training_sets_eval_split_scores_as_training_scored_it(trained):
    summary = json.loads((trained / "run" / "summary" / "worker-0.json").read_text())
    scores = _scores(_cli("trainer.evaluate", "--model-dir", trained / "run", "--data", trained / "train_ds",
                          "--split", "eval"))
    assert scores["eval_examples"] == summary["eval_examples"]
    assert scores["eval_accuracy"] == summary["eval_accuracy"] and scores["eval_loss"] == pytest.approx(summary["eval_loss"], abs=1e-5)


def test_a_test_set_prepared_apart_scores_by_name_as_one_with_labels_from(trained):
    """Before: the set apart's ids 0/1 were read as the model's circle/square (accuracy near 0). Now both score alike."""
    shared = _cli("trainer.evaluate", "--model-dir", trained / "run", "--data", trained / "test_shared")
    apart = _cli("trainer.evaluate", "--model-dir", trained / "run", "--data", trained / "test_apart")
    assert "class ids matched by name: the same names in the same order" in shared.stdout
    assert "class ids mapped by name to the model's (square: 0->1, stripes: 1->2)" in apart.stdout
    a, b = _scores(shared), _scores(apart)
    assert a["eval_examples"] == b["eval_examples"] == 60 and a["eval_split"] == "test"
    assert a["eval_accuracy"] == b["eval_accuracy"] and a["eval_loss"] == pytest.approx(b["eval_loss"], abs=1e-5)
    assert a["eval_accuracy"] > 0.5  # learnt well above what the mis-mapped ids scored


def test_a_data_set_with_a_class_the_model_lacks_is_refused_in_one_line(trained, tmp_path):
    raw = tmp_path / "raw"
    shutil.copytree(trained / "raw_test", raw)
    (raw / "square").rename(raw / "triangle")
    assert run.main(["--input", str(raw), "--format", "images", "--num-shards", "1", "--output", str(tmp_path / "ds"),
                     "--split", "test=1"]) == 0
    proc = _cli("trainer.evaluate", "--model-dir", trained / "run", "--data", tmp_path / "ds")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "class names differ from the model's: 'triangle' not among the model's 'circle', 'square', 'stripes'" in lines[0]


def test_bad_arguments_are_one_line(trained, tmp_path):
    for args, says in (
        (["--model-dir", tmp_path, "--data", trained / "test_shared"], "no export/model.json"),
        (["--model-dir", trained / "run", "--data", trained / "test_shared", "--split", "nope"], "--split 'nope' is not in"),
        (["--model-dir", trained / "run", "--data", trained / "train_ds"], "name one with --split"),
    ):
        proc = _cli("trainer.evaluate", *args)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and says in lines[0], proc.stderr

"""``--model bert``: real shards from ``shardprep.run --task``, real MWMS workers, the custom loop and ``fit``.

The pre-training run is ``make demo-text`` at a smaller size (``trainer.demo_text``: its corpus,
``--train-vocab``, BERT-tiny on 2 workers); the classifier starts from that run (``--init-from``)
on classification shards made with the same vocabulary. Refusals run in process (pre-flight is TF-free).
"""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shardprep import manifest
from shardprep import run as shardprep_run
from tests import trainer_fixtures as fx
from trainer import demo_corpus, train
from trainer.run_table import read_summaries

SLOW = pytest.mark.slow


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """``trainer.demo_text`` with 400 documents and 2 epochs of 20 steps: ``out/ds`` shards, ``out/run`` the model."""
    out = tmp_path_factory.mktemp("demo-text") / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.demo_text", "--out", str(out), "--docs", "400", "--steps", "20", "--epochs", "2"],
        env=fx.worker_env(), capture_output=True, text=True, timeout=300, cwd=fx.REPO, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc


@pytest.fixture(scope="module")
def classification(demo, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Classification shards (a document's topic from its text) with the pre-training run's vocabulary."""
    folder = tmp_path_factory.mktemp("topics")
    with open(folder / "docs.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["body", "topic"])
        for i, doc in enumerate(demo_corpus.documents(600, seed=1)):
            writer.writerow([" ".join(doc[:3]), list(demo_corpus.TOPICS)[i % len(demo_corpus.TOPICS)]])
    out = folder / "ds"
    code = shardprep_run.main([
        "--input", str(folder / "docs.csv"), "--output", str(out), "--task", "text-classification", "--text-column", "body",
        "--label", "topic", "--vocab", str(demo[0] / "ds"), "--max-seq-length", "64", "--num-shards", "3",
        "--split", "train=0.8,eval=0.2",
    ])
    assert code == 0
    return out


@SLOW
def test_demo_text_pretrains_on_two_equal_workers(demo) -> None:
    out, proc = demo
    a, b = read_summaries(str(out / "run"), 2)
    assert a["steps"] == b["steps"] == a["global_step"] == 40 and a["empty_replica_steps"] == b["empty_replica_steps"] == 0
    assert a["examples"] == b["examples"] == 40 * 32
    assert a["final_loss"] < a["first_loss"] - 1.0  # masked-LM + next-sentence loss falls
    for s in (a, b):
        assert 0 < s["masked_lm_accuracy"] < 1 and 0 < s["next_sentence_accuracy"] < 1 and "accuracy" not in s
    config = json.loads((out / "run" / "bert.json").read_text())
    vocab = (out / "ds" / manifest.load(str(out / "ds")).text["vocab"]).read_text().split("\n")[:-1]
    assert config["size"] == "tiny" and config["vocab_size"] == len(vocab) and config["max_seq_length"] == 64
    lines = proc.stdout.splitlines()
    assert "equal steps on every worker: True; empty replica-steps: 0" in lines
    eval_records = manifest.load(str(out / "ds")).splits["eval"].num_records
    for s in (a, b):  # every eval record once, scored by the objective; the same totals on both workers
        assert s["eval_examples"] == eval_records and s["eval_accuracy"] is None
        assert s["eval_masked_lm_accuracy"] == a["eval_masked_lm_accuracy"] > 0
        assert 0 < s["eval_next_sentence_accuracy"] < 1 and s["eval_loss"] < a["first_loss"]
    mlm = next(x for x in lines if x.startswith("eval masked-LM accuracy"))
    accuracy, baseline = (float(v) for v in re.findall(r"\d\.\d{4}", mlm))
    assert accuracy == a["eval_masked_lm_accuracy"]
    assert 0.05 < baseline < 0.25  # "." or "the": the grammar's most frequent words
    assert any(x.startswith("eval next-sentence accuracy") for x in lines)
    assert any(x.startswith(f"eval split 'eval': {eval_records} examples") and "masked-LM accuracy" in x for x in lines)
    assert any(line.split()[:2] == ["worker", "mode"] and "mlm_accuracy" in line for line in lines)  # the launcher's table


@SLOW
def test_exported_pretraining_model_loads_and_init_from_restores_its_encoder(demo) -> None:
    import keras
    import numpy as np

    from trainer import bert
    from trainer.bert_task import bert_task

    out = demo[0]
    exported = keras.saving.load_model(str(out / "run" / "export" / "model.keras"))  # the tied head rebuilt
    batch = {"input_ids": np.full((2, 64), 7), "input_mask": np.ones((2, 64), "int64"),
             "segment_ids": np.zeros((2, 64), "int64"), "masked_lm_positions": np.ones((2, 10), "int64")}
    outputs = exported(batch)
    vocab_size = json.loads((out / "run" / "bert.json").read_text())["vocab_size"]
    assert tuple(outputs["masked_lm"].shape) == (2, 10, vocab_size) and tuple(outputs["next_sentence"].shape) == (2, 2)
    text = {"task": "text-classification", "vocab": manifest.load(str(out / "ds")).text["vocab"], "vocab_size": vocab_size,
            "max_seq_length": 64,
            "labels": ["a", "b"]}
    task = bert_task(text, data=str(out / "ds"), size=None, init_from=str(out / "run"), label="")
    assert task.size == "tiny"
    classifier = bert.build_bert(task, sequence_length=64)
    fresh = [w.copy() for w in classifier.get_layer(bert.ENCODER).get_weights()]
    bert.restore_encoder(classifier, task)
    restored = classifier.get_layer(bert.ENCODER).get_weights()
    trained = exported.get_layer(bert.ENCODER).get_weights()  # the final weights = the last checkpoint's
    assert len(restored) == len(trained) == len(fresh)
    assert all(np.array_equal(r, t) for r, t in zip(restored, trained))
    assert not all(np.array_equal(r, f) for r, f in zip(restored, fresh))


@SLOW
def test_classifier_from_pretraining_two_workers_fit_bfloat16(demo, classification, tmp_path) -> None:
    model_dir = tmp_path / "cls"
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.launch", "--workers", "2", "--", "--data", str(classification), "--model", "bert",
         "--init-from", str(demo[0] / "run"), "--per-replica-batch", "16", "--epochs", "4", "--loop", "fit",
         "--mixed-precision", "bfloat16", "--model-dir", str(model_dir), "--eval-split", "eval", "--learning-rate", "5e-4"],
        env=fx.worker_env(), capture_output=True, text=True, timeout=300, cwd=fx.REPO, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "encoder weights restored from" in proc.stdout
    a, b = read_summaries(str(model_dir), 2)
    splits = manifest.load(str(classification)).splits
    assert a["steps"] == b["steps"] == 4 * a["steps_per_epoch"] and a["steps_per_epoch"] >= splits["train"].num_records // 34
    assert a["precision"] == "mixed_bfloat16" and a["loop"] == "fit" and a["final_loss"] < a["first_loss"]
    assert a["eval_examples"] == splits["eval"].num_records and a["eval_accuracy"] > 0.5  # 6 topics: chance is 1/6
    assert not (model_dir / "bert.json").exists()  # only a pre-training run writes it


# --- refusals: one line, exit 2, before TensorFlow is imported -------------------------------------------------


@pytest.fixture(scope="module")
def pretraining(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pt")
    demo_corpus.write_corpus(str(folder / "raw"), docs=60, files=1)
    out = folder / "ds"
    assert shardprep_run.main(["--input", str(folder / "raw" / "*.txt"), "--output", str(out), "--task", "bert-pretraining",
                               "--train-vocab", "200", "--max-seq-length", "32", "--max-predictions-per-seq", "5",
                               "--num-shards", "2"]) == 0
    return out


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert train.main([*map(str, argv)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_bert_refusals(pretraining: Path, tmp_path, capsys) -> None:
    tabular = tmp_path / "tab"
    fx.make_dataset(str(tabular), rows=100, num_shards=1)
    assert "was not made by `shardprep.run --task bert-pretraining`" in _refused(capsys, "--data", tabular, "--model", "bert")
    assert "--label is required" in _refused(capsys, "--data", tabular)
    assert "--bert-size and --init-from go with --model bert" in _refused(capsys, "--data", tabular, "--label", "label",
                                                                          "--bert-size", "tiny")
    line = _refused(capsys, "--data", pretraining, "--model", "bert", "--label", "masked_lm_ids")
    assert "predicts 'next_sentence_labels'; leave --label out" in line
    assert "takes text-classification shards" in _refused(capsys, "--data", pretraining, "--model", "bert", "--init-from",
                                                          tmp_path)
    assert "leave --features" in _refused(capsys, "--data", pretraining, "--model", "bert", "--features", "input_ids")


def test_init_from_refuses_another_vocabulary_and_a_run_without_bert_json(pretraining: Path, tmp_path, capsys) -> None:
    from trainer.bert_task import BertError, BertTask, bert_task, write_bert_config

    text = json.loads((pretraining / "manifest.json").read_text())["text"]
    done = tmp_path / "run"
    os.makedirs(done)
    write_bert_config(str(done), BertTask("bert-pretraining", "tiny", 99, 32, "0" * 64))
    classification = {**text, "task": "text-classification", "labels": ["x", "y"]}
    with pytest.raises(BertError, match="differs from the one .* was pre-trained on"):
        bert_task(classification, data=str(pretraining), size=None, init_from=str(done), label="")
    with pytest.raises(BertError, match="--bert-size mini: the run in .* pre-trained BERT-tiny"):
        bert_task(classification, data=str(pretraining), size="mini", init_from=str(done), label="")
    with pytest.raises(BertError, match="no bert.json there"):
        bert_task(classification, data=str(pretraining), size=None, init_from=str(tmp_path / "nothing"), label="")

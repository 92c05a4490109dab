"""Every path a manifest names is opened through ``shardprep.members``, and a manifest is checked
against one schema on load (issue 57, items 2 and 3), through the real CLIs.

A real data set (a CSV run with statistics and one dead letter, and a text run for the trainer) is
committed once; each test edits a copy: a dead letter, shard or vocabulary replaced by a FIFO, a link
to ``/dev/zero`` or to a file outside the data set, a path with ``..``, a malformed section. Each
command answers at once (subprocess timeouts: never a hang) with one error line: exit 2 (``verify``
lists a file that is not a safe member as a FAIL line, exit 1, with the other problems it finds).
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

SECRET = "a file of another folder: never shown"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """A committed data set with statistics and one dead letter (a row of 4 fields under 3 names)."""
    folder = tmp_path_factory.mktemp("paths")
    rows = [f"{i},{i * 0.5},{i % 3}" for i in range(60)]
    rows[7] = "7,3.5,1,extra"
    (folder / "a.csv").write_text("id,x,label\n" + "\n".join(rows) + "\n")
    out = folder / "ds"
    run_cli("shardprep.run", "--input", folder / "a.csv", "--output", out, "--num-shards", 2, "--statistics", "on",
            "--max-bad-records", 1, check=True)
    return out


@pytest.fixture
def copy(dataset, tmp_path) -> Path:
    target = tmp_path / "ds"
    shutil.copytree(dataset, target, symlinks=True)
    return target


def _doc(root: Path) -> dict:
    return json.loads((root / "manifest.json").read_text())


def _save(root: Path, doc: dict) -> None:
    (root / "manifest.json").write_text(json.dumps(doc, indent=2))


def _cli(module: str, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m module args``; a hang fails the test (``TimeoutExpired``) instead of blocking it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=timeout)


def _one_error(proc: subprocess.CompletedProcess, module: str, code: int = 2) -> str:
    assert proc.returncode == code and "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith(f"{module}: error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def _readers(root: Path, tmp_path: Path) -> dict[str, subprocess.CompletedProcess]:
    html = tmp_path / "report.html"
    return {"shardprep.verify": _cli("shardprep.verify", root), "shardprep.inspect": _cli("shardprep.inspect", root),
            "shardprep.report": _cli("shardprep.report", root, "-o", html)}


def _dead_letter(root: Path) -> Path:
    path = root / _doc(root)["rejected"]["paths"][0]
    path.unlink()
    return path


# --- files the manifest names that are not safe members -----------------------------------------------


def test_the_data_set_is_sound_as_made(dataset, tmp_path):
    procs = _readers(dataset, tmp_path)
    assert all(p.returncode == 0 for p in procs.values()), {m: p.stderr for m, p in procs.items()}
    assert _doc(dataset)["rejected"]["num_records"] == 1 and "csv_columns" in (tmp_path / "report.html").read_text()


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "outside", "folder"])
def test_a_dead_letter_file_that_is_not_a_safe_member_is_refused_by_report_and_verify(copy, tmp_path, kind):
    path = _dead_letter(copy)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "outside":
        path.symlink_to(_outside(copy))
    else:
        path.mkdir()
    says = {"fifo": "is a FIFO, not a regular file", "dev_zero": "outside the data set folder",
            "outside": "outside the data set folder", "folder": "is a folder, not a regular file"}[kind]
    html = tmp_path / "report.html"
    line = _one_error(_cli("shardprep.report", copy, "-o", html), "shardprep.report")
    assert "manifest field rejected.paths[0]" in line and says in line and str(path.relative_to(copy)) in line, line
    assert not html.exists()
    proc = _cli("shardprep.verify", copy)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert any(line.startswith("FAIL manifest field rejected.paths[0]") and says in line for line in proc.stdout.splitlines())
    assert SECRET not in proc.stdout + proc.stderr


def _outside(root: Path) -> Path:
    """A file beside the data set's folder, outside it."""
    target = root.parent / "outside.txt"
    target.write_text(json.dumps({"reason": "csv_columns", "raw": SECRET}) + "\n")
    return target


@pytest.mark.parametrize("kind", ["fifo", "outside"])
def test_a_shard_that_is_not_a_safe_member_is_refused_by_inspect(copy, kind):
    doc = _doc(copy)
    shard = copy / doc["splits"]["train"]["shards"][0]["path"]
    data = shard.read_bytes()
    shard.unlink()
    if kind == "fifo":
        os.mkfifo(shard)
    else:  # the same bytes, outside the data set: the size and crc32c still fit
        target = copy.parent / "same.tfrecord"
        target.write_bytes(data)
        shard.symlink_to(target)
    line = _one_error(_cli("shardprep.inspect", copy), "shardprep.inspect")
    assert "manifest field splits.train.shards[0].path" in line, line
    assert ("a FIFO, not a regular file" if kind == "fifo" else "outside the data set folder") in line, line


def test_a_manifest_that_is_a_fifo_never_blocks_a_reader(copy, tmp_path):
    (copy / "manifest.json").unlink()
    os.mkfifo(copy / "manifest.json")
    for module, proc in _readers(copy, tmp_path).items():
        assert "'manifest.json' is a FIFO, not a regular file" in _one_error(proc, module)


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd"])
@pytest.mark.parametrize("where", ["shard", "dead_letter"])
def test_paths_leaving_the_data_set_are_refused_on_load_by_every_reader(copy, tmp_path, path, where):
    doc = _doc(copy)
    if where == "shard":
        doc["splits"]["train"]["shards"][0]["path"] = path
        field = "splits.train.shards[0].path"
    else:
        doc["rejected"]["paths"] = [path]
        field = "rejected.paths[0]"
    _save(copy, doc)
    for module, proc in _readers(copy, tmp_path).items():
        line = _one_error(proc, module)
        assert f"manifest field {field}: '{path}' is not a plain path inside the data set folder" in line, line
        assert "root:" not in proc.stdout + proc.stderr  # /etc/passwd was never read


# --- malformed sections -------------------------------------------------------------------------------

MALFORMED = {
    "statistics_strings": (lambda d: d["statistics"]["train"]["x"].update(mean="2.5", std="0.5"),
                           "statistics.train.x.mean: expected a number"),
    "split_a_list": (lambda d: d["splits"].update(train=[d["splits"]["train"]]), "splits.train: expected an object"),
    "statistics_count_missing": (lambda d: d["statistics"]["train"]["x"].pop("count"),
                                 "statistics.train.x.count: expected a non-negative integer, found missing"),
    "split_count_missing": (lambda d: d["splits"]["train"].pop("num_records"),
                            "splits.train.num_records: expected a non-negative integer, found missing"),
    "statistics_split_a_list": (lambda d: d["statistics"].update(train=[1]), "statistics.train: expected an object"),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_a_malformed_section_is_exit_2_with_one_line_for_every_reader(copy, tmp_path, name):
    edit, says = MALFORMED[name]
    doc = _doc(copy)
    edit(doc)
    _save(copy, doc)
    for module, proc in _readers(copy, tmp_path).items():
        line = _one_error(proc, module)
        assert line == f"{module}: error: manifest is malformed: {says}" or \
            line.startswith(f"{module}: error: manifest is malformed: {says}, found"), line


# --- the trainer --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def text_dataset(tmp_path_factory) -> Path:
    """A committed BERT pre-training data set: its vocabulary is ``<run>/vocab.txt``, named by ``text.vocab``."""
    folder = tmp_path_factory.mktemp("text")
    r, words = random.Random(1), "the cat sat on a mat dog river stone music night house".split()
    docs = ["\n".join(" ".join(r.choice(words) for _ in range(8)) + "." for _ in range(4)) for _ in range(40)]
    (folder / "a.txt").write_text("\n\n".join(docs) + "\n")
    out = folder / "ds"
    run_cli("shardprep.run", "--input", folder / "a.txt", "--output", out, "--task", "bert-pretraining",
            "--train-vocab", 60, "--max-seq-length", 32, "--max-predictions-per-seq", 4, "--num-shards", 1, check=True)
    return out


def _train(data: Path, tmp_path: Path, *args) -> str:
    proc = _cli("trainer.train", "--data", data, "--model-dir", tmp_path / "model", "--epochs", 1,
                "--per-replica-batch", 4, *args, timeout=300)
    return _one_error(proc, "trainer.train")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "old_name_outside", "traversal"])
def test_the_trainer_reads_text_vocab_only_as_a_safe_member(text_dataset, tmp_path, kind):
    copy = tmp_path / "ds"
    shutil.copytree(text_dataset, copy, symlinks=True)
    doc = _doc(copy)
    vocab = copy / doc["text"]["vocab"]
    if kind == "fifo":
        vocab.unlink()
        os.mkfifo(vocab)
        says = f"manifest field text.vocab: '{doc['text']['vocab']}' is a FIFO, not a regular file"
    elif kind == "dev_zero":
        vocab.unlink()
        vocab.symlink_to("/dev/zero")
        says = "is a link to /dev/zero, outside the data set folder"
    elif kind == "old_name_outside":  # an older manifest's DIR/vocab.txt, a link out of the data set
        doc["text"] = {k: v for k, v in doc["text"].items() if k not in ("vocab_num_bytes", "vocab_crc32c")}
        doc["text"]["vocab"] = "vocab.txt"
        (copy / "vocab.txt").symlink_to(_outside(copy))
        _save(copy, doc)
        says = "manifest field text.vocab: 'vocab.txt' is a link to"
    else:
        doc["text"]["vocab"] = "../../../../../etc/passwd"
        _save(copy, doc)
        says = "manifest field text.vocab: '../../../../../etc/passwd' is not a plain path inside the data set folder"
    line = _train(copy, tmp_path, "--model", "bert")
    assert says in line, line


def test_an_older_text_manifest_with_dir_vocab_txt_still_reads(text_dataset, tmp_path):
    """``text.vocab`` = ``vocab.txt`` (no size, no crc32c), as older text runs wrote it: read through
    ``shardprep.members`` with the trainer's cap (no TensorFlow needed for this part of the job)."""
    copy = tmp_path / "ds"
    shutil.copytree(text_dataset, copy, symlinks=True)
    doc = _doc(copy)
    shutil.copy(copy / doc["text"]["vocab"], copy / "vocab.txt")
    doc["text"] = {k: v for k, v in doc["text"].items() if k not in ("vocab_num_bytes", "vocab_crc32c")}
    doc["text"]["vocab"] = "vocab.txt"
    _save(copy, doc)
    from shardprep import manifest
    from trainer.bert_task import bert_task

    task = bert_task(manifest.load(str(copy)).text, data=str(copy), size=None, init_from=None, label="")
    assert task.vocab_size == doc["text"]["vocab_size"] and len(task.vocab_sha256) == 64


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["shard_fifo", "statistics_strings"])
def test_the_trainer_refuses_a_shard_fifo_and_a_malformed_manifest(copy, tmp_path, kind):
    doc = _doc(copy)
    if kind == "shard_fifo":
        shard = copy / doc["splits"]["train"]["shards"][1]["path"]
        shard.unlink()
        os.mkfifo(shard)
        says = "manifest field splits.train.shards[1].path"
    else:
        MALFORMED["statistics_strings"][0](doc)
        _save(copy, doc)
        says = "manifest is malformed: statistics.train.x.mean: expected a number"
    line = _train(copy, tmp_path, "--model", "mlp", "--label", "label")
    assert says in line, line

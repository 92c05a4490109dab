"""``shardprep.run --labels-from DIR`` / ``--label-vocab FILE``: a data set prepared apart takes another's class ids.

Real runs of ``shardprep.run`` on image class folders and a text-classification CSV (issue 54 item 5).
"""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from shardprep import label_vocab, manifest, run
from tests.conftest import run_cli
from tests.shardprep.formats.test_images import records
from trainer.demo_images import write_images

LABEL = "image/class/label"


def _names(root: Path) -> list[str]:
    return json.loads((root / "manifest.json").read_text())["features"][LABEL]["names"]


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    """train/ (circle, square, stripes), test/ (square and stripes only) and train_ds (made from train/)."""
    folder = tmp_path_factory.mktemp("labels")
    write_images(str(folder / "train"), per_class=6, size=16, formats=("png",))
    write_images(str(folder / "test"), per_class=4, size=16, seed=3, formats=("png",))
    shutil.rmtree(folder / "test" / "circle")
    assert run.main(["--input", str(folder / "train"), "--format", "images", "--output", str(folder / "train_ds"),
                     "--num-shards", "1"]) == 0
    return folder


def _labels_of(root: Path) -> dict[str, int]:
    """File name's class folder -> the label id its record holds (one per class: they agree)."""
    out = {}
    for r in records(str(root)):
        name = r["image/filename"][0].decode() if isinstance(r["image/filename"][0], bytes) else r["image/filename"][0]
        out.setdefault(name.split("/")[0], set()).add(int(r[LABEL][0]))
    assert all(len(ids) == 1 for ids in out.values()), out
    return {k: next(iter(v)) for k, v in out.items()}


def test_a_test_set_prepared_apart_numbers_its_own_classes(images, tmp_path):
    """The issue's case: without the flag, the two classes of the test set become ids 0 and 1."""
    out = tmp_path / "apart"
    assert run.main(["--input", str(images / "test"), "--format", "images", "--output", str(out), "--num-shards", "1"]) == 0
    assert _names(out) == ["square", "stripes"] and _labels_of(out) == {"square": 0, "stripes": 1}
    assert _names(images / "train_ds") == ["circle", "square", "stripes"]


def test_labels_from_gives_the_training_sets_names_and_ids(images, tmp_path):
    out = tmp_path / "shared"
    assert run.main(["--input", str(images / "test"), "--format", "images", "--output", str(out), "--num-shards", "1",
                     "--labels-from", str(images / "train_ds")]) == 0
    assert _names(out) == ["circle", "square", "stripes"]  # every class kept, circle with no image
    assert _labels_of(out) == {"square": 1, "stripes": 2}
    texts = {int(r[LABEL][0]): r["image/class/text"][0] for r in records(str(out))}
    assert texts == {1: b"square", 2: b"stripes"}


def test_label_vocab_file_sets_the_ids_in_its_order(images, tmp_path):
    vocab = tmp_path / "labels.txt"
    vocab.write_text("stripes\ncat\nsquare\ncircle\n")
    out = tmp_path / "ds"
    assert run.main(["--input", str(images / "test"), "--format", "images", "--output", str(out), "--num-shards", "1",
                     "--label-vocab", str(vocab)]) == 0
    assert _names(out) == ["stripes", "cat", "square", "circle"] and _labels_of(out) == {"stripes": 0, "square": 2}


def test_a_class_the_vocabulary_lacks_is_refused_in_one_line(images, tmp_path):
    vocab = tmp_path / "labels.txt"
    vocab.write_text("circle\nsquare\n")
    proc = run_cli("shardprep.run", "--input", images / "test", "--format", "images", "--output", tmp_path / "ds",
                   "--num-shards", 1, "--label-vocab", vocab)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "1 class(es) of the class folders" in lines[0] and "'stripes'" in lines[0] and "not in the given label" in lines[0]
    assert not (tmp_path / "ds" / "manifest.json").exists()


@pytest.mark.parametrize("case,says", [
    ("both", "give one"),
    ("csv", "goes with --format images or --task text-classification"),
    ("no names", "no class names: give the names with --label-vocab"),
    ("no data set", "no data set there"),
    ("repeated", "more than once"),
])
def test_bad_label_flags_are_one_line_before_any_input_is_read(images, tmp_path, case, says):
    vocab = tmp_path / "labels.txt"
    vocab.write_text("a\nb\na\n" if case == "repeated" else "circle\nsquare\nstripes\n")
    table = tmp_path / "t.csv"
    table.write_text("x,label\n1,2\n")
    plain = tmp_path / "plain"
    assert run.main(["--input", str(table), "--output", str(plain), "--num-shards", "1"]) == 0
    flags = {"both": ["--labels-from", images / "train_ds", "--label-vocab", vocab], "csv": ["--label-vocab", vocab],
             "no names": ["--labels-from", plain], "no data set": ["--labels-from", tmp_path / "nothing"],
             "repeated": ["--label-vocab", vocab]}[case]
    source = ["--input", table] if case == "csv" else ["--input", images / "test", "--format", "images"]
    proc = run_cli("shardprep.run", *source, "--output", tmp_path / "ds", "--num-shards", 1, *flags)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and says in lines[0], proc.stderr


def test_text_classification_takes_the_given_labels(tmp_path):
    from shardprep.text.vocab import train_vocab, write_vocab

    texts = ["the cat sat on the mat", "music of the night", "the river and the stone"] * 10
    write_vocab(train_vocab(texts, 120), tmp_path / "vocab.txt")
    with open(tmp_path / "test.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["body", "topic"])
        for i, t in enumerate(texts):
            w.writerow([t, ["pets", "rivers"][i % 2]])
    (tmp_path / "labels.txt").write_text("music\npets\nrivers\n")
    common = ["--input", str(tmp_path / "test.csv"), "--task", "text-classification", "--text-column", "body",
              "--label", "topic", "--vocab", str(tmp_path / "vocab.txt"), "--max-seq-length", "16", "--num-shards", "1"]
    assert run.main([*common, "--output", str(tmp_path / "ds"), "--label-vocab", str(tmp_path / "labels.txt")]) == 0
    m = manifest.load(str(tmp_path / "ds"))
    assert m.text["labels"] == ["music", "pets", "rivers"]
    assert label_vocab.labels_from(str(tmp_path / "ds")) == ("music", "pets", "rivers")
    ids = sorted({int(r["label_ids"][0]) for r in records(str(tmp_path / "ds"))})
    assert ids == [1, 2]  # pets and rivers keep the given ids, not 0 and 1
    (tmp_path / "short.txt").write_text("music\npets\n")
    proc = run_cli("shardprep.run", *common, "--output", tmp_path / "ds2", "--label-vocab", tmp_path / "short.txt")
    last = proc.stderr.strip().splitlines()[-1]  # the labels are known once the document store is built: after log lines
    assert proc.returncode == 2 and "'rivers'" in last and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "ds2" / "manifest.json").exists()

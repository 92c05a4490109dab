"""``shardprep.run --task ... --dedup exact|near``: planted copies and near-copies removed, end to end.

Real runs of the CLI: the dropped documents are dead letters naming the one kept (the lowest input
position), the manifest's ``text`` entry counts them, and the shards are byte-identical on every
engine (one process, the local pool, Beam's in-process runner, a Dask LocalCluster) and unit size.
"""
from __future__ import annotations

import csv
import hashlib
import json
import random
from pathlib import Path

import pytest

from shardprep import manifest, run
from shardprep.text.vocab import train_vocab, write_vocab
from tests.conftest import run_cli

WORDS = [f"w{i}" for i in range(2000)]
BASE = ["--num-shards", 2, "--task", "bert-pretraining", "--dupe-factor", 1, "--max-seq-length", 64,
        "--max-predictions-per-seq", 10]


def _document(r: random.Random) -> list[str]:
    return [" ".join(r.choice(WORDS) for _ in range(r.randint(10, 20))) + "." for _ in range(r.randint(4, 10))]


def _near(r: random.Random, doc: list[str]) -> list[str]:
    """One word of the document changed: Jaccard of word 5-grams above 0.85 for these lengths."""
    out = list(doc)
    words = out[0].split()
    words[2] = "changed"
    out[0] = " ".join(words)
    return out


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> tuple[Path, dict]:
    """a.txt and b.txt: 150 documents, then 10 exact copies and 10 near copies of the first 20, spread
    over both files (each copy after its original); v/vocab.txt."""
    folder = tmp_path_factory.mktemp("dedup")
    r = random.Random(5)
    docs = [_document(r) for _ in range(150)]
    copies = [list(d) for d in docs[:10]] + [_near(r, d) for d in docs[10:20]]
    a, b = docs[:80], docs[80:] + copies
    (folder / "a.txt").write_text("\n\n".join("\n".join(d) for d in a) + "\n")
    (folder / "b.txt").write_text("\n\n".join("\n".join(d) for d in b) + "\n")
    (folder / "v").mkdir()
    write_vocab(train_vocab([s for d in docs for s in d], 300), folder / "v" / "vocab.txt")
    return folder, {"documents": 170, "exact": 10, "near": 10}


def _run(out: Path, *args) -> int:
    return run.main([str(a) for a in ("--output", out, *args)])


def _letters(out: Path) -> list[dict]:
    m = manifest.load(str(out))
    return [json.loads(line) for p in m.rejected.paths for line in (out / p).read_text().splitlines()]


def test_near_removes_planted_copies_and_names_the_kept_document(planted, tmp_path):
    folder, truth = planted
    out = tmp_path / "ds"
    assert _run(out, "--input", folder / "*.txt", "--vocab", folder / "v" / "vocab.txt", "--dedup", "near", *BASE) == 0
    m = manifest.load(str(out))
    assert m.rejected.by_reason == {"duplicate": truth["exact"], "near_duplicate": truth["near"]}
    text = m.text
    assert text["dedup"] == {"mode": "near", "shingle_words": 5, "bands": 14, "rows": 8, "threshold": 0.8,
                             "removed": {"duplicate": 10, "near_duplicate": 10}}
    assert text["corpus"]["documents"] == truth["documents"] and text["corpus"]["exact_duplicate_documents"] == 10
    letters = _letters(out)
    assert {x["source"].rsplit("/", 1)[1] for x in letters} == {"b.txt"}  # the copies come later: the first is kept
    assert all("kept at" in x["detail"] and x["detail"].split(" position ")[0].endswith(".txt") for x in letters)
    a_lines = (folder / "a.txt").read_text().split("\n")
    for x in letters:  # the kept document's first line is the dropped one's (near: but for one word)
        kept_file, kept_line = x["detail"].split("kept at ")[1].rsplit(" position ", 1)
        lines = a_lines if kept_file.endswith("a.txt") else (folder / "b.txt").read_text().split("\n")
        first = x["raw"].split("\n")[0].split()
        kept = lines[int(kept_line) - 1].split()
        assert sum(a != b for a, b in zip(first, kept)) == (0 if x["reason"] == "duplicate" else 1)


def test_exact_removes_only_exact_copies(planted, tmp_path):
    folder, truth = planted
    out = tmp_path / "ds"
    assert _run(out, "--input", folder / "*.txt", "--vocab", folder / "v" / "vocab.txt", "--dedup", "exact", *BASE) == 0
    m = manifest.load(str(out))
    assert m.rejected.by_reason == {"duplicate": truth["exact"]}
    assert m.text["dedup"] == {"mode": "exact", "removed": {"duplicate": 10, "near_duplicate": 0}}


def _digests(out: Path) -> dict[str, str]:
    """The shards' digests, and the dead letters' but for the work unit each names (units differ with --unit-mb)."""
    m = manifest.load(str(out))
    files = [s.path for split in m.splits.values() for s in split.shards]
    out_ = {p.split("/", 1)[1]: hashlib.sha256((out / p).read_bytes()).hexdigest() for p in files}
    letters = [{k: v for k, v in x.items() if k != "unit"} for x in _letters(out)]
    out_["rejected"] = hashlib.sha256(json.dumps(letters).encode()).hexdigest()
    return out_


@pytest.mark.slow
def test_the_same_bytes_on_every_engine_and_unit_size(planted, tmp_path):
    from distributed import LocalCluster

    folder, _ = planted
    args = ["--input", folder / "*.txt", "--train-vocab", 200, "--dedup", "near", *BASE]
    digests = {}
    for name, extra in (("one", ["--local-workers", 1]), ("default", ["--unit-mb", 0.01]),
                        ("beam", ["--runner", "beam", "--unit-mb", 0.005])):
        assert _run(tmp_path / name, *args, *extra) == 0, name
        digests[name] = _digests(tmp_path / name)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0") as c:
        assert _run(tmp_path / "dask", *args, "--unit-mb", 0.01, "--runner", "dask",
                    "--dask-address", c.scheduler_address) == 0
    digests["dask"] = _digests(tmp_path / "dask")
    assert digests["one"] == digests["default"] == digests["beam"] == digests["dask"], digests
    assert len(_letters(tmp_path / "one")) == 20


def test_classification_counts_its_classes_and_drops_copies(planted, tmp_path):
    folder, _ = planted
    r = random.Random(2)
    with open(tmp_path / "c.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["body", "topic"])
        rows = [(" ".join(r.choice(WORDS) for _ in range(12)), ["pets", "music", "rivers"][i % 3]) for i in range(60)]
        for row in rows + rows[:5]:
            w.writerow(row)
    out = tmp_path / "ds"
    assert _run(out, "--input", tmp_path / "c.csv", "--task", "text-classification", "--text-column", "body", "--label",
                "topic", "--vocab", folder / "v" / "vocab.txt", "--num-shards", 2, "--dedup", "exact") == 0
    m = manifest.load(str(out))
    assert m.rejected.by_reason == {"duplicate": 5} and m.accounting.written == 60
    assert m.text["corpus"]["label_counts"] == {"music": 20, "pets": 20, "rivers": 20}
    assert not {"dupe_factor", "masked_lm_prob", "max_predictions_per_seq", "short_seq_prob"} & set(m.text)


@pytest.mark.parametrize("args, message", [
    (["--dedup", "near"], "goes with --task"),
    (["--task", "bert-pretraining", "--train-vocab", 50, "--dedup-bands", 4], "--dedup-bands goes with --dedup near"),
    (["--task", "bert-pretraining", "--train-vocab", 50, "--dedup", "near", "--dedup-rows", 0],
     "--dedup-rows 0: expected 1 or more"),
])
def test_a_dedup_flag_that_does_not_fit_is_one_line_exit_2(planted, tmp_path, args, message):
    folder, _ = planted
    proc = run_cli("shardprep.run", "--input", folder / "a.txt", "--output", tmp_path / "ds", "--num-shards", 2, *args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr

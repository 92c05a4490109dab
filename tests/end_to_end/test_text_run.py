"""``shardprep.run --task``: BERT's pre-training and classification features from text, end to end.

Real runs of the CLI on a small generated corpus (.txt, .txt.gz, a CSV text column), the shards read
with BERT run_pretraining.py's exact feature spec by TensorFlow, byte identity across worker counts,
a real Dask LocalCluster and Beam's in-process runner, and bad input.
"""
from __future__ import annotations

import csv
import gzip
import hashlib
import json
import random
from pathlib import Path

import google_crc32c
import pytest

from shardprep import manifest, run
from shardprep.text.vocab import train_vocab, write_vocab
from tests.conftest import run_cli
from tests.shardprep.text.test_pretraining import run_pretraining_features

WORDS = ("the cat sat on a mat running quickly über house of and to jumped over lazy dog tokenization "
         "unbelievable river stone music night").split()
BASE = ["--num-shards", 3, "--task", "bert-pretraining", "--dupe-factor", 2, "--max-seq-length", 64,
        "--max-predictions-per-seq", 10]


def _document(r: random.Random) -> str:
    return "\n".join(" ".join(r.choice(WORDS) for _ in range(r.randint(3, 25))) + "."
                     for _ in range(r.randint(1, 10)))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """a.txt (BERT's layout, with extra blank lines), b.txt.gz, c.csv (a ``body`` column), v/vocab.txt."""
    folder = tmp_path_factory.mktemp("text")
    r = random.Random(7)
    docs = [_document(r) for _ in range(240)]
    (folder / "a.txt").write_text("\n\n\n".join(docs[:100]) + "\n")
    with gzip.open(folder / "b.txt.gz", "wt") as f:
        f.write("\n\n".join(docs[100:200]) + "\n")
    with open(folder / "c.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["body", "topic"])
        for i, d in enumerate(docs[200:]):
            w.writerow([d, ["pets", "music", "rivers"][i % 3]])
    (folder / "v").mkdir()
    write_vocab(train_vocab(docs, 300), folder / "v" / "vocab.txt")
    return folder


def _run(out: Path, *args) -> int:
    return run.main([str(a) for a in ("--output", out, *args)])


def _shard_digests(out: Path) -> dict[str, str]:
    m = manifest.load(str(out))
    return {s.path.split("/", 1)[1]: hashlib.sha256((out / s.path).read_bytes()).hexdigest()
            for split in m.splits.values() for s in split.shards}


def _bert_records(out: Path, max_seq_length: int, max_predictions: int) -> list[dict]:
    """Every record, parsed with run_pretraining.py's input_fn_builder feature spec."""
    tf = pytest.importorskip("tensorflow")
    name_to_features = run_pretraining_features(tf, max_seq_length, max_predictions)
    m = manifest.load(str(out))
    files = [str(out / s.path) for s in m.splits["train"].shards]
    out_rows = []
    for raw in tf.data.TFRecordDataset(files):
        ex = tf.io.parse_single_example(raw, name_to_features)
        out_rows.append({k: v.numpy().tolist() for k, v in ex.items()})
    return out_rows


def test_txt_and_gz_give_berts_features_read_by_run_pretrainings_spec(corpus, tmp_path):
    out = tmp_path / "ds"
    assert _run(out, "--input", corpus / "*.txt*", "--vocab", corpus / "v" / "vocab.txt", *BASE) == 0
    doc = json.loads((out / "manifest.json").read_text())
    given = (corpus / "v" / "vocab.txt").read_bytes()
    vocab = given.decode().split("\n")[:-1]
    (run_id,) = manifest.load(str(out)).run_ids
    corpus = doc["text"].pop("corpus")
    assert corpus["documents"] == 200 and corpus["sentences"] == corpus["sentences_sampled"] > 200
    assert corpus["exact_duplicate_documents"] == 0 and "dedup" not in doc["text"]
    assert doc["text"] == {"task": "bert-pretraining", "vocab": f"{run_id}/vocab.txt", "vocab_num_bytes": len(given),
                           "vocab_crc32c": f"{google_crc32c.value(given):08x}", "vocab_size": len(vocab), "cased": False,
                           "max_seq_length": 64, "max_predictions_per_seq": 10, "masked_lm_prob": 0.15,
                           "short_seq_prob": 0.1, "dupe_factor": 2, "whole_word_masking": False, "seed": 42}
    assert (out / doc["text"]["vocab"]).read_bytes() == given and not (out / "vocab.txt").exists()
    rows = _bert_records(out, 64, 10)
    assert len(rows) == doc["accounting"]["written"] > 200
    sizes = [len(s["shards"]) for s in doc["splits"].values()]
    assert sizes == [3]
    counts = [s["num_records"] for s in doc["splits"]["train"]["shards"]]
    assert max(counts) - min(counts) <= 1  # exactly balanced
    cls, sep, mask = vocab.index("[CLS]"), vocab.index("[SEP]"), vocab.index("[MASK]")
    for row in rows:
        n = sum(row["input_mask"])
        assert row["input_ids"][0] == cls and row["input_ids"][n - 1] == sep and row["input_ids"][n:] == [0] * (64 - n)
        assert row["segment_ids"][:n].count(1) >= 2 and row["segment_ids"][n:] == [0] * (64 - n)
        k = int(sum(row["masked_lm_weights"]))
        assert 1 <= k <= 10 and all(0 < p < n for p in row["masked_lm_positions"][:k])
        assert row["next_sentence_labels"][0] in (0, 1)
    masked = [row["input_ids"][p] for row in rows for p in row["masked_lm_positions"][:int(sum(row["masked_lm_weights"]))]]
    assert 0.7 < masked.count(mask) / len(masked) < 0.9  # BERT's 80% [MASK]
    random_next = sum(row["next_sentence_labels"][0] for row in rows) / len(rows)
    assert 0.3 < random_next < 0.7


def test_a_csv_text_column_and_a_trained_vocabulary(corpus, tmp_path):
    out = tmp_path / "ds"
    assert _run(out, "--input", corpus / "c.csv", "--text-column", "body", "--train-vocab", 200, *BASE) == 0
    doc = json.loads((out / "manifest.json").read_text())
    tokens = (out / doc["text"]["vocab"]).read_text().split("\n")[:-1]
    assert doc["text"]["vocab_size"] == len(tokens) <= 200 and tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(_bert_records(out, 64, 10)) == doc["accounting"]["written"] > 20
    again = tmp_path / "again"
    assert _run(again, "--input", corpus / "c.csv", "--text-column", "body", "--train-vocab", 200, *BASE) == 0
    again_vocab = json.loads((again / "manifest.json").read_text())["text"]["vocab"]
    assert (again / again_vocab).read_bytes() == (out / doc["text"]["vocab"]).read_bytes()
    assert _shard_digests(again) == _shard_digests(out)


def test_a_failed_or_interrupted_run_leaves_the_committed_vocabulary_as_it_was(corpus, tmp_path):
    """The vocabulary lives in its run's folder: an --overwrite run that fails changes nothing of the
    committed data set, and verify notices a vocabulary replaced behind the manifest's back."""
    out = tmp_path / "ds"
    assert _run(out, "--input", corpus / "c.csv", "--text-column", "body", "--train-vocab", 200, *BASE) == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    other = tmp_path / "other.txt"
    other.write_text("".join(t + "\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "."]))
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "bad.txt").write_bytes(b"a b c.\nb c a.\n\nthe \xff line.\nc a b.\n")
    proc = run_cli("shardprep.run", "--input", raw / "bad.txt", "--output", out, "--overwrite", "--vocab", other, *BASE)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr  # one bad line, --max-bad-records 0
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert {k: v for k, v in after.items() if k in before} == before  # the failed run wrote only in its own folder
    assert run_cli("shardprep.verify", out).returncode == 0
    vocab = out / json.loads((out / "manifest.json").read_text())["text"]["vocab"]
    vocab.write_bytes(other.read_bytes())  # a vocabulary swapped behind the manifest's back
    proc = run_cli("shardprep.verify", out)
    assert proc.returncode == 1 and "vocab" in proc.stdout, proc.stdout


def test_a_data_set_folder_gives_its_vocabulary(corpus, tmp_path):
    pre = tmp_path / "pre"
    assert _run(pre, "--input", corpus / "c.csv", "--text-column", "body", "--train-vocab", 200, *BASE) == 0
    out = tmp_path / "cls"
    assert _run(out, "--input", corpus / "c.csv", "--task", "text-classification", "--text-column", "body",
                "--label", "topic", "--vocab", pre, "--max-seq-length", 32, "--num-shards", 2) == 0
    vocab_of = {d: json.loads((d / "manifest.json").read_text())["text"]["vocab"] for d in (pre, out)}
    assert (out / vocab_of[out]).read_bytes() == (pre / vocab_of[pre]).read_bytes()


def test_text_classification_maps_sorted_labels(corpus, tmp_path):
    out = tmp_path / "ds"
    assert _run(out, "--input", corpus / "c.csv", "--task", "text-classification", "--text-column", "body",
                "--label", "topic", "--vocab", corpus / "v" / "vocab.txt", "--max-seq-length", 32, "--num-shards", 2) == 0
    doc = json.loads((out / "manifest.json").read_text())
    assert doc["text"]["labels"] == ["music", "pets", "rivers"] and doc["text"]["task"] == "text-classification"
    assert set(doc["features"]) == {"input_ids", "input_mask", "segment_ids", "label_ids"}
    assert doc["accounting"]["written"] == 40


@pytest.mark.slow
def test_bytes_are_the_same_on_every_engine_and_worker_count(corpus, tmp_path):
    from distributed import LocalCluster

    args = ["--input", corpus / "*.txt*", "--vocab", corpus / "v" / "vocab.txt", "--unit-mb", 0.02, *BASE]
    digests = {}
    for name, extra in (("one", ["--local-workers", 1]), ("default", []), ("beam", ["--runner", "beam"])):
        assert _run(tmp_path / name, *args, *extra) == 0, name
        digests[name] = _shard_digests(tmp_path / name)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0") as c:
        assert _run(tmp_path / "dask", *args, "--runner", "dask", "--dask-address", c.scheduler_address) == 0
    digests["dask"] = _shard_digests(tmp_path / "dask")
    assert len(manifest.load(str(tmp_path / "one")).sources) == 2
    assert digests["one"] == digests["default"] == digests["beam"] == digests["dask"], digests


def test_bad_input_empty_documents_long_lines_and_invalid_utf8(corpus, tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    long_line = " ".join(["unbelievable"] * 500)  # far more tokens than one sequence holds
    (raw / "bad.txt").write_bytes(b"\n\n\nthe cat sat.\nthe dog ran.\n\n\n\n" + long_line.encode() + b"\nmusic.\n\n"
                                  b"the river \xff\xfe stone.\nthe night.\n\n")
    out = tmp_path / "ds"
    proc = run_cli("shardprep.run", "--input", raw / "bad.txt", "--output", out, "--vocab", corpus / "v" / "vocab.txt", *BASE)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr  # one bad line, --max-bad-records 0
    assert _run(out, "--input", raw / "bad.txt", "--vocab", corpus / "v" / "vocab.txt", "--max-bad-records", 1, *BASE) == 0
    m = manifest.load(str(out))
    assert m.rejected.by_reason == {"invalid_utf8": 1}
    letter = json.loads(gzip.decompress((out / m.rejected.paths[0]).read_bytes()) if m.rejected.paths[0].endswith(".gz")
                        else (out / m.rejected.paths[0]).read_bytes())
    assert letter["reason"] == "invalid_utf8" and letter["position"] == 12 and letter["source"].endswith("bad.txt")
    rows = _bert_records(out, 64, 10)
    assert rows and max(sum(r["input_mask"]) for r in rows) == 64  # the long line fills a sequence, truncated


@pytest.mark.parametrize("drop", ["[CLS]", "[SEP]", "[MASK]", "[UNK]"])
def test_a_vocabulary_without_a_special_token_is_one_line_before_any_input_is_read(corpus, tmp_path, drop):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(t + "\n" for t in (corpus / "v" / "vocab.txt").read_text().split("\n")[:-1] if t != drop))
    proc = run_cli("shardprep.run", "--input", tmp_path / "no-such-*.txt", "--output", tmp_path / "ds",
                   "--vocab", vocab, *BASE)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and drop in lines[0] and "--vocab" in lines[0], proc.stderr


def test_a_vocabulary_whose_case_does_not_match_cased_is_refused(corpus, tmp_path):
    proc = run_cli("shardprep.run", "--input", tmp_path / "no-such-*.txt", "--output", tmp_path / "ds",
                   "--vocab", corpus / "v" / "vocab.txt", "--cased", *BASE)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "uncased" in lines[0], proc.stderr


def test_text_without_a_task_is_refused(corpus, tmp_path):
    proc = run_cli("shardprep.run", "--input", corpus / "a.txt", "--output", tmp_path / "ds", "--num-shards", 2)
    assert proc.returncode == 2 and "--task bert-pretraining" in proc.stderr and "Traceback" not in proc.stderr


# --- issue 57 item 8: text flags and files ----------------------------------------------------------

CLASSIFY = ["--task", "text-classification", "--text-column", "body", "--label", "topic", "--num-shards", 1]
MISFITS = {  # flags that do not apply to the task (or to no task): one line, exit 2, before any input is read
    "--cased without --task": (["--num-shards", 1, "--cased"], "c.csv", "--cased goes with --task"),
    "--max-seq-length without --task": (["--num-shards", 1, "--max-seq-length", 64], "c.csv", "--max-seq-length goes with"),
    "--dupe-factor without --task": (["--num-shards", 1, "--dupe-factor", 2], "c.csv", "--dupe-factor goes with"),
    "--schema with pre-training": (["--schema", "SCHEMA", *BASE], "a.txt", "--schema does not go with --task"),
    "--schema with classification": (["--schema", "SCHEMA", *CLASSIFY], "c.csv", "--schema does not go with --task"),
    "--text-column with .txt": (["--text-column", "body", *BASE], "a.txt", "--text-column goes with CSV"),
    "classification of .txt": (["--task", "text-classification", "--text-column", "body", "--label", "topic",
                                "--num-shards", 1], "a.txt", "not .txt"),
    "--masked-lm-prob with classification": ([*CLASSIFY, "--masked-lm-prob", 0.2], "c.csv",
                                             "--masked-lm-prob goes with --task bert-pretraining"),
    "--max-predictions-per-seq with classification": ([*CLASSIFY, "--max-predictions-per-seq", 5], "c.csv",
                                                      "--max-predictions-per-seq goes with --task bert-pretraining"),
    "--dupe-factor with classification": ([*CLASSIFY, "--dupe-factor", 2], "c.csv", "--dupe-factor goes with"),
    "--short-seq-prob with classification": ([*CLASSIFY, "--short-seq-prob", 0.2], "c.csv", "--short-seq-prob goes"),
    "--whole-word-masking with classification": ([*CLASSIFY, "--whole-word-masking"], "c.csv", "--whole-word-masking"),
    "more predictions than the sequence holds": ([*BASE, "--max-seq-length", 16, "--max-predictions-per-seq", 14],
                                                 "a.txt", "--max-predictions-per-seq 14 is more than --max-seq-length 16"),
    "--label with pre-training": ([*BASE, "--label", "topic"], "a.txt", "--label and --text-pair-column go with"),
}


@pytest.mark.parametrize("case", MISFITS.values(), ids=MISFITS)
def test_a_text_flag_that_does_not_fit_the_task_is_one_line_exit_2(corpus, tmp_path, case):
    flags, source, message = case
    schema = tmp_path / "s.json"
    schema.write_text('{"body": {"dtype": "string", "shape": []}}')
    flags = [schema if f == "SCHEMA" else f for f in flags]
    vocab = ["--vocab", corpus / "v" / "vocab.txt"] if "--task" in flags else []
    proc = run_cli("shardprep.run", "--input", corpus / source, "--output", tmp_path / "ds", *vocab, *flags)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    assert not (tmp_path / "ds").exists()  # refused before the run's folder


def test_a_sentence_limit_follows_max_record_mb(corpus, tmp_path):
    """A line over --max-record-mb is a record_too_large dead letter, one under it a sentence (no fixed 1 MiB)."""
    raw = tmp_path / "long.txt"
    line = " ".join(["music"] * 300_000)  # 1.8 MB: over the old fixed 1 MiB
    raw.write_text(f"the cat sat.\n{line}\nthe dog ran.\n\nthe river.\nthe night.\n")
    outcomes = {}
    for mb in (1, 2):
        out = tmp_path / f"ds{mb}"
        assert _run(out, "--input", raw, "--vocab", corpus / "v" / "vocab.txt", "--max-record-mb", mb,
                    "--max-bad-records", 1, *BASE) == 0
        outcomes[mb] = manifest.load(str(out)).rejected.by_reason
    assert outcomes == {1: {"record_too_large": 1}, 2: {}}


def test_a_vocabulary_with_a_byte_order_mark_reads_as_without(corpus, tmp_path):
    vocab = tmp_path / "bom.txt"
    vocab.write_bytes(b"\xef\xbb\xbf" + (corpus / "v" / "vocab.txt").read_bytes())  # as Notepad saves UTF-8
    a, b = tmp_path / "a", tmp_path / "b"
    assert _run(a, "--input", corpus / "a.txt", "--vocab", vocab, *BASE) == 0
    assert _run(b, "--input", corpus / "a.txt", "--vocab", corpus / "v" / "vocab.txt", *BASE) == 0
    assert _shard_digests(a) == _shard_digests(b)


def test_a_huge_max_seq_length_stays_in_bounded_memory(tmp_path):
    """--max-seq-length 100000 on 4 short documents: tens of MB, not the 10 GB of a table per length."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    raw = tmp_path / "four.txt"
    raw.write_text("\n\n".join(f"the cat sat on the mat {i}.\nthe dog ran over the river.\nmusic at night."
                               for i in range(4)) + "\n")
    # VmHWM is this process's own peak: ru_maxrss would carry the forking pytest process's size across exec
    code = ("import re, sys; from shardprep import run; rc = run.main(sys.argv[1:]); "
            "print(re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1)); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, "--input", str(raw), "--output", str(tmp_path / "ds"),
                           "--task", "bert-pretraining", "--train-vocab", "40", "--max-seq-length", "100000",
                           "--dupe-factor", "1", "--num-shards", "1", "--local-workers", "1"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    peak_kb = int(proc.stdout.split()[-1])
    assert peak_kb < 1_000_000, peak_kb  # the table per length alone was 10 GB

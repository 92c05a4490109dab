"""Issue 37's benchmark: the corpus generator, the create_pretraining_data.py contender, the comparison."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks import harness, text_corpus
from shardprep.text.vocab import train_vocab, write_vocab

tf = pytest.importorskip("tensorflow")


def _lines(paths):
    for p in paths:
        with open(p, encoding="utf-8") as f:
            yield from f


def test_corpus_is_deterministic_and_in_bert_layout(tmp_path) -> None:
    a = text_corpus.generate(0.3, str(tmp_path / "a"), files=3, seed=1)
    b = text_corpus.generate(0.3, str(tmp_path / "b"), files=3, seed=1)
    assert [open(p, "rb").read() for p in a] == [open(p, "rb").read() for p in b]
    sizes = [os.path.getsize(p) for p in a]
    assert 0.28e6 < sum(sizes) < 0.4e6 and sizes[0] > sizes[1] > sizes[2], sizes  # unequal files
    text = open(a[0], encoding="utf-8").read()
    docs = text.split("\n\n")
    assert len(docs) > 5 and all(d.strip() and "\n\n" not in d for d in docs)
    lengths = {d.count("\n") for d in docs}
    assert len(lengths) > 3  # documents of varying length
    words = text.split()
    top = max(set(words), key=words.count)
    assert words.count(top) > 20 * len(words) / len(set(words))  # Zipfian: the top word far above the mean
    assert text_corpus.generate(0.3, str(tmp_path / "c"), files=3, seed=2) and \
        open(tmp_path / "c" / "corpus-00.txt", "rb").read() != open(a[0], "rb").read()


def test_contender_writes_berts_features(tmp_path) -> None:
    from tests.shardprep.text.test_pretraining import run_pretraining_features

    paths = text_corpus.generate(0.1, str(tmp_path / "corpus"), files=2)
    vocab = tmp_path / "vocab.txt"
    write_vocab(train_vocab(_lines(paths), 2000), vocab)
    out = tmp_path / "out.tfrecord"
    subprocess.run([sys.executable, "-m", "benchmarks.contenders.create_pretraining_data",
                    f"--input_file={','.join(paths)}", f"--output_file={out}", f"--vocab_file={vocab}",
                    "--dupe_factor=2"], check=True, cwd=harness.REPO, env=harness._env(), capture_output=True)
    records = [r.numpy() for r in tf.data.TFRecordDataset(str(out))]
    assert len(records) > 100
    parsed = tf.io.parse_example(tf.constant(records), run_pretraining_features(tf, 128, 20))
    lengths = parsed["input_mask"].numpy().sum(axis=1)
    masked = parsed["masked_lm_weights"].numpy().sum(axis=1)
    assert lengths.max() == 128 and lengths.min() >= 5
    assert abs(masked.sum() / lengths.sum() - 0.15) < 0.01
    assert 0.4 < parsed["next_sentence_labels"].numpy().mean() < 0.8

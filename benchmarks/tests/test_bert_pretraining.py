"""Issue 37's benchmark: the corpus generator, the create_pretraining_data.py contender, the comparison."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks import bert_pretraining, harness, text_corpus
from shardprep.text.vocab import train_vocab, write_vocab

pytest.importorskip("tensorflow")  # the contender's writer, and the reader of every output (in a process of its own)


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
    paths = text_corpus.generate(0.1, str(tmp_path / "corpus"), files=2)
    vocab = tmp_path / "vocab.txt"
    write_vocab(train_vocab(_lines(paths), 2000), vocab)
    out = tmp_path / "out.tfrecord"
    subprocess.run([sys.executable, "-m", "benchmarks.contenders.create_pretraining_data",
                    f"--input_file={','.join(paths)}", f"--output_file={out}", f"--vocab_file={vocab}",
                    "--dupe_factor=2"], check=True, cwd=harness.REPO, env=harness._env(), capture_output=True)
    stats = bert_pretraining._statistics_apart([str(out)], 4)  # BERT's run_pretraining.py feature spec; [MASK] is 4
    assert stats["instances"] > 100 and stats["full_length_share"] > 0.3
    assert abs(stats["masked_share"] - 0.15) < 0.01 and abs(stats["masked_as_mask"] - 0.8) < 0.05
    assert 0.4 < stats["random_next_share"] < 0.8


def test_comparison_gives_the_ratios_and_outputs_that_agree() -> None:
    # the whole benchmark, for real, at a tiny size: every contender, the goals' ratios, the statistics
    result = bert_pretraining.compare(0.4, 1, dupe_factor=2, shards=2, vocab_size=2000, log=lambda _: None)
    s = result["summary"]
    assert list(s) == ["one_process", "contender", "all_cores", "two_at_once"]
    assert not os.path.exists(bert_pretraining.WORK)
    goals = {g["goal"].split(",")[0].split(" (")[0]: g for g in result["goals"]}
    speed = goals["shardprep one process / create_pretraining_data.py"]
    assert speed["value"] == pytest.approx(s["contender"]["wall_s"] / s["one_process"]["wall_s"], rel=0.01)
    ceiling = goals["default"]
    assert ceiling["value"] == pytest.approx(s["all_cores"]["mb_per_s"] / s["two_at_once"]["mb_per_s"], rel=0.01)
    assert s["two_at_once"]["mb_per_s"] * s["two_at_once"]["wall_s"] == pytest.approx(2 * result["mb"], rel=0.05)
    ours, bert = s["one_process"]["stats"], s["contender"]["stats"]
    assert ours == s["all_cores"]["stats"] == s["two_at_once"]["stats"]  # the same instances on any worker count
    assert ours["instances"] > 500 and abs(ours["instances"] - bert["instances"]) / bert["instances"] < 0.05
    assert abs(ours["mean_length"] - bert["mean_length"]) / bert["mean_length"] < 0.04, (ours, bert)
    assert abs(ours["masked_share"] - bert["masked_share"]) < 0.005 and abs(ours["masked_share"] - 0.15) < 0.01
    assert abs(ours["random_next_share"] - bert["random_next_share"]) < 0.05, (ours, bert)
    for stats in (ours, bert):  # 80% [MASK], 10% kept (plus random draws of the token itself), 10% random
        assert abs(stats["masked_as_mask"] - 0.8) < 0.03 and abs(stats["masked_kept"] - 0.1) < 0.03, stats
    # (>=: a child's peak RSS starts at its parent's, and another test of this process may hold TensorFlow)
    assert s["contender"]["max_rss_mb"] >= s["one_process"]["max_rss_mb"]
    assert bert_pretraining.table(result)[2].startswith("| shardprep, one process")

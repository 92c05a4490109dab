"""``shardprep.text.prepare``: a text run's flags, judged before any input is read and again against
the input files found. A flag that does not apply is one line (``UsageError``, exit 2), never
ignored; the flags left out take their defaults and a given ``--vocab`` is loaded."""
from __future__ import annotations

import argparse
import re

import pytest

from shardprep.errors import UsageError
from shardprep.formats.base import InputFile
from shardprep.run import parser
from shardprep.text import prepare
from shardprep.text.pretraining import PretrainingConfig
from shardprep.text.vocab import train_vocab, write_vocab


def _args(*flags: str) -> argparse.Namespace:
    args, _ = parser().parse_known_args(["--input", "x", "--output", "y", *flags])
    return args


@pytest.fixture(scope="module")
def vocab(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    write_vocab(train_vocab(iter(["the cat sat on the mat", "a dog ran far"] * 5), 40), path)
    return str(path)


@pytest.mark.parametrize("flags, message", [
    (["--max-seq-length", "64"], "--max-seq-length goes with --task bert-pretraining|text-classification"),
    (["--task", "bert-pretraining", "--train-vocab", "50", "--schema", "s.json"], "--schema does not go with --task"),
    (["--task", "bert-pretraining", "--train-vocab", "50", "--dedup-bands", "4"],
     "--dedup-bands goes with --dedup near"),
    (["--task", "bert-pretraining", "--train-vocab", "50", "--dedup", "near", "--dedup-threshold", "1.5"],
     "--dedup-threshold 1.5: a share, in (0, 1]"),
    (["--task", "bert-pretraining", "--train-vocab", "50", "--dedup", "near", "--dedup-rows", "0"],
     "--dedup-rows 0: expected 1 or more"),
    (["--task", "bert-pretraining", "--train-vocab", "50", "--statistics", "on"], "--statistics on does not go with"),
    (["--task", "text-classification", "--train-vocab", "50", "--text-column", "t", "--label", "l",
      "--masked-lm-prob", "0.2"], "--masked-lm-prob goes with --task bert-pretraining"),
    (["--task", "bert-pretraining"], "--task bert-pretraining: give --vocab FILE or --train-vocab SIZE (one of them)"),
    (["--task", "text-classification", "--train-vocab", "50", "--text-column", "t"],
     "--task text-classification needs --text-column C and --label L"),
    (["--task", "bert-pretraining", "--train-vocab", "50", "--label", "l"],
     "--label and --text-pair-column go with --task text-classification"),
    (["--task", "bert-pretraining", "--train-vocab", "50", "--max-seq-length", "16", "--max-predictions-per-seq", "14"],
     "--max-predictions-per-seq 14 is more than --max-seq-length 16 allows: a sequence has at most 13 tokens"),
    (["--task", "bert-pretraining", "--train-vocab", "5"], "--train-vocab 5: a vocabulary needs more than"),
    (["--task", "bert-pretraining", "--vocab", "no/such/vocab.txt"], "--vocab no/such/vocab.txt: cannot be read"),
])
def test_a_flag_that_does_not_apply_is_one_line(flags, message):
    with pytest.raises(UsageError, match="^" + re.escape(message)) as refused:
        prepare.check(_args(*flags))
    assert "\n" not in str(refused.value)


def test_no_task_no_text_flags_nothing_to_check():
    assert prepare.check(_args()) is None


def test_the_flags_left_out_take_their_defaults_and_a_given_vocabulary_is_loaded(vocab):
    args = _args("--task", "bert-pretraining", "--vocab", vocab, "--max-seq-length", "64")
    loaded = prepare.check(args)
    assert loaded is not None and "cat" in loaded.tokens
    d = PretrainingConfig()
    assert (args.max_seq_length, args.max_predictions_per_seq, args.dupe_factor, args.cased) == \
        (64, d.max_predictions_per_seq, d.dupe_factor, False)
    assert prepare.config(args).max_seq_length == 64
    assert set(prepare.schema_of(args)) >= {"input_ids", "input_mask", "segment_ids"}


@pytest.mark.parametrize("task, names, flags, message", [
    ("text-classification", ["a.txt"], ["--text-column", "t", "--label", "l"],
     "--task text-classification reads --text-column of CSV / JSON Lines / Parquet, not .txt"),
    ("bert-pretraining", ["a.csv"], [], "is csv: --task needs --text-column C"),
    ("bert-pretraining", ["a.txt"], ["--text-column", "t"], "--text-column goes with CSV / JSON Lines / Parquet input"),
])
def test_the_flags_are_judged_against_the_input_files(vocab, task, names, flags, message):
    args = _args("--task", task, "--vocab", vocab, *flags)
    prepare.check(args)
    files = [InputFile(i, name, 10, {"txt": "text", "csv": "csv"}[name.rsplit(".", 1)[1]], False)
             for i, name in enumerate(names)]
    with pytest.raises(UsageError, match=re.escape(message)):
        prepare.check_inputs(args, files)
    prepare.check_inputs(args, [])  # nothing found yet: nothing to judge

"""``shardprep.run --task``: a text run's flags and vocabulary, checked before any input is read.

Order, so that a bad flag or vocabulary costs no input read: ``check`` (the flags, and a given
``--vocab`` loaded and judged: missing special tokens, or a case that does not match ``--cased``,
is one line and exit 2), ``check_inputs`` (the flags against the input files found). Then, inside
the run's lease, the launcher builds the run's job, whose first stages build the document store
and plan the work units over it (``text.store_stages``).
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence

from shardprep import naming
from shardprep.errors import UsageError
from shardprep.formats.base import InputFile
from shardprep.schema import Schema
from shardprep.text.corpus import NO_DEDUP, DedupSettings
from shardprep.text.minhash import BANDS, ROWS, SHINGLE
from shardprep.text.pretraining import PretrainingConfig, bert_schema
from shardprep.text.spec import CLASSIFICATION, PRETRAINING, TASKS
from shardprep.text.vocab import Vocab, load_vocab, remember_vocab

__all__ = ["CLASSIFICATION", "PRETRAINING", "add_arguments", "check", "check_inputs", "config", "dedup_settings",
           "schema_of", "share_vocab", "vocab_file"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    t = p.add_argument_group("text for BERT (--task; input: .txt in BERT's layout, or --text-column of CSV / JSON "
                             "Lines / Parquet)")
    t.add_argument("--task", choices=TASKS, help="make BERT's features instead of re-sharding records: "
                   "bert-pretraining (create_pretraining_data.py's instances) or text-classification "
                   "(run_classifier.py's examples, with --label) (default: re-shard the records as they are)")
    t.add_argument("--vocab", metavar="FILE", help="WordPiece vocab.txt (local or gs://), or a data set folder made by a "
                   "text run (its vocabulary); copied into the new data set (the manifest's text.vocab names it)")
    t.add_argument("--train-vocab", type=int, metavar="SIZE", help="learn a WordPiece vocabulary of at most SIZE "
                   "tokens from the input first (deterministic; one more pass), written into the data set (the manifest's "
                   "text.vocab names it)")
    t.add_argument("--cased", action="store_true", default=None, help="keep case and accents (default: lower-case "
                   "and strip accents, as BERT's uncased models); must match the vocabulary")
    t.add_argument("--text-column", metavar="C", help="CSV / JSON Lines / Parquet column holding the text: one "
                   "document per record, its sentences the text's non-blank lines")
    t.add_argument("--text-pair-column", metavar="P", help="text-classification: the second text of a pair")
    t.add_argument("--label", metavar="L", help="text-classification: the label column (labels are mapped to "
                   "ids in sorted order, or in --labels-from/--label-vocab's order, kept in the manifest's text.labels)")
    d = PretrainingConfig()  # defaults None here, so that a flag given to a task it does not fit is refused (check)
    t.add_argument("--max-seq-length", type=int, metavar="N", help="tokens per sequence, "
                   f"[CLS] and [SEP]s included (default: {d.max_seq_length})")
    t.add_argument("--max-predictions-per-seq", type=int, metavar="N", help="bert-pretraining: masked LM "
                   f"predictions per sequence at most, up to --max-seq-length - 3 (default: {d.max_predictions_per_seq})")
    t.add_argument("--masked-lm-prob", type=float, metavar="P",
                   help=f"bert-pretraining: share of tokens masked (default: {d.masked_lm_prob})")
    t.add_argument("--short-seq-prob", type=float, metavar="P", help="bert-pretraining: share of sequences given a "
                   f"shorter random target length (default: {d.short_seq_prob})")
    t.add_argument("--dupe-factor", type=int, metavar="N",
                   help="bert-pretraining: copies of each document, each masked and paired anew: BERT's default, kept so "
                   "that the data set matches create_pretraining_data.py's; the output (and time) grows with N, so try "
                   f"1-2 for a quick look (default: {d.dupe_factor})")
    t.add_argument("--whole-word-masking", action="store_true", default=None,
                   help="bert-pretraining: mask all pieces of a word together")
    t.add_argument("--dedup-bands", type=int, metavar="B", help=f"--dedup near: LSH bands (default: {BANDS})")
    t.add_argument("--dedup-rows", type=int, metavar="R", help=f"--dedup near: MinHash rows a band; more rows, a "
                   f"higher similarity threshold, about (1/B)**(1/R) (default: {ROWS})")
    t.add_argument("--dedup-shingle", type=int, metavar="W", help=f"--dedup near: words a shingle (default: {SHINGLE})")
    t.add_argument("--dedup-threshold", type=float, metavar="J", help="--dedup near: a pair that shares a band is a "
                   "near-duplicate if its MinHash signatures agree in this share of places, the estimated Jaccard "
                   "similarity; where the estimate is within 3 standard errors of J, the exact Jaccard similarity of "
                   f"their shingles decides (up to 8 checks a document) (default: {NO_DEDUP.threshold})")
    _add_dedup_arguments(p)


def _add_dedup_arguments(p: argparse.ArgumentParser) -> None:
    """``--dedup``, one flag for records and text runs (``run_checks.dedup`` judges it for records), and
    ``--dedup-key``."""
    d = p.add_argument_group("duplicates")
    d.add_argument("--dedup", choices=("none", "exact", "near"), help="drop repeated records, keeping the first in "
                   "input order (with --append, also those already in the data set); each dropped one is a dead "
                   "letter duplicate naming the one kept, counted in the manifest. exact: the same Example bytes (or "
                   "--dedup-key value); with --task, repeated documents before any instance is made: exact (the same "
                   "text) or near (also near_duplicate: MinHash of word 5-grams, LSH of "
                   f"{BANDS} bands x {ROWS} rows, about Jaccard 0.72 and up) (default: none)")
    d.add_argument("--dedup-key", metavar="COLUMN", help="--dedup exact without --task: records are the same when "
                   "this feature's values are (a record without it is never a duplicate) (default: the whole record)")


_PRETRAINING_ONLY = ("max_predictions_per_seq", "masked_lm_prob", "short_seq_prob", "dupe_factor", "whole_word_masking")
_NEAR_ONLY = ("dedup_bands", "dedup_rows", "dedup_shingle", "dedup_threshold")
_TEXT_FLAGS = ("vocab", "train_vocab", "cased", "text_column", "text_pair_column", "label", "max_seq_length",
               *_PRETRAINING_ONLY, *_NEAR_ONLY)  # --dedup goes with records too (run_checks.dedup)


def _given(args: argparse.Namespace, names: Sequence[str]) -> list[str]:
    """The flags of ``names`` given on the command line (their defaults are None), as ``--flag-name``s."""
    return ["--" + n.replace("_", "-") for n in names if getattr(args, n, None) is not None]


def _defaults(args: argparse.Namespace) -> None:
    """The text flags left out set to their defaults (``PretrainingConfig``'s; uncased)."""
    d = PretrainingConfig()
    for name, value in (("max_seq_length", d.max_seq_length), ("max_predictions_per_seq", d.max_predictions_per_seq),
                        ("masked_lm_prob", d.masked_lm_prob), ("short_seq_prob", d.short_seq_prob),
                        ("dupe_factor", d.dupe_factor), ("whole_word_masking", d.whole_word_mask), ("cased", False)):
        if getattr(args, name, None) is None:
            setattr(args, name, value)


def check(args: argparse.Namespace) -> Vocab | None:
    """The text flags, before any input is read; the given ``--vocab`` loaded (None: trained later, or no task).

    A flag that does not apply is one line (``UsageError``, exit 2), never ignored: any text flag without
    ``--task``; ``--schema`` with a task (its features are the task's); the masking flags
    (``_PRETRAINING_ONLY``) with text-classification; ``--label`` and ``--text-pair-column`` with
    bert-pretraining; more ``--max-predictions-per-seq`` than ``--max-seq-length - 3`` (the tokens a
    sequence has besides [CLS] and two [SEP], the only ones masked). The flags left out are then set to
    their defaults. ``check_inputs`` judges the flags against the input files once they are found."""
    given = _given(args, _TEXT_FLAGS)
    if args.task is None:
        if given:
            raise UsageError(f"{given[0]} goes with --task bert-pretraining|text-classification")
        return None
    if getattr(args, "schema", None):
        raise UsageError(f"--schema does not go with --task {args.task}: a text run's features are the task's "
                         "(BERT's input_ids, input_mask, segment_ids, ...), fixed by its flags")
    near = _given(args, _NEAR_ONLY)
    if near and args.dedup != "near":
        raise UsageError(f"{near[0]} goes with --dedup near")
    if args.dedup_threshold is not None and not 0 < args.dedup_threshold <= 1:
        raise UsageError(f"--dedup-threshold {args.dedup_threshold}: a share, in (0, 1]")
    for flag in (f for f in near if f != "--dedup-threshold"):
        if getattr(args, flag[2:].replace("-", "_")) < 1:
            raise UsageError(f"{flag} {getattr(args, flag[2:].replace('-', '_'))}: expected 1 or more")
    if getattr(args, "statistics", None) == "on":
        raise UsageError(f"--statistics on does not go with --task {args.task}: a text run's corpus statistics are "
                         "its manifest's text.corpus, shown with samples of its shards by shardprep.inspect and "
                         "shardprep.report")
    masking = _given(args, _PRETRAINING_ONLY)
    if args.task == CLASSIFICATION and masking:
        raise UsageError(f"{masking[0]} goes with --task bert-pretraining: text-classification masks no token and "
                         "makes one example per record")
    _defaults(args)
    if (args.vocab is None) == (args.train_vocab is None):
        raise UsageError(f"--task {args.task}: give --vocab FILE or --train-vocab SIZE (one of them)")
    if args.task == CLASSIFICATION and (args.label is None or args.text_column is None):
        raise UsageError("--task text-classification needs --text-column C and --label L")
    if args.task == PRETRAINING and (args.label or args.text_pair_column):
        raise UsageError("--label and --text-pair-column go with --task text-classification")
    try:
        c = config(args)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.task == PRETRAINING and c.max_predictions_per_seq > c.max_seq_length - 3:
        raise UsageError(f"--max-predictions-per-seq {c.max_predictions_per_seq} is more than --max-seq-length "
                         f"{c.max_seq_length} allows: a sequence has at most {c.max_seq_length - 3} tokens to mask "
                         "([CLS] and its two [SEP] never are)")
    if args.train_vocab is not None:
        if args.train_vocab <= 5:
            raise UsageError(f"--train-vocab {args.train_vocab}: a vocabulary needs more than its 5 special tokens")
        return None
    try:
        vocab = load_vocab(vocab_file(args.vocab), cased=args.cased)
    except (OSError, FileNotFoundError) as e:
        raise UsageError(f"--vocab {args.vocab}: cannot be read ({e})") from None
    except ValueError as e:
        raise UsageError(f"--vocab {args.vocab}: {e}") from None
    if vocab.warning:
        raise UsageError(f"--vocab {args.vocab}: {vocab.warning}")
    return vocab


def vocab_file(given: str) -> str:
    """``--vocab``'s file: a vocab.txt, or the vocabulary a data set folder's manifest names (``text.vocab``),
    so a classification run can take a pre-training data set's vocabulary by its folder."""
    from shardprep import manifest

    if not manifest.exists(given):
        return given
    text = manifest.load(given).text or {}
    if not isinstance(text.get("vocab"), str):
        raise UsageError(f"--vocab {given}: that data set was not made by a text run (its manifest names no vocabulary)")
    return naming.join(given, text["vocab"])


def check_inputs(args: argparse.Namespace, files: Sequence[InputFile]) -> None:
    """The text flags against the input files found, before any is read (``UsageError``, one line):
    ``--text-column`` names a column of CSV / JSON Lines / Parquet input, so input of .txt files alone
    refuses it and input of any of them needs it; text-classification reads such columns only, never .txt."""
    if args.task is None or not files:
        return
    text = [f for f in files if f.format == "text"]
    if args.task == CLASSIFICATION and text:
        raise UsageError(f"--task text-classification reads --text-column of CSV / JSON Lines / Parquet, not .txt "
                         f"({text[0].url})")
    column = [f.url for f in files if f.format != "text"]
    if column and args.text_column is None:
        raise UsageError(f"{column[0]} is {files[0].format if files[0].format != 'text' else 'tabular'}: --task "
                         "needs --text-column C for CSV / JSON Lines / Parquet input")
    if args.text_column is not None and len(text) == len(files):
        raise UsageError(f"--text-column goes with CSV / JSON Lines / Parquet input: {text[0].url} is .txt, read in "
                         "BERT's layout (a sentence a line, a blank line between documents); leave --text-column out")


def dedup_settings(args: argparse.Namespace) -> DedupSettings:
    """``--dedup`` and its LSH flags (their defaults where left out)."""
    threshold = getattr(args, "dedup_threshold", None)
    return DedupSettings(getattr(args, "dedup", None) or "none", getattr(args, "dedup_bands", None) or BANDS,
                         getattr(args, "dedup_rows", None) or ROWS, getattr(args, "dedup_shingle", None) or SHINGLE,
                         NO_DEDUP.threshold if threshold is None else threshold)


def config(args: argparse.Namespace) -> PretrainingConfig:
    return PretrainingConfig(args.max_seq_length, args.max_predictions_per_seq, args.masked_lm_prob,
                             args.short_seq_prob, args.dupe_factor, args.whole_word_masking, seed=args.seed)


def schema_of(args: argparse.Namespace) -> Schema:
    from shardprep.formats.text import classification_schema

    if args.task == CLASSIFICATION:
        return classification_schema(args.max_seq_length)
    return bert_schema(args.max_seq_length, args.max_predictions_per_seq)


def share_vocab(vocab: Vocab | None, output: str, run_id: str) -> None:
    """Before the engine's workers start: the given vocabulary is the one the run writes to its
    vocab.txt, so a process forked from here tokenizes with it instead of loading that file again."""
    remember_vocab(naming.join(output, naming.vocab_path(run_id)), vocab)

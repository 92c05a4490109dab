"""``shardprep.run --task``: the launcher's side of a text run (flags, vocabulary, document store, units).

Order, so that a bad flag or vocabulary costs no input read: ``check`` (the flags, and a given
``--vocab`` loaded and judged: missing special tokens, or a case that does not match ``--cased``,
is one line and exit 2), then, inside the run's lease, ``plan``: ``vocab.txt`` written into the run's
folder, the document store (``text.store``; with a given vocabulary, a pre-training run's
documents tokenized as it is built), or the store, ``--train-vocab``'s pass over it and then
``vocab.txt``; and the job's work units (byte ranges of the store, a ``TextSpec`` on each).
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from shardprep import formats, fs, naming
from shardprep.errors import InputError, UsageError
from shardprep.formats.base import InputFile, WorkUnit
from shardprep.label_vocab import apply_vocabulary
from shardprep.schema import Schema
from shardprep.text.corpus import NO_DEDUP, DedupSettings
from shardprep.text.minhash import BANDS, ROWS, SHINGLE
from shardprep.text.pretraining import PretrainingConfig, bert_schema
from shardprep.text.spec import CLASSIFICATION, PRETRAINING, TASKS, TextSpec
from shardprep.text.store import build_store, sentences
from shardprep.text.vocab import PROGRESS_SECONDS, Vocab, load_vocab, remember_vocab, train_vocab, write_vocab

__all__ = ["add_arguments", "check", "check_inputs", "plan", "schema_of", "share_vocab"]

log = logging.getLogger("shardprep")
MIN_UNIT_BYTES, MAX_UNIT_BYTES = 1 << 20, 16 << 20


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
    t.add_argument("--dedup", choices=("none", "exact", "near"), help="drop repeated documents before any instance "
                   "is made, keeping the first in input order; each dropped one is a dead letter naming it: exact "
                   "(reason duplicate: the same text) or near (also near_duplicate: MinHash of word 5-grams, LSH of "
                   f"{BANDS} bands x {ROWS} rows, about Jaccard 0.72 and up) (default: none)")
    t.add_argument("--dedup-bands", type=int, metavar="B", help=f"--dedup near: LSH bands (default: {BANDS})")
    t.add_argument("--dedup-rows", type=int, metavar="R", help=f"--dedup near: MinHash rows a band; more rows, a "
                   f"higher similarity threshold, about (1/B)**(1/R) (default: {ROWS})")
    t.add_argument("--dedup-shingle", type=int, metavar="W", help=f"--dedup near: words a shingle (default: {SHINGLE})")
    t.add_argument("--dedup-threshold", type=float, metavar="J", help="--dedup near: a pair that shares a band is a "
                   "near-duplicate if its MinHash signatures agree in this share of places, the estimated Jaccard "
                   f"similarity (default: {NO_DEDUP.threshold})")


_PRETRAINING_ONLY = ("max_predictions_per_seq", "masked_lm_prob", "short_seq_prob", "dupe_factor", "whole_word_masking")
_NEAR_ONLY = ("dedup_bands", "dedup_rows", "dedup_shingle", "dedup_threshold")
_TEXT_FLAGS = ("vocab", "train_vocab", "cased", "text_column", "text_pair_column", "label", "max_seq_length",
               *_PRETRAINING_ONLY, "dedup", *_NEAR_ONLY)


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
    refuses it; text-classification reads such columns only, never .txt."""
    if args.task is None or not files:
        return
    text = [f for f in files if f.format == "text"]
    if args.task == CLASSIFICATION and text:
        raise UsageError(f"--task text-classification reads --text-column of CSV / JSON Lines / Parquet, not .txt "
                         f"({text[0].url})")
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


def unit_bytes(total: int, given_mb: float | None) -> int:
    """Store bytes per unit: ``--unit-mb``, else total / 32 within 1-16 MB (a unit's instances are many times its text)."""
    if given_mb is not None:
        return max(1, int(given_mb * 1024 * 1024))
    return max(MIN_UNIT_BYTES, min(MAX_UNIT_BYTES, total // 32))


def plan(args: argparse.Namespace, vocab: Vocab | None, files: Sequence[InputFile], column_units: dict[int, list],
         output: str, run_id: str, max_line_bytes: int,
         run_stage: Callable[[Any, list], list] | None = None, on_workers: bool = True) -> tuple[list[WorkUnit], dict]:
    """Writes the store and the run's vocab.txt (in its run folder, so a failed run leaves the committed
    data set's as it was); the job's units and the manifest's ``text`` entry. ``run_stage``:
    the engine's runner of the store's first step, a part per input file or piece (``shardprep.job.Plan``);
    ``on_workers``: it runs where the job's stages will (``Engine.plans_on_workers``), so the store's
    parts are tokenized as they are built (else, on Beam's engines, in the launcher before the graph:
    the job's workers tokenize, in CountRanges)."""
    column = [f.url for f in files if f.format != "text"]
    if column and args.text_column is None:
        raise UsageError(f"{column[0]} is {files[0].format if files[0].format != 'text' else 'tabular'}: --task "
                         "needs --text-column C for CSV / JSON Lines / Parquet input")
    if args.task == CLASSIFICATION and len(column) < len(files):
        raise UsageError("--task text-classification reads --text-column of CSV / JSON Lines / Parquet, not .txt")
    folder = naming.join(output, naming.spill_folder(run_id)) + "/text"
    total = sum(f.size for f in files)
    vocab_url = naming.join(output, naming.vocab_path(run_id))
    tokenize = None
    dedup = dedup_settings(args)
    if vocab is not None:  # written first: the store's step tokenizes with it (a worker of another engine reads it)
        written = write_vocab(list(vocab.tokens), vocab_url)  # (not with --dedup: CountRanges tokenizes those kept)
        tokenize = (vocab_url, args.cased) if args.task == PRETRAINING and on_workers and dedup.mode == "none" else None
    result = build_store(files, folder, unit_bytes=unit_bytes(total, args.unit_mb), column_units=column_units,
                         columns=(args.text_column, args.text_pair_column, args.label), max_line_bytes=max_line_bytes,
                         read_unit=formats.read_unit, run=run_stage, tokenize=tokenize, dedup=dedup)
    if result.num_documents == 0:
        raise InputError(f"found no document in the input ({result.stats.bad_lines} bad lines, "
                         f"{result.stats.empty_documents} empty documents"
                         + "".join(f", {n} {r}" for r, n in result.removed.items() if n)
                         + "): check --input and --text-column")
    if vocab is None:
        store = f"{folder}/store.jsonl"
        tokens = train_vocab(progress_lines(sentences(store), fs.size(store)), args.train_vocab, cased=args.cased,
                             progress=log.info)
        log.info("trained a vocabulary of %d tokens", len(tokens))
        written = write_vocab(tokens, vocab_url)
    else:
        tokens = list(vocab.tokens)
    labels = result.labels
    if args.task == CLASSIFICATION and getattr(args, "label_classes", ()):  # --labels-from / --label-vocab
        labels = apply_vocabulary(args.label_classes, result.labels, what=f"label column {args.label!r}")
    spec = TextSpec(args.task, f"{folder}/store.jsonl", f"{folder}/index.npy", result.num_documents, vocab_url,
                    args.cased, config(args), labels, result.stats.sentences)
    by_index = {f.index: dataclasses.replace(f, format="text", gzip=False, text=spec) for f in files}
    units, count = [], {}
    for u in result.units:
        k = count[u.file_index] = count.get(u.file_index, -1) + 1
        units.append(WorkUnit(by_index[u.file_index], k, u.start, u.end, u.first_doc))
    log.info("%s -> %d work units of the document store", _counts_line(args.task, result), len(units))
    return units, spec.manifest_entry(len(tokens), vocab=naming.vocab_path(run_id), vocab_bytes=written[0],
                                      vocab_crc32c=written[1], corpus=result.corpus.entry(),
                                      dedup={**dedup.entry(), "removed": result.removed} if dedup.mode != "none" else None)


def _counts_line(task: str, result) -> str:
    """The store's counts for the log: documents and sentences, or a classification run's examples."""
    s, c = result.stats, result.corpus
    if task == CLASSIFICATION:
        line = f"{s.documents:,} examples"
    else:
        line = f"{s.documents:,} documents, {s.sentences:,} sentences"
    line += f", {s.bad_lines:,} bad lines"
    if c.exact_duplicate_documents:
        line += f"; {c.exact_duplicate_documents:,} documents are exact copies of another"
    if c.sentences_sampled and task == PRETRAINING:
        line += f"; {100 * c.sentences_repeated / c.sentences_sampled:.1f}% of sentences occur more than once"
    removed = [f"{n:,} {r.replace('_', '-')}s" for r, n in result.removed.items() if n]
    if result.removed:
        line += f"; --dedup removed {' and '.join(removed) if removed else 'nothing'}"
    return line


def progress_lines(lines: Iterator[str], total: int, every: float = PROGRESS_SECONDS) -> Iterator[str]:
    """``lines`` as they are, logging about every ``every`` seconds how far through ``total`` bytes of
    text (UTF-8, counted from the lines) the pass is."""
    done, last, start = 0, time.monotonic(), time.monotonic()
    for line in lines:
        done += len(line.encode("utf-8")) + 1
        if time.monotonic() - last >= every:
            last = time.monotonic()
            log.info("--train-vocab: read %.0f of %.0f MB of text (%.0f%%, %.0f s)", done / 1e6, total / 1e6,
                     min(100.0, 100 * done / max(1, total)), last - start)
        yield line


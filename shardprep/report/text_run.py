"""A text run's corpus and sequences, for ``shardprep.report`` and ``shardprep.inspect``.

From the manifest's ``text`` entry (exact, counted as the run read its input): documents,
sentences, exact copies, repeated sentences and the most repeated, classes, what ``--dedup``
removed, the settings. From a sample of the shards (``sample``: the first records of every shard,
``SAMPLE_RECORDS`` in all, read as ``verify`` reads shards): tokens, the sequence lengths and the
padding share, the masked share and predictions a sequence, the next-sentence balance, the
vocabulary's coverage and the [UNK] rate. ``text_flags`` says what a person should look at;
``decoded`` shows a record's ids as wordpieces. Every string from the data goes through
``display.shown`` (inspect) or ``display.html_text`` (the report).
"""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from shardprep import manifest, members, shard_reader
from shardprep.example import decode_example
from shardprep.report.red_flags import IMBALANCE_LIMIT, Flag

__all__ = ["DUPLICATE_LIMIT", "PADDING_LIMIT", "REPEATED_LIMIT", "SAMPLE_RECORDS", "UNK_LIMIT", "TextSample",
           "decoded", "sample", "text_flags", "text_rows", "vocabulary"]

SAMPLE_RECORDS = 20_000
DUPLICATE_LIMIT = 0.02  # exact copies kept, share of documents
REPEATED_LIMIT = 0.3  # sentence occurrences whose sentence occurs more than once
PADDING_LIMIT = 0.5  # [PAD] share of the sequences' positions
UNK_LIMIT = 0.01  # [UNK] share of the tokens
BINS = 16


@dataclasses.dataclass
class TextSample:
    """What a sample of a text data set's records holds."""

    records: int = 0
    positions: int = 0  # records x max_seq_length
    tokens: int = 0  # input_mask ones
    unk: int = 0
    ids_seen: int = 0  # distinct ids among the tokens
    lengths: list = dataclasses.field(default_factory=list)  # histogram counts of BINS bins over 0..max_seq_length
    predictions: int = 0  # masked LM weights
    random_next: int = 0
    classes: dict = dataclasses.field(default_factory=dict)  # label id -> records
    first: list = dataclasses.field(default_factory=list)  # the first few records, decoded

    @property
    def padding(self) -> float:
        return 1 - self.tokens / self.positions if self.positions else 0.0


def vocabulary(root: str, text: dict) -> list[str]:
    """The data set's vocabulary (``text.vocab``, opened through ``shardprep.members``); [] where unreadable."""
    try:
        data = members.read_member(root, text["vocab"], field="text.vocab", size=text.get("vocab_num_bytes"),
                                   cap=64 << 20)
    except (OSError, ValueError, KeyError):
        return []
    return data.decode("utf-8", "replace").lstrip("\ufeff").split("\n")[:-1]


def sample(root: str, m: manifest.Manifest, vocab: list[str], limit: int = SAMPLE_RECORDS, keep: int = 3) -> TextSample:
    """Counts over the first records of every shard (``limit`` in all, shared out evenly)."""
    shards = [(name, i, s) for name, split in m.splits.items() for i, s in enumerate(split.shards)]
    out = TextSample()
    if not shards:
        return out
    n = int(m.text.get("max_seq_length", 0)) if m.text else 0
    unk = vocab.index("[UNK]") if "[UNK]" in vocab else -1
    lengths = np.zeros(BINS, np.int64)
    seen = np.zeros(max(len(vocab), 1), bool)
    per_shard = max(1, limit // len(shards))
    for name, i, s in shards:
        with shard_reader.open_shard(root, s.path, limit=s.num_bytes, field=f"splits.{name}.shards[{i}].path") as stream:
            for raw in itertools.islice(shard_reader.records(stream, compression=m.compression), per_shard):
                r = decode_example(raw)
                mask = r.get("input_mask", [])
                ids = np.asarray(r.get("input_ids", []), np.int64)[:int(sum(mask))]
                out.records += 1
                out.positions += n or len(mask)
                out.tokens += len(ids)
                out.unk += int((ids == unk).sum())
                seen[ids[(ids >= 0) & (ids < len(seen))]] = True
                lengths[min(BINS - 1, len(ids) * BINS // max(1, n))] += 1
                out.predictions += int(sum(r.get("masked_lm_weights", [])))
                out.random_next += int(sum(r.get("next_sentence_labels", [])))
                for label in r.get("label_ids", []):
                    out.classes[int(label)] = out.classes.get(int(label), 0) + 1
                if len(out.first) < keep:
                    out.first.append(r)
    out.lengths, out.ids_seen = lengths.tolist(), int(seen.sum())
    return out


def decoded(record: dict, vocab: list[str]) -> tuple[str, str]:
    """A record's tokens as wordpieces (padding left out), and its masked predictions as ``position:piece``."""
    def piece(i: int) -> str:
        return vocab[i] if 0 <= i < len(vocab) else f"<{i}>"
    k = int(sum(record.get("input_mask", [])))
    tokens = " ".join(f"{piece(int(i))}" for i in record.get("input_ids", [])[:k])
    w = int(sum(record.get("masked_lm_weights", [])))
    masked = ", ".join(f"{int(p)}:{piece(int(i))}" for p, i in zip(record.get("masked_lm_positions", [])[:w],
                                                                    record.get("masked_lm_ids", [])[:w]))
    return tokens, masked


def text_rows(m: manifest.Manifest, s: TextSample, vocab: list[str]) -> list[tuple[str, str]]:
    """(what, value) rows of the corpus and the sample, as plain text (callers escape them)."""
    t = m.text or {}
    c = t.get("corpus", {})
    rows: list[tuple[str, str]] = [("task", str(t.get("task", "")))]
    if c:
        rows.append(("documents read" if t.get("task") != "text-classification" else "examples read",
                     f"{c.get('documents', 0):,}"))
        if c.get("sentences"):
            rows.append(("sentences", f"{c['sentences']:,}"))
        rows.append(("exact copies of another document", _share(c.get("exact_duplicate_documents", 0),
                                                               c.get("documents", 0))))
        if c.get("sentences_sampled"):
            basis = "" if c.get("sentence_share", 1) >= 1 else f" (of {c['sentences_sampled']:,} sampled by hash)"
            rows.append(("sentences that occur more than once",
                         _share(c.get("sentences_repeated", 0), c["sentences_sampled"]) + basis))
    d = t.get("dedup")
    if d:
        removed = d.get("removed", {})
        rows.append(("--dedup " + str(d.get("mode", "")), ", ".join(f"{n:,} {r} removed" for r, n in removed.items())
                     + (f" (MinHash of {d['shingle_words']}-word shingles, {d['bands']} bands x {d['rows']} rows)"
                        if "bands" in d else "")))
    rows.append(("vocabulary", f"{t.get('vocab_size', len(vocab)):,} tokens ({'cased' if t.get('cased') else 'uncased'})"))
    settings = ["max_seq_length", "max_predictions_per_seq", "masked_lm_prob", "short_seq_prob", "dupe_factor",
                "whole_word_masking"]
    rows.append(("settings", ", ".join(f"{k} {t[k]}" for k in settings if k in t)))
    if s.records:
        rows.append(("sample", f"the first records of every shard: {s.records:,} records, {s.tokens:,} tokens"))
        rows.append(("tokens a sequence (mean)", f"{s.tokens / s.records:.1f} of {t.get('max_seq_length', '?')}"))
        rows.append(("padding", f"{100 * s.padding:.1f}% of positions"))
        rows.append(("[UNK]", _share(s.unk, s.tokens) + " of tokens"))
        if vocab:
            rows.append(("vocabulary coverage", f"{s.ids_seen:,} of {len(vocab):,} ids seen ({100 * s.ids_seen / len(vocab):.1f}%)"))
        if t.get("task") == "bert-pretraining":
            rows.append(("masked", f"{100 * s.predictions / max(1, s.tokens):.1f}% of tokens, "
                                   f"{s.predictions / s.records:.1f} predictions a sequence"))
            rows.append(("next sentence", f"{100 * s.random_next / s.records:.1f}% random next, "
                                          f"{100 - 100 * s.random_next / s.records:.1f}% actual next"))
    for label, count in _classes(m, s).items():
        rows.append((f"class {label}", _share(count, sum(_classes(m, s).values()))))
    return rows


def _share(part: int, whole: int) -> str:
    return f"{part:,} ({100 * part / whole:.1f}%)" if whole else f"{part:,}"


def _classes(m: manifest.Manifest, s: TextSample) -> dict[str, int]:
    """Classification: examples per class, exact from the manifest, else from the sample."""
    t = m.text or {}
    if t.get("task") != "text-classification":
        return {}
    counts = (t.get("corpus") or {}).get("label_counts")
    if counts:
        return dict(counts)
    labels = t.get("labels", [])
    return {(labels[k] if 0 <= k < len(labels) else str(k)): n for k, n in sorted(s.classes.items())}


def text_flags(m: manifest.Manifest, s: TextSample) -> list[Flag]:
    """Red flags of a text data set: copies kept, repeated sentences, heavy padding, [UNK], skewed classes."""
    t = m.text or {}
    c = t.get("corpus", {})
    flags = []
    docs, copies = c.get("documents", 0), c.get("exact_duplicate_documents", 0)
    mode = (t.get("dedup") or {}).get("mode", "none")
    if docs and copies / docs > DUPLICATE_LIMIT and mode == "none":
        flags.append(Flag("text corpus", f"{copies:,} of {docs:,} documents ({100 * copies / docs:.1f}%) are exact copies "
                          "of another, and were kept: a model memorises repeated text; rerun with --dedup exact or near"))
    if c.get("sentences_sampled") and c.get("sentences_repeated", 0) / c["sentences_sampled"] > REPEATED_LIMIT:
        share = c["sentences_repeated"] / c["sentences_sampled"]
        top = c.get("top_repeated_sentences") or []
        example = f" (the most frequent: {top[0][0]!r}, {top[0][1]:,} times)" if top else ""
        flags.append(Flag("text corpus", f"{100 * share:.1f}% of sentences occur more than once{example}: boilerplate "
                          f"weighs as much as text (more than {100 * REPEATED_LIMIT:.0f}%); clean the corpus, or "
                          "--dedup near for whole near-copies"))
    if s.records and s.padding > PADDING_LIMIT:
        flags.append(Flag("text sequences", f"{100 * s.padding:.1f}% of positions are padding (more than "
                          f"{100 * PADDING_LIMIT:.0f}%): compute spent on nothing; a smaller --max-seq-length fits"))
    if s.tokens and s.unk / s.tokens > UNK_LIMIT:
        flags.append(Flag("text vocabulary", f"{100 * s.unk / s.tokens:.2f}% of tokens are [UNK] (more than "
                          f"{100 * UNK_LIMIT:.0f}%): the vocabulary does not fit the text (case, language, --cased)"))
    classes = _classes(m, s)
    if len(classes) >= 2:
        most, least = max(classes.items(), key=lambda x: x[1]), min(classes.items(), key=lambda x: x[1])
        if least[1] and most[1] / least[1] > IMBALANCE_LIMIT:
            flags.append(Flag("text classes", f"the most frequent class {most[0]!r} has {most[1]:,} examples, "
                              f"{most[1] / least[1]:.1f}x the least frequent {least[0]!r} ({least[1]:,}; more than "
                              f"{IMBALANCE_LIMIT:.0f}x): accuracy says little; weight the classes or resample"))
    return flags

"""What a text run learns of its corpus as the document store is built: per part, then merged.

``PartSketch`` sees each document of one store part (``text.store.BuildPart``) where it is read:
its position, a 64-bit hash of its text (exact copies), its sentences' hashes (repeated sentences;
a share of them chosen by hash value when the corpus is large, so that every copy of a sentence
is kept or left out together), its label (classification) and, for ``--dedup near``, its MinHash
signature and LSH band keys (``text.minhash``). It writes them beside the part (``<part>.corpus.npz``) and keeps the texts
of the part's most repeated sentences. ``merge`` reads the parts' files in store order and gives
the corpus's counts (``CorpusStats``) and the per-document arrays ``text.dedup`` decides over (the
band keys and signatures stay in the parts' files: ``text.bands`` groups them in the job). Every value is a
function of the documents' texts and order, never of the engine or the worker count.
"""
from __future__ import annotations

import collections
import dataclasses
import io
from collections.abc import Sequence

import numpy as np

from shardprep import fs, native
from shardprep.text.minhash import MinHasher, keys_of

__all__ = ["NO_DEDUP", "SENTENCE_HASH_BUDGET", "CorpusArrays", "CorpusStats", "DedupSettings", "PartSketch", "entry_text",
           "label_counts", "merge", "sentence_share"]

SENTENCE_HASH_BUDGET = 32 << 20  # sentence hashes the launcher holds at most (8 bytes each)
TOP_SENTENCES = 10
_BATCH_BYTES = 4 << 20
_DOC_SEED, _SENTENCE_SEED = 0xD0C, 0x5E7


@dataclasses.dataclass(frozen=True)
class DedupSettings:
    """``--dedup`` and its LSH parameters."""

    mode: str = "none"  # none, exact, near
    bands: int = 14
    rows: int = 8
    shingle: int = 5
    threshold: float = 0.8  # a candidate pair (a shared band) is a near-duplicate at this Jaccard (text.dedup.Verifier)

    def entry(self) -> dict:
        """The manifest's ``text.dedup`` settings (none: no entry)."""
        if self.mode == "near":
            return {"mode": "near", "shingle_words": self.shingle, "bands": self.bands, "rows": self.rows,
                    "threshold": self.threshold}
        return {"mode": self.mode}


NO_DEDUP = DedupSettings()


def sentence_share(total_bytes: int) -> float:
    """The share of sentences whose hashes are kept: all of a corpus of up to ~2 GB (~60 bytes a sentence)."""
    return min(1.0, SENTENCE_HASH_BUDGET * 60 / max(1, total_bytes))


def entry_text(entry: dict) -> str:
    """A store entry's text as its part's sketch hashes it: the sentences, or text and pair, one a line."""
    if "s" in entry:
        return "\n".join(entry["s"])
    b = entry.get("b")
    return entry["a"] + ("\n" + b if b else "")


def _hashes(texts: Sequence[str], seed: int) -> np.ndarray:
    encoded = [t.encode("utf-8") for t in texts]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return np.frombuffer(native.hash_values(b"".join(encoded), offsets, seed), np.uint64)


class PartSketch:
    """One store part's documents, as they are read (``add``), written by ``finish``."""

    def __init__(self, dedup: DedupSettings, share: float) -> None:
        self._near = MinHasher(dedup.bands, dedup.rows, dedup.shingle) if dedup.mode == "near" else None
        self._limit = np.uint64(min((1 << 64) - 1, int(share * 2.0 ** 64)))
        self._texts: list[str] = []
        self._sentences: list[str] = []
        self._size = 0
        self.positions: list[int] = []
        self.labels: list[str] = []
        self._doc, self._sent, self._keys = [], [], []
        self._top: collections.Counter[int] = collections.Counter()
        self._text_of: dict[int, str] = {}

    def add(self, position: int, sentences: Sequence[str] | None, text: str, label: str | None = None) -> None:
        """A document: its sentences (pre-training; None: classification) and its whole text."""
        self.positions.append(position)
        if label is not None:
            self.labels.append(label)
        self._texts.append(text)
        self._size += len(text)
        if sentences:
            self._sentences.extend(sentences)
        if self._size >= _BATCH_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._texts:
            self._doc.append(_hashes(self._texts, _DOC_SEED))
            if self._near is not None:
                self._keys.append(self._near.signatures(self._texts))
        if self._sentences:
            h = _hashes(self._sentences, _SENTENCE_SEED)
            kept = h <= self._limit
            self._sent.append(h[kept])
            counts = collections.Counter(h[kept].tolist())
            for value, n in counts.items():
                if n > 1:
                    self._top[value] += n
            for i in np.flatnonzero(kept).tolist():
                value = int(h[i])
                if counts[value] > 1 and value not in self._text_of:
                    self._text_of[value] = self._sentences[i][:300]
        self._texts, self._sentences, self._size = [], [], 0
        if len(self._top) > 4 * TOP_SENTENCES:  # bounded: the part's most repeated candidates
            self._top = collections.Counter(dict(self._top.most_common(2 * TOP_SENTENCES)))
            self._text_of = {k: v for k, v in self._text_of.items() if k in self._top}

    def finish(self, url: str) -> tuple[tuple[int, str], ...]:
        """Writes the part's arrays to ``url`` (.npz); the texts of its most repeated sentences (hash, text)."""
        self._flush()
        arrays = {"positions": np.asarray(self.positions, np.int64), "doc": _cat(self._doc, np.uint64),
                  "sentences": _cat(self._sent, np.uint64)}
        if self.labels:
            arrays["labels"] = np.asarray(self.labels, dtype=str)
        if self._near is not None:
            sig = (np.concatenate(self._keys) if self._keys
                   else np.zeros((0, self._near.bands * self._near.rows), np.uint32))
            arrays["signatures"], arrays["keys"] = sig, keys_of(sig, self._near.bands, self._near.rows)
        data = io.BytesIO()
        np.savez(data, **arrays)
        with fs.write_atomic(url, durable=False) as out:
            out.write(data.getvalue())
        return tuple((h, self._text_of[h]) for h, _ in self._top.most_common(2 * TOP_SENTENCES) if h in self._text_of)


def _cat(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


@dataclasses.dataclass
class CorpusArrays:
    """The whole store's per-document arrays, in id order (before any document is dropped)."""

    positions: np.ndarray  # int64: each document's input position
    files: np.ndarray  # int64: each document's input file index
    doc: np.ndarray  # uint64: each document's text hash
    keys: np.ndarray | None = None  # (N, bands) uint64 band keys: near, in memory (``text.dedup.kept_of``)
    signatures: np.ndarray | None = None  # (M, bands * rows) uint32 MinHash signatures: near, in memory
    signature_ids: np.ndarray | None = None  # int64, ascending: the ids of ``signatures``' rows (None: all N)


@dataclasses.dataclass
class CorpusStats:
    """The corpus's counts, for the manifest's ``text.corpus``."""

    documents: int = 0
    sentences: int = 0
    exact_duplicate_documents: int = 0  # documents that are a copy of an earlier one
    sentences_sampled: int = 0
    sentences_distinct: int = 0  # of those sampled
    sentences_repeated: int = 0  # sampled occurrences of a sentence found more than once
    sentence_share: float = 1.0
    top_repeated: list = dataclasses.field(default_factory=list)  # [[text, count], ...]
    labels: dict = dataclasses.field(default_factory=dict)  # classification: label -> documents kept

    def entry(self) -> dict:
        out = {"documents": self.documents, "sentences": self.sentences,
               "exact_duplicate_documents": self.exact_duplicate_documents}
        if self.sentences_sampled:
            out.update({"sentences_sampled": self.sentences_sampled, "sentences_distinct": self.sentences_distinct,
                        "sentences_repeated": self.sentences_repeated, "sentence_share": self.sentence_share,
                        "top_repeated_sentences": self.top_repeated})
        if self.labels:
            out["label_counts"] = self.labels
        return out


def merge(parts: Sequence, share: float) -> tuple[CorpusArrays, CorpusStats]:
    """The parts' sketches (``StorePart.corpus`` urls, in store order) as whole-corpus arrays (no
    band keys or signatures: ``--dedup near`` groups those in the job, ``text.bands``) and counts."""
    positions, files, docs, sentences, tops = [], [], [], [], {}
    for part in parts:
        with np.load(io.BytesIO(fs.read_bytes(part.corpus))) as z:
            positions.append(z["positions"])
            files.append(np.full(len(z["positions"]), part.file_index, np.int64))
            docs.append(z["doc"])
            sentences.append(z["sentences"])
        tops.update(dict(part.top_sentences))
    doc = _cat(docs, np.uint64)
    arrays = CorpusArrays(_cat(positions, np.int64), _cat(files, np.int64), doc)
    stats = CorpusStats(documents=len(doc), exact_duplicate_documents=int(len(doc) - len(np.unique(doc))),
                        sentence_share=share)
    sent = _cat(sentences, np.uint64)
    if len(sent):
        values, counts = np.unique(sent, return_counts=True)
        stats.sentences_sampled, stats.sentences_distinct = len(sent), len(values)
        stats.sentences_repeated = int(counts[counts > 1].sum())
        order = np.argsort(-counts, kind="stable")
        for i in order[:4 * TOP_SENTENCES].tolist():
            if counts[i] < 2 or len(stats.top_repeated) >= TOP_SENTENCES:
                break
            text = tops.get(int(values[i]))
            if text is not None:
                stats.top_repeated.append([text, int(counts[i])])
    return arrays, stats


def label_counts(parts: Sequence, kept: np.ndarray) -> dict[str, int]:
    """Classification: the documents kept of each label, by label (sorted)."""
    names: list[np.ndarray] = []
    for part in parts:
        with np.load(io.BytesIO(fs.read_bytes(part.corpus))) as z:
            if "labels" in z:
                names.append(z["labels"])
    if not names:
        return {}
    values, counts = np.unique(np.concatenate(names)[kept], return_counts=True)
    return {str(v): int(c) for v, c in zip(values.tolist(), counts.tolist())}

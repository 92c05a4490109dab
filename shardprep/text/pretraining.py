"""BERT pre-training instances, as google-research/bert's create_pretraining_data.py makes them.

``create_instances(document, doc_id, ...)`` is BERT's ``create_instances_from_document`` for one
tokenized document (a list of sentences, each a list of token ids), for each of ``dupe_factor``
copies: segment pairs up to ``max_seq_length - 3`` tokens (a shorter target with
``short_seq_prob``), a random next segment half the time, then masked LM (80% [MASK], 10% the
token itself, 10% a random token; ``whole_word_mask`` masks all pieces of a word together).

Determinism across work units processed independently, in any order:

* each (document, copy) has its own RNG, ``random.Random`` seeded from blake2b(seed, doc_id,
  copy): BERT's one shared RNG would make a document's instances depend on every document before it;
* the random next segment's document is chosen by a keyed hash, blake2b(seed, doc_id, copy,
  instance index) mod (num_documents - 1), skipping ``doc_id`` itself, over the corpus's document
  ids ``0 .. num_documents - 1``; the caller's ``random_document(id)`` returns that document,
  tokenized, from wherever it is (another unit). BERT draws it from the shared RNG, and tries ten
  times to avoid the document itself; here it is never the document itself (unless the corpus has one).

Everything else (the short target once per document, where segment A ends, truncation from a random
end, which tokens are masked and how) draws from the document's RNG in BERT's order.

``instance_row`` turns an instance into BERT's features: a row for ``shardprep.example``'s encoder
under ``bert_schema``.
"""
from __future__ import annotations

import array
import dataclasses
import hashlib
import itertools
import random
from collections.abc import Callable, Iterator, Sequence

from shardprep.schema import FeatureSpec, Schema
from shardprep.text.vocab import Vocab

__all__ = ["Document", "Instance", "PackedDocument", "PretrainingConfig", "bert_schema", "create_instances", "document_rng",
           "instance_key", "instance_row", "random_document_id", "tokenize_document"]

Document = Sequence[Sequence[int]]  # sentences of token ids


@dataclasses.dataclass(frozen=True)
class PretrainingConfig:
    """create_pretraining_data.py's flags, with its defaults (random_seed 12345)."""

    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    dupe_factor: int = 10
    whole_word_mask: bool = False
    seed: int = 12345

    def __post_init__(self) -> None:
        if self.max_seq_length < 5:
            raise ValueError(f"max_seq_length {self.max_seq_length}: it must hold [CLS] A [SEP] B [SEP], at least 5")
        if self.max_predictions_per_seq < 1 or self.dupe_factor < 1:
            raise ValueError("max_predictions_per_seq and dupe_factor must be at least 1")
        if not 0 <= self.masked_lm_prob <= 1 or not 0 <= self.short_seq_prob <= 1:
            raise ValueError("masked_lm_prob and short_seq_prob are probabilities, in [0, 1]")


@dataclasses.dataclass(frozen=True)
class Instance:
    """One training instance, as BERT's TrainingInstance but with ids."""

    input_ids: list[int]  # [CLS] A [SEP] B [SEP], masked; unpadded
    segment_ids: list[int]
    is_random_next: bool
    masked_lm_positions: list[int]
    masked_lm_ids: list[int]  # the original ids at those positions


def _key(*parts: int) -> bytes:
    return hashlib.blake2b(b"".join(p.to_bytes(16, "little", signed=True) for p in parts), digest_size=16).digest()


def instance_key(seed: int, doc_id: int, copy: int) -> bytes:
    """The 16 bytes whose little-endian int seeds ``document_rng`` (the compiled twin takes them as they are)."""
    return _key(0, seed, doc_id, copy)


def document_rng(seed: int, doc_id: int, copy: int) -> random.Random:
    """The RNG of one copy of one document: the same whatever else is processed, or in which order."""
    return random.Random(int.from_bytes(instance_key(seed, doc_id, copy), "little"))


def random_document_id(seed: int, doc_id: int, copy: int, instance: int, num_documents: int) -> int:
    """The document the ``instance``-th instance of (doc_id, copy) takes a random next segment from.

    A keyed hash over the corpus's document ids, never ``doc_id`` unless it is the only one; each
    other document is equally likely (up to 2**-128)."""
    if num_documents <= 1:
        return 0
    r = int.from_bytes(_key(1, seed, doc_id, copy, instance), "little") % (num_documents - 1)
    return r + 1 if r >= doc_id else r


def tokenize_document(vocab: Vocab, sentences: Sequence[str]) -> list[list[int]]:
    """A document's sentences as token ids, sentences that tokenize to nothing left out (as BERT)."""
    return [ids for ids in vocab.encode_batch(sentences) if ids]


class PackedDocument(Sequence[Sequence[int]]):
    """A tokenized document in 4 bytes a token (a list of Python ints takes ~10x that): what the
    document reader caches. ``packed`` is (int32 ids, int64 end of each sentence) as bytes, read as
    they are by the compiled instance maker; items are the sentences' id lists (typed views made on
    first use: a document the compiled maker reads needs none)."""

    __slots__ = ("packed", "_views")

    def __init__(self, sentences: Sequence[Sequence[int]]) -> None:
        ids = array.array("i", itertools.chain.from_iterable(sentences))
        ends = array.array("q", itertools.accumulate(map(len, sentences)))
        self.packed, self._views = (ids.tobytes(), ends.tobytes()), None

    @classmethod
    def from_packed(cls, ids, ends) -> PackedDocument:
        """A document from its packed buffers as they are (``bytes`` or byte ``memoryview``s; no copy)."""
        self = cls.__new__(cls)
        self.packed, self._views = (ids, ends), None
        return self

    @property
    def nbytes(self) -> int:
        return len(self.packed[0]) + len(self.packed[1])

    def __len__(self) -> int:
        return len(self.packed[1]) >> 3

    def __getitem__(self, i):  # type: ignore[override]
        n = len(self)
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(n))]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        if self._views is None:
            self._views = tuple(memoryview(b).cast("B").cast(t) for b, t in zip(self.packed, "iq"))
        ids, ends = self._views
        return ids[ends[i - 1] if i else 0:ends[i]].tolist()


def _truncate_pair(a: list[int], b: list[int], max_num_tokens: int, rng: random.Random) -> tuple[list[int], list[int]]:
    """BERT's truncate_seq_pair, without its quadratic ``del tokens[0]``: the same draws, the same result."""
    a0, a1, b0, b1 = 0, len(a), 0, len(b)
    while (a1 - a0) + (b1 - b0) > max_num_tokens:
        if a1 - a0 > b1 - b0:
            if rng.random() < 0.5:
                a0 += 1
            else:
                a1 -= 1
        elif rng.random() < 0.5:
            b0 += 1
        else:
            b1 -= 1
    return a[a0:a1], b[b0:b1]


def _mask(tokens: list[int], cfg: PretrainingConfig, vocab_size: int, special: frozenset[int],
          continuation: Callable[[int], bool], mask_id: int, rng: random.Random) -> tuple[list[int], list[int], list[int]]:
    """BERT's create_masked_lm_predictions, over ids."""
    cand: list[list[int]] = []
    for i, t in enumerate(tokens):
        if t in special:  # [CLS], [SEP]
            continue
        if cfg.whole_word_mask and cand and continuation(t):
            cand[-1].append(i)
        else:
            cand.append([i])
    rng.shuffle(cand)
    output = list(tokens)
    num_to_predict = min(cfg.max_predictions_per_seq, max(1, int(round(len(tokens) * cfg.masked_lm_prob))))
    masked: list[tuple[int, int]] = []
    covered: set[int] = set()
    for index_set in cand:
        if len(masked) >= num_to_predict:
            break
        if len(masked) + len(index_set) > num_to_predict:
            continue
        if any(i in covered for i in index_set):
            continue
        for i in index_set:
            covered.add(i)
            if rng.random() < 0.8:
                new = mask_id
            elif rng.random() < 0.5:
                new = tokens[i]
            else:
                new = rng.randint(0, vocab_size - 1)
            output[i] = new
            masked.append((i, tokens[i]))
    masked.sort()
    return output, [i for i, _ in masked], [t for _, t in masked]


def create_instances(document: Document, doc_id: int, *, num_documents: int,
                     random_document: Callable[[int], Document], vocab: Vocab,
                     config: PretrainingConfig = PretrainingConfig(),
                     copies: Sequence[int] | None = None) -> Iterator[Instance]:
    """The instances of one tokenized document, for each copy ``0 .. dupe_factor - 1`` (or ``copies``).

    ``doc_id`` is the document's id in the corpus (``0 .. num_documents - 1``, the same in every
    unit); ``random_document(id)`` returns document ``id`` tokenized the same way (sentences that
    tokenize to nothing left out; no empty document). An empty ``document`` yields nothing."""
    if not 0 <= doc_id < num_documents:
        raise ValueError(f"doc_id {doc_id} is outside the corpus's ids 0 .. {num_documents - 1}")
    if not document:
        return
    special = frozenset((vocab.cls_id, vocab.sep_id))
    cont = vocab.continuation
    for copy in (range(config.dupe_factor) if copies is None else copies):
        rng = document_rng(config.seed, doc_id, copy)
        yield from _from_document(document, doc_id, copy, num_documents, random_document, config, len(vocab),
                                  special, cont.__getitem__, vocab.cls_id, vocab.sep_id, vocab.mask_id, rng)


def _from_document(document: Document, doc_id: int, copy: int, num_documents: int,
                   random_document: Callable[[int], Document], cfg: PretrainingConfig, vocab_size: int,
                   special: frozenset[int], continuation: Callable[[int], bool], cls_id: int, sep_id: int,
                   mask_id: int, rng: random.Random) -> Iterator[Instance]:
    max_num_tokens = cfg.max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < cfg.short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    chunk: list[Sequence[int]] = []
    current_length = 0
    made = 0
    i = 0
    while i < len(document):
        segment = document[i]
        chunk.append(segment)
        current_length += len(segment)
        if i == len(document) - 1 or current_length >= target_seq_length:
            if chunk:
                a_end = 1
                if len(chunk) >= 2:
                    a_end = rng.randint(1, len(chunk) - 1)
                tokens_a: list[int] = []
                for j in range(a_end):
                    tokens_a.extend(chunk[j])
                tokens_b: list[int] = []
                if len(chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    other = random_document(random_document_id(cfg.seed, doc_id, copy, made, num_documents))
                    random_start = rng.randint(0, len(other) - 1)
                    for j in range(random_start, len(other)):
                        tokens_b.extend(other[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    i -= len(chunk) - a_end  # the unused segments go back for the next instance
                else:
                    is_random_next = False
                    for j in range(a_end, len(chunk)):
                        tokens_b.extend(chunk[j])
                tokens_a, tokens_b = _truncate_pair(tokens_a, tokens_b, max_num_tokens, rng)
                if not tokens_a or not tokens_b:  # BERT asserts; only an empty sentence or document can do it
                    raise ValueError(f"document {doc_id}: an empty sentence or random document (tokenize with "
                                     "tokenize_document, which leaves empty sentences out)")
                ids = [cls_id, *tokens_a, sep_id, *tokens_b, sep_id]
                segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
                ids, positions, labels = _mask(ids, cfg, vocab_size, special, continuation, mask_id, rng)
                yield Instance(ids, segment_ids, is_random_next, positions, labels)
                made += 1
            chunk = []
            current_length = 0
        i += 1


def bert_schema(max_seq_length: int = 128, max_predictions_per_seq: int = 20) -> Schema:
    """The features of BERT's run_pretraining.py input: the schema ``instance_row``'s rows fit."""
    seq, pred = (max_seq_length,), (max_predictions_per_seq,)
    return {
        "input_ids": FeatureSpec("int64", seq),
        "input_mask": FeatureSpec("int64", seq),
        "segment_ids": FeatureSpec("int64", seq),
        "masked_lm_positions": FeatureSpec("int64", pred),
        "masked_lm_ids": FeatureSpec("int64", pred),
        "masked_lm_weights": FeatureSpec("float32", pred),
        "next_sentence_labels": FeatureSpec("int64", (1,)),
    }


def instance_row(instance: Instance, config: PretrainingConfig = PretrainingConfig()) -> dict[str, list]:
    """BERT's write_instance_to_example_files features of one instance, zero-padded as BERT pads them."""
    n, p = config.max_seq_length, config.max_predictions_per_seq
    k = len(instance.input_ids)
    m = len(instance.masked_lm_positions)
    if k > n or m > p:
        raise ValueError(f"the instance holds {k} tokens and {m} predictions: more than {n} and {p}")
    pad, ppad = [0] * (n - k), [0] * (p - m)
    return {
        "input_ids": instance.input_ids + pad,
        "input_mask": [1] * k + pad,
        "segment_ids": instance.segment_ids + pad,
        "masked_lm_positions": instance.masked_lm_positions + ppad,
        "masked_lm_ids": instance.masked_lm_ids + ppad,
        "masked_lm_weights": [1.0] * m + [0.0] * (p - m),
        "next_sentence_labels": [1 if instance.is_random_next else 0],
    }

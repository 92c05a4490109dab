"""BERT's pre-training features of an instance as framed tf.train.Example bytes, without the generic encoder.

``InstanceEncoder(config, vocab_size)(instance)`` gives exactly the bytes
``shardprep.example.example_encoder(bert_schema(...))(instance_row(instance, config))`` gives
(tests/shardprep/text/test_encode.py compares them), faster: the features' order, prefixes
and padding are fixed by the config, so only the ids' varints are computed per instance (from a
table of every id's varint), the 0/1 lists are ``bytes`` of the values, the weights repeated
constants. ``encoded_instances`` gives the encoded instances of one document: from the compiled
twin (``shardprep.native._bert``: the same draws of Python's Mersenne Twister, the same bytes,
faster) where it is built and ``SHARDPREP_NATIVE`` is not 0, else ``create_instances`` and the
encoder. ``batches`` turns a unit's ``(position, Example bytes | Bad)`` into the framed batches of
``Format.framed_batches``: each record length's frame header made once, the data CRCs written
by one native call a batch (``native.fill_data_crcs``), the bytes of ``framing.frame``.
"""
from __future__ import annotations

import importlib
import os
import struct
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType

import numpy as np

from shardprep import framing, native
from shardprep.example.wire import varint
from shardprep.formats.base import Bad
from shardprep.text.pretraining import (
    Document,
    Instance,
    PretrainingConfig,
    create_instances,
    instance_key,
    random_document_id,
)
from shardprep.text.vocab import Vocab

__all__ = ["COMPILED", "InstanceEncoder", "batches", "encoded_instances"]


def _compiled() -> ModuleType | None:
    if os.environ.get("SHARDPREP_NATIVE", "1") == "0":
        return None
    try:
        return importlib.import_module("shardprep.native._bert")
    except ImportError:
        return None


_bert = _compiled()
COMPILED = _bert is not None

BATCH_RECORDS, BATCH_BYTES = 4096, 4 << 20


def _prefix(name: str, tag: bytes, packed_length: int) -> bytes:
    """The map entry bytes of a list feature before its ``packed_length`` bytes of packed values
    (``tag``: the Feature's list field): ``wire.map_entry`` of ``wire.feature_message``, less the values."""
    body = b"\x0a" + varint(packed_length)  # the list's packed field: tag, length (the values follow)
    feature = tag + varint(len(body) + packed_length) + body
    key = name.encode()
    inner_length = 1 + len(varint(len(key))) + len(key) + 1 + len(varint(len(feature) + packed_length)) \
        + len(feature) + packed_length
    return (b"\x0a" + varint(inner_length) + b"\x0a" + varint(len(key)) + key + b"\x12"
            + varint(len(feature) + packed_length) + feature)


_ONE, _ZERO = struct.pack("<f", 1.0), struct.pack("<f", 0.0)
_KEPT_BYTES = 16 << 20  # what each table keeps: every length of a usual --max-seq-length, some of a huge one


class InstanceEncoder:
    """Instances of one config and vocabulary size -> serialized Examples (unframed)."""

    def __init__(self, config: PretrainingConfig, vocab_size: int) -> None:
        self.n, self.p = n, p = config.max_seq_length, config.max_predictions_per_seq
        self._varints = [varint(i) for i in range(max(vocab_size, n))]  # ids and positions are below both
        # The mask and weights of each length, made when first needed and kept: memory grows with the
        # lengths that occur, never with n x n (a table of every length would be 10 GB at n = 100,000).
        self._mask_prefix = _prefix("input_mask", b"\x1a", n)
        self._weights_prefix = _prefix("masked_lm_weights", b"\x12", 4 * p)
        self._mask: dict[int, bytes] = {}
        self._weights: dict[int, bytes] = {}
        self._labels = [_prefix("next_sentence_labels", b"\x1a", 1) + bytes([v]) for v in (0, 1)]
        self._segments = _prefix("segment_ids", b"\x1a", n)

    def _list(self, name: str, values: list[int], size: int) -> bytes:
        packed = b"".join(map(self._varints.__getitem__, values)) + b"\x00" * (size - len(values))
        return _prefix(name, b"\x1a", len(packed)) + packed

    def _masked(self, k: int) -> bytes:
        """``input_mask`` of ``k`` tokens: k ones, then zeros to ``n``."""
        if len(self._mask) * self.n >= _KEPT_BYTES:
            self._mask.clear()
        got = self._mask[k] = self._mask_prefix + b"\x01" * k + b"\x00" * (self.n - k)
        return got

    def _weighted(self, m: int) -> bytes:
        """``masked_lm_weights`` of ``m`` predictions: m 1.0s, then 0.0s to ``p``."""
        if len(self._weights) * 4 * self.p >= _KEPT_BYTES:
            self._weights.clear()
        got = self._weights[m] = self._weights_prefix + _ONE * m + _ZERO * (self.p - m)
        return got

    def __call__(self, x: Instance) -> bytes:
        k, m = len(x.input_ids), len(x.masked_lm_positions)
        if k > self.n or m > self.p:
            raise ValueError(f"the instance holds {k} tokens and {m} predictions: more than {self.n} and {self.p}")
        body = b"".join((  # sorted by name, as the generic encoder writes them
            self._list("input_ids", x.input_ids, self.n),
            self._mask.get(k) or self._masked(k),
            self._list("masked_lm_ids", x.masked_lm_ids, self.p),
            self._list("masked_lm_positions", x.masked_lm_positions, self.p),
            self._weights.get(m) or self._weighted(m),
            self._labels[x.is_random_next],
            self._segments, bytes(x.segment_ids), b"\x00" * (self.n - k),
        ))
        return b"\x0a" + varint(len(body)) + body


_HEADERS: dict[int, bytes] = {}  # a record length's frame header (length, its masked CRC): lengths repeat
_NO_CRC = bytes(4)


def _header(n: int) -> bytes:
    header = _HEADERS.get(n)
    if header is None:
        length = struct.pack("<Q", n)
        header = length + struct.pack("<I", framing.masked_crc(length))
        if len(_HEADERS) < 1 << 16:
            _HEADERS[n] = header
    return header


def _joined(records: list[bytes]) -> framing.FramedBatch:
    """``framing.frame`` of each record, back to back: headers from ``_header``, the data CRCs
    written in place by one native call (not two CRC calls and a join per record)."""
    parts = []
    for r in records:
        parts += (_header(len(r)), r, _NO_CRC)
    ends = np.cumsum(np.fromiter(map(len, records), "<u8", len(records)) + 16, dtype="<u8")
    blob = bytearray(b"".join(parts))
    native.fill_data_crcs(blob, ends)
    return framing.FramedBatch(blob, ends)


def encoded_instances(document: Document, doc_id: int, *, num_documents: int,
                      random_document: Callable[[int], Document], vocab: Vocab, config: PretrainingConfig,
                      encoder: InstanceEncoder, compiled: bool = COMPILED) -> Iterator[bytes]:
    """``encoder(x)`` for each ``x`` of ``create_instances(document, doc_id, ...)``, in order."""
    if not compiled:
        for x in create_instances(document, doc_id, num_documents=num_documents, random_document=random_document,
                                  vocab=vocab, config=config):
            yield encoder(x)
        return
    if not 0 <= doc_id < num_documents:
        raise ValueError(f"doc_id {doc_id} is outside the corpus's ids 0 .. {num_documents - 1}")
    if not document:
        return
    c = config
    params = (c.max_seq_length, c.max_predictions_per_seq, c.masked_lm_prob, c.short_seq_prob, c.whole_word_mask,
              len(vocab), vocab.cls_id, vocab.sep_id, vocab.mask_id)
    flags = vocab.continuation_bytes if c.whole_word_mask else b""
    keys = [instance_key(c.seed, doc_id, copy) for copy in range(c.dupe_factor)]

    def other(copy: int, k: int) -> Document:
        return random_document(random_document_id(c.seed, doc_id, copy, k, num_documents))
    try:
        yield from _bert.instances(keys, document, other, params, flags)
    except ValueError as e:
        raise ValueError(f"document {doc_id}: {e}") from None


def batches(items: Iterable[tuple[int, bytes | Bad]]) -> Iterator[framing.FramedBatch | Bad]:
    """Framed batches of the Examples (up to ``BATCH_RECORDS`` or ``BATCH_BYTES``), ``Bad`` ones in place."""
    records: list[bytes] = []
    held = 0
    for _, item in items:
        if isinstance(item, Bad):
            if records:
                yield _joined(records)
                records, held = [], 0
            yield item
            continue
        records.append(item)
        held += len(item) + 16
        if len(records) >= BATCH_RECORDS or held >= BATCH_BYTES:
            yield _joined(records)
            records, held = [], 0
    if records:
        yield _joined(records)

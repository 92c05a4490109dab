"""Text for BERT (``--task``): a unit is a byte range of the run's document store (``text.store``).

``read`` yields BERT's features as rows (``text.pretraining.bert_schema``, or the classification
schema ``classification_schema``): pre-training instances of each document of the unit, for each
of ``dupe_factor`` copies, their random next segments read from the store by id; or one example
per classification record. A store entry that is a bad line or record is yielded as ``Bad`` at its
place in the source. ``.txt`` files are planned by the launcher (``text.store.build_store``), so
``plan`` refuses them without ``--task``.
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING

from shardprep.formats.base import Bad, Format, InputError, InputFile, Record, WorkUnit
from shardprep.schema import FeatureSpec, Schema

if TYPE_CHECKING:
    from shardprep.text.spec import TextSpec
    from shardprep.text.store import DocumentReader
    from shardprep.text.vocab import Vocab

# shardprep.text's modules are imported where they are used: they import formats.base, whose
# package imports this module (the format registry), so a first import of shardprep.text.* would
# otherwise find this module half made.

__all__ = ["TextFormat", "classification_row", "classification_schema"]

_CLASSIFICATION_BATCH = 256  # classification records tokenized in one ``Vocab.encode_batch`` call


@functools.lru_cache(maxsize=2)
def _reader(spec: TextSpec) -> DocumentReader:
    from shardprep.text.pretraining import PackedDocument, tokenize_document
    from shardprep.text.store import DocumentReader
    from shardprep.text.tokens import TokenFiles
    from shardprep.text.vocab import vocab_of

    vocab = vocab_of(spec.vocab_url, spec.cased)
    return DocumentReader(spec.store_url, spec.index_url,
                          lambda sentences: PackedDocument(tokenize_document(vocab, sentences)),
                          packed=TokenFiles(spec.store_url))


def tokenize_unit(unit: WorkUnit) -> int:
    """A pre-training unit's documents tokenized once for the run (``text.tokens``: every worker reads
    them by id); how many. The job's CountRanges step calls it for each unit before any is parsed."""
    from shardprep import fs
    from shardprep.text.pretraining import tokenize_document
    from shardprep.text.spec import PRETRAINING
    from shardprep.text.store import entries
    from shardprep.text.tokens import tokenize_entries, unit_url, write_unit
    from shardprep.text.vocab import vocab_of

    spec: TextSpec = unit.file.text
    if spec.task != PRETRAINING or fs.exists(unit_url(spec.store_url, unit.first_position)):
        return 0  # classification, or tokenized as the store was built (``text.store.BuildPart``)
    vocab = vocab_of(spec.vocab_url, spec.cased)
    return write_unit(spec.store_url, unit.first_position,
                      tokenize_entries(entries(spec.store_url, unit.start, unit.end),
                                       lambda sentences: tokenize_document(vocab, sentences)))


@functools.lru_cache(maxsize=2)
def _encoder(config, vocab_size: int):
    """``text.encode.InstanceEncoder`` once per process (its varint table: one entry per token id)."""
    from shardprep.text.encode import InstanceEncoder

    return InstanceEncoder(config, vocab_size)


def classification_schema(max_seq_length: int) -> Schema:
    """BERT run_classifier.py's features."""
    seq = (max_seq_length,)
    return {"input_ids": FeatureSpec("int64", seq), "input_mask": FeatureSpec("int64", seq),
            "segment_ids": FeatureSpec("int64", seq), "label_ids": FeatureSpec("int64", (1,))}


def classification_row(a: list[int], b: list[int] | None, label_id: int, vocab: Vocab, max_seq_length: int) -> dict:
    """BERT's convert_single_example: [CLS] A [SEP] (B [SEP]), the pair truncated from the longer one's end."""
    if b is None:
        a = a[:max_seq_length - 2]
        b = []
    else:
        a, b = list(a), list(b)
        while len(a) + len(b) > max_seq_length - 3:
            (a if len(a) > len(b) else b).pop()
    ids = [vocab.cls_id, *a, vocab.sep_id] + ([*b, vocab.sep_id] if b else [])
    segments = [0] * (len(a) + 2) + [1] * (len(ids) - len(a) - 2)
    pad = [0] * (max_seq_length - len(ids))
    return {"input_ids": ids + pad, "input_mask": [1] * len(ids) + pad, "segment_ids": segments + pad,
            "label_ids": [label_id]}


class TextFormat(Format):
    name = "text"
    extensions = (".txt",)

    def plan(self, file: InputFile, unit_bytes: int) -> list[WorkUnit]:
        raise InputError(f"{file.url} is text: give --task bert-pretraining (BERT's layout: a sentence per line, "
                         "a blank line between documents) and --vocab FILE or --train-vocab SIZE")

    def read(self, unit: WorkUnit) -> Iterator[Record]:
        from shardprep.text.pretraining import create_instances, instance_row
        from shardprep.text.spec import CLASSIFICATION
        from shardprep.text.vocab import vocab_of

        spec: TextSpec = unit.file.text
        vocab = vocab_of(spec.vocab_url, spec.cased)
        if spec.task == CLASSIFICATION:
            yield from self._classification(unit, spec, vocab)
            return
        cfg = spec.config
        for position, doc_id, document in self._documents(unit, spec):
            if isinstance(document, Bad):
                yield position, document
                continue
            for instance in create_instances(document, doc_id, num_documents=spec.num_documents,
                                             random_document=_reader(spec), vocab=vocab, config=cfg):
                yield position, instance_row(instance, cfg)

    def column_wise(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> bool:
        """Pre-training instances go straight to framed Examples (``text.encode``) under BERT's schema."""
        from shardprep.text.pretraining import bert_schema
        from shardprep.text.spec import PRETRAINING

        spec: TextSpec = unit.file.text
        return spec.task == PRETRAINING and schema == bert_schema(spec.config.max_seq_length,
                                                                  spec.config.max_predictions_per_seq)

    def framed_batches(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> Iterator:
        from shardprep.text.encode import batches
        from shardprep.text.vocab import vocab_of

        spec: TextSpec = unit.file.text
        vocab = vocab_of(spec.vocab_url, spec.cased)
        yield from batches(self._encoded(unit, spec, vocab, _encoder(spec.config, len(vocab))))

    def _encoded(self, unit: WorkUnit, spec: TextSpec, vocab: Vocab, encoder) -> Iterator:
        from shardprep.text.encode import encoded_instances

        for position, doc_id, document in self._documents(unit, spec):
            if isinstance(document, Bad):
                yield position, document
                continue
            for example in encoded_instances(document, doc_id, num_documents=spec.num_documents,
                                             random_document=_reader(spec), vocab=vocab, config=spec.config,
                                             encoder=encoder):
                yield position, example

    def _documents(self, unit: WorkUnit, spec: TextSpec) -> Iterator:
        """``(position, doc_id, tokenized document | Bad)`` of the unit's store entries, in order; each
        document also goes to the reader's cache (the random next segments of the documents near it)."""
        from shardprep.text.pretraining import PackedDocument, tokenize_document
        from shardprep.text.store import entries
        from shardprep.text.tokens import read_unit
        from shardprep.text.vocab import vocab_of

        vocab, reader = vocab_of(spec.vocab_url, spec.cased), _reader(spec)
        doc_id = unit.first_position  # the unit's first document's id (text.store.StoreUnit.first_doc)
        tokenized = read_unit(spec.store_url, doc_id)  # as CountRanges tokenized them (None: not done)
        for entry in entries(spec.store_url, unit.start, unit.end):
            if "r" in entry:
                yield entry["p"], doc_id, Bad(entry["p"], entry["r"], entry["d"], entry["x"])
                continue
            document = next(tokenized) if tokenized is not None else PackedDocument(tokenize_document(vocab, entry["s"]))
            reader.put(doc_id, document)
            yield entry["p"], doc_id, document
            doc_id += 1

    def _classification(self, unit: WorkUnit, spec: TextSpec, vocab: Vocab) -> Iterator[Record]:
        from shardprep.text.store import entries

        label_ids = {label: i for i, label in enumerate(spec.labels)}
        n = spec.config.max_seq_length
        stream = entries(spec.store_url, unit.start, unit.end)
        while chunk := list(itertools.islice(stream, _CLASSIFICATION_BATCH)):
            # The chunk's texts in one ``encode_batch`` (the ids ``encode`` gives, at the pre-training
            # path's cost); their rows in the store's order.
            texts = [t for e in chunk if "r" not in e for t in (e["a"], e.get("b")) if t is not None]
            encoded = iter(vocab.encode_batch(texts))
            for entry in chunk:
                if "r" in entry:
                    yield entry["p"], Bad(entry["p"], entry["r"], entry["d"], entry["x"])
                    continue
                a = next(encoded)
                b = next(encoded) if entry.get("b") is not None else None
                yield entry["p"], classification_row(a, b, label_ids[entry["l"]], vocab, n)

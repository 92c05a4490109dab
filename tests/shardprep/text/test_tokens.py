"""``text.tokens``: each unit's documents tokenized once into a file beside the store, read packed by id."""
from __future__ import annotations

import dataclasses
import gzip

import numpy as np
import pytest

from shardprep.formats.base import InputFile, WorkUnit
from shardprep.formats.text import tokenize_unit
from shardprep.text.encode import COMPILED, InstanceEncoder, encoded_instances
from shardprep.text.pretraining import PackedDocument, PretrainingConfig, tokenize_document
from shardprep.text.spec import PRETRAINING, TextSpec
from shardprep.text.store import DocumentReader, build_store, entries
from shardprep.text.tokens import TokenFiles, read_unit, unit_url, units_url
from shardprep.text.vocab import SPECIAL_TOKENS, load_vocab, write_vocab

WORDS = "the cat sat on a mat dog ran far river stone music night".split()


@pytest.fixture
def store(tmp_path):
    """Three .txt files (one empty, one with a line of invalid UTF-8), small units; the store and its spec."""
    (tmp_path / "a.txt").write_bytes(b"".join(
        b"%s.\n%s %s.\n\n" % (WORDS[i % 13].encode(), WORDS[(i * 5) % 13].encode(), WORDS[(i * 3) % 13].encode())
        for i in range(60)) + b"\xff\xfe.\n\n!!! ???\n\n\x01\n\n")
    (tmp_path / "b.txt").write_bytes(b"")
    (tmp_path / "c.txt").write_bytes(b"the river.\n\nmusic night.\n")
    files = [InputFile(i, str(tmp_path / n), (tmp_path / n).stat().st_size, "text", False)
             for i, n in enumerate(("a.txt", "b.txt", "c.txt"))]
    result = build_store(files, str(tmp_path / "text"), unit_bytes=300, column_units={}, columns=(None, None, None),
                         max_line_bytes=1 << 20, read_unit=None)
    write_vocab([*SPECIAL_TOKENS, *WORDS, ".", "!", "?"], str(tmp_path / "vocab.txt"))
    spec = TextSpec(PRETRAINING, str(tmp_path / "text" / "store.jsonl"), str(tmp_path / "text" / "index.npy"),
                    result.num_documents, str(tmp_path / "vocab.txt"), False)
    units = [WorkUnit(dataclasses.replace(files[u.file_index], text=spec), k, u.start, u.end, u.first_doc)
             for k, u in enumerate(result.units)]
    return spec, units, load_vocab(spec.vocab_url)


def _expected(spec: TextSpec, vocab) -> list[list[list[int]]]:
    return [tokenize_document(vocab, e["s"]) for e in entries(spec.store_url, 0, 1 << 30) if "s" in e]


def test_units_tokenized_once_and_read_by_id(store) -> None:
    spec, units, vocab = store
    expected = _expected(spec, vocab)
    assert len(expected) == spec.num_documents == 64 and [] in expected  # "\\x01" tokenizes to nothing
    firsts = np.load(units_url(spec.store_url)).tolist()
    holding = sorted({u.first_position for u, nxt in zip(units, [*units[1:], None])
                      if (nxt.first_position if nxt else spec.num_documents) > u.first_position})
    assert firsts == holding and len(firsts) > 3  # units without a document (the empty file) are not listed
    assert read_unit(spec.store_url, firsts[0]) is None  # nothing written yet
    assert sum(tokenize_unit(u) for u in units) == spec.num_documents
    for first in firsts:
        got = [list(d) for d in read_unit(spec.store_url, first)]
        assert got == expected[first:first + len(got)]
    files = TokenFiles(spec.store_url)
    for i in [*range(spec.num_documents), 5, 0, 63]:
        doc = files(i)
        assert list(doc) == expected[i] and doc.nbytes == 4 * sum(map(len, expected[i])) + 8 * len(expected[i])
    files.close()


def test_reader_reads_the_tokens_and_falls_back_where_a_unit_has_none(store) -> None:
    spec, units, vocab = store
    expected = _expected(spec, vocab)
    for u in units:
        tokenize_unit(u)
    firsts = np.load(units_url(spec.store_url)).tolist()
    missing = unit_url(spec.store_url, firsts[1])
    import os
    os.remove(missing)
    calls = []

    def tokenize(sentences):
        calls.append(sentences)
        return PackedDocument(tokenize_document(vocab, sentences))

    reader = DocumentReader(spec.store_url, spec.index_url, tokenize, packed=TokenFiles(spec.store_url))
    for i in range(spec.num_documents):
        want = expected[i] or expected[(i + 1) % spec.num_documents]  # an empty document gives the next one
        assert list(reader(i)) == want, i
    assert len(calls) == firsts[2] - firsts[1]  # only the unit whose file is missing was tokenized here
    reader.close()


@pytest.mark.skipif(not COMPILED, reason="shardprep.native._bert is not built")
def test_compiled_maker_takes_a_packed_document_as_the_document() -> None:
    config = PretrainingConfig(dupe_factor=3, short_seq_prob=0.3, max_seq_length=32)
    r = np.random.default_rng(3)
    corpus = [[r.integers(5, 40, r.integers(1, 30)).tolist() for _ in range(r.integers(1, 12))] for _ in range(30)]
    vocab = load_vocab_from(list(SPECIAL_TOKENS) + [f"w{i}" for i in range(40)])
    encoder = InstanceEncoder(config, len(vocab))
    packed = [PackedDocument(d) for d in corpus]
    for d in range(len(corpus)):
        kw = dict(num_documents=len(corpus), vocab=vocab, config=config, encoder=encoder,
                  random_document=packed.__getitem__)
        from_file = PackedDocument.from_packed(*map(memoryview, packed[d].packed))
        assert list(encoded_instances(from_file, d, compiled=True, **kw)) == \
            list(encoded_instances(corpus[d], d, compiled=False, **kw)), d


def load_vocab_from(tokens):
    from shardprep.text.vocab import parse_vocab

    return parse_vocab(tokens)


def test_store_built_with_the_vocabulary_writes_the_token_files_the_units_would(store, tmp_path) -> None:
    spec, units, vocab = store
    for u in units:
        tokenize_unit(u)
    expected = {p.name: p.read_bytes() for p in (tmp_path / "text" / "tokens").iterdir()}
    files = list({u.file.index: dataclasses.replace(u.file, text=None) for u in units}.values())
    (tmp_path / "c.txt.gz").write_bytes(gzip.compress((tmp_path / "c.txt").read_bytes()))  # a gzip file is one part:
    files[2] = dataclasses.replace(files[2], url=str(tmp_path / "c.txt.gz"), gzip=True)  # CountRanges tokenizes it
    result = build_store(files, str(tmp_path / "again"), unit_bytes=300, column_units={},
                         columns=(None, None, None), max_line_bytes=1 << 20, read_unit=None,
                         tokenize=(spec.vocab_url, False))
    assert [(u.start, u.end, u.first_doc) for u in result.units] == [(u.start, u.end, u.first_position) for u in units]
    again = dataclasses.replace(spec, store_url=str(tmp_path / "again" / "store.jsonl"))
    units = [dataclasses.replace(u, file=dataclasses.replace(u.file, text=again)) for u in units]
    assert [tokenize_unit(u) for u in units if u.file.index == 2] == [2]
    assert sum(tokenize_unit(u) for u in units) == 0
    got = {p.name: p.read_bytes() for p in (tmp_path / "again" / "tokens").iterdir()}
    assert got == expected and len(got) > 3  # named for their units, none left under a part's name

"""shardprep.text.encode: the same Example bytes as the generic encoder of instance_row, and its batches."""
from __future__ import annotations

import random

import pytest

from shardprep.example.encoder import example_encoder
from shardprep.formats.base import Bad
from shardprep.framing import frame
from shardprep.text.encode import COMPILED, InstanceEncoder, batches, encoded_instances
from shardprep.text.pretraining import PretrainingConfig, bert_schema, create_instances, instance_row
from shardprep.text.vocab import SPECIAL_TOKENS, parse_vocab

# a vocabulary of 20,000 ids: ids and random replacements of 1, 2 and 3 varint bytes
VOCAB = parse_vocab(list(SPECIAL_TOKENS) + [f"w{i}" for i in range(20_000)])


def _corpus(n: int) -> list[list[list[int]]]:
    rng = random.Random(3)
    return [[[rng.randrange(5, len(VOCAB)) for _ in range(rng.randint(1, 60))] for _ in range(rng.randint(1, 15))]
            for _ in range(n)]


@pytest.mark.parametrize("config", [PretrainingConfig(dupe_factor=2),
                                    PretrainingConfig(max_seq_length=300, max_predictions_per_seq=45, dupe_factor=1,
                                                      masked_lm_prob=0.2),
                                    PretrainingConfig(max_seq_length=16, max_predictions_per_seq=3, dupe_factor=1)])
def test_same_bytes_as_the_generic_encoder(config: PretrainingConfig) -> None:
    corpus = _corpus(40)
    generic = example_encoder(bert_schema(config.max_seq_length, config.max_predictions_per_seq))
    fast = InstanceEncoder(config, len(VOCAB))
    instances = [x for d in range(len(corpus)) for x in create_instances(
        corpus[d], d, num_documents=len(corpus), random_document=corpus.__getitem__, vocab=VOCAB, config=config)]
    assert len(instances) > 50
    assert any(max(x.input_ids) >= 16384 for x in instances)  # 3-byte varints
    assert config.max_seq_length <= 128 or any(max(x.masked_lm_positions) >= 128 for x in instances)
    for x in instances:
        assert fast(x) == generic(instance_row(x, config))
    too_long = PretrainingConfig(max_seq_length=8, max_predictions_per_seq=3)
    with pytest.raises(ValueError, match="more than"):
        InstanceEncoder(too_long, len(VOCAB))(max(instances, key=lambda x: len(x.input_ids)))


def test_batches_frame_in_order_with_bad_ones_in_place(monkeypatch) -> None:
    import shardprep.text.encode as enc

    monkeypatch.setattr(enc, "BATCH_RECORDS", 3)
    corpus = _corpus(5)
    config = PretrainingConfig(dupe_factor=1)
    fast = InstanceEncoder(config, len(VOCAB))
    instances = [x for d in range(5) for x in create_instances(corpus[d], d, num_documents=5,
                                                               random_document=corpus.__getitem__, vocab=VOCAB,
                                                               config=config)][:7]
    bad = Bad(9, "invalid_utf8", "line 9", b"\xff")
    items = [(1, fast(x)) for x in instances[:4]] + [(9, bad)] + [(10, fast(x)) for x in instances[4:]]
    out = list(batches(items))
    assert [len(b.ends) if not isinstance(b, Bad) else "bad" for b in out] == [3, 1, "bad", 3]
    blobs = b"".join(b.blob for b in out if not isinstance(b, Bad))
    assert blobs == b"".join(frame(fast(x)) for x in instances)
    assert out[0].ends.tolist() == [sum(len(frame(fast(x))) for x in instances[:k]) for k in (1, 2, 3)]


# the compiled twin (shardprep.native._bert): the same draws of Python's Mersenne Twister, the same bytes
WORDS = parse_vocab(list(SPECIAL_TOKENS) + [f"w{i}" for i in range(3000)] + [f"##p{i}" for i in range(17_000)])


def _pieces_corpus(n: int, seed: int) -> list[list[list[int]]]:
    """Words of 1-3 pieces (ids above 3005 are ## continuations), sentences of 1-200 tokens."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        doc = []
        for _ in range(rng.randint(1, 25)):
            sentence: list[int] = []
            while len(sentence) < rng.choice((1, 3, 20, 60, 200)):
                sentence.append(rng.randrange(5, 3005))
                sentence += [rng.randrange(3005, len(WORDS)) for _ in range(rng.choice((0, 0, 1, 2)))]
            doc.append(sentence)
        docs.append(doc)
    return docs


@pytest.mark.skipif(not COMPILED, reason="shardprep.native._bert is not built")
@pytest.mark.parametrize("config", [
    PretrainingConfig(dupe_factor=3),
    PretrainingConfig(dupe_factor=2, whole_word_mask=True, seed=9),
    PretrainingConfig(dupe_factor=2, short_seq_prob=0.7, masked_lm_prob=0.3, max_predictions_per_seq=50),
    PretrainingConfig(max_seq_length=300, max_predictions_per_seq=45, dupe_factor=1, whole_word_mask=True),
    PretrainingConfig(max_seq_length=9, max_predictions_per_seq=2, dupe_factor=2, masked_lm_prob=0.5),
])
def test_compiled_twin_gives_the_same_bytes(config: PretrainingConfig) -> None:
    corpus = _pieces_corpus(60, seed=config.dupe_factor)
    encoder = InstanceEncoder(config, len(WORDS))
    made = 0
    for d in range(len(corpus)):
        kw = dict(num_documents=len(corpus), random_document=corpus.__getitem__, vocab=WORDS, config=config,
                  encoder=encoder)
        ours = list(encoded_instances(corpus[d], d, compiled=True, **kw))
        assert ours == list(encoded_instances(corpus[d], d, compiled=False, **kw)), d
        made += len(ours)
    assert made > 100


@pytest.mark.skipif(not COMPILED, reason="shardprep.native._bert is not built")
def test_compiled_twin_errors() -> None:
    config = PretrainingConfig(dupe_factor=1)
    encoder = InstanceEncoder(config, len(WORDS))
    kw = dict(num_documents=2, vocab=WORDS, config=config, encoder=encoder, compiled=True)
    with pytest.raises(ValueError, match="document 0: an empty sentence"):
        list(encoded_instances([[]], 0, random_document=lambda i: [[7]], **kw))  # an empty sentence: BERT asserts
    with pytest.raises(ValueError, match="outside the corpus"):
        list(encoded_instances([[5]], 2, random_document=lambda i: [[7]], **kw))
    with pytest.raises(ZeroDivisionError):  # the reader's own error comes through
        list(encoded_instances([[5]], 0, random_document=lambda i: 1 / 0, **kw))
    assert list(encoded_instances([], 0, random_document=lambda i: [[7]], **kw)) == []


def test_packed_document_is_its_sentences() -> None:
    from shardprep.text.pretraining import PackedDocument

    sentences = [[5, 70000, 6], [7], [8, 9, 2**31 - 1]]
    doc = PackedDocument(sentences)
    assert len(doc) == 3 and list(doc) == sentences and doc[-1] == sentences[-1] and doc[1:] == sentences[1:]
    assert doc.nbytes == 7 * 4 + 3 * 8 and not PackedDocument([])
    with pytest.raises(IndexError):
        doc[3]


@pytest.mark.skipif(not COMPILED, reason="shardprep.native._bert is not built")
def test_compiled_twin_reads_packed_random_documents() -> None:
    from shardprep.text.pretraining import PackedDocument

    config = PretrainingConfig(dupe_factor=2, short_seq_prob=0.3)
    corpus = _pieces_corpus(40, seed=5)
    packed = [PackedDocument(d) for d in corpus]
    encoder = InstanceEncoder(config, len(WORDS))
    for d in range(len(corpus)):
        kw = dict(num_documents=len(corpus), vocab=WORDS, config=config, encoder=encoder)
        assert list(encoded_instances(corpus[d], d, random_document=packed.__getitem__, compiled=True, **kw)) == \
            list(encoded_instances(corpus[d], d, random_document=corpus.__getitem__, compiled=False, **kw)), d


def test_reader_cache_is_bounded_by_bytes(tmp_path) -> None:
    import io as _io

    import numpy as np

    from shardprep.text.pretraining import PackedDocument
    from shardprep.text.store import DocumentReader

    lines = [b'{"p": %d, "s": ["w%d w%d"]}\n' % (i, i % 300, (i * 7) % 300) for i in range(50)]
    (tmp_path / "store.jsonl").write_bytes(b"".join(lines))
    buf = _io.BytesIO()
    np.save(buf, np.cumsum([0] + [len(x) for x in lines[:-1]]))
    (tmp_path / "index.npy").write_bytes(buf.getvalue())
    calls = []

    def tokenize(sentences):
        calls.append(sentences)
        return PackedDocument([[VOCAB.ids[w] for w in s.split()] for s in sentences])

    reader = DocumentReader(str(tmp_path / "store.jsonl"), str(tmp_path / "index.npy"), tokenize, cache_bytes=100)
    for i in range(50):
        assert list(reader(i)) == [[VOCAB.ids[f"w{i % 300}"], VOCAB.ids[f"w{(i * 7) % 300}"]]]
    assert reader._held <= 100 and len(reader._cache) == 100 // 16  # 2 ids and 1 end: 16 bytes each
    reader(49)
    assert len(calls) == 50  # the last ones are still cached
    reader.close()


def test_an_encoder_of_a_huge_max_seq_length_grows_with_what_it_encodes_not_n_squared():
    """Issue 57 item 8: no table of every length (n x n bytes: 10 GB at n = 100,000)."""
    import tracemalloc

    from shardprep.text.pretraining import Instance

    tracemalloc.start()
    encoder = InstanceEncoder(PretrainingConfig(max_seq_length=100_000, max_predictions_per_seq=20), 50)
    for k in range(5, 400):
        encoder(Instance([2] + [7] * (k - 2) + [3], [0] * k, False, [1], [7]))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 << 20, peak

"""shardprep.text.encode: the same Example bytes as the generic encoder of instance_row, and its batches."""
from __future__ import annotations

import random

import pytest

from shardprep.example.encoder import example_encoder
from shardprep.formats.base import Bad
from shardprep.text.encode import InstanceEncoder, batches
from shardprep.text.pretraining import PretrainingConfig, bert_schema, create_instances, instance_row
from shardprep.text.vocab import SPECIAL_TOKENS, parse_vocab
from shardprep.tfrecord import frame

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
    items = [(1, x) for x in instances[:4]] + [(9, bad)] + [(10, x) for x in instances[4:]]
    out = list(batches(items, fast))
    assert [len(b.ends) if not isinstance(b, Bad) else "bad" for b in out] == [3, 1, "bad", 3]
    blobs = b"".join(b.blob for b in out if not isinstance(b, Bad))
    assert blobs == b"".join(frame(fast(x)) for x in instances)
    assert out[0].ends.tolist() == [sum(len(frame(fast(x))) for x in instances[:k]) for k in (1, 2, 3)]

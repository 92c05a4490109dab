"""shardprep.text.documents and shardprep.text.pretraining: BERT's text layout and pre-training instances."""
from __future__ import annotations

import io
import random

import pytest

from shardprep.text.documents import DocumentStats, read_documents
from shardprep.text.pretraining import (
    PretrainingConfig,
    bert_schema,
    create_instances,
    document_rng,
    instance_row,
    random_document_id,
    tokenize_document,
)
from shardprep.text.vocab import SPECIAL_TOKENS, parse_vocab

# --- documents ---


def _read(data: bytes, **kw):
    stats = DocumentStats()
    return list(read_documents(io.BytesIO(data), stats=stats, **kw)), stats


def test_documents_layout_positions_and_counts() -> None:
    data = b"\nA one.\n  A two.  \n\n\n\nB one.\r\n\xff\xfe bad\nB three.\n\n\xffonly bad\n\nC one."
    out, stats = _read(data, first_position=10)
    docs = [(p, d) for p, d in out if isinstance(d, list)]
    bad = [d for _, d in out if not isinstance(d, list)]
    assert docs == [(11, ["A one.", "A two."]), (16, ["B one.", "B three."]), (22, ["C one."])]
    assert [(b.position, b.reason) for b in bad] == [(17, "invalid_utf8"), (20, "invalid_utf8")]
    assert "line 17 is not valid UTF-8" in bad[0].detail and bad[0].raw == b"\xff\xfe bad\n"
    # empty: the leading blank line, two extra blank lines after A, and the document of one bad line
    assert (stats.documents, stats.sentences, stats.bad_lines, stats.empty_documents) == (3, 5, 2, 4)


def test_documents_bounded_line_and_document() -> None:
    data = b"short\n" + b"x" * 5000 + b"\nafter\n\n" + b"".join(b"s%d\n" % i for i in range(7))
    out, stats = _read(data, max_line_bytes=1000, max_document_sentences=3)
    bad = [d for _, d in out if not isinstance(d, list)]
    assert [(b.position, b.reason) for b in bad] == [(2, "record_too_large")]
    docs = [d for _, d in out if isinstance(d, list)]
    assert docs == [["short", "after"], ["s0", "s1", "s2"], ["s3", "s4", "s5"], ["s6"]]
    assert stats.split_documents == 2


# --- a vocabulary and corpus ---

_WORDS = [f"w{i}" for i in range(300)]
VOCAB = parse_vocab(list(SPECIAL_TOKENS) + _WORDS + ["##" + w for w in _WORDS[:50]] + ["."])


def _corpus(n_docs: int, seed: int = 0) -> list[list[list[int]]]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        sentences = []
        for _ in range(rng.randint(1, 12)):
            words = [rng.choice(_WORDS) + ("".join(" ##" + rng.choice(_WORDS[:50]) for _ in range(rng.randint(0, 2))))
                     for _ in range(rng.randint(1, 30))]
            sentences.append(" ".join(words).replace(" ##", "").replace(" w", " w") + " .")
        docs.append(tokenize_document(VOCAB, sentences))
    return docs


CORPUS = _corpus(120)


def _instances(corpus, doc_ids, config):
    out = {}
    for d in doc_ids:
        out[d] = list(create_instances(corpus[d], d, num_documents=len(corpus), random_document=corpus.__getitem__,
                                       vocab=VOCAB, config=config))
    return out


# --- BERT's create_instances_from_document and create_masked_lm_predictions, verbatim over ids (the reference) ---


def _ref_truncate(tokens_a, tokens_b, max_num_tokens, rng):
    while True:
        total_length = len(tokens_a) + len(tokens_b)
        if total_length <= max_num_tokens:
            break
        trunc_tokens = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        assert len(trunc_tokens) >= 1
        if rng.random() < 0.5:
            del trunc_tokens[0]
        else:
            trunc_tokens.pop()


def _ref_mask(tokens, cfg, vocab_words, rng, cls, sep, mask, is_cont):
    cand_indexes = []
    for (i, token) in enumerate(tokens):
        if token == cls or token == sep:
            continue
        if cfg.whole_word_mask and len(cand_indexes) >= 1 and is_cont(token):
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])
    rng.shuffle(cand_indexes)
    output_tokens = list(tokens)
    num_to_predict = min(cfg.max_predictions_per_seq, max(1, int(round(len(tokens) * cfg.masked_lm_prob))))
    masked_lms = []
    covered_indexes = set()
    for index_set in cand_indexes:
        if len(masked_lms) >= num_to_predict:
            break
        if len(masked_lms) + len(index_set) > num_to_predict:
            continue
        if any(index in covered_indexes for index in index_set):
            continue
        for index in index_set:
            covered_indexes.add(index)
            if rng.random() < 0.8:
                masked_token = mask
            else:
                if rng.random() < 0.5:
                    masked_token = tokens[index]
                else:
                    masked_token = vocab_words[rng.randint(0, len(vocab_words) - 1)]
            output_tokens[index] = masked_token
            masked_lms.append((index, tokens[index]))
    masked_lms = sorted(masked_lms, key=lambda x: x[0])
    return output_tokens, [p for p, _ in masked_lms], [t for _, t in masked_lms]


def reference_instances(all_documents, document_index, cfg, rng, choose=None):
    """BERT's create_instances_from_document; ``choose(instance)`` replaces its random document draw, if given."""
    cls, sep, mask = VOCAB.cls_id, VOCAB.sep_id, VOCAB.mask_id
    vocab_words = list(range(len(VOCAB)))
    is_cont = lambda t: VOCAB.tokens[t].startswith("##")  # noqa: E731
    document = all_documents[document_index]
    max_num_tokens = cfg.max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < cfg.short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    instances = []
    current_chunk = []
    current_length = 0
    i = 0
    while i < len(document):
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == len(document) - 1 or current_length >= target_seq_length:
            if current_chunk:
                a_end = 1
                if len(current_chunk) >= 2:
                    a_end = rng.randint(1, len(current_chunk) - 1)
                tokens_a = []
                for j in range(a_end):
                    tokens_a.extend(current_chunk[j])
                tokens_b = []
                if len(current_chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    if choose is not None:
                        random_document_index = choose(len(instances))
                    else:
                        for _ in range(10):
                            random_document_index = rng.randint(0, len(all_documents) - 1)
                            if random_document_index != document_index:
                                break
                    random_document = all_documents[random_document_index]
                    random_start = rng.randint(0, len(random_document) - 1)
                    for j in range(random_start, len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    num_unused_segments = len(current_chunk) - a_end
                    i -= num_unused_segments
                else:
                    is_random_next = False
                    for j in range(a_end, len(current_chunk)):
                        tokens_b.extend(current_chunk[j])
                _ref_truncate(tokens_a, tokens_b, max_num_tokens, rng)
                assert len(tokens_a) >= 1 and len(tokens_b) >= 1
                tokens = [cls] + tokens_a + [sep] + tokens_b + [sep]
                segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
                tokens, positions, labels = _ref_mask(tokens, cfg, vocab_words, rng, cls, sep, mask, is_cont)
                instances.append((tokens, segment_ids, is_random_next, positions, labels))
            current_chunk = []
            current_length = 0
        i += 1
    return instances


def _as_tuples(instances):
    return [(x.input_ids, x.segment_ids, x.is_random_next, x.masked_lm_positions, x.masked_lm_ids) for x in instances]


@pytest.mark.parametrize("config", [PretrainingConfig(dupe_factor=2), PretrainingConfig(dupe_factor=1, whole_word_mask=True),
                                    PretrainingConfig(dupe_factor=1, max_seq_length=32, max_predictions_per_seq=5,
                                                      short_seq_prob=0.5, seed=7)])
def test_same_as_bert_given_the_same_draws(config: PretrainingConfig) -> None:
    """With the per-document RNG and the keyed random document, every other draw and step is BERT's."""
    ours = _instances(CORPUS, range(len(CORPUS)), config)
    n = len(CORPUS)
    for d in range(n):
        expected = []
        for copy in range(config.dupe_factor):
            rng = document_rng(config.seed, d, copy)
            expected += reference_instances(
                CORPUS, d, config, rng, choose=lambda k, copy=copy, d=d: random_document_id(config.seed, d, copy, k, n))
        assert _as_tuples(ours[d]) == expected, d


def test_deterministic_whatever_the_order() -> None:
    config = PretrainingConfig(dupe_factor=3)
    forward = _instances(CORPUS, range(len(CORPUS)), config)
    order = list(range(len(CORPUS)))
    random.Random(5).shuffle(order)
    shuffled = _instances(CORPUS, order, config)
    assert all(_as_tuples(forward[d]) == _as_tuples(shuffled[d]) for d in order)
    # each copy is masked differently, and another seed gives other instances
    d = max(forward, key=lambda k: len(forward[k]))
    per_copy = len(forward[d]) // 3
    assert forward[d][0].input_ids != forward[d][per_copy].input_ids or forward[d][0].masked_lm_positions != \
        forward[d][per_copy].masked_lm_positions
    other = _instances(CORPUS, [d], PretrainingConfig(dupe_factor=3, seed=1))
    assert _as_tuples(other[d]) != _as_tuples(forward[d])


def test_random_document_is_another_and_spread() -> None:
    n = 50
    picks = [random_document_id(12345, d, c, k, n) for d in range(n) for c in range(4) for k in range(10)]
    assert all(p != d for p, d in zip(picks, [d for d in range(n) for _ in range(40)]))
    counts = [picks.count(i) for i in range(n)]
    assert min(counts) > 10 and max(counts) < 80  # 2000 picks over 50 ids, ~40 each
    assert random_document_id(1, 0, 0, 0, 1) == 0


def test_statistics_close_to_bert() -> None:
    config = PretrainingConfig(dupe_factor=4)
    corpus = _corpus(300, seed=1)
    ours = [x for xs in _instances(corpus, range(len(corpus)), config).values() for x in xs]
    rng = random.Random(config.seed)
    ref = [x for _ in range(config.dupe_factor) for d in range(len(corpus)) for x in
           reference_instances(corpus, d, config, rng)]

    def stats(tokens, randoms, n_masked):
        total = sum(tokens)
        return n_masked / total, sum(randoms) / len(randoms), total / len(tokens)

    o = stats([len(x.input_ids) for x in ours], [x.is_random_next for x in ours],
              sum(len(x.masked_lm_positions) for x in ours))
    r = stats([len(x[0]) for x in ref], [x[2] for x in ref], sum(len(x[3]) for x in ref))
    assert 0.14 <= o[0] <= 0.16 and abs(o[0] - r[0]) < 0.005, (o, r)  # masked share of the tokens
    # random next: half of the pairs, plus every chunk of one segment (BERT: always random); ~0.61 in both here
    assert 0.5 <= o[1] <= 0.7 and abs(o[1] - r[1]) < 0.03, (o, r)
    assert abs(o[2] - r[2]) / r[2] < 0.03 and 60 < o[2] <= 128, (o, r)  # mean sequence length
    assert abs(len(ours) - len(ref)) / len(ref) < 0.03
    masked = [(x.input_ids[p], t) for x in ours for p, t in zip(x.masked_lm_positions, x.masked_lm_ids)]
    share_mask = sum(a == VOCAB.mask_id for a, _ in masked) / len(masked)
    share_same = sum(a == t for a, t in masked) / len(masked)
    assert abs(share_mask - 0.8) < 0.02 and abs(share_same - 0.1) < 0.02  # 80/10/10 (random may hit the token)


def test_long_line_truncated_as_bert() -> None:
    config = PretrainingConfig(dupe_factor=2)
    long = [list(range(10, 1010))]
    corpus = [long, [[5, 6, 7]], [[8, 9], list(range(10, 600))]]
    out = _instances(corpus, range(3), config)
    for xs in out.values():
        for x in xs:
            assert len(x.input_ids) <= 128 and len(x.segment_ids) == len(x.input_ids)
            assert 1 <= len(x.masked_lm_positions) <= 20
    assert all(len(x.input_ids) == 128 for x in out[0] if x.segment_ids.count(1) > 5)
    for d in range(3):
        expected = []
        for copy in range(2):
            expected += reference_instances(corpus, d, config, document_rng(config.seed, d, copy),
                                            choose=lambda k, d=d, copy=copy: random_document_id(config.seed, d, copy, k, 3))
        assert _as_tuples(out[d]) == expected


def test_vocab_without_mask_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"\[MASK\]"):
        parse_vocab([t for t in SPECIAL_TOKENS if t != "[MASK]"] + _WORDS)


def test_rows_parse_with_bert_feature_spec() -> None:
    tf = pytest.importorskip("tensorflow")
    from shardprep.example.encoder import example_encoder

    config = PretrainingConfig(dupe_factor=1)
    encode = example_encoder(bert_schema(config.max_seq_length, config.max_predictions_per_seq))
    instances = [x for xs in _instances(CORPUS[:10], range(10), config).values() for x in xs]
    rows = [instance_row(x, config) for x in instances]
    records = [encode(r) for r in rows]
    name_to_features = run_pretraining_features(tf, 128, 20)
    parsed = tf.io.parse_example(tf.constant(records), name_to_features)
    for name in name_to_features:
        got = parsed[name].numpy().tolist()
        assert got == [r[name] for r in rows], name
    assert all(sum(r["input_mask"]) == len(x.input_ids) for r, x in zip(rows, instances))


def test_create_instances_arguments() -> None:
    config = PretrainingConfig(dupe_factor=3)
    kw = dict(num_documents=len(CORPUS), random_document=CORPUS.__getitem__, vocab=VOCAB, config=config)
    with pytest.raises(ValueError, match="outside the corpus"):
        list(create_instances(CORPUS[0], len(CORPUS), **kw))
    assert list(create_instances([], 0, **kw)) == []
    whole = _as_tuples(create_instances(CORPUS[3], 3, **kw))
    parts = [x for c in range(3) for x in _as_tuples(create_instances(CORPUS[3], 3, copies=[c], **kw))]
    assert whole == parts  # a copy can be made on its own (another unit, another time)
    with pytest.raises(ValueError, match="at least 5"):
        PretrainingConfig(max_seq_length=4)
    row = instance_row(next(create_instances(CORPUS[3], 3, **kw)), config)
    with pytest.raises(ValueError, match="more than"):
        instance_row(next(create_instances(CORPUS[3], 3, **kw)), PretrainingConfig(max_seq_length=8))
    assert len(row["input_ids"]) == 128 and row["masked_lm_weights"].count(1.0) == sum(1 for p in row["masked_lm_ids"] if p)


def run_pretraining_features(tf, max_seq_length: int, max_predictions_per_seq: int) -> dict:
    """BERT run_pretraining.py's input_fn_builder feature spec, as it is written there."""
    return {
        "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }

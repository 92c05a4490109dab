"""shardprep.formats.text: classification records are tokenized a chunk at a time (``Vocab.encode_batch``)
and give the rows, in the store's order, that ``Vocab.encode`` of each text gives, bad entries in place."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import shardprep.formats.text as text_format
from shardprep.formats.base import Bad
from shardprep.formats.text import TextFormat, classification_row
from tests.shardprep.text.test_vocab import CASED, VOCAB

TEXTS = ["the quick brown fox", "Hello, world!\x07 x", "Über ünïcödé 你好", "", "x" * 101 + " fox", "a.b don't ...",
         "tab\tin\r\nline"]


def _entries() -> list[dict]:
    out = []
    for i in range(23):
        if i % 5 == 3:
            out.append({"p": i, "r": "missing_label", "d": "no label", "x": f"raw {i}"})
            continue
        entry = {"p": i, "a": TEXTS[i % len(TEXTS)], "l": "neg" if i % 2 else "pos"}
        if i % 3:
            entry["b"] = TEXTS[(i * 5 + 1) % len(TEXTS)]
        out.append(entry)
    return out


@pytest.mark.parametrize("batch", [1, 4, 256])
@pytest.mark.parametrize("vocab", [VOCAB, CASED], ids=["uncased", "cased"])
def test_classification_rows_are_each_texts_encode_in_store_order(tmp_path, monkeypatch, batch, vocab) -> None:
    monkeypatch.setattr(text_format, "_CLASSIFICATION_BATCH", batch)
    entries = _entries()
    store = tmp_path / "store.jsonl"
    data = b"".join(json.dumps(e).encode() + b"\n" for e in entries)
    store.write_bytes(data)
    spec = SimpleNamespace(store_url=str(store), labels=("neg", "pos"), config=SimpleNamespace(max_seq_length=16))
    unit = SimpleNamespace(start=0, end=len(data))
    got = list(TextFormat()._classification(unit, spec, vocab))
    expected = []
    for e in entries:
        if "r" in e:
            expected.append((e["p"], Bad(e["p"], e["r"], e["d"], e["x"])))
            continue
        b = vocab.encode(e["b"]) if "b" in e else None
        expected.append((e["p"], classification_row(vocab.encode(e["a"]), b, ("neg", "pos").index(e["l"]), vocab, 16)))
    assert got == expected

"""Record hashes of ``--dedup exact`` (``record_hashes``): equal records hash equal, a key's values
alone decide with ``--dedup-key``, a generation's file is read back only at its size and crc32c."""
from __future__ import annotations

import numpy as np
import pytest

from shardprep import framing, record_hashes
from shardprep.errors import ManifestError
from shardprep.example import example_encoder
from shardprep.schema import schema_from_json

SCHEMA = schema_from_json({"id": {"dtype": "int64", "shape": []}, "x": {"dtype": "float32", "shape": []},
                           "tag": {"dtype": "string", "shape": [], "nullable": True}})


def _batch(rows: list[dict]) -> tuple[bytes, np.ndarray]:
    encode = example_encoder(SCHEMA, on_missing="omit")
    framed = [framing.frame(encode(r)) for r in rows]
    return b"".join(framed), np.cumsum([len(f) for f in framed]).astype(np.uint64)


def test_equal_records_hash_equal_and_others_differ():
    blob, ends = _batch([{"id": 1, "x": 0.5, "tag": "a"}, {"id": 2, "x": 0.5, "tag": "a"}, {"id": 1, "x": 0.5, "tag": "a"}])
    h = record_hashes.of_framed(blob, ends)
    assert h.shape == (3, 2) and (h[0] == h[2]).all() and (h[0] != h[1]).any()
    assert (record_hashes.of_framed(np.frombuffer(blob, np.uint8), ends) == h).all()  # any buffer type


def test_a_key_hashes_its_values_alone_and_a_record_without_it_is_never_a_duplicate():
    blob, ends = _batch([{"id": 1, "x": 0.5, "tag": "a"}, {"id": 2, "x": 9.0, "tag": "a"}, {"id": 3, "x": 0.5},
                         {"id": 4, "x": 1.0}])
    h, present = record_hashes.of_keys(blob, ends, "tag")
    assert present.tolist() == [True, True, False, False]
    assert (h[0] == h[1]).all()
    ids, _ = record_hashes.of_keys(blob, ends, "id")
    assert len({tuple(r) for r in ids.tolist()}) == 4


def test_sorted_unique_and_contains():
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 2**63, size=(500, 2), dtype=np.uint64)
    rows[100:150, 0] = rows[200:250, 0]  # first words shared, second words not
    rows[300:310] = rows[310:320]  # whole repeats
    table = record_hashes.sorted_unique(rows)
    assert len(table) == 490
    assert (np.diff(table[:, 0].astype(np.float64)) >= 0).all()
    assert record_hashes.contains(table, rows).all()
    other = rows[100:150].copy()
    other[:, 1] ^= np.uint64(1)
    assert not record_hashes.contains(table, other).any()
    assert not record_hashes.contains(table[:0], rows).any()


def test_a_generations_file_reads_back_only_as_the_manifest_names_it(tmp_path):
    run = "run-20261207T000000Z-00000001"
    rows = record_hashes.sorted_unique(np.arange(20, dtype=np.uint64).reshape(10, 2))
    info = record_hashes.write(str(tmp_path), run, rows, "id")
    assert (info.num_records, info.key) == (10, "id")
    assert (record_hashes.read(str(tmp_path), info, field="f") == rows).all()
    path = tmp_path / info.path
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="size or crc32c differs"):
        record_hashes.read(str(tmp_path), info, field="generations[0].hashes")


@pytest.mark.parametrize("n", [0, 1, 2, 3, 64, 1000, 4096, 4097])
def test_order_sorts_rows_by_both_words_exactly_even_when_first_words_share_their_high_bits(n):
    rng = np.random.default_rng(n)
    rows = rng.integers(0, 2**64 - 1, size=(n, 2), dtype=np.uint64, endpoint=True)
    if n > 8:
        rows[: n // 2, 0] = rng.integers(0, 5, n // 2).astype(np.uint64) << np.uint64(40)  # ties of the high bits
        rows[n // 2: n // 2 + 4] = rows[:4]  # whole repeats
    order = record_hashes.order(rows)
    assert sorted(order.tolist()) == list(range(n))
    assert (rows[order] == rows[np.lexsort((rows[:, 1], rows[:, 0]))]).all()
    table = record_hashes.sorted_unique(rows)
    assert len(table) == len({tuple(r) for r in rows.tolist()})

"""The compiled TFRecord path (issue 11): C vs Python twin: CRCs, the split hash, the conformance
check and scan. Reading TFRecord input (byte-range units, gzip, pass-through): formats/test_tfrecord.py."""
from __future__ import annotations

import hashlib
import random
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardprep import native, planning
from shardprep.example import RecordError, decode_example, example_encoder
from shardprep.framing import frame_all
from shardprep.native import fallback
from shardprep.schema import FeatureSpec

SCHEMA = {"id": FeatureSpec("int64"), "l": FeatureSpec("int64", (-1,)), "t": FeatureSpec("string"),
          "x": FeatureSpec("float32", (3,))}
SPEC = native.example_spec(SCHEMA)
ENCODE = example_encoder(SCHEMA)
compiled = pytest.mark.skipif(not native.NATIVE, reason="the C extension is not built")


def row(r: random.Random) -> dict:
    return {"id": r.randint(-(1 << 63), (1 << 63) - 1), "l": [r.randint(-9, 1 << 40) for _ in range(r.randint(0, 4))],
            "t": r.randbytes(r.randint(0, 60)), "x": [r.uniform(-1e6, 1e6) for _ in range(3)]}


RECORDS = [ENCODE(row(random.Random(i))) for i in range(12)]


def entries(data: bytes) -> list[bytes]:
    """The map entries (``0a len entry``) of an Example whose Features field is ``0a len body``."""
    pos = 2 if data[1] < 0x80 else 3 if data[2] < 0x80 else 4
    out = []
    while pos < len(data):
        n, p = data[pos + 1], pos + 2
        if n >= 0x80:
            n, p = (n & 0x7F) | data[pos + 2] << 7, pos + 3  # entries here are under 16 KB
        out.append(data[pos:p + n])
        pos = p + n
    return out


def reorder(data: bytes, order: list[int]) -> bytes:
    """The same Example with its map entries in another order (TensorFlow writes them in hash order)."""
    parts = entries(data)
    return data[:len(data) - sum(map(len, parts))] + b"".join(parts[i] for i in order)


def is_encoder_output_reordered(data: bytes) -> bool:
    """What ``conforms`` means: the encoder writes these bytes for the decoded record, up to entry order."""
    try:
        again = ENCODE(decode_example(data))
    except RecordError:
        return False
    return len(again) == len(data) and sorted(entries(again)) == sorted(entries(data))


# --- the C extension and its Python twin ------------------------------------------------------------


@compiled
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=600), seed=st.integers(-(1 << 63), (1 << 63) - 1))
def test_crc_and_split_hash_equal_the_libraries(data, seed):
    assert native.crc32c(data) == fallback.crc32c(data)
    key = seed.to_bytes(8, "little", signed=True)
    assert native.blake2b8(data, seed) == int.from_bytes(hashlib.blake2b(data, digest_size=8, key=key).digest(), "little")


@compiled
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_canonical_check_and_scan_equal_the_python_twin(data):
    r = random.Random(data.draw(st.integers(0, 1 << 30)))
    record = bytearray(ENCODE(row(r)))
    for _ in range(data.draw(st.integers(0, 3))):  # damage: a changed, dropped or inserted byte
        at = r.randrange(len(record))
        choice = r.randrange(3)
        if choice == 0:
            record[at] = r.randrange(256)
        elif choice == 1:
            del record[at]
        else:
            record.insert(at, r.randrange(256))
    record = bytes(record)
    c = native.conforms(record, SPEC)
    assert c == fallback.conforms(record, SPEC)
    if c:
        assert is_encoder_output_reordered(record)
    blob = frame_all([RECORDS[0], record, RECORDS[1]])
    cut = data.draw(st.integers(0, len(blob)))
    assert native.scan(blob[:cut], 0, SPEC) == fallback.scan(blob[:cut], 0, SPEC)
    shuffled = reorder(ENCODE(row(r)), r.sample(range(4), 4))
    assert native.conforms(shuffled, SPEC) and is_encoder_output_reordered(shuffled)


def test_records_conform_in_any_entry_order_but_not_with_odd_encodings():
    for i, r in enumerate(RECORDS):
        shuffled = reorder(r, random.Random(i).sample(range(4), 4))
        assert native.conforms(shuffled, SPEC) and fallback.conforms(shuffled, SPEC)
        assert decode_example(shuffled) == decode_example(r)
    twice = reorder(RECORDS[0], [0, 0, 1, 2, 3])  # a feature twice: the decoder keeps the last one
    assert not native.conforms(twice, SPEC) and not fallback.conforms(twice, SPEC)
    missing = reorder(RECORDS[0], [0, 1, 2])
    assert not native.conforms(missing, SPEC) and not fallback.conforms(missing, SPEC)


def test_the_encoder_writes_conforming_records_and_odd_encodings_are_not():
    assert all(native.conforms(r, SPEC) and fallback.conforms(r, SPEC) for r in RECORDS)
    unpacked = b"\x0a\x0d" + b"\x0a\x0b\x0a\x02id\x12\x05\x1a\x03\x08\x96\x01"  # id=150 as an unpacked varint
    assert decode_example(unpacked) == {"id": [150]} and not native.conforms(unpacked, SPEC)
    nan = ENCODE({**row(random.Random(1)), "x": [1.0, 2.0, 3.0]}).replace(struct.pack("<f", 2.0), struct.pack("<f", float("nan")))
    assert not native.conforms(nan, SPEC)


@compiled
@settings(max_examples=100, deadline=None)
@given(n=st.integers(0, 40), seed=st.integers(-(1 << 63), (1 << 63) - 1),
       fractions=st.sampled_from(["a", "a=0.5,b=0.5", "a=0.1,b=0.2,c=0.7", "a=0.999,b=0.001"]))
def test_split_indices_equal_split_index(n, seed, fractions):
    thresholds = planning.split_thresholds(planning.parse_splits(fractions))
    records = [random.Random(i).randbytes(i % 50) for i in range(n)]
    blob = b"".join(records)
    ends = np.cumsum([len(r) for r in records], dtype=np.int64)
    starts = ends - [len(r) for r in records]
    got = planning.split_indices(blob, starts, ends, seed, thresholds).tolist()
    assert got == [planning.split_index(r, seed, thresholds) for r in records]
    if len(thresholds) > 1:
        assert fallback.split_indices(blob, starts.tobytes(), ends.tobytes(), seed,
                                      np.asarray(thresholds[:-1], "<u8").tobytes()) == bytes(got)


# --- pass-through ----------------------------------------------------------------------------------


# --- byte-range units ------------------------------------------------------------------------------


# --- gzip --------------------------------------------------------------------------------------------

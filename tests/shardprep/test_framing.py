"""The compiled TFRecord path (issue 11): C vs Python twin, pass-through, byte-range units, gzip."""
from __future__ import annotations

import gzip
import hashlib
import json
import random
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardprep import native, planning
from shardprep.example import RecordError, decode_example, example_encoder
from shardprep.formats import Bad, expand_inputs, plan_units, read_unit
from shardprep.formats.base import Decoded
from shardprep.formats.tfrecord import TFRecordFormat
from shardprep.framing import frame, frame_all, read_records
from shardprep.native import fallback
from shardprep.schema import FeatureSpec
from tests.conftest import run_cli

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


def units_of(path, unit_bytes=64 << 20):
    return plan_units(expand_inputs([str(path)]), unit_bytes=unit_bytes)


def test_conforming_records_keep_their_frames_and_the_rest_are_decoded(tmp_path):
    odd = b"\x0a\x0d" + b"\x0a\x0b\x0a\x02id\x12\x05\x1a\x03\x08\x96\x01"  # valid, but unpacked: re-encoded
    tf_order = reorder(RECORDS[2], [3, 1, 0, 2])  # as TensorFlow writes maps: passes through as it is
    framed = [frame(RECORDS[0]), frame(RECORDS[1]), frame(tf_order), frame(odd), frame(b"\xff"), *map(frame, RECORDS[3:])]
    path = tmp_path / "a.tfrecord"
    path.write_bytes(b"".join(framed))
    (unit,) = units_of(path)
    out = list(TFRecordFormat().framed_batches(unit, SCHEMA, "reject"))
    kinds = [type(x).__name__ for x in out]
    assert kinds == ["FramedBatch", "Decoded", "Bad", "FramedBatch"]
    assert bytes(out[0].blob) == b"".join(framed[:3]) and out[0].ends.tolist() == np.cumsum(list(map(len, framed[:3]))).tolist()
    assert bytes(out[3].blob) == b"".join(framed[5:])
    assert out[1] == Decoded(4, {"id": [150]}) and (out[2].position, out[2].reason) == (5, "not_an_example")


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("big", [300_000, 9 << 20])  # inside one read block, and larger than a block
def test_frames_over_the_record_limit_are_dead_letters_and_the_rest_is_read(tmp_path, gz, big):
    huge = ENCODE({**row(random.Random(7)), "t": b"x" * big})
    records = [RECORDS[0], huge, RECORDS[1], huge, RECORDS[2]]
    path = tmp_path / ("a.tfrecord.gz" if gz else "a.tfrecord")
    data = frame_all(records)
    path.write_bytes(gzip.compress(data) if gz else data)
    (unit,) = plan_units(expand_inputs([str(path)]), max_record_bytes=100_000)
    for items in (list(TFRecordFormat().framed_batches(unit, SCHEMA, "reject")), [r for _, r in read_unit(unit)]):
        bad = [x for x in items if isinstance(x, Bad)]
        assert [(b.position, b.reason) for b in bad] == [(2, "record_too_large"), (4, "record_too_large")]
        assert f"{len(huge):,} bytes" in bad[0].detail and len(bad[0].raw) <= 1024
        kept = sum(len(x.ends) if hasattr(x, "ends") else 1 for x in items if not isinstance(x, Bad))
        assert kept == 3


def shard_records(folder) -> list[bytes]:
    return [r for p in sorted(folder.rglob("*.tfrecord*")) for r in read_records(open(p, "rb"))]  # noqa: SIM115


@pytest.mark.slow
def test_a_run_writes_conforming_records_byte_for_byte_and_reencodes_the_rest(tmp_path):
    records = [ENCODE(row(random.Random(i))) for i in range(300)]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.tfrecord").write_bytes(frame_all(records))
    proc = run_cli("shardprep.run", "--input", tmp_path / "in" / "a.tfrecord", "--output", tmp_path / "same", "--num-shards", 4,
                   check=True)
    assert sorted(shard_records(tmp_path / "same")) == sorted(records), proc.stderr
    narrow = {"id": {"dtype": "int64", "shape": []}, "t": {"dtype": "string", "shape": []}}  # drops l and x
    (tmp_path / "schema.json").write_text(json.dumps(narrow))
    run_cli("shardprep.run", "--input", tmp_path / "in" / "a.tfrecord", "--output", tmp_path / "narrow", "--num-shards", 4,
            "--schema", tmp_path / "schema.json", check=True)
    encode = example_encoder({"id": FeatureSpec("int64"), "t": FeatureSpec("string")}, extra_fields="ignore")
    assert sorted(shard_records(tmp_path / "narrow")) == sorted(encode(decode_example(r)) for r in records)


# --- byte-range units ------------------------------------------------------------------------------


def read_all(path, unit_bytes):
    """(position, row or Bad) of every unit, per-record reader and column-wise reader, as lists."""
    units = units_of(path, unit_bytes)
    per_record = [item for unit in units for item in read_unit(unit)]
    batches = [x for unit in units for x in TFRecordFormat().framed_batches(unit, SCHEMA, "reject")]
    return units, per_record, batches


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 1]) + data[at + 1:]


@pytest.mark.parametrize("damage", ["none", "data_crc", "length_crc", "truncated"])
def test_every_cut_reads_each_record_exactly_once(tmp_path, damage):
    records = RECORDS[:6]
    framed = [frame(r) for r in records]
    offsets = np.cumsum([0, *map(len, framed)]).tolist()
    data, bad, lost = b"".join(framed), [], None
    if damage == "data_crc":
        data, bad, lost = flip(data, offsets[3] + 14), [(3, "tfrecord_data_crc")], 3
    elif damage == "length_crc":
        data, bad, lost = flip(data, offsets[3] + 2), [(3, "tfrecord_length_crc")], 3
    elif damage == "truncated":
        data, bad, lost = data[:-5], [(5, "tfrecord_truncated")], 5
    good = [i for i in range(len(records)) if i != lost]
    path = tmp_path / "a.tfrecord"
    path.write_bytes(data)
    for unit_bytes in range(1, len(data) + 2):
        units, items, batches = read_all(path, unit_bytes)
        assert len(units) == -(-len(data) // unit_bytes), unit_bytes
        assert [row for _, row in items if not isinstance(row, Bad)] == [decode_example(records[i]) for i in good]
        first = units[1].start if len(units) > 1 else len(data)

        def position(i: int, first: int = first) -> int:
            """Unit 0 numbers the records its chain of frames reaches (up to the first sound frame past
            its end); later units name them by byte offset."""
            return i + 1 if not any(first <= offsets[g] <= offsets[i] for g in good) else offsets[i]

        expected = [(position(i), reason) for i, reason in bad]
        assert [(pos, row.reason) for pos, row in items if isinstance(row, Bad)] == expected, unit_bytes
        assert [pos for pos, row in items if not isinstance(row, Bad)] == [position(i) for i in good]
        kept = b"".join(bytes(x.blob) for x in batches if not isinstance(x, (Bad, Decoded)))
        assert kept == b"".join(framed[i] for i in good), unit_bytes
        assert [(x.position, x.reason) for x in batches if isinstance(x, Bad)] == expected


# --- gzip --------------------------------------------------------------------------------------------


def test_gzip_tfrecords_named_tfrecord_are_read_as_one_unit(tmp_path):
    path = tmp_path / "a.tfrecord"
    path.write_bytes(gzip.compress(frame_all(RECORDS)))
    units = units_of(path, unit_bytes=16)
    assert len(units) == 1 and units[0].file.gzip
    assert [row for _, row in read_unit(units[0])] == [decode_example(r) for r in RECORDS]
    kept = b"".join(bytes(x.blob) for x in TFRecordFormat().framed_batches(units[0], SCHEMA, "reject"))
    assert kept == frame_all(RECORDS)


def test_a_plain_tfrecord_starting_like_gzip_is_not_taken_for_gzip(tmp_path):
    record = b"\x0a" + bytes(0x8B1F - 1)  # a length whose low bytes are the gzip magic 1f 8b
    path = tmp_path / "a.tfrecord"
    path.write_bytes(frame(record))
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    (unit,) = units_of(path)
    assert not unit.file.gzip and [type(r).__name__ for _, r in read_unit(unit)] == ["Bad"]  # read, not gunzipped


@pytest.mark.slow
def test_tensorflow_gzip_writer_output_is_read(tmp_path):
    tf = pytest.importorskip("tensorflow")
    path = tmp_path / "a.tfrecord"
    with tf.io.TFRecordWriter(str(path), options="GZIP") as w:
        for r in RECORDS:
            w.write(r)
    assert [row for _, row in read_unit(units_of(path)[0])] == [decode_example(r) for r in RECORDS]

"""``shardprep.formats.tfrecord``: TFRecord input read by byte-range units, plain or gzip: conforming
records keep their frames, the rest are decoded, frames over the record limit are dead letters, and
every cut of a file reads each record exactly once."""
from __future__ import annotations

import gzip
import json
import random

import numpy as np
import pytest

from shardprep.example import decode_example, example_encoder
from shardprep.formats import Bad, expand_inputs, plan_units, read_unit
from shardprep.formats.base import Decoded
from shardprep.formats.tfrecord import TFRecordFormat
from shardprep.framing import frame, frame_all, read_records
from shardprep.schema import FeatureSpec
from tests.conftest import run_cli
from tests.shardprep.test_framing import ENCODE, RECORDS, SCHEMA, reorder, row


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

"""The pure-Python Example codec and TFRecord framing, checked against TensorFlow itself."""
from __future__ import annotations

import io
import math
import pickle
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep.example import RecordError, decode_example, example_encoder
from shardprep.framing import CorruptRecordError, frame, frame_all, masked_crc, read_records
from shardprep.schema import FeatureSpec

tf = pytest.importorskip("tensorflow")

I64, F, S = "int64", "float32", "string"
I64_MIN, I64_MAX = -(2**63), 2**63 - 1

SCHEMA = {
    "f": FeatureSpec(F, ()),
    "fv": FeatureSpec(F, (3,)),
    "fr": FeatureSpec(F, (-1,)),
    "i": FeatureSpec(I64, ()),
    "iv": FeatureSpec(I64, (2,)),
    "ir": FeatureSpec(I64, (-1,)),
    "s": FeatureSpec(S, ()),
    "sv": FeatureSpec(S, (2,)),
    "sr": FeatureSpec(S, (-1,)),
    "naïve key": FeatureSpec(I64, ()),
}
ROWS = [
    {"f": 1.5, "fv": [1, 2.25, -3], "fr": [], "i": 0, "iv": [I64_MIN, I64_MAX], "ir": [1, -1, 300, 2**40],
     "s": "", "sv": ["é", b"\x00\xff"], "sr": ["a"], "naïve key": 7},
    {"f": "  -2.5 ", "fv": [0.1, 1e30, -0.0], "fr": [float("inf"), 2], "i": " 12 ", "iv": [True, False], "ir": None,
     "s": "x" * 300, "sv": ["", "b"], "sr": [], "naïve key": -1},
    {"f": 3, "fv": (7, 8, 9), "fr": 4.0, "i": "-16385", "iv": ["1", 2], "ir": 5, "s": b"bytes", "sv": ("c", "d"),
     "naïve key": 16384},
]


def tf_spec(schema):
    dtypes = {I64: tf.int64, F: tf.float32, S: tf.string}
    return {name: tf.io.RaggedFeature(dtypes[s.dtype]) if s.shape == (-1,) else tf.io.FixedLenFeature(s.shape,
            dtypes[s.dtype]) for name, s in schema.items()}


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def test_tensorflow_parses_what_we_encode():
    encode = example_encoder(SCHEMA, allow_non_finite=True)  # row 2 holds an infinity
    parsed = tf.io.parse_example(tf.constant([encode(r) for r in ROWS]), tf_spec(SCHEMA))
    assert parsed["f"].numpy().tolist() == [1.5, -2.5, 3.0]
    assert parsed["fv"].numpy().tolist()[1] == [f32(0.1), f32(1e30), -0.0]
    assert parsed["fr"].to_list() == [[], [math.inf, 2.0], [4.0]]
    assert parsed["i"].numpy().tolist() == [0, 12, -16385]
    assert parsed["iv"].numpy().tolist() == [[I64_MIN, I64_MAX], [1, 0], [1, 2]]
    assert parsed["ir"].to_list() == [[1, -1, 300, 2**40], [], [5]]
    assert parsed["s"].numpy().tolist() == [b"", b"x" * 300, b"bytes"]
    assert parsed["sv"].numpy().tolist() == [["é".encode(), b"\x00\xff"], [b"", b"b"], [b"c", b"d"]]
    assert parsed["sr"].to_list() == [[b"a"], [], []]
    assert parsed["naïve key"].numpy().tolist() == [7, -1, 16384]


def same_as_protobuf(data):
    """Protobuf reads the same message and would write it in as many bytes (packed lists, no extras)."""
    proto = tf.train.Example.FromString(data)
    again = proto.SerializeToString(deterministic=True)
    return tf.train.Example.FromString(again) == proto and len(again) == len(data) == proto.ByteSize()


def test_bytes_are_deterministic_in_sorted_name_order_and_as_compact_as_protobufs():
    encode = example_encoder(SCHEMA, allow_non_finite=True)  # ROWS hold an infinity
    for row in ROWS:
        data = encode(row)
        assert same_as_protobuf(data)
        assert list(decode_example(data)) == sorted(SCHEMA)
        assert encode(dict(reversed(list(row.items())))) == data


@pytest.mark.parametrize(
    "spec, value, expected",
    [
        (FeatureSpec(I64, ()), "42", [42]),
        (FeatureSpec(I64, ()), True, [1]),
        (FeatureSpec(I64, ()), [5], [5]),  # a 1-list is one value (what a decoded Example holds)
        (FeatureSpec(I64, (-1,)), "", []),  # an empty CSV value in a list feature: no values
        (FeatureSpec(I64, (-1,)), None, []),
        (FeatureSpec(F, ()), "1e3", [1000.0]),
        (FeatureSpec(F, ()), 0.1, [f32(0.1)]),
        (FeatureSpec(F, (-1,)), [1, "2", True], [1.0, 2.0, 1.0]),
        (FeatureSpec(S, ()), "", [b""]),
        (FeatureSpec(S, ()), 12, [b"12"]),  # numbers in a string feature keep their JSON spelling
        (FeatureSpec(S, ()), 2.5, [b"2.5"]),
        (FeatureSpec(S, ()), False, [b"false"]),
        (FeatureSpec(S, (-1,)), "", [b""]),
        (FeatureSpec(S, (-1,)), ["a", 1], [b"a", b"1"]),
    ],
)
def test_values_are_converted(spec, value, expected):
    assert decode_example(example_encoder({"x": spec})({"x": value})) == {"x": expected}


@pytest.mark.parametrize(
    "spec, row, reason, message",
    [
        (FeatureSpec(I64, ()), {}, "missing_value", "field 'x' is missing: expected one int64 value"),
        (FeatureSpec(I64, ()), {"x": None}, "missing_value", "field 'x' is missing"),
        (FeatureSpec(I64, ()), {"x": " "}, "missing_value", "field 'x' is empty: expected an int64"),
        (FeatureSpec(F, ()), {"x": ""}, "missing_value", "field 'x' is empty: expected a float32"),
        (FeatureSpec(F, (2,)), {"x": None}, "missing_value", "expected exactly 2 float32 values"),
        (FeatureSpec(I64, ()), {"x": "1.5"}, "type_mismatch", "field 'x' holds '1.5': expected an int64"),
        (FeatureSpec(I64, ()), {"x": 2.0}, "type_mismatch", "field 'x' holds 2.0 (float): expected an int64"),
        (FeatureSpec(I64, (-1,)), {"x": [1, 2.5]}, "type_mismatch", "holds 2.5 (float)"),
        (FeatureSpec(I64, ()), {"x": b"1"}, "type_mismatch", "holds b'1' (bytes)"),
        (FeatureSpec(F, ()), {"x": "abc"}, "type_mismatch", "field 'x' holds 'abc': expected a float32"),
        (FeatureSpec(F, (-1,)), {"x": [1.0, None]}, "type_mismatch", "holds None (NoneType)"),
        (FeatureSpec(S, ()), {"x": [["a"]]}, "type_mismatch", "holds a nested list"),
        (FeatureSpec(S, ()), {"x": {"a": 1}}, "nested_object", "field 'x' holds a nested object {'a': 1}"),
        (FeatureSpec(F, (-1,)), {"x": [{"a": 1}]}, "nested_object", "field 'x' holds a nested object"),
        (FeatureSpec(I64, ()), {"x": 2**63}, "out_of_range", "outside the int64 range"),
        (FeatureSpec(I64, (-1,)), {"x": [0, -(2**63) - 1]}, "out_of_range", "outside the int64 range"),
        (FeatureSpec(I64, ()), {"x": "99999999999999999999"}, "out_of_range", "outside the int64 range"),
        (FeatureSpec(F, ()), {"x": 1e39}, "out_of_range", "outside the float32 range"),
        (FeatureSpec(F, (-1,)), {"x": [10**400]}, "out_of_range", "outside the float32 range"),
        (FeatureSpec(F, ()), {"x": [1.0, 2.0]}, "shape_mismatch", "field 'x' holds 2 values [1.0, 2.0]: expected one"),
        (FeatureSpec(F, (3,)), {"x": [1.0, 2.0]}, "shape_mismatch", "expected exactly 3 float32 values"),
        (FeatureSpec(S, (2,)), {"x": "a"}, "shape_mismatch", "holds 1 values 'a'"),
        (FeatureSpec(S, ()), {"x": "\ud800"}, "invalid_utf8", "cannot be UTF-8 encoded"),
        (FeatureSpec(S, ()), {"x": "a", "y": 1, "z": 2}, "unknown_field", "field(s) 'y', 'z' are not in the schema"),
    ],
)
def test_values_that_do_not_fit_raise_record_errors(spec, row, reason, message):
    with pytest.raises(RecordError) as e:
        example_encoder({"x": spec})(row)
    assert e.value.reason == reason and message in e.value.detail, e.value.detail


def test_extra_fields_can_be_ignored_and_bad_arguments_are_refused():
    assert decode_example(example_encoder({"x": FeatureSpec(I64, ())}, extra_fields="ignore")({"x": 1, "y": {}})) == {
        "x": [1]}
    with pytest.raises(ValueError, match="extra_fields='drop': expected one of reject, ignore"):
        example_encoder({"x": FeatureSpec(I64, ())}, extra_fields="drop")
    with pytest.raises(ValueError, match="no features"):
        example_encoder({})


def test_errors_survive_pickling_for_beam():
    e = pickle.loads(pickle.dumps(RecordError("type_mismatch", "field 'x' ...")))
    assert (e.reason, e.detail) == ("type_mismatch", "field 'x' ...")
    c = pickle.loads(pickle.dumps(CorruptRecordError(3, 120, "tfrecord_data_crc", "bad", b"raw")))
    assert (c.index, c.offset, c.reason, c.detail, c.raw) == (3, 120, "tfrecord_data_crc", "bad", b"raw")


def example(**features):
    feature = {}
    for name, (kind, values) in features.items():
        lst = {"b": tf.train.BytesList, "f": tf.train.FloatList, "i": tf.train.Int64List}[kind](value=values)
        feature[name] = tf.train.Feature(**{{"b": "bytes_list", "f": "float_list", "i": "int64_list"}[kind]: lst})
    return tf.train.Example(features=tf.train.Features(feature=feature))


def test_decodes_what_tensorflow_serialized():
    ex = example(a=("i", [1, -1, I64_MIN, I64_MAX, 300]), b=("f", [0.5, -2.0]), c=("b", [b"", b"\xff" * 200]),
                 e=("f", []), g=("i", []), h=("b", []))
    ex.features.feature["none"].CopyFrom(tf.train.Feature())
    assert decode_example(ex.SerializeToString()) == {
        "a": [1, -1, I64_MIN, I64_MAX, 300], "b": [0.5, -2.0], "c": [b"", b"\xff" * 200], "e": [], "g": [], "h": [],
        "none": []}
    assert decode_example(tf.train.Example().SerializeToString()) == {}


def ld(field, payload):  # a length-delimited protobuf field
    return bytes([field << 3 | 2, len(payload)]) + payload


def entry(key, feature):
    return ld(1, ld(1, key.encode()) + ld(2, feature))


@pytest.mark.parametrize(
    "feature, expected",
    [
        (ld(3, b"\x08\x05\x08\x7f"), [5, 127]),  # unpacked int64
        (ld(3, b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), [-1]),
        (ld(3, ld(1, b"\x01\x02") + b"\x08\x03"), [1, 2, 3]),  # packed then unpacked
        (ld(2, b"\x0d" + struct.pack("<f", 1.5) + b"\x0d" + struct.pack("<f", -2)), [1.5, -2.0]),  # unpacked floats
        (ld(2, ld(1, struct.pack("<2f", 1, 2))) + ld(2, ld(1, struct.pack("<f", 3))), [1.0, 2.0, 3.0]),  # merged
        (ld(3, b"\x08\x01") + ld(1, ld(1, b"s")), [b"s"]),  # another list kind replaces (oneof)
    ],
)
def test_unpacked_and_merged_encodings_decode_like_tensorflow(feature, expected):
    data = ld(1, entry("k", feature))
    assert decode_example(data) == {"k": expected}
    proto = tf.train.Example.FromString(data).features.feature["k"]
    assert list(getattr(proto, proto.WhichOneof("kind")).value) == expected


@pytest.mark.parametrize(
    "data, message",
    [
        (b"\xff", "a varint is cut off"),
        (b'{"a": 1}', "unexpected field 15 (wire type 3) in Example"),
        (b"\x0a\x05\x0a\x03", "runs past the end of its message"),
        (ld(1, entry("k", ld(2, ld(1, b"\x00\x00\x80"))))[:-1], "runs past the end"),
        (ld(1, entry("k", ld(2, ld(1, b"\x00\x00\x80")))), "not a multiple of 4"),
        (ld(1, entry("k", ld(4, b""))), "unexpected field 4 (wire type 2) in Feature"),
        (ld(1, ld(1, ld(1, b"\xff"))), "a feature name at byte 6 is not valid UTF-8"),
        (ld(1, b"") + ld(2, b""), "unexpected field 2 (wire type 2) in Example"),  # a SequenceExample
        (ld(1, entry("k", ld(3, b"\x08" + b"\xff" * 10 + b"\x01"))), "longer than 10 bytes"),
    ],
)
def test_anything_else_is_not_an_example(data, message):
    with pytest.raises(RecordError) as e:
        decode_example(data)
    assert e.value.reason == "not_an_example" and message in e.value.detail, e.value.detail


VALUES = {
    I64: st.integers(I64_MIN, I64_MAX),
    F: st.floats(width=32, allow_nan=False),
    S: st.one_of(st.text(max_size=40), st.binary(max_size=40)),
}


@st.composite
def schema_and_rows(draw):
    names = draw(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=6, unique=True))
    specs = {n: FeatureSpec(draw(st.sampled_from([I64, F, S])), draw(st.sampled_from([(), (2,), (-1,)]))) for n in names}
    rows = []
    for _ in range(draw(st.integers(1, 4))):
        row = {}
        for n, s in specs.items():
            size = {(): 1, (2,): 2}.get(s.shape) or draw(st.integers(0, 5))
            values = draw(st.lists(VALUES[s.dtype], min_size=size, max_size=size))
            row[n] = values[0] if s.shape == () else values
        rows.append(row)
    return specs, rows


def as_bytes(v):
    return v.encode() if isinstance(v, str) else v


@settings(max_examples=150, deadline=None)
@given(schema_and_rows())
def test_any_row_round_trips_and_protobuf_agrees(case):
    specs, rows = case
    encode = example_encoder(specs, allow_non_finite=True)  # the float32 values include infinities
    for row in rows:
        data = encode(row)
        want = {n: [as_bytes(x) for x in (v if isinstance(v, list) else [v])] for n, v in row.items()}
        assert decode_example(data) == want
        assert same_as_protobuf(data)


RECORDS = [b"", b"a", b"x" * 70_000, example(a=("i", [1])).SerializeToString()]


@pytest.fixture
def tf_file(tmp_path):
    path = tmp_path / "a.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as w:
        for r in RECORDS:
            w.write(r)
    return path


def test_framing_matches_tensorflows_writer_and_reader(tf_file):
    data = tf_file.read_bytes()
    assert frame_all(RECORDS) == data == b"".join(frame(r) for r in RECORDS)
    assert list(read_records(io.BytesIO(data))) == RECORDS
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(tf_file))] == RECORDS
    assert masked_crc(b"") == 0xA282EAD8 and list(read_records(io.BytesIO(b""))) == []


def damage(data, at, size=1):
    return data[:at] + bytes(b ^ 0xFF for b in data[at:at + size]) + data[at + size:]


SECOND = 12 + 4  # offset of record 2 (the first record is empty)


@pytest.mark.parametrize(
    "change, reason, index, offset, message",
    [
        (lambda d: damage(d, SECOND + 8), "tfrecord_length_crc", 1, SECOND, "record 2 at byte 16: the length field"),
        (lambda d: damage(d, SECOND + 2), "tfrecord_length_crc", 1, SECOND, "fails its CRC"),
        (lambda d: damage(d, SECOND + 12), "tfrecord_data_crc", 1, SECOND, "its 1 data bytes fail their CRC"),
        (lambda d: damage(d, SECOND + 13), "tfrecord_data_crc", 1, SECOND, "record 2"),
        (lambda d: d[: SECOND + 5], "tfrecord_truncated", 1, SECOND, "the file ends inside its 12-byte header"),
        (lambda d: d[: SECOND + 14], "tfrecord_truncated", 1, SECOND, "ends inside a record of 1 bytes"),
        (lambda d: d[:-1], "tfrecord_truncated", 3, None, "record 4"),
    ],
)
def test_corrupt_framing_is_reported_at_the_first_bad_record(tf_file, change, reason, index, offset, message):
    data = change(tf_file.read_bytes())
    records = read_records(io.BytesIO(data))
    assert [next(records) for _ in range(index)] == RECORDS[:index]
    with pytest.raises(CorruptRecordError) as e:
        next(records)
    assert (e.value.reason, e.value.index) == (reason, index) and message in e.value.detail, e.value.detail
    assert offset is None or e.value.offset == offset


def test_data_crcs_can_be_skipped(tf_file):
    data = damage(tf_file.read_bytes(), SECOND + 12)
    assert list(read_records(io.BytesIO(data), check_crc=False))[1] == bytes([ord("a") ^ 0xFF])

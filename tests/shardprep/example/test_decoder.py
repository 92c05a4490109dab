"""The compiled Example reader (``native.decode_example``) against the Python one
(``example.decoder.read_example``): the same dict for every record the compiled one takes, and it
declines (None) exactly where the Python one refuses the bytes (which then words the error)."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep.example import RecordError
from shardprep.example.decoder import decode_example, read_example

compiled = pytest.importorskip("shardprep.native._native")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    return _varint(tag) + _varint(len(payload)) + payload


values = st.one_of(
    st.tuples(st.just(0x0A), st.lists(st.binary(max_size=12), max_size=4)),
    st.tuples(st.just(0x12), st.lists(st.floats(width=32, allow_nan=True), max_size=4)),
    st.tuples(st.just(0x1A), st.lists(st.integers(-(2**63), 2**64 - 1), max_size=4)),
)


@st.composite
def examples(draw) -> bytes:
    """Examples as any writer may encode them: packed or not, keys repeated, several value fields
    per entry, non-canonical (longer) varints, empty lists, keys that are not UTF-8."""
    entries = []
    for _ in range(draw(st.integers(0, 4))):
        key = draw(st.one_of(st.text(max_size=6).map(str.encode), st.binary(max_size=3)))
        body = b""
        for kind, vals in draw(st.lists(values, max_size=2)):
            if kind == 0x0A:
                lst = b"".join(_field(0x0A, v) for v in vals)
            elif kind == 0x12:
                raw = [struct.pack("<f", v) for v in vals]
                lst = _field(0x0A, b"".join(raw)) if draw(st.booleans()) else b"".join(b"\x0d" + r for r in raw)
            else:
                ints = [_varint(v & (2**64 - 1)) for v in vals]
                lst = _field(0x0A, b"".join(ints)) if draw(st.booleans()) else b"".join(b"\x08" + i for i in ints)
            body += _field(kind, lst)
        parts = [_field(0x0A, key), _field(0x12, body)]
        entries.append(b"".join(draw(st.permutations(parts)) if draw(st.booleans()) else parts))
    features = b"".join(_field(0x0A, e) for e in entries)
    return _field(0x0A, features) if features or draw(st.booleans()) else b""


@st.composite
def damaged(draw) -> bytes:
    data = bytearray(draw(examples()))
    for _ in range(draw(st.integers(0, 3))):
        what = draw(st.sampled_from(["cut", "flip", "insert"]))
        at = draw(st.integers(0, len(data)))
        if what == "cut":
            del data[at:]
        elif what == "flip" and at < len(data):
            data[at] ^= draw(st.integers(1, 255))
        elif what == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=11))
    return bytes(data)


def _same(a: dict, b: dict) -> bool:
    """Equal dicts, keys in the same order, floats compared by their bits (NaN included)."""
    def bits(v):
        return struct.pack("<d", v) if isinstance(v, float) else (type(v), v)
    return list(a) == list(b) and all([bits(v) for v in a[k]] == [bits(v) for v in b[k]] for k in a)


@settings(max_examples=600, deadline=None)
@given(st.one_of(examples(), damaged()))
def test_compiled_reader_takes_what_the_python_one_reads_and_declines_the_rest(data):
    fast = compiled.decode_example(data)
    try:
        slow = read_example(data)
    except RecordError:
        assert fast is None
        return
    assert fast is not None and _same(fast, slow)
    assert _same(decode_example(data), slow)


def test_long_varints_and_their_limits():
    ten = bytes([0x80] * 9 + [0x01])  # 2**63 in ten bytes: a tag or a length that large is refused
    for data in (ten, b"\x0a" + ten, b"\x0a\x05\x0a\x03\x0a\x01"):
        with pytest.raises(RecordError):
            read_example(data)
        assert compiled.decode_example(data) is None
    wide = _field(0x0A, _field(0x0A, _field(0x0A, b"k") + _field(0x12, _field(0x1A, b"\x08" + bytes([0xFF] * 9 + [0x7F])))))
    assert compiled.decode_example(wide) == read_example(wide) == {"k": [-1]}  # bits past the 64th dropped

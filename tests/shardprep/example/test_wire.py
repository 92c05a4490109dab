from shardprep.example import wire


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def test_the_varint_table_holds_each_numbers_varint():
    assert len(wire.VARINTS) == 1 << 14
    assert all(wire.VARINTS[n] == _varint(n) for n in range(1 << 14))
    assert all(type(v) is bytes for v in wire.VARINTS)
    assert [wire.varint(n) for n in (16383, 16384, 2**35)] == [_varint(16383), _varint(16384), _varint(2**35)]

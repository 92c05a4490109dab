"""The image reader's column-wise path: the same records, dead letters and order as the row path, read from real files."""
from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from shardprep import framing
from shardprep.example import RecordError, example_encoder
from shardprep.formats.base import Bad, Decoded
from shardprep.formats.image_headers import sniff
from shardprep.formats.image_listing import ImageOptions
from shardprep.formats.images import FILES_PER_UNIT, ImageFormat, ImageUnit, _read_local, expand_images, image_schema
from trainer.demo_images import BROKEN, write_broken, write_images


def _column_wise(unit, schema) -> list[tuple[int, bytes] | Bad]:
    """(position, framed record) of every record ``framed_batches`` gives, in order, and its Bad ones; a
    ``Decoded`` row goes through the row encoder, as the pipeline's Parse step does."""
    fmt, encode, out = ImageFormat(), example_encoder(schema), []
    position = unit.first_position
    for block in fmt.framed_batches(unit, schema, "reject"):
        if isinstance(block, Bad):
            out.append(block)
            position = block.position + 1
        elif isinstance(block, Decoded):
            try:
                out.append((block.position, framing.frame(encode(block.row))))
            except RecordError as e:
                out.append(Bad(block.position, e.reason, e.detail, ""))
            position = block.position + 1
        else:
            start = 0
            for end in block.ends.tolist():
                out.append((position, bytes(block.blob[start:end])))
                start, position = end, position + 1
    return out


def _row_path(unit, schema) -> list[tuple[int, bytes] | Bad]:
    encode, out = example_encoder(schema), []
    for position, row in ImageFormat().read(unit):
        if isinstance(row, Bad):
            out.append(row)
            continue
        try:
            out.append((position, framing.frame(encode(row))))
        except RecordError as e:
            out.append(Bad(position, e.reason, e.detail, ""))
    return out


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("reader") / "raw"
    write_images(str(root), per_class=25, formats=("jpeg", "png", "gif", "bmp", "webp"))
    write_broken(str(root))
    (root / "circle" / os.fsdecode(b"caf\xe9.jpg")).write_bytes((root / "circle" / "00000.jpg").read_bytes())  # Latin-1 name
    return root


def test_column_wise_gives_the_row_path_bytes_and_dead_letters(tree):
    source = expand_images([str(tree)], ImageOptions())[0]
    schema = image_schema(source.classes)
    units = ImageFormat().plan(source, 20_000)  # several units, by bytes
    assert len(units) > 3 and all(ImageFormat().column_wise(u, schema, "reject") for u in units)
    got = [item for u in units for item in _column_wise(u, schema)]
    want = [item for u in units for item in _row_path(u, schema)]
    assert got == want
    assert [item[0] if isinstance(item, tuple) else item.position for item in got] == list(range(1, len(source.entries) + 1))
    bad = {b.raw: b.reason for b in got if isinstance(b, Bad)}
    assert bad == {**BROKEN, b"circle/caf\xe9.jpg": "invalid_utf8"}  # the Latin-1 file name: raw, its bytes


def test_column_wise_shrinks_as_the_row_path_does(tree):
    source = expand_images([str(tree)], ImageOptions(check="decode", max_side=16, jpeg_quality=70))[0]
    schema = image_schema(source.classes)
    unit = ImageFormat().plan(source, 1 << 30)[0]
    got = _column_wise(unit, schema)
    assert got == _row_path(unit, schema)
    assert sum(isinstance(item, tuple) for item in got) == 3 * 25  # every good image, shrunk to 16 px


def test_units_carry_their_images_as_columns(tree):
    source = expand_images([str(tree)], ImageOptions())[0]
    units = ImageFormat().plan(source, 1 << 30)
    assert [len(u.entries) for u in units] == [min(FILES_PER_UNIT, len(source.entries))]
    unit = pickle.loads(pickle.dumps(units[0]))
    assert isinstance(unit, ImageUnit) and unit.entries == source.entries and len(unit.file.entries) == 0
    assert unit.entries.paths[:2] == ("circle/00000.jpg", "circle/00001.png")


@pytest.mark.parametrize("listed,actual", [(1000, 1000), (1000, 1500), (1000, 400), (0, 3000), (5, 0)])
def test_a_local_file_is_read_whole_whatever_its_listed_size(tmp_path, listed, actual):
    path = tmp_path / "x.bin"
    data = os.urandom(actual)
    path.write_bytes(data)
    assert _read_local(str(path), listed) == data


def test_a_missing_local_file_is_an_error_value(tmp_path):
    got = _read_local(str(tmp_path / "gone.jpg"), 10)
    assert isinstance(got, FileNotFoundError) and "gone.jpg" in str(got)


def test_header_of_every_jpeg_segment_kind(tree):
    data = (tree / "circle" / "00000.jpg").read_bytes()
    soi, rest = data[:2], data[2:]
    padded = soi + b"\xff\xff" + b"\xff\xd0" + rest  # a fill byte and a bare restart marker before the first segment
    assert sniff(padded) == sniff(data)

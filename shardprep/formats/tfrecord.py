"""TFRecord files of tf.train.Example: always one unit, read record by record.

Bad records: ``tfrecord_length_crc`` (the bytes up to the next record that checks),
``tfrecord_data_crc`` (one record), ``tfrecord_truncated`` (the file ends inside a record),
``not_an_example``, ``gzip_truncated`` and ``gzip_invalid``.
"""
from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator

from shardprep.example import RecordError, decode_example
from shardprep.formats.base import Bad, Format, InputFile, Record, WorkUnit, open_input
from shardprep.tfrecord import CorruptRecordError, scan_records

__all__ = ["TFRecordFormat"]


class TFRecordFormat(Format):
    """TFRecord (``.tfrecord``, ``.tfrecords``, ``.tfr``): rows are feature -> list of int/float/bytes."""

    name = "tfrecord"
    extensions = (".tfrecord", ".tfrecords", ".tfr")

    def plan(self, file: InputFile, unit_bytes: int) -> list[WorkUnit]:
        return [WorkUnit(file, 0, 0, file.size, 1)]  # records cannot be found from the middle of a file

    def read(self, unit: WorkUnit) -> Iterator[Record]:
        return read_tfrecord(unit)


def read_tfrecord(unit: WorkUnit) -> Iterator[Record]:
    position = unit.first_position
    with open_input(unit.file, 0) as stream:
        try:
            for data in scan_records(stream):
                if isinstance(data, CorruptRecordError):
                    row: dict | Bad = Bad(position, data.reason, data.detail, data.raw)
                else:
                    try:
                        row = decode_example(data)
                    except RecordError as e:
                        row = Bad(position, e.reason, f"record {position}: {e.detail}", data)
                yield position, row
                position += 1
        except EOFError as e:
            yield position, Bad(position, "gzip_truncated", f"record {position}: the gzip data ends early ({e})", b"")
        except (gzip.BadGzipFile, zlib.error) as e:
            yield position, Bad(position, "gzip_invalid", f"record {position}: the gzip data is corrupt ({e})", b"")

"""Input formats: one module per format behind one small protocol, ``base.Format``.

``files`` finds input files, tells their format and dispatches by format name through
``REGISTRY``; ``csv``, ``jsonl``, ``parquet`` and ``tfrecord`` cut files into work units and read
them record by record with exact positions; ``csv.arrow`` is CSV's column-wise fast path (pyarrow,
imported only when a unit is parsed). ``cuts`` places the cuts of line-based files; ``grouping``
gathers runs of small files into one unit.

Bad records (``Bad.reason``): ``csv_columns``, ``csv_parse`` (unterminated quote at the end of the
file, or a record the csv module refuses), ``invalid_utf8``, ``json_invalid``, ``json_not_object``,
``duplicate_key`` (a JSON object with a key twice, at any depth), ``tfrecord_length_crc`` (reading
resumes at the next record that checks), ``tfrecord_data_crc``,
``tfrecord_truncated``, ``not_an_example``, ``gzip_truncated`` and ``gzip_invalid``; ``images``
(a class-folder tree or a listing, ``image_listing``; headers ``image_headers``; Pillow ``image_codec``):
``image_empty``, ``image_not_an_image``, ``image_unsupported_format``, ``image_truncated``,
``image_decode_error``, ``image_unreadable`` and ``image_too_large`` (more pixels than ``--max-image-pixels``).
"""
from __future__ import annotations

from shardprep.formats.base import (
    FORMATS,
    Bad,
    FileGroup,
    Format,
    InputError,
    InputFile,
    InputOptions,
    Record,
    Unsupported,
    WorkUnit,
)
from shardprep.formats.files import (
    REGISTRY,
    auto_unit_bytes,
    described,
    detect_format,
    expand_inputs,
    format_of,
    own_schema,
    own_splits,
    plan_units,
    prepare_inputs,
    read_unit,
    sample_rows,
)

__all__ = [
    "FORMATS",
    "REGISTRY",
    "Bad",
    "FileGroup",
    "Format",
    "InputError",
    "InputFile",
    "InputOptions",
    "Record",
    "Unsupported",
    "WorkUnit",
    "auto_unit_bytes",
    "described",
    "detect_format",
    "expand_inputs",
    "format_of",
    "own_schema",
    "own_splits",
    "plan_units",
    "prepare_inputs",
    "read_unit",
    "sample_rows",
]

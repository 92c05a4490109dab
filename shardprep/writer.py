"""Writes one shard or one dead-letter file, atomically, and describes what it wrote."""
from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterable

import google_crc32c

from shardprep import fs, naming
from shardprep.manifest import ShardInfo

__all__ = ["dead_letter_line", "write_rejected", "write_shard"]


def write_shard(root: str, path: str, framed: bytes, num_records: int, *, compress: bool) -> ShardInfo:
    """Writes ``framed`` (``num_records`` TFRecords, already in shard order) to ``root/path``.

    The crc32c covers the file exactly as stored (after gzip), so ``verify`` and GCS object
    metadata can be compared with the manifest without decompressing. gzip uses mtime 0, so the
    same records always give the same bytes.
    """
    data = framed
    if compress:
        data = gzip.compress(data, compresslevel=6, mtime=0)
    with fs.write_atomic(naming.join(root, path)) as f:
        f.write(data)
    return ShardInfo(path, num_records, len(data), f"{google_crc32c.value(data):08x}")


def dead_letter_line(*, source: str, position: int, unit: str, reason: str, detail: str, raw: str | bytes) -> bytes:
    """One JSON Lines entry: where the record came from, why it was rejected, and its raw form."""
    entry: dict[str, object] = {"source": source, "position": position, "unit": unit, "reason": reason, "detail": detail}
    if isinstance(raw, bytes):
        try:
            entry["raw"] = raw.decode("utf-8")
        except UnicodeDecodeError:
            entry["raw_base64"] = base64.b64encode(raw).decode("ascii")
    else:
        entry["raw"] = raw
    return json.dumps(entry, ensure_ascii=False).encode("utf-8") + b"\n"


def write_rejected(root: str, path: str, lines: Iterable[bytes]) -> int:
    """Writes dead-letter lines to ``root/path``; returns how many."""
    count = 0
    with fs.write_atomic(naming.join(root, path)) as f:
        for line in lines:
            f.write(line)
            count += 1
    return count

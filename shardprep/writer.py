"""Writes one shard or one dead-letter file, atomically, and describes what it wrote."""
from __future__ import annotations

import base64
import gzip
import json
import os
from collections.abc import Iterable
from typing import Any, BinaryIO

import numpy as np

from shardprep import background, fs, naming, native, record_index
from shardprep.manifest import IndexInfo, ShardInfo

__all__ = ["BACKGROUND_MAX_BYTES", "ShardWriter", "aligned_buffer", "dead_letter_line", "write_rejected", "write_shard"]

BACKGROUND_MAX_BYTES = 256 << 20  # a larger shard is stored before ``ShardWriter.write`` returns
_PAGE = 4096  # O_DIRECT: address, offset and length in whole pages (of any block size up to this)


def aligned_buffer(size: int) -> np.ndarray:
    """``size`` writable bytes at a page-aligned address: a shard built there is written to local
    disk without a page-cache copy (``write_shard``)."""
    raw = np.empty(size + _PAGE, np.uint8)
    start = -raw.ctypes.data % _PAGE
    return raw[start:start + size]


def write_shard(root: str, path: str, framed: bytes | np.ndarray, num_records: int, *, compress: bool,
                ends: np.ndarray | None = None) -> ShardInfo:
    """Writes ``framed`` (``num_records`` TFRecords, already in shard order) to ``root/path``, and,
    given ``ends`` (where each record ends in ``framed``) and no compression, its record index beside
    it (``record_index``; stored after the shard, both before any manifest names them).

    The crc32c covers the file exactly as stored (after gzip), so ``verify`` and GCS object
    metadata can be compared with the manifest without decompressing. gzip uses mtime 0, so the
    same records always give the same bytes. Uncompressed, page-aligned data (``aligned_buffer``)
    goes to a local disk with ``O_DIRECT``: copying it into the page cache costs
    more CPU than any other step; the fsync before the rename makes it durable either way.
    """
    data, index, info = _stored_form(path, framed, num_records, compress, ends)
    _store(root, path, data, index)
    return info


def _stored_form(path: str, framed: bytes | np.ndarray, num_records: int, compress: bool,
                 ends: np.ndarray | None) -> tuple[Any, bytes | None, ShardInfo]:
    data = gzip.compress(framed, compresslevel=6, mtime=0) if compress else framed
    index = index_info = None
    if ends is not None and not compress:
        index = record_index.encode_ends(ends)
        index_info = IndexInfo(naming.index_path(path), len(index), record_index.crc32c_hex(index))
    return data, index, ShardInfo(path, num_records, len(data), f"{native.crc32c(data):08x}", index_info)


def _store(root: str, path: str, data: bytes | np.ndarray, index: bytes | None = None) -> None:
    url = naming.join(root, path)
    with fs.write_atomic(url) as f:
        if not (fs.is_local(url) and _write_direct(f, data)):
            f.write(data)
    if index is not None:
        with fs.write_atomic(naming.join(root, naming.index_path(path))) as f:
            f.write(index)


class ShardWriter:
    """``write_shard`` on a thread of its own, one shard at a time, while the caller builds the next.

    A process writing shards with ``O_DIRECT`` waits for the disk (benchmarks/analysis.md). ``write`` returns the shard's ``ShardInfo`` at once (its bytes and
    crc32c are known before it is stored) and stores it in the background once the one before is
    stored; ``flush`` waits for the last and raises any error of theirs. The caller flushes before
    anyone may rely on the shards (the end of a bundle or a pool task): until then a shard may be
    missing or a temporary file. At most two shards are in memory; one over ``BACKGROUND_MAX_BYTES``
    is stored before ``write`` returns.
    """

    def __init__(self) -> None:
        self._behind = background.Behind("shardprep-shard-writer")

    def write(self, root: str, path: str, framed: bytes | np.ndarray, num_records: int, *, compress: bool,
              ends: np.ndarray | None = None) -> ShardInfo:
        data, index, info = _stored_form(path, framed, num_records, compress, ends)
        self.flush()
        if len(data) > BACKGROUND_MAX_BYTES:
            _store(root, path, data, index)
        else:
            self._behind.submit(_store, root, path, data, index)
        return info

    def flush(self) -> None:
        self._behind.wait()

    def close(self) -> None:
        self._behind.close()


def _write_direct(f: BinaryIO, data: bytes | np.ndarray) -> bool:
    """Writes ``data`` to the new, empty local file ``f``: its whole pages past the page cache, the
    rest through ``f``. False, having written nothing that stays, where the data, ``f`` or the file
    system does not allow it (unaligned data, a file object without a path, tmpfs, no ``O_DIRECT``)."""
    view, name = memoryview(data).cast("B"), getattr(f, "name", None)
    head = len(view) // _PAGE * _PAGE
    address = np.frombuffer(view, np.uint8).ctypes.data if head else 1
    if address % _PAGE or not hasattr(os, "O_DIRECT") or not isinstance(name, str):
        return False
    try:
        fd = os.open(name, os.O_WRONLY | os.O_DIRECT)
    except OSError:
        return False
    try:
        done = 0
        while done < head:
            done += os.pwrite(fd, view[done:head], done)
    except OSError:
        return False  # the caller writes it all through ``f``, from offset 0: nothing of this stays
    finally:
        os.close(fd)
    f.seek(head)
    f.write(view[head:])
    return True


def dead_letter_line(*, source: str, position: int, unit: str, reason: str, detail: str, raw: str | bytes) -> bytes:
    """One JSON Lines entry: where the record came from, why it was rejected, and its raw form.

    Text that UTF-8 cannot hold (a lone surrogate, as JSON's ``"\\ud83d"`` parses to) is written as
    JSON escapes, which read back as the same text."""
    entry: dict[str, object] = {"source": source, "position": position, "unit": unit, "reason": reason, "detail": detail}
    if isinstance(raw, bytes):
        try:
            entry["raw"] = raw.decode("utf-8")
        except UnicodeDecodeError:
            entry["raw_base64"] = base64.b64encode(raw).decode("ascii")
    else:
        entry["raw"] = raw
    try:
        return json.dumps(entry, ensure_ascii=False).encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(entry).encode("ascii") + b"\n"


def write_rejected(root: str, path: str, lines: Iterable[bytes]) -> int:
    """Writes dead-letter lines to ``root/path``; returns how many."""
    count = 0
    with fs.write_atomic(naming.join(root, path)) as f:
        for line in lines:
            f.write(line)
            count += 1
    return count

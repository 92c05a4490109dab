"""File access for local paths, NFS and any fsspec URL (gs://, memory://), through one API.

Output is atomic per file: locally a temp file then a rename; on object stores a single upload,
which the store makes visible all at once.
"""
from __future__ import annotations

import contextlib
import os
import posixpath
import uuid
from typing import IO, Iterator

import fsspec

__all__ = [
    "exists",
    "filesystem",
    "glob",
    "is_local",
    "listdir",
    "open_file",
    "read_bytes",
    "remove",
    "size",
    "write_atomic",
]


def filesystem(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec file system of ``url`` and the path inside it."""
    fs, path = fsspec.core.url_to_fs(url)
    return fs, path


def is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def _url(fs: fsspec.AbstractFileSystem, path: str, like: str) -> str:
    return path if is_local(like) else fs.unstrip_protocol(path)


def glob(pattern: str) -> list[str]:
    """Files matching ``pattern``, sorted, as URLs of the same kind as the pattern."""
    fs, path = filesystem(pattern)
    if fs.isfile(path):
        return [pattern if is_local(pattern) else _url(fs, path, pattern)]
    return sorted(_url(fs, p, pattern) for p in fs.glob(path) if fs.isfile(p))


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    return fs.exists(path)


def size(url: str) -> int:
    fs, path = filesystem(url)
    return int(fs.size(path))


def listdir(url: str) -> list[str]:
    """Names (not paths) directly inside a folder; empty if it does not exist."""
    fs, path = filesystem(url)
    if not fs.exists(path):
        return []
    return sorted(posixpath.basename(p.rstrip("/")) for p in fs.ls(path, detail=False))


def open_file(url: str, mode: str = "rb") -> IO:
    fs, path = filesystem(url)
    return fs.open(path, mode)


def read_bytes(url: str, start: int | None = None, end: int | None = None) -> bytes:
    fs, path = filesystem(url)
    return fs.cat_file(path, start=start, end=end)


def remove(url: str, recursive: bool = False) -> None:
    fs, path = filesystem(url)
    if fs.exists(path):
        fs.rm(path, recursive=recursive)


@contextlib.contextmanager
def write_atomic(url: str) -> Iterator[IO[bytes]]:
    """Opens ``url`` for writing so that readers see either nothing or the whole file."""
    fs, path = filesystem(url)
    if is_local(url):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
        try:
            with open(tmp, "wb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    else:
        with fs.open(path, "wb") as f:
            yield f

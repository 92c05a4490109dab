"""Every file a manifest names, resolved and opened through one function.

A manifest is input like any other: an edited or hostile one may name ``../../etc/passwd``, an
absolute path, a link to ``/dev/zero`` or to a file outside the data set, a FIFO (a read blocks for
ever) or a folder. Every reader of a file a manifest names (shards, dead letters, a text run's
vocabulary, index files, anything later) and of the TFDS metadata beside it opens it here, and only
here. A member must be:

- a plain relative path: no ``..`` component, not absolute, no URL scheme, no ``./`` or ``//``;
- inside the data set folder after resolving links (locally ``os.path.realpath``; on object
  stores, which have no links, the plain path suffices);
- a regular file, checked with ``os.stat`` before it is opened (and opened non-blocking, then
  checked again on the open descriptor), so a FIFO or device is never read;
- at most its recorded size (``size``: the manifest's), or the caller's ``cap`` where the manifest
  records none; reads never go past that limit.

A violation raises ``MemberError`` (a ``ManifestError``: exit 2) naming the manifest field and the
path. A member that does not exist raises ``FileNotFoundError``, so callers can say "missing".
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import io
import os
import posixpath
import stat
from collections.abc import Iterator
from typing import IO

from shardprep import fs, naming
from shardprep.errors import ManifestError

__all__ = ["CHUNK", "Member", "MemberError", "check_relative", "open_member", "read_member", "resolve_member"]

CHUNK = 1 << 20  # the buffer of a member's stream
REMOTE_BLOCK = 64 << 20  # one ranged download per 64 MiB on object stores, not one per small read
_READALL_PIECE = 16 << 20


class MemberError(ManifestError):
    """A file named by a manifest that is not a safe member of its data set; the message names the
    manifest field and the path."""


@dataclasses.dataclass(frozen=True)
class Member:
    """A checked member: its URL, its size when checked, and the most bytes a read of it returns."""

    url: str
    size: int
    limit: int


def _refuse(field: str, relative: str, why: str, document: str) -> MemberError:
    """``manifest field text.vocab: '../x' is a FIFO, not a regular file: refusing to read it``."""
    where = f"{document} field {field}: " if field else ""
    return MemberError(f"{where}{relative!r} is {why}: refusing to read it")


def check_relative(relative: object, *, field: str, document: str = "manifest") -> str:
    """``relative`` if it is a plain path inside a folder (no ``..``, not absolute, no scheme, in
    normal form), else ``MemberError``. Needs no file system: ``manifest.load`` checks every path
    it knows with it. ``field``: the field of ``document`` that names the path, for the message."""
    if type(relative) is not str:
        raise MemberError(f"{document} is malformed: {field}: expected a path (a string), found {relative!r:.40}")
    parts = relative.split("/")
    if (
        not relative
        or "://" in relative
        or "\\" in relative
        or "\x00" in relative
        or relative.startswith("/")
        or (len(relative) > 1 and relative[1] == ":")
        or ".." in parts
        or posixpath.normpath(relative) != relative
    ):
        where = f"{document} field {field}: " if field else ""
        raise MemberError(f"{where}{relative!r} is not a plain path inside the data set folder: refusing to follow it")
    return relative


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _limit(field: str, relative: str, found: int, *, size: int | None, cap: int | None, prefix: bool,
           document: str) -> int:
    if size is None and cap is None:
        raise TypeError("resolve_member needs size (the manifest's) or cap (the caller's bound)")
    limit = size if size is not None else cap
    assert limit is not None
    if found > limit and not prefix:
        said = f"the {size:,} the {document} records" if size is not None else f"the {cap:,} such a file may hold"
        raise _refuse(field, relative, f"{found:,} bytes, more than {said}", document)
    return limit


def _local_stat(root: str, relative: str, *, field: str, document: str) -> tuple[str, os.stat_result]:
    """The local path of a member and its ``os.stat`` (links followed), after the containment check."""
    path = fs.local_path(naming.join(root, relative))
    real_root, real = os.path.realpath(fs.local_path(root)), os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
        raise _refuse(field, relative, f"a link to {real}, outside the data set folder", document)
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _refuse(field, relative, "a loop of symbolic links", document) from None
        raise
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(field, relative, f"{_kind(st.st_mode)}, not a regular file", document)
    return path, st


def resolve_member(root: str, relative: str, *, field: str, size: int | None = None, cap: int | None = None,
                   prefix: bool = False, document: str = "manifest") -> Member:
    """Checks the member ``relative`` of the data set at ``root`` without reading it.

    ``field``: the manifest field that names it (``text.vocab``, ``splits.train.shards[3].path``),
    for the message (``document``: what names it, where not the manifest: ``dataset_info.json``).
    ``size``: its recorded size; ``cap``: the bound where none is recorded (one of the two is
    required). ``prefix``: a larger file is read only up to the limit instead of refused.
    ``FileNotFoundError`` when it does not exist; ``MemberError`` when it is not a safe member."""
    check_relative(relative, field=field, document=document)
    url = naming.join(root, relative)
    if fs.is_local(url):
        _, st = _local_stat(root, relative, field=field, document=document)
        found = st.st_size
    else:
        filesystem, path = fs.filesystem(url)
        info = filesystem.info(path)
        if info.get("type") != "file":
            raise _refuse(field, relative, f"a {info.get('type') or 'non-file'} entry, not a regular file", document)
        found = int(info.get("size") or 0)
    return Member(url, found, _limit(field, relative, found, size=size, cap=cap, prefix=prefix, document=document))


class _Bounded(io.RawIOBase):
    """A raw stream that ends after ``limit`` bytes of ``raw``."""

    def __init__(self, raw: IO[bytes], limit: int) -> None:
        super().__init__()
        self._raw, self._left = raw, limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self._left)
        if n <= 0:
            return 0
        view = memoryview(buffer).cast("B")[:n]
        got = self._raw.readinto(view) or 0
        self._left -= got
        return got

    def readall(self) -> bytes:
        """The rest up to the limit, in large pieces (``RawIOBase.readall`` reads 8 KiB at a time)."""
        parts = []
        while self._left > 0 and (data := self._raw.read(min(self._left, _READALL_PIECE))):
            self._left -= len(data)
            parts.append(data)
        return b"".join(parts)

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


def _open_local(root: str, relative: str, *, field: str, document: str) -> tuple[IO[bytes], os.stat_result]:
    path, before = _local_stat(root, relative, field=field, document=document)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # a FIFO swapped in never blocks
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        raise _refuse(field, relative, "a file replaced while it was being opened", document)
    return os.fdopen(fd, "rb", buffering=0), st


@contextlib.contextmanager
def open_member(root: str, relative: str, *, field: str, size: int | None = None, cap: int | None = None,
                prefix: bool = False, document: str = "manifest") -> Iterator[IO[bytes]]:
    """Opens the member ``relative`` of the data set at ``root`` for reading, after the checks of
    ``resolve_member``; the stream (buffered, lines iterate) ends at the limit whatever the file
    holds by then."""
    check_relative(relative, field=field, document=document)
    url = naming.join(root, relative)
    if fs.is_local(url):
        raw, st = _open_local(root, relative, field=field, document=document)
        found = st.st_size
    else:
        member = resolve_member(root, relative, field=field, size=size, cap=cap, prefix=prefix, document=document)
        found = member.size
        filesystem, path = fs.filesystem(url)
        raw = filesystem.open(path, "rb", block_size=REMOTE_BLOCK, cache_type="readahead")
    try:
        limit = _limit(field, relative, found, size=size, cap=cap, prefix=prefix, document=document)
    except MemberError:
        raw.close()
        raise
    with io.BufferedReader(_Bounded(raw, limit), buffer_size=CHUNK) as stream:
        yield stream


def read_member(root: str, relative: str, *, field: str, size: int | None = None, cap: int | None = None,
                prefix: bool = False, document: str = "manifest") -> bytes:
    """The bytes of the member ``relative`` (at most its limit), after the checks of ``resolve_member``."""
    with open_member(root, relative, field=field, size=size, cap=cap, prefix=prefix, document=document) as f:
        return f.read()

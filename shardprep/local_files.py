"""Local files through their file descriptors: the least system calls a file, for inputs of many files.

``opened_facts``: a file's size, version, identity and kind from one open and its ``fstat`` (the
launcher's check of every input file); ``local_versions``: the versions of many files, one ``stat``
each (the commit's check that none changed); ``read_range`` and ``read_to_end``: bytes by ``pread``,
without a file object. A version is ``shardprep.fs.version``'s for a local file: size, mtime and inode.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from typing import NamedTuple

__all__ = ["LocalFacts", "kind", "local_versions", "opened_facts", "read_range", "read_to_end", "version"]


class LocalFacts(NamedTuple):
    """What ``opened_facts`` tells of a local file."""

    size: int
    version: str  # as ``version`` gives it
    identity: tuple[int, int]  # (device, inode): one file reached by several names has one identity
    kind: str | None  # ``kind``'s words for what it is; None for a regular file
    data: bytes | None = None  # all of a regular file asked to be read whole (``opened_facts``'s ``whole``)


def kind(mode: int) -> str | None:
    """What a file of this ``st_mode`` is, in words ("a folder", "a FIFO (named pipe)", ...); None for a
    regular file."""
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((what for test, what in kinds if test(mode)), "not a regular file")


def version(st: os.stat_result) -> str:
    """A local file's version from its ``stat``: it changes when the file is rewritten, cut, appended to or replaced."""
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"


def opened_facts(path: str, whole: int = 0) -> LocalFacts:
    """A local file's facts from one open and its ``fstat``: the open proves it readable, and, read-only and
    non-blocking, it never waits (a FIFO that took a listed file's place). A regular file of at most
    ``whole`` bytes is read too, in the same open (``data``). Raises ``OSError``."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        what = kind(st.st_mode)
        data = read_range(fd, st.st_size, 0) if what is None and 0 < st.st_size <= whole else None
    finally:
        os.close(fd)
    return LocalFacts(st.st_size, version(st), (st.st_dev, st.st_ino), what, data)


def local_versions(paths: Iterable[str]) -> list[str | None]:
    """``version`` of each local file (one ``stat`` each, no other work a file), None for one that
    cannot be found or checked."""
    out: list[str | None] = []
    stat_, append = os.stat, out.append
    for path in paths:
        try:
            st = stat_(path)
        except OSError:
            append(None)
            continue
        append(version(st))
    return out


def read_to_end(fd: int, offset: int) -> bytes:
    """The bytes of ``fd`` from ``offset`` up to where a read finds its end (a file that grew is read on)."""
    parts, want = [], max(0, os.fstat(fd).st_size - offset) + 1
    while data := os.pread(fd, want, offset):
        parts.append(data)
        offset += len(data)
    return b"".join(parts)


def read_range(fd: int, size: int, offset: int) -> bytes:
    """Up to ``size`` bytes of ``fd`` from ``offset``: fewer only at the file's end."""
    data = os.pread(fd, size, offset)
    if not data or len(data) == size:
        return data
    parts, got = [data], len(data)
    while got < size and (more := os.pread(fd, size - got, offset + got)):
        parts.append(more)
        got += len(more)
    return b"".join(parts)

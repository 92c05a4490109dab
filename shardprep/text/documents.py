"""BERT's pre-training text layout: one sentence per line, a blank line between documents.

``read_documents`` reads a byte stream one line at a time and yields ``(position, document)``,
``document`` a list of sentences (each line stripped of surrounding white space, as BERT's
``create_training_instances`` strips it), ``position`` the line number of its first sentence. A
line that is not valid UTF-8 is yielded as ``(position, Bad)`` (reason ``invalid_utf8``) and left
out of its document, for the caller to make a dead letter; so is a line of more than
``max_line_bytes`` (reason ``record_too_large``: memory stays bounded whatever the input). A
document with no sentence left (its lines all bad) is skipped and counted, as is each further blank
line (BERT appends an empty document per blank line and drops the empty ones).

``blank_line_pieces`` cuts a large file after blank lines into pieces that ``read_documents`` reads
apart (each from its first line number), as it would have read them in one go: the document store
builds them in parallel (``text.store``).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import IO

from shardprep.formats.base import Bad

__all__ = ["Bad", "DocumentStats", "Lines", "blank_line_pieces", "read_documents"]

MAX_LINE_BYTES = 1 << 20
MAX_DOCUMENT_SENTENCES = 100_000


@dataclasses.dataclass
class DocumentStats:
    """What ``read_documents`` saw: counts, for the run's summary."""

    documents: int = 0  # yielded
    sentences: int = 0  # in the yielded documents
    bad_lines: int = 0  # yielded as Bad
    empty_documents: int = 0  # skipped: no sentence (extra blank lines, or every line bad)
    split_documents: int = 0  # cut at max_document_sentences, the rest a document of its own


def read_documents(stream: IO[bytes], *, first_position: int = 1, stats: DocumentStats | None = None,
                   max_line_bytes: int = MAX_LINE_BYTES,
                   max_document_sentences: int = MAX_DOCUMENT_SENTENCES) -> Iterator[tuple[int, list[str] | Bad]]:
    """``(position, [sentence, ...])`` per document and ``(position, Bad)`` per unreadable line, in input order.

    ``first_position`` is the line number of the stream's first line (a work unit starting inside
    a file). A document of more than ``max_document_sentences`` lines is yielded in pieces of that
    many (counted in ``stats.split_documents``): one document in memory at a time, bounded.
    """
    stats = stats if stats is not None else DocumentStats()
    doc: list[str] = []
    start = 0  # line number of doc's first sentence
    had_bad = False  # the current document lost a line: if it ends empty, it counts as an empty document
    blank_run = 0
    position = first_position - 1
    readline = stream.readline
    while True:
        raw = readline(max_line_bytes + 1)
        if not raw:
            break
        position += 1
        if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
            size = len(raw)
            while raw and not raw.endswith(b"\n"):  # skip the rest of the line, max_line_bytes at a time
                raw = readline(max_line_bytes + 1)
                size += len(raw)
            stats.bad_lines += 1
            had_bad = True
            yield position, Bad(position, "record_too_large",
                                f"line {position} holds {size:,} bytes or more, more than the {max_line_bytes:,} a "
                                "sentence may hold", b"")
            continue
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError as e:
            stats.bad_lines += 1
            had_bad = True
            yield position, Bad(position, "invalid_utf8",
                                f"line {position} is not valid UTF-8 (byte {e.start}: {raw[e.start:e.start + 4]!r})",
                                raw)
            continue
        if not line:
            if doc:
                stats.documents += 1
                stats.sentences += len(doc)
                yield start, doc
                doc, had_bad = [], False
                blank_run = 1
            else:
                if had_bad or blank_run or position == first_position:
                    stats.empty_documents += 1
                had_bad = False
                blank_run += 1
            continue
        blank_run = 0
        if not doc:
            start = position
        doc.append(line)
        if len(doc) >= max_document_sentences:
            stats.documents += 1
            stats.sentences += len(doc)
            stats.split_documents += 1
            yield start, doc
            doc = []
    if doc:
        stats.documents += 1
        stats.sentences += len(doc)
        yield start, doc
    elif had_bad:
        stats.empty_documents += 1


WINDOW = 1 << 16  # bytes read at a time looking for a blank line


def blank_line_pieces(stream: IO[bytes], size: int, piece_bytes: int) -> list[tuple[int, int, int]]:
    """``(start, end, first line number)`` of the pieces of a BERT-layout file of ``size`` bytes: each
    of about ``piece_bytes`` or more, the last of at most 1.5 times that, all but the last ending
    with a blank line (an empty line, ``\\n`` or ``\\r\\n``; a file without one further on ends in one piece).

    ``read_documents`` of each piece, from its first line number, yields and counts what it yields
    and counts of the whole file there: at a cut the whole file's reader has ended its document and
    counted the blank line, and a blank line that then comes first in a piece is an extra one to
    both (``blank_run``, ``first_position``)."""
    pieces, start, line = [], 0, 1
    while size - start > piece_bytes * 3 // 2:
        cut = _after_blank_line(stream, start + piece_bytes, size)
        if cut is None or cut >= size:
            break
        pieces.append((start, cut, line))
        line += _newlines(stream, start, cut)
        start = cut
    pieces.append((start, size, line))
    return pieces


class Lines:
    """The lines of ``stream``'s bytes ``[start, end)`` (a piece), for ``read_documents``: its ``readline``."""

    def __init__(self, stream: IO[bytes], start: int, end: int) -> None:
        stream.seek(start)
        self._stream, self._left = stream, end - start

    def readline(self, limit: int = -1) -> bytes:
        n = self._left if limit < 0 else min(limit, self._left)
        line = self._stream.readline(n) if n > 0 else b""
        self._left -= len(line)
        return line


def _after_blank_line(stream: IO[bytes], at: int, size: int) -> int | None:
    """The offset just after the first blank line at or after ``at``: a line end, then an empty line."""
    while at < size:
        stream.seek(at)
        window = stream.read(WINDOW)
        ends = [i + len(p) for p in (b"\n\n", b"\n\r\n") if (i := window.find(p)) >= 0]
        if ends:
            return at + min(ends)
        if len(window) < WINDOW:
            return None
        at += len(window) - 2  # a blank line across the windows' edge
    return None


def _newlines(stream: IO[bytes], start: int, end: int) -> int:
    stream.seek(start)
    n = 0
    while start < end:
        block = stream.read(min(1 << 22, end - start))
        if not block:
            break
        n += block.count(b"\n")
        start += len(block)
    return n

"""The run's document store: every input document once, in input order, numbered, readable by id.

``build_store`` (the launcher, before the job) reads the input once: BERT-layout ``.txt`` /
``.txt.gz`` files (``text.documents``), or one column of CSV / JSON Lines / Parquet records (one
document per record, its sentences the column's non-blank lines: a text without a newline is a
one-sentence document). It writes ``store.jsonl`` into the run's spill folder, one JSON line per
document (``{"p": position, "s": [sentence, ...]}``; classification ``{"p", "a", "b", "l"}``) or
per unreadable line / record (``{"p", "r": reason, "d": detail, "x": raw}``), and ``index.npy``:
the store's byte offset of each document id ``0 .. N-1`` (ids in input order: files sorted, then
place in the file). The job's work units are byte ranges of the store cut at entries, of one
source file each (``StoreUnit``); every engine reads the same store, so ids and bytes agree.

``units.npy`` lists the first document id of each unit that holds a document: the job tokenizes
each such unit once into a file of its own (``text.tokens``), found by those ids.

``DocumentReader`` reads any document by id in bounded memory, kept in an LRU of at most
``CACHE_BYTES`` (the documents' ``nbytes``: packed, 4 bytes a token): from the run's token files
(``text.tokens.TokenFiles``: a seek and one read), else a seek to its store line, tokenized there.
"""
from __future__ import annotations

import array
import collections
import dataclasses
import gzip
import io
import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from shardprep import fs
from shardprep.formats.base import Bad, InputFile
from shardprep.text.bands import Edges
from shardprep.text.corpus import NO_DEDUP, CorpusStats, DedupSettings, PartSketch, label_counts, merge, sentence_share
from shardprep.text.dedup import kept_in_store, rewrite
from shardprep.text.documents import DocumentStats, Lines, blank_line_pieces, read_documents
from shardprep.text.tokens import document_bytes, unit_url, write_documents

__all__ = ["CACHE_BYTES", "BuildPart", "DocumentReader", "StorePart", "StoreResult", "StoreUnit", "build_store",
           "entries", "join_store", "store_parts"]

CACHE_BYTES = 256 << 20


@dataclasses.dataclass(frozen=True)
class StoreUnit:
    """A byte range ``[start, end)`` of the store: entries of one source file, its first document's id."""

    file_index: int
    start: int
    end: int
    first_doc: int


@dataclasses.dataclass
class StoreResult:
    """What ``build_store`` wrote."""

    units: list[StoreUnit]
    num_documents: int
    labels: tuple[str, ...]  # classification: the distinct labels, sorted
    stats: DocumentStats
    corpus: CorpusStats = dataclasses.field(default_factory=CorpusStats)
    removed: dict = dataclasses.field(default_factory=dict)  # --dedup: reason -> documents dropped


def _text_entries(file: InputFile, piece: Piece | None, stats: DocumentStats, max_line_bytes: int) -> Iterator[dict]:
    with fs.open_file(file.url, "rb") as raw:
        stream, first = (gzip.GzipFile(fileobj=raw) if file.gzip else raw), 1
        if piece is not None:
            stream, first = Lines(raw, piece[0], piece[1]), piece[2]
        try:
            for position, doc in read_documents(stream, first_position=first, stats=stats,
                                                max_line_bytes=max_line_bytes):
                yield _bad(doc) if isinstance(doc, Bad) else {"p": position, "s": doc}
        except (EOFError, gzip.BadGzipFile, OSError) as e:
            yield {"p": 0, "r": "gzip_invalid", "d": f"{file.url}: the gzip stream is damaged ({e})", "x": ""}


def _bad(bad: Bad) -> dict:
    raw = bad.raw.decode("latin-1") if isinstance(bad.raw, bytes) else bad.raw
    return {"p": bad.position, "r": bad.reason, "d": bad.detail, "x": raw[:1024]}


def _column_entries(file: InputFile, units: Sequence, columns: tuple[str, str | None, str | None],
                    stats: DocumentStats, read_unit: Callable[[Any], Iterator]) -> Iterator[dict]:
    text, pair, label = columns
    for unit in units:
        for position, row in read_unit(unit):
            if isinstance(row, Bad):
                yield _bad(row)
                continue
            value = row.get(text)
            if not isinstance(value, str):
                yield {"p": position, "r": "missing_value" if value is None else "not_text",
                       "d": f"record {position}: column {text!r} is {'missing' if value is None else type(value).__name__}, "
                       "expected text", "x": json.dumps(row, default=repr)[:1024]}
                continue
            if label is not None:  # classification: one example per record
                lab = row.get(label)
                if lab is None:
                    yield {"p": position, "r": "missing_value", "d": f"record {position}: no label in {label!r}",
                           "x": value[:1024]}
                    continue
                b = row.get(pair) if pair else None
                stats.documents += 1
                yield {"p": position, "a": value, "b": b if isinstance(b, str) else None, "l": str(lab)}
                continue
            sentences = [s.strip() for s in value.split("\n") if s.strip()]
            if not sentences:
                stats.empty_documents += 1
                continue
            stats.documents += 1
            stats.sentences += len(sentences)
            yield {"p": position, "s": sentences}


Piece = tuple[int, int, int, int]  # a large .txt file's (start, end, first line number, number): ``blank_line_pieces``
Element = tuple[InputFile, Sequence, Piece | None]  # a part: a file (its planned column units), or a piece of one


@dataclasses.dataclass(frozen=True)
class StorePart:
    """What ``BuildPart`` wrote for one input file or piece: ``url`` (``size`` bytes), its documents'
    offsets and its units' ``(start, end, first_doc)``, both from the part's start, each unit's
    token file (``""``: none written), its labels and counts."""

    file_index: int
    url: str
    size: int
    offsets: np.ndarray  # int64
    cuts: tuple[tuple[int, int, int], ...]
    labels: tuple[str, ...]
    stats: DocumentStats
    tokens: tuple[str, ...] = ()
    corpus: str = ""  # its documents' sketch (``text.corpus.PartSketch``: .npz)
    top_sentences: tuple[tuple[int, str], ...] = ()


class BuildPart:
    """The store's first step, one part at a time: an input file (with its planned column units) or
    a piece of a large .txt file in, its entries written to ``parts/<file index>[-<piece>].jsonl``
    and its ``StorePart`` out. A part is what the whole store holds of it, byte for byte:
    ``build_store`` concatenates them. ``tokenize`` (a pre-training run's given vocabulary: its URL,
    cased): the units of a piece, or of an uncompressed file of at most a unit, are tokenized here
    too, into token files that ``build_store`` names for their units (``text.tokens``), which the
    job's CountRanges step then finds written; it tokenizes the units of the larger parts (a gzip
    file, one not local), in parallel, rather than one worker all of a part's. Each document also
    goes to the part's ``text.corpus.PartSketch`` (hashes, and band keys for ``dedup``), written
    beside the part."""

    def __init__(self, folder: str, unit_bytes: int, columns: tuple[str | None, str | None, str | None],
                 max_line_bytes: int, read_unit: Callable[[Any], Iterator] | None,
                 tokenize: tuple[str, bool] | None = None, dedup: DedupSettings = NO_DEDUP,
                 sentence_share: float = 1.0) -> None:
        self._folder, self._unit_bytes, self._columns = folder, unit_bytes, columns
        self._max_line_bytes, self._read_unit, self._tokenize = max_line_bytes, read_unit, tokenize
        self._dedup, self._share = dedup, sentence_share

    @staticmethod
    def cost(element: Element) -> int:
        """What an element costs, for the order of a pool's tasks (``pipelines.driver``): its bytes."""
        file, _, piece = element
        return piece[1] - piece[0] if piece is not None else file.size

    def _tokenizer(self) -> Callable[[list[str]], Any] | None:
        if self._tokenize is None:
            return None
        from shardprep.text.pretraining import tokenize_document
        from shardprep.text.vocab import vocab_of

        vocab = vocab_of(*self._tokenize)
        return lambda sentences: tokenize_document(vocab, sentences)

    def process(self, element: Element) -> Iterator[StorePart]:
        file, column_units, piece = element
        stats = DocumentStats()
        if file.format == "text":
            items = _text_entries(file, piece, stats, self._max_line_bytes)
        else:
            if self._columns[0] is None:
                raise ValueError(f"{file.url}: a {file.format} input needs --text-column")
            items = _column_entries(file, column_units, self._columns, stats, self._read_unit)  # type: ignore[arg-type]
        small = piece is not None or (not file.gzip and file.size <= self._unit_bytes)
        tokenize = self._tokenizer() if small else None
        offsets, cuts, labels, tokens, documents = array.array("q"), [], set(), [], []
        sketch = PartSketch(self._dedup, self._share)
        at = start = first = 0
        name = f"{file.index:06d}" + (f"-{piece[3]:06d}" if piece is not None else "")
        limit = self._unit_bytes * (2 if piece is not None else 1)  # a piece: one unit, unless few blank lines

        def cut() -> None:
            tok = f"{self._folder}/tokens/part-{name}-{len(cuts):06d}.tok"
            tokens.append(tok if tokenize is not None and write_documents(tok, documents) else "")
            cuts.append((start, at, first))
            documents.clear()

        url = f"{self._folder}/parts/{name}.jsonl"
        with fs.write_atomic(url, durable=False) as out:
            buffer = bytearray()
            for entry in items:
                line = json.dumps(entry, ensure_ascii=False).encode("utf-8") + b"\n"
                if "r" not in entry:
                    offsets.append(at)
                    if "l" in entry:
                        labels.add(entry["l"])
                        b = entry.get("b")
                        sketch.add(entry["p"], None, entry["a"] + ("\n" + b if b else ""), entry["l"])
                    else:
                        sketch.add(entry["p"], entry["s"], "\n".join(entry["s"]))
                        if tokenize is not None:
                            documents.append(document_bytes(tokenize(entry["s"])))
                buffer += line
                if len(buffer) >= 1 << 20:
                    out.write(bytes(buffer))
                    buffer.clear()
                at += len(line)
                if at - start >= limit:
                    cut()
                    start, first = at, len(offsets)
            if at > start or not cuts:
                cut()  # every file has a unit, maybe empty
            out.write(bytes(buffer))
        corpus = f"{self._folder}/parts/{name}.corpus.npz"
        top = sketch.finish(corpus)
        yield StorePart(file.index, url, at, np.frombuffer(offsets, dtype=np.int64), tuple(cuts),
                        tuple(sorted(labels)), stats, tuple(tokens), corpus, top)


def store_parts(files: Sequence[InputFile], column_units: dict[int, list], unit_bytes: int) -> list[Element]:
    """The store's parts: a file each, but a local .txt file of more than 1.5 units is cut into
    pieces of about a unit after blank lines (``blank_line_pieces``: one pass that counts its lines)."""
    out: list[Element] = []
    for f in files:
        if f.format == "text" and not f.gzip and fs.is_local(f.url) and f.size > unit_bytes * 3 // 2:
            with fs.open_file(f.url, "rb") as stream:
                pieces = blank_line_pieces(stream, f.size, unit_bytes)
            if len(pieces) > 1:
                out += [(f, (), (start, end, line, k)) for k, (start, end, line) in enumerate(pieces)]
                continue
        out.append((f, tuple(column_units.get(f.index, ())), None))
    return out


def build_store(files: Sequence[InputFile], folder: str, *, unit_bytes: int, column_units: dict[int, list],
                columns: tuple[str | None, str | None, str | None], max_line_bytes: int,
                read_unit: Callable[[Any], Iterator] | None, run: Callable[[Any, list], list] | None = None,
                tokenize: tuple[str, bool] | None = None, dedup: DedupSettings = NO_DEDUP) -> StoreResult:
    """Writes ``folder``/store.jsonl and index.npy from ``files`` (their order is the ids' order).

    ``column_units``: the planned work units of each CSV / JSON Lines / Parquet file (by file
    index), read by ``read_unit`` (``formats.read_unit``: (position, row or Bad)) for ``columns`` =
    (text, pair, label); ``.txt`` files are read whole. Each file, or piece of a large .txt file, is
    a part of its own (``store_parts``; ``BuildPart``, which also writes the units' token files where
    ``tokenize`` gives the vocabulary), built by ``run(work, elements)`` (their outputs in order;
    None: here, one after the other), then joined (``join_store``). A text run's job runs these
    steps as its first stages instead (``text.store_stages``)."""
    share = sentence_share(sum(f.size for f in files))
    work = BuildPart(folder, unit_bytes, columns, max_line_bytes, read_unit, tokenize, dedup, share)
    elements = store_parts(files, column_units, unit_bytes)
    parts = run(work, elements) if run else [out for element in elements for out in work.process(element)]
    return join_store(parts, files, folder, share=share, dedup=dedup)


def join_store(parts: Sequence[StorePart], files: Sequence[InputFile], folder: str, *, share: float,
               dedup: DedupSettings = NO_DEDUP, edges: Edges | None = None) -> StoreResult:
    """The store of ``files`` from its ``parts`` (``BuildPart``'s, in ``store_parts`` order): ids,
    offsets and units are the parts' shifted by the counts before them, so the store is the same
    however many processes built it. The parts' sketches (``text.corpus``) give the corpus's counts;
    with ``dedup`` (exact or near: no ``tokenize`` then) each document that ``text.dedup.kept_in_store``
    drops (near: over the job's ``edges``, ``text.bands``; None: grouped here) becomes a dead letter
    naming the one kept, in a copy of its part (``text.dedup.rewrite``), before the parts are joined."""
    arrays, corpus = merge(parts, share)
    ids = np.arange(len(arrays.doc))
    kept = kept_in_store(parts, arrays, dedup, edges)
    dropped = kept != ids
    exact = dropped & (arrays.doc[kept] == arrays.doc)
    removed = {"duplicate": int(exact.sum()), "near_duplicate": int((dropped & ~exact).sum())} \
        if dedup.mode != "none" else {}
    corpus.labels = label_counts(parts, ~dropped)
    url_of = {f.index: f.url for f in files}
    stats, labels = DocumentStats(), set()
    units: list[StoreUnit] = []
    offsets: list[np.ndarray] = [np.zeros(0, np.int64)]
    at = docs = first = 0
    with fs.write_atomic(f"{folder}/store.jsonl", durable=False) as out:
        for part in parts:
            url, size, part_offsets, cuts = part.url, part.size, part.offsets, part.cuts
            if dropped[first:first + len(part.offsets)].any():
                url = part.url + ".dedup"
                size, part_offsets, cuts = rewrite(part.url, url, first, kept, arrays, part.cuts,
                                                   lambda i: url_of.get(i, str(i)))
            with fs.open_file(url, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 22)
            units += [StoreUnit(part.file_index, at + s, at + e, docs + d) for s, e, d in cuts]
            for (_, _, d), tok in zip(cuts, part.tokens):
                if tok:
                    fs.rename(tok, unit_url(f"{folder}/store.jsonl", docs + d))
            offsets.append(part_offsets + at)
            labels.update(part.labels)
            for field in dataclasses.fields(DocumentStats):
                setattr(stats, field.name, getattr(stats, field.name) + getattr(part.stats, field.name))
            at, docs, first = at + size, docs + len(part_offsets), first + len(part.offsets)
    if parts:
        fs.remove(f"{folder}/parts", recursive=True)
    index = np.concatenate(offsets)
    _save(f"{folder}/index.npy", index)
    firsts = [u.first_doc for u in units] + [len(index)]  # the first ids of units that hold documents:
    _save(f"{folder}/units.npy", np.asarray(sorted({f for f, nxt in zip(firsts, firsts[1:]) if nxt > f}),
                                            dtype=np.int64))  # text.tokens finds a document's file by them
    corpus.sentences = stats.sentences
    return StoreResult(units, len(index), tuple(sorted(labels)), stats, corpus, removed)


def _save(url: str, array: np.ndarray) -> None:
    data = io.BytesIO()
    np.save(data, array)
    with fs.write_atomic(url, durable=False) as out:  # the spill folder: a run that stops is discarded
        out.write(data.getvalue())


def entries(store_url: str, start: int, end: int) -> Iterator[dict]:
    """The store's entries in ``[start, end)``, in order."""
    if end <= start:
        return
    with fs.open_file(store_url, "rb") as f:
        f.seek(start)
        left = end - start
        while left > 0:
            line = f.readline()
            if not line:
                break
            left -= len(line)
            yield json.loads(line)


def sentences(store_url: str) -> Iterator[str]:
    """Every sentence (or classification text) of the store, in order: ``--train-vocab``'s pass."""
    with fs.open_file(store_url, "rb") as f:
        for line in f:
            entry = json.loads(line)
            if "s" in entry:
                yield from entry["s"]
            elif "a" in entry:
                yield entry["a"]
                if entry.get("b"):
                    yield entry["b"]


def _size(document) -> int:
    """A cached document's bytes: its ``nbytes`` (``text.pretraining.PackedDocument``), else ~40 a token."""
    size = getattr(document, "nbytes", None)
    return size if size is not None else 40 * sum(map(len, document)) + 64


class DocumentReader:
    """Document ``id`` of the store, tokenized by ``tokenize``; an LRU of ``cache_bytes`` of documents."""

    def __init__(self, store_url: str, index_url: str, tokenize, cache_bytes: int = CACHE_BYTES,
                 packed: Callable[[int], Any] | None = None) -> None:
        self._offsets = np.load(io.BytesIO(fs.read_bytes(index_url)))
        self._store = fs.open_file(store_url, "rb")
        self._tokenize = tokenize
        self._packed = packed  # id -> the document as tokenized once for the run (text.tokens), or None
        self._cache: collections.OrderedDict[int, Any] = collections.OrderedDict()
        self._budget, self._held = cache_bytes, 0

    def close(self) -> None:
        self._store.close()
        close = getattr(self._packed, "close", None)
        if close is not None:
            close()

    def put(self, doc_id: int, document) -> None:
        old = self._cache.pop(doc_id, None)
        self._held += _size(document) - (_size(old) if old is not None else 0)
        self._cache[doc_id] = document
        while self._held > self._budget and len(self._cache) > 1:
            self._held -= _size(self._cache.popitem(last=False)[1])

    def __call__(self, doc_id: int):
        """The document, tokenized; one that tokenizes to nothing gives the next id's (mod N), deterministically."""
        for k in range(len(self._offsets)):
            i = (doc_id + k) % len(self._offsets)
            doc = self._cache.get(i)
            if doc is None:
                doc = self._packed(i) if self._packed is not None else None
                if doc is None:
                    self._store.seek(int(self._offsets[i]))
                    doc = self._tokenize(json.loads(self._store.readline())["s"])
                self.put(i, doc)
            else:
                self._cache.move_to_end(i)
            if doc:
                return doc
        raise ValueError("no document of the corpus holds a token")

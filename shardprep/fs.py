"""File access for local paths, NFS and any fsspec URL (gs://, memory://), through one API.

Output is atomic per file: locally a temp file then a rename; on object stores a single upload,
which the store makes visible all at once. Local paths take Python's own calls, and fsspec is
imported on the first URL that needs it (its import is a noticeable share of a local run).
"""
from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
import posixpath
import shutil
import uuid
from collections.abc import Iterator, Sequence
from typing import IO, TYPE_CHECKING, NamedTuple

from shardprep import local_files

if TYPE_CHECKING:
    import fsspec

__all__ = [
    "exists",
    "facts",
    "filesystem",
    "glob",
    "is_local",
    "isdir",
    "listdir",
    "match",
    "Matches",
    "not_regular",
    "open_file",
    "read_bytes",
    "remove",
    "rename",
    "size",
    "write_atomic",
]


def is_gcs(url: str) -> bool:
    return url.startswith(("gs://", "gcs://"))


def filesystem(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec file system of ``url`` and the path inside it.

    GCS: no listings cache, so a folder listed before another process wrote to it is never
    answered from memory (the commit step lists and checks what workers wrote). Transient errors
    (408, 429, 5xx, dropped connections) are retried by gcsfs on every request: 6 attempts, with
    exponential backoff from 1 s to 32 s. Against an emulator (``STORAGE_EMULATOR_HOST``): no
    credentials, as google-cloud-storage does, and gcsfs's JSON-API class, because its default
    class first asks the gRPC Storage Control API for the bucket layout, which emulators do not
    serve (a 60 s timeout, repeated on every operation).
    """
    import fsspec

    if is_local(url):
        return fsspec.filesystem("file"), local_path(url)
    if not is_gcs(url):
        return fsspec.core.url_to_fs(url)
    options: dict = {"use_listings_cache": False}
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from gcsfs.core import GCSFileSystem

        if "token" not in fsspec.config.conf.get("gs", {}):
            options["token"] = "anon"
        fs = GCSFileSystem(**options)
        return fs, fs._strip_protocol(url)
    return fsspec.core.url_to_fs(url, **options)


def is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def local_path(url: str) -> str:
    """The absolute path of a local URL, as fsspec's local file system names it (``~`` expanded, no
    trailing slash, ``..`` kept)."""
    path = url.removeprefix("file://")
    if path.startswith("~"):
        path = os.path.expanduser(path)
    elif not path.startswith("/"):
        path = f"{os.getcwd()}/{'' if path == '.' else path.removeprefix('./')}"
    return path.rstrip("/") or "/"


def _url(fs: fsspec.AbstractFileSystem, path: str, like: str) -> str:
    return path if is_local(like) else fs.unstrip_protocol(path)


log = logging.getLogger("shardprep")


def not_regular(url: str) -> str | None:
    """What a local path is when it is not a regular file, links followed, from ``os.stat`` alone (a
    FIFO is never opened): "a folder", "a FIFO (named pipe)", "a character device" (``/dev/zero``),
    "a block device", "a socket", "a link to nothing"; None for a regular file, a missing path or a URL."""
    if not is_local(url):
        return None
    path = local_path(url)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a link to nothing" if os.path.islink(path) else None
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    return local_files.kind(mode)


class Matches(NamedTuple):
    """What a pattern matched: its regular files (sorted URLs), and the names it matched but left out,
    each with why ("a FIFO (named pipe)", "a folder", ...: ``not_regular``); ``listed``: URL ->
    (size, ``version``) of the files whose listing gave them (GCS), so that none is asked again."""

    files: list[str]
    left_out: list[tuple[str, str]]
    listed: dict[str, tuple[int, str]] | None = None


def glob(pattern: str) -> list[str]:
    """Files matching ``pattern``, sorted, as URLs of the same kind as the pattern (``match``'s files)."""
    return match(pattern).files


def match(pattern: str) -> Matches:
    """The regular files matching ``pattern``, as URLs of the same kind as the pattern, and the names it
    matched that are no regular file, with why. A local wildcard is matched by ``_local_glob``
    (fsspec's pattern rules; folders it cannot read logged and skipped). A pattern without a wildcard
    that names something other than a regular file matches nothing (``not_regular`` says what it is)."""
    if is_local(pattern):
        path = local_path(pattern)
        if os.path.isfile(path):
            return Matches([pattern], [])
        if any(c in path for c in "*?["):
            return _local_glob(path)
        return Matches([], [])
    fs, path = filesystem(pattern)
    if fs.isfile(path):
        return Matches([_url(fs, path, pattern)], [])
    if is_gcs(pattern):  # one paged listing gives every name's type, size and generation: no request a file
        found = sorted(fs.glob(path, detail=True).items())
        files = [(_url(fs, p, pattern), info) for p, info in found if info.get("type") == "file"]
        return Matches([url for url, _ in files],
                       [(_url(fs, p, pattern), "a folder") for p, info in found if info.get("type") != "file"],
                       {url: (int(info.get("size") or 0), version_of(info)) for url, info in files})
    found = sorted(fs.glob(path))
    kinds = [(p, fs.isfile(p)) for p in found]
    return Matches([_url(fs, p, pattern) for p, is_file in kinds if is_file],
                   [(_url(fs, p, pattern), "a folder") for p, is_file in kinds if not is_file])


def _local_glob(path: str) -> Matches:
    """Files matching the local pattern ``path`` (absolute, as fsspec strips it), as fsspec's glob finds
    them: below the folder before the first wildcard, as deep as the pattern reaches (``**``: any
    depth), links to folders not followed (so a link loop is never walked), links to files kept. A
    matching name that is no regular file (a FIFO, a link to a device or to nothing, a folder the
    pattern does not reach into) is left out, with why. A folder that cannot be listed (permissions, a
    name too long, I/O error) is skipped with one log line, never fatal."""
    first = min(i for i in (path.find(c) for c in "*?[") if i >= 0)
    root = path[:path.rindex("/", 0, first) + 1] if "/" in path[:first] else ""
    depth = None if "**" in path else path[len(root):].count("/") + 1
    parts = path[len(root):].split("/")  # below the root: the root's own names are the pattern's, literally
    out: list[str] = []
    left_out: list[tuple[str, str]] = []
    stack = [(root.rstrip("/") or "/", 1)]
    while stack:
        folder, level = stack.pop()
        try:  # the listing's file types: a regular file (not a link) needs no stat of its own
            with os.scandir(folder) as entries:
                listed = [(e.path, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False)) for e in entries]
        except OSError as e:
            if folder != (root.rstrip("/") or "/"):  # the pattern's own folder missing: no match, as before
                log.warning("skipped %s: cannot be listed (%s)", folder, e.strerror or e)
            continue
        for entry, is_dir, is_file in listed:
            if is_dir and (depth is None or level < depth):
                stack.append((entry, level + 1))
            elif glob_match(parts, entry[len(root):].split("/")):
                what = "a folder" if is_dir else None if is_file else not_regular(entry)
                if what is None:
                    out.append(entry)
                else:
                    left_out.append((entry, what))
    return Matches(sorted(out), sorted(left_out))


def glob_match(parts: Sequence[str], names: Sequence[str]) -> bool:
    """Whether a path (its names between slashes) matches a pattern (its parts), by fsspec's glob rules
    (``fsspec.utils.glob_translate``: ``**`` alone in a part is any number of names, hidden names
    match, a part's other wildcards match within one name)."""
    if not parts:
        return not names
    if parts[0] == "**":  # last: one name or more; else no names, or names that are not one empty name
        if len(parts) == 1:
            return bool(names)
        return any(glob_match(parts[1:], names[i:]) for i in range(len(names) + 1) if not i or "/".join(names[:i]))
    if "**" in parts[0]:
        raise ValueError("Invalid pattern: '**' can only be an entire path component")
    if not names or (parts[0] == "*" and not names[0]):
        return False
    return fnmatch.fnmatchcase(names[0], parts[0]) and glob_match(parts[1:], names[1:])


def exists(url: str) -> bool:
    if is_local(url):
        return os.path.exists(local_path(url))
    fs, path = filesystem(url)
    return fs.exists(path)


def isdir(url: str) -> bool:
    if is_local(url):
        return os.path.isdir(local_path(url))
    fs, path = filesystem(url)
    return fs.isdir(path)


def size(url: str) -> int:
    if is_local(url):
        return os.path.getsize(local_path(url))
    fs, path = filesystem(url)
    return int(fs.size(path))


def version(url: str) -> str:
    """A token that changes when the file at ``url`` is rewritten, cut, appended to or replaced:
    size, mtime and inode locally; size and generation on GCS; size and the store's time/etag elsewhere.
    Raises ``FileNotFoundError`` for a file that is gone."""
    return facts(url)[1]


def facts(url: str) -> tuple[int, str]:
    """(size, ``version``) of the file at ``url``: one ``stat`` locally, one request elsewhere."""
    if is_local(url):
        st = os.stat(url.removeprefix("file://"))
        return st.st_size, local_files.version(st)
    fs, path = filesystem(url)
    fs.invalidate_cache(path)
    info = fs.info(path)
    return int(info.get("size") or 0), version_of(info)


def version_of(info: dict) -> str:
    """The ``version`` of an object store's file from its info (``info``, or a listing's entry)."""
    return ":".join(str(info.get(k, "")) for k in ("size", "generation", "mtime", "updated", "ETag"))


def listdir(url: str) -> list[str]:
    """Names (not paths) directly inside a folder; empty if it does not exist."""
    if is_local(url):
        path = local_path(url)
        if not os.path.exists(path):
            return []
        return sorted(os.listdir(path)) if os.path.isdir(path) else [posixpath.basename(path)]
    fs, path = filesystem(url)
    if not fs.exists(path):
        return []
    return sorted(posixpath.basename(p.rstrip("/")) for p in fs.ls(path, detail=False))


def sizes(url: str) -> dict[str, int]:
    """Name -> size of the files directly inside a folder, from one fresh listing; {} if it does not exist."""
    if is_local(url):
        try:
            with os.scandir(local_path(url)) as entries:
                return {e.name: e.stat().st_size for e in entries if e.is_file()}
        except (FileNotFoundError, NotADirectoryError):
            return {}
    fs, path = filesystem(url)
    fs.invalidate_cache(path)
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        return {}
    return {posixpath.basename(e["name"].rstrip("/")): int(e["size"]) for e in entries if e.get("type") == "file"}


def open_file(url: str, mode: str = "rb") -> IO:
    if is_local(url):  # Python's own file: fsspec's wrapper costs more per open
        return open(url.removeprefix("file://"), mode)
    fs, path = filesystem(url)
    return fs.open(path, mode)


def read_bytes(url: str, start: int | None = None, end: int | None = None) -> bytes:
    """The bytes of ``url`` from ``start`` up to ``end`` (or its end): offsets from its start."""
    if is_local(url) and (start or 0) >= 0:  # no file object: preads
        offset = start or 0
        fd = os.open(url.removeprefix("file://"), os.O_RDONLY | os.O_CLOEXEC)
        try:
            if end is not None:
                return local_files.read_range(fd, max(0, end - offset), offset)
            return local_files.read_to_end(fd, offset)
        finally:
            os.close(fd)
    if is_local(url):
        with open(url.removeprefix("file://"), "rb") as f:
            if start:
                f.seek(start)
            return f.read() if end is None else f.read(max(0, end - (start or 0)))
    fs, path = filesystem(url)
    return fs.cat_file(path, start=start, end=end)


def rename(url: str, to: str) -> None:
    """Moves a file to ``to`` (a name on the same store), replacing what is there."""
    if is_local(url) and is_local(to):
        os.replace(local_path(url), local_path(to))
        return
    fs, path = filesystem(url)
    fs.mv(path, filesystem(to)[1])


def remove(url: str, recursive: bool = False) -> None:
    if is_local(url):
        path = local_path(url)
        with contextlib.suppress(FileNotFoundError):
            if os.path.isdir(path) and not os.path.islink(path):
                if not recursive:
                    raise ValueError(f"{url} is a folder: remove it with recursive=True")
                shutil.rmtree(path)
            else:
                os.remove(path)
        return
    fs, path = filesystem(url)
    if fs.exists(path):
        fs.rm(path, recursive=recursive)


@contextlib.contextmanager
def write_atomic(url: str, *, durable: bool = True) -> Iterator[IO[bytes]]:
    """Opens ``url`` for writing so that readers see either nothing or the whole file.

    ``durable=False`` skips the local fsync, for scratch files that a crash makes worthless anyway.
    """
    if is_local(url):  # Python's own calls: a run of many small files writes a spill file per unit
        path = url.removeprefix("file://")
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
        try:
            try:
                f = open(tmp, "wb")
            except FileNotFoundError:  # the folder's first file
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                f = open(tmp, "wb")
            with f:
                yield f
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
            raise
    else:
        fs, path = filesystem(url)
        # One upload once the writer is done: a writer that fails leaves nothing behind (an open
        # object-store file uploads what it holds when closed, even on an error), and a retry after
        # a lost answer repeats the same request (gcsfs: one multipart request up to 50 MB, a
        # resumable upload above).
        buffer = _Buffer()
        yield buffer
        fs.pipe_file(path, buffer.value())


class _Buffer:
    """A write-only binary file in memory; one ``write`` of bytes is kept without a copy."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._chunks.append(data if type(data) is bytes else bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def value(self) -> bytes:
        return b"".join(self._chunks)  # returns the single chunk itself when there is one

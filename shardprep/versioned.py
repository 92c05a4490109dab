"""Conditional writes for the output lease (``shardprep.lease``) and the retention's outcome marks.

A version token names one version of a file: GCS's generation; locally inode, mtime and size (local
compare-then-act is not atomic: the lease module adds its own break lock around it).
"""
from __future__ import annotations

import contextlib
import os
import uuid
from typing import TYPE_CHECKING

from shardprep.fs import filesystem, is_gcs, is_local, local_path, write_atomic

if TYPE_CHECKING:
    import fsspec

__all__ = ["create_exclusive", "read_versioned", "remove_if_version", "replace_if_version"]


def _gcs_object(url: str) -> tuple[fsspec.AbstractFileSystem, str, str]:
    fs, path = filesystem(url)
    bucket, key, _ = fs.split_path(path)
    return fs, bucket, key


def create_exclusive(url: str, data: bytes) -> bool:
    """Writes ``url`` only if nothing is there; False if something is.

    Locally and on NFS: a complete temp file hard-linked into place (``link`` fails if the name
    exists, atomically even on NFS, and readers never see a half-written file). GCS: a create-only
    upload (``ifGenerationMatch=0``). Other stores: check then write (not atomic).
    """
    if is_local(url):
        path = local_path(url)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:  # also when the write failed (a full disk): no temp file stays
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
    fs, path = filesystem(url)
    if is_gcs(url):
        try:
            fs.pipe_file(path, data, mode="create")
            return True
        except FileExistsError:
            return False
    if fs.exists(path):
        return False
    fs.pipe_file(path, data)
    return True


def read_versioned(url: str) -> tuple[bytes, str] | None:
    """The content of ``url`` and its version token, or None if it does not exist."""
    try:
        if is_local(url):
            with open(local_path(url), "rb") as f:
                version = _token(os.fstat(f.fileno()))  # of the version read next
                return f.read(1 << 20), version
        fs, path = filesystem(url)
        if is_gcs(url):  # one request: the content and the generation it belongs to
            fs, bucket, key = _gcs_object(url)
            headers, data = fs.call("GET", "b/{}/o/{}", bucket, key, alt="media")
            generation = headers.get("x-goog-generation") or str(fs.info(path)["generation"])
            return data, str(generation)
        data = fs.cat_file(path)
        return data, str(hash(data))
    except FileNotFoundError:
        return None


def _token(st: os.stat_result) -> str:
    """A local file's version token: inode, mtime and size."""
    return f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}"


def _local_version(path: str) -> str | None:
    try:
        return _token(os.stat(path))
    except FileNotFoundError:
        return None


def remove_if_version(url: str, version: str) -> bool:
    """Removes ``url`` if it still is ``version``; False if it changed or is gone."""
    if is_gcs(url):
        fs, bucket, key = _gcs_object(url)
        try:
            fs.call("DELETE", "b/{}/o/{}", bucket, key, ifGenerationMatch=version)
        except (FileExistsError, FileNotFoundError):  # gcsfs maps 412 (precondition failed) to FileExistsError
            return False
        fs.invalidate_cache(fs._strip_protocol(url))
        return True
    if is_local(url):
        path = local_path(url)
        if _local_version(path) != version:
            return False
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
            return True
        return False
    fs, path = filesystem(url)
    current = read_versioned(url)
    if current is None or current[1] != version:
        return False
    fs.rm(path)
    return True


def replace_if_version(url: str, data: bytes, version: str) -> bool:
    """Replaces ``url`` with ``data`` if it still is ``version``; False if it changed or is gone."""
    if is_gcs(url):
        fs, bucket, key = _gcs_object(url)
        try:
            fs.call("POST", f"{fs._location}/upload/storage/v1/b/{{}}/o", bucket, uploadType="media", name=key,
                    ifGenerationMatch=version, data=data)
        except (FileExistsError, FileNotFoundError):
            return False
        fs.invalidate_cache(fs._strip_protocol(url))
        return True
    current = _local_version(local_path(url)) if is_local(url) else (read_versioned(url) or (b"", None))[1]
    if current != version:
        return False
    with write_atomic(url) as f:
        f.write(data)
    return True

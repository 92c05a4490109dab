"""``--stage-dir``: copy this worker's own shards from any fsspec URL to local disk, checked.

TensorFlow reads local paths and ``gs://`` natively but not every fsspec URL (``memory://``, an
emulator); staging makes any store work and keeps reads local. Each copy is verified against the
manifest's size and CRC32C, written to a temp name and renamed, so a half-copied file is never used
and a rerun skips shards already staged.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable

import google_crc32c

from shardprep import members
from trainer.preflight import DataSetError, InputPlan

__all__ = ["stage_shards"]

_CHUNK = 4 << 20
log = logging.getLogger(__name__)


def _crc_of_file(path: str) -> str:
    crc = google_crc32c.Checksum()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            crc.update(chunk)
    return crc.hexdigest().decode()


def _copy(plan: InputPlan, index: int, dest: str) -> str:
    """Copies shard ``index`` of ``plan`` to ``dest`` through a temp file (read through
    ``shardprep.members``: a regular file inside the data set, at most its recorded size); returns
    the hex CRC32C of what was copied."""
    tmp = f"{dest}.tmp-{os.getpid()}"
    crc = google_crc32c.Checksum()
    shard = plan.shards[index]
    try:
        with members.open_member(plan.root, shard.path, field=f"splits.{plan.split}.shards[{index}].path",
                                 size=shard.num_bytes) as src, open(tmp, "wb") as out:
            while chunk := src.read(_CHUNK):
                crc.update(chunk)
                out.write(chunk)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return crc.hexdigest().decode()


def stage_shards(plan: InputPlan, *, shards: Iterable[int], stage_dir: str) -> InputPlan:
    """Copies ``shards`` (indices into the split) under ``stage_dir``; returns the plan reading them there."""
    folder = os.path.join(stage_dir, plan.split)
    os.makedirs(folder, exist_ok=True)
    urls = list(plan.shard_urls)
    copied = reused = 0
    for index in sorted(set(shards)):
        url = urls[index]
        dest = os.path.join(folder, url.rstrip("/").rsplit("/", 1)[-1])
        num_bytes, crc = plan.shards[index].num_bytes, plan.shards[index].crc32c
        if os.path.exists(dest) and os.path.getsize(dest) == num_bytes and _crc_of_file(dest) == crc:
            reused += 1
        else:
            got = _copy(plan, index, dest)
            size = os.path.getsize(dest)
            if size != num_bytes or got != crc:
                os.remove(dest)
                raise DataSetError(
                    f"staged copy of {url} has {size} bytes and CRC32C {got}, the manifest says {num_bytes} "
                    f"bytes and {crc}: the shard is corrupt; run `python -m shardprep.verify {plan.root}`"
                )
            copied += 1
        urls[index] = dest
    log.info("staged %d shard(s) to %s (%d copied, %d already there and verified)", copied + reused, folder, copied, reused)
    return dataclasses.replace(plan, shard_urls=tuple(urls))

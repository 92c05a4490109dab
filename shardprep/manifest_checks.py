"""The manifest's invariants (docs/design.md, "Manifest"), checked by the commit, verify and the trainer.

``problems`` lists every violation as one readable line: the accounting adds up, each split's
shards add up to it and are exactly balanced within each generation (run folder), and no shard is
listed twice nor holds another's content (an eval split made of train's shards).
"""
from __future__ import annotations

from typing import Any

Manifest = Any  # shardprep.manifest.Manifest (which imports this module)

__all__ = ["problems"]


def problems(manifest: Manifest) -> list[str]:
    """Invariant violations (docs/design.md, "Manifest"), one readable line each; empty when sound."""
    out = []
    acc = manifest.accounting
    if acc.read != acc.written + acc.rejected:
        out.append(f"accounting: read {acc.read} != written {acc.written} + rejected {acc.rejected}")
    written = sum(s.num_records for s in manifest.splits.values())
    if written != acc.written:
        out.append(f"accounting: written {acc.written} but the splits hold {written} records")
    if manifest.rejected.num_records != acc.rejected:
        out.append(f"accounting: rejected {acc.rejected} but the dead letters hold {manifest.rejected.num_records}")
    out.extend(_repeated_shards(manifest))
    for name, split in manifest.splits.items():
        counts = [s.num_records for s in split.shards]
        if not counts:
            out.append(f"split {name!r} has no shards")
            continue
        by_run: dict[str, list[int]] = {}  # each generation (run folder) is balanced on its own
        for shard in split.shards:
            by_run.setdefault(shard.path.split("/", 1)[0], []).append(shard.num_records)
        for run, held in by_run.items():
            if max(held) - min(held) > 1:
                where = f" (generation {run})" if len(by_run) > 1 else ""
                out.append(f"split {name!r} is unbalanced{where}: shards hold {min(held)} to {max(held)} records")
        if sum(counts) != split.num_records:
            out.append(f"split {name!r}: shards hold {sum(counts)} records, the split says {split.num_records}")
        if sum(s.num_bytes for s in split.shards) != split.num_bytes:
            out.append(f"split {name!r}: shard bytes do not add up to the split's num_bytes")
    return out


def _repeated_shards(manifest: Manifest) -> list[str]:
    """A shard listed twice (another is then never read), or the same content in two places (an
    eval split that is a copy of train's shards: evaluation on training data)."""
    out = []
    by_path: dict[str, str] = {}
    by_content: dict[tuple[str, int, int], str] = {}
    for name, split in manifest.splits.items():
        for i, shard in enumerate(split.shards):
            here = f"{name}[{i}]"
            if shard.path in by_path:
                out.append(f"{shard.path} is listed twice ({by_path[shard.path]} and {here})")
                continue
            by_path[shard.path] = here
            key = (shard.crc32c, shard.num_bytes, shard.num_records)
            if shard.num_records and key in by_content:
                out.append(f"{shard.path} ({here}) has the same crc32c, size and records as {by_content[key]}")
            by_content.setdefault(key, f"{shard.path} ({here})")
    return out

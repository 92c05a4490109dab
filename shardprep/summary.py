"""Human-readable tables of a data set, shared by ``run`` (final summary) and ``inspect``; names and
paths from the data are escaped by ``display.shown``."""
from __future__ import annotations

import statistics
from collections.abc import Iterable

from shardprep import naming
from shardprep.display import shown
from shardprep.manifest import Manifest, SplitInfo

__all__ = ["human_bytes", "print_summary", "split_stats", "table"]


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def split_stats(split: SplitInfo) -> dict[str, float]:
    records = [s.num_records for s in split.shards]
    sizes = [s.num_bytes for s in split.shards]
    return {
        "shards": len(records),
        "records": split.num_records,
        "bytes": split.num_bytes,
        "min_records": min(records),
        "median_records": statistics.median(records),
        "max_records": max(records),
        "min_bytes": min(sizes),
        "median_bytes": statistics.median(sizes),
        "max_bytes": max(sizes),
        # (max - min) / median of shard bytes: records balance exactly, bytes (a shard's read time) need not
        "bytes_spread": round((max(sizes) - min(sizes)) / statistics.median(sizes), 4) if statistics.median(sizes) else 0.0,
    }


def table(header: list[str], rows: Iterable[list[object]]) -> str:
    """A fixed-width text table; every header and cell through ``display.shown`` (names are untrusted)."""
    header = [shown(h) for h in header]
    rows = [[shown(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    fmt = lambda r: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)])


def print_summary(root: str, m: Manifest) -> None:
    rows = []
    for name, split in m.splits.items():
        st = split_stats(split)
        rows.append([name, st["shards"], f"{st['records']:,}", human_bytes(st["bytes"]),
                     f"{st['min_records']:,}", f"{st['max_records']:,}"])
    print(table(["split", "shards", "records", "bytes", "min/shard", "max/shard"], rows))
    acc = m.accounting
    print(f"read {acc.read:,} = written {acc.written:,} + rejected {acc.rejected:,}", end="")
    if m.rejected.num_records:
        reasons = ", ".join(f"{k}: {v}" for k, v in m.rejected.by_reason.items())
        print(shown(f" ({reasons}; dead letters: {', '.join(naming.join(root, p) for p in m.rejected.paths)})"))
    else:
        print()
    print(f"manifest: {shown(naming.join(root, naming.MANIFEST))}")

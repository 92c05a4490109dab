"""``python -m shardprep.inspect DIR``: what a data set holds and how it divides among workers.

Every name and value from the manifest or the records is printed through ``display.shown`` (the
tables escape their cells): control, bidi and zero-width characters cannot reorder or hide output."""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
from collections.abc import Sequence

import numpy as np

from shardprep import cli, manifest, planning, shard_reader
from shardprep.display import shown
from shardprep.example import decode_example
from shardprep.report.generation_section import generation_rows, statistics_note
from shardprep.report.generation_section import text_rows as generation_text_rows
from shardprep.report.red_flags import MAGIC, shown_value, top_values
from shardprep.report.text_run import decoded, sample, text_flags, text_rows, vocabulary
from shardprep.summary import human_bytes, split_stats, table

__all__ = ["main", "sample_records"]


def sample_records(root: str, m: manifest.Manifest, split: str, count: int) -> list[dict]:
    """The first ``count`` records of the split's first shard, decoded (read as ``verify`` reads shards)."""
    shards = m.splits[split].shards
    if not shards or count < 1:
        return []
    with shard_reader.open_shard(root, shards[0].path, limit=shards[0].num_bytes,
                                 field=f"splits.{split}.shards[0].path") as stream:
        records = itertools.islice(shard_reader.records(stream, compression=m.compression), count)
        return [decode_example(r) for r in records]


class _Raw(str):
    """A value already shown as text (``<PNG 1234 bytes>``): printed without JSON quotes."""


def _show_bytes(v: bytes) -> str:
    """Text as text; binary data (an image, anything not printable UTF-8) by its type and size."""
    kind = next((name for magic, name in MAGIC if v.startswith(magic)), None)
    if kind is None:
        try:
            text = v.decode("utf-8")
            if text.isprintable():
                return text
        except UnicodeDecodeError:
            pass
        kind = "binary"
    return _Raw(f"<{kind} {len(v):,} bytes>")


def _show_value(v: object) -> object:
    if isinstance(v, bytes):
        return _show_bytes(v)
    if isinstance(v, float):  # stored as float32: its shortest round-tripping form (13.8, not 13.800000190734863)
        return float(str(np.float32(v)))
    return v


def _json(v: object) -> str:
    return str(v) if isinstance(v, _Raw) else json.dumps(v, ensure_ascii=False)


def _show(value: list) -> str:
    shown = [_show_value(v) for v in value[:8]]
    text = _json(shown[0]) if len(shown) == 1 else "[" + ", ".join(map(_json, shown)) + "]"
    text = text if len(text) <= 60 else text[:57] + "..."
    return text + (f" (+{len(value) - 8})" if len(value) > 8 else "")


def _top(value: str) -> str:
    shown = shown_value(value)
    return repr(value) if shown == value else shown


def _stats_row(name: str, s: dict) -> list:
    """One feature's statistics as a table row (``shardprep.stats.feature_stats``): blanks where they do not apply."""
    def num(key: str) -> str:
        return f"{s[key]:.6g}" if key in s else ""
    q = s.get("quantiles", {})
    quantiles = " / ".join(f"{q[k]:.4g}" for k in ("p5", "p50", "p95")) if all(k in q for k in ("p5", "p50", "p95")) else ""
    lengths = f"{s['length_min']}..{s['length_max']}" if "length_min" in s else ""
    distinct = f"{s['distinct']:,}{'+' if s.get('distinct_capped') else ''}" if "distinct" in s else ""
    top = ", ".join(f"{_top(v)}: {c:,}" for v, c in top_values(s)[:3])
    return [name, f"{s['count']:,}", f"{s['missing']:,}", num("min"), num("max"), num("mean"), num("std"), quantiles, lengths,
            distinct, top[:60]]


def _print_text(root: str, m: manifest.Manifest) -> None:
    """A text run's corpus, a sample of its sequences, its red flags and its first records as wordpieces."""
    vocab = vocabulary(root, m.text)
    found = sample(root, m, vocab)
    print("\ntext:")
    rows = text_rows(m, found, vocab)
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(shown(f"  {k.ljust(width)}  {v}"))
    for flag in text_flags(m, found):
        print(shown(f"red flag: {flag.where}: {flag.why}"))
    for record in found.first if vocab else ():
        tokens, masked = decoded(record, vocab)
        print()
        print(shown(f"wordpieces: {tokens[:600]}"))
        if masked:
            print(shown(f"masked (position:original): {masked}"))


def _main(argv: Sequence[str] | None) -> int:
    p = argparse.ArgumentParser(prog="python -m shardprep.inspect", description=__doc__.split("\n", 1)[0].split(": ", 1)[1])
    p.add_argument("dir", metavar="DIR", help="data set folder (local, NFS or gs://)")
    p.add_argument("--samples", type=int, default=3, help="decoded records to show per split (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")
    args = p.parse_args(argv)
    m = manifest.load(args.dir)
    stats = {name: split_stats(s) for name, s in m.splits.items()}
    workers = {name: planning.valid_worker_counts(len(s.shards)) for name, s in m.splits.items()}
    if args.json:
        print(json.dumps({"splits": stats, "file_mode_workers": workers, "features": m.features,
                          "statistics": m.statistics, "data_version": m.data_version,
                          "generations": [dataclasses.asdict(g) for g in generation_rows(m)],
                          "accounting": m.to_json()["accounting"]}, indent=2))
        return 0
    print(shown(f"{args.dir}: {sum(s['records'] for s in stats.values()):,} records, compression {m.compression}, "
                f"seed {m.seed}, {'shuffled' if m.shuffled else 'input order'}, created {m.created}"))
    print(table(
        ["split", "shards", "records", "bytes", "records/shard min/median/max", "bytes/shard min/median/max",
         "bytes spread"],
        [[n, s["shards"], f"{s['records']:,}", human_bytes(s["bytes"]),
          f"{s['min_records']:,} / {s['median_records']:,.0f} / {s['max_records']:,}",
          f"{human_bytes(s['min_bytes'])} / {human_bytes(s['median_bytes'])} / {human_bytes(s['max_bytes'])}",
          f"{100 * s['bytes_spread']:.1f}%"]
         for n, s in stats.items()]))
    if m.generations:
        header, rows = generation_text_rows(m)
        print(f"\ngenerations (manifest version {m.data_version:,}):")
        print(table(header, rows))
        print(statistics_note(m))
    print()
    print(table(["feature", "dtype", "shape", "class names"],
                [[k, v["dtype"] + (f" ({v['unit']})" if v.get("unit") else ""), v["shape"], _show(v["names"]) if v.get("names") else ""] for k, v in m.features.items()]))
    if m.text:
        _print_text(args.dir, m)
    for split, features in m.statistics.items():
        print(f"\nstatistics of '{shown(split)}':")
        print(table(["feature", "count", "missing", "min", "max", "mean", "std", "p5 / median / p95", "lengths", "distinct", "most frequent"],
                    [_stats_row(k, s) for k, s in features.items()]))
    for name in m.splits:
        print(f"\nworker counts that read whole shards of '{shown(name)}' (file mode): "
              f"{', '.join(map(str, workers[name]))}; any other count reads exact record ranges (range mode)")
    acc = m.accounting
    print(f"\naccounting: read {acc.read:,} = written {acc.written:,} + rejected {acc.rejected:,}"
          + (f"; rejected by reason: {shown(m.rejected.by_reason)}" if acc.rejected else ""))
    for name in m.splits:
        samples = sample_records(args.dir, m, name, args.samples)
        if samples:
            print(f"\nfirst {len(samples)} records of '{shown(name)}':")
            keys = sorted(m.features)
            print(table(keys, [[_show(r.get(k, [])) for k in keys] for r in samples]))
    print(f"\nreport: python -m shardprep.report {shown(args.dir)} -o report.html")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main("shardprep.inspect", _main, argv)


if __name__ == "__main__":
    sys.exit(main())

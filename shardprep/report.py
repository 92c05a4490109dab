"""``python -m shardprep.report DIR -o report.html``: one self-contained HTML page of a data set (splits, shards, dead letters, feature statistics and red flags).

The page has inline CSS and inline SVG charts drawn here: no JavaScript, nothing fetched, so it
opens from a file, a mail attachment or a bucket. Every string from the data (feature names, values,
dead letters' raw records, file names) is escaped with ``html.escape``: data is hostile.
Statistics fields a manifest lacks (an older tool, ``--statistics off``) are left out, never guessed.
"""
from __future__ import annotations

import argparse
import html
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from shardprep import cli, fs, manifest, naming
from shardprep.errors import UsageError
from shardprep.report_charts import bar_chart, histogram_chart, js_divergence, rebin
from shardprep.summary import human_bytes

__all__ = ["DIVERGENCE_LIMIT", "Flag", "build", "dead_letter_examples", "divergences", "main", "red_flags", "render"]

MISSING_LIMIT = 0.2  # missing share above which a feature is flagged
IMBALANCE_LIMIT = 10.0  # most / least frequent class of a label
DIVERGENCE_LIMIT = 0.1  # Jensen-Shannon divergence (base 2) of a feature between train and another split
MIN_COMPARED = 100  # records a split needs in a feature for its divergence to mean more than noise
BYTES_RATIO_LIMIT = 1.1  # a split's largest / smallest shard in bytes
EXAMPLES_PER_REASON = 3
_MAX_DEAD_LETTER_LINES = 100_000  # read at most this many dead letters for examples
_RAW_CHARS = 300
_LABEL_NAMES = {"label", "labels", "class", "target", "y", "category"}
_QUANTILES = ("p1", "p5", "p25", "p50", "p75", "p95", "p99")

e = html.escape


class Flag(tuple):
    """``(where, why)``: one red flag, ``why`` a sentence saying what is wrong and why it matters."""

    def __new__(cls, where: str, why: str) -> Flag:
        return super().__new__(cls, (where, why))

    @property
    def where(self) -> str:
        return self[0]

    @property
    def why(self) -> str:
        return self[1]


def _num(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return ""
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.6g}"
    return e(str(v))


def _share(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


# ---------------------------------------------------------------- dead letters

def dead_letter_examples(root: str, m: manifest.Manifest, per_reason: int = EXAMPLES_PER_REASON) -> tuple[dict[str, list[dict]], list[str]]:
    """Up to ``per_reason`` dead letters of each reason (``writer.dead_letter_line`` entries), read from
    the run's ``rejected/`` files; and a note per file that could not be read."""
    out: dict[str, list[dict]] = {}
    notes: list[str] = []
    wanted = set(m.rejected.by_reason) or None
    seen = 0
    for path in m.rejected.paths:
        url = naming.join(root, path)
        try:
            with fs.open_file(url, "rb") as f:
                for line in f:
                    seen += 1
                    if seen > _MAX_DEAD_LETTER_LINES:
                        break
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue
                    if not isinstance(entry, dict):
                        continue
                    reason = str(entry.get("reason", "unknown"))
                    kept = out.setdefault(reason, [])
                    if len(kept) < per_reason:
                        kept.append(entry)
                    if wanted and all(len(out.get(r, ())) >= per_reason for r in wanted):
                        return out, notes
        except FileNotFoundError:
            notes.append(f"{path} is missing")
        except OSError as err:
            notes.append(f"{path} cannot be read: {type(err).__name__}")
    return out, notes


# ---------------------------------------------------------------- divergence and red flags

def _histogram(s: dict) -> tuple[list[float], list[float]] | None:
    """``(edges, counts)`` of a statistics entry's ``histogram``, when it is well formed."""
    h = s.get("histogram")
    if not isinstance(h, dict):
        return None
    edges, counts = h.get("edges"), h.get("counts")
    if (isinstance(edges, list) and isinstance(counts, list) and len(edges) == len(counts) + 1 and counts
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in [*edges, *counts])):
        return [float(x) for x in edges], [float(x) for x in counts]
    return None


def _top(s: dict) -> list[tuple[str, int]]:
    top = s.get("top")
    if not isinstance(top, list):
        return []
    out = []
    for item in top:
        if isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[1], int) and not isinstance(item[1], bool):
            out.append((str(item[0]), item[1]))
    return out


def _identifier_like(s: dict) -> bool:
    """Too many distinct values to compare counts: fewer than 5 records per value on average."""
    distinct, count = s.get("distinct"), s.get("count") or 0
    return bool(s.get("distinct_capped")) or (isinstance(distinct, int) and distinct > count / 5)


def divergence(a: dict, b: dict, scalar: bool = True) -> tuple[float, str] | None:
    """How far feature statistics ``b`` are from ``a``: ``(Jensen-Shannon divergence, what was compared)``,
    from their histograms (re-binned onto one grid) or their top values; None when nothing compares
    (no histograms, identifier-like strings) or either side has under ``MIN_COMPARED`` records."""
    if min(a.get("count") or 0, b.get("count") or 0) < MIN_COMPARED:
        return None  # sampling noise alone: 50 records of one normal distribution read 0.04-0.08 from 5,000 more
    ha, hb = _histogram(a), _histogram(b)
    if ha and hb:
        lo, hi = min(ha[0][0], hb[0][0]), max(ha[0][-1], hb[0][-1])
        if hi <= lo:
            return 0.0, "histogram"
        grid = [lo + (hi - lo) * i / 20 for i in range(21)]
        return js_divergence(rebin(*ha, grid), rebin(*hb, grid)), "histogram"
    ta, tb = _top(a), _top(b)
    if ta and tb and not _identifier_like(a) and not _identifier_like(b):
        keys = sorted({v for v, _ in ta} | {v for v, _ in tb})
        da, db = dict(ta), dict(tb)
        p, q = [da.get(k, 0) for k in keys], [db.get(k, 0) for k in keys]
        if scalar:  # values outside the listed top ones, as one more bucket
            p.append(max(0, (a.get("count") or 0) - sum(p)))
            q.append(max(0, (b.get("count") or 0) - sum(q)))
        return js_divergence(p, q), "top values"
    return None


def _reference_split(m: manifest.Manifest) -> str:
    return "train" if "train" in m.splits else next(iter(m.splits))


def divergences(m: manifest.Manifest) -> dict[str, dict[str, tuple[float, str]]]:
    """feature -> other split -> (divergence from the reference split, basis)."""
    ref = _reference_split(m)
    base = m.statistics.get(ref, {})
    out: dict[str, dict[str, tuple[float, str]]] = {}
    for split, features in m.statistics.items():
        if split == ref:
            continue
        for name, s in features.items():
            if name in base and isinstance(s, dict) and isinstance(base[name], dict):
                scalar = m.features.get(name, {}).get("shape") == []
                d = divergence(base[name], s, scalar)
                if d is not None:
                    out.setdefault(name, {})[split] = d
    return out


def _label_names(m: manifest.Manifest, label: str | None) -> set[str]:
    names = {label} if label else set()
    for name, spec in m.features.items():
        if spec.get("names") or name.lower() in _LABEL_NAMES or name.lower().endswith(("_label", "/label")):
            names.add(name)
    return names


def red_flags(m: manifest.Manifest, *, label: str | None = None) -> list[Flag]:
    """Everything in the data set a person should look at before training, each saying why."""
    flags: list[Flag] = []
    for split, info in m.splits.items():
        sizes = [s.num_bytes for s in info.shards]
        if sizes and min(sizes) > 0 and max(sizes) / min(sizes) > BYTES_RATIO_LIMIT:
            flags.append(Flag(f"split {split}", (
                f"shard bytes range from {human_bytes(min(sizes))} to {human_bytes(max(sizes))} "
                f"(max/min {max(sizes) / min(sizes):.2f} > {BYTES_RATIO_LIMIT}): records balance exactly, but the "
                "largest shard takes longer to read, so its worker finishes last each epoch")))
    labels = _label_names(m, label)
    for split, features in m.statistics.items():
        for name, s in features.items():
            if not isinstance(s, dict):
                continue
            where = f"feature {name} in {split}"
            count, missing = s.get("count") or 0, s.get("missing") or 0
            share = _share(missing, count + missing)
            if share > MISSING_LIMIT:
                flags.append(Flag(where, (
                    f"{100 * share:.1f}% of records miss it ({missing:,} of {count + missing:,}; more than "
                    f"{100 * MISSING_LIMIT:.0f}%): a model sees a default in its place; impute it, drop it or "
                    "check the source")))
            if count and (("min" in s and s.get("min") == s.get("max"))
                          or (s.get("distinct") == 1 and not s.get("distinct_capped"))):
                value = s.get("min") if "min" in s else (_top(s)[0][0] if _top(s) else "")
                flags.append(Flag(where, (
                    f"constant: every record holds {value!r}; it carries no information for a model "
                    "(a column filled with a default, or a filter upstream)")))
            top = _top(s)
            if name in labels and len(top) >= 2 and len(top) == s.get("distinct", len(top)):
                most, least = top[0], min(top, key=lambda t: t[1])
                if least[1] and most[1] / least[1] > IMBALANCE_LIMIT:
                    flags.append(Flag(where, (
                        f"label imbalance: the most frequent class {most[0]!r} has {most[1]:,} records, "
                        f"{most[1] / least[1]:.1f}x the least frequent {least[0]!r} ({least[1]:,}; more than "
                        f"{IMBALANCE_LIMIT:.0f}x): accuracy says little; weight the classes or resample")))
    ref = _reference_split(m)
    for name, by_split in divergences(m).items():
        for split, (d, basis) in by_split.items():
            if d > DIVERGENCE_LIMIT:
                flags.append(Flag(f"feature {name} in {split}", (
                    f"its distribution differs from {ref}'s (Jensen-Shannon divergence {d:.3f} of the {basis}, more "
                    f"than {DIVERGENCE_LIMIT}): the split does not measure what training saw; check how the "
                    "data was split")))
    return flags


# ---------------------------------------------------------------- HTML

_CSS = """
:root{color-scheme:light}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
main{max-width:1180px;margin:0 auto;padding:16px 20px 48px}
h1{font-size:22px;margin:8px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d6dae1;padding-bottom:4px}
h3{font-size:15px;margin:0 0 6px;word-break:break-all}
.meta{color:#5a6272;margin:0 0 12px}
.card{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:12px 14px;margin:10px 0;overflow-x:auto}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:10px}
table{border-collapse:collapse;margin:6px 0;font-variant-numeric:tabular-nums}
th,td{padding:3px 8px;border-bottom:1px solid #eceef2;text-align:right;vertical-align:top}
th:first-child,td:first-child,td.t,th.t{text-align:left}
th{background:#f1f3f6;font-weight:600}
td.v{max-width:420px;overflow-wrap:anywhere;text-align:left;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.flags li{margin:4px 0}.flags b{color:#b42318}
.ok{color:#16794c}.bad{color:#b42318;font-weight:600}
.chart{max-width:100%;height:auto;display:block}.ax{font-size:10px;fill:#5a6272}
.charts{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
.charts figure{margin:0}.charts figcaption{font-size:12px;color:#5a6272}
.tag{display:inline-block;background:#eef1f6;border-radius:3px;padding:0 5px;margin-left:6px;font-size:12px;color:#40495a}
"""


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], *, text_cols: Sequence[int] = (),
           drop_empty: bool = False) -> str:
    """An HTML table; ``header`` is escaped here, cells must be escaped already."""
    if drop_empty and rows:  # columns blank in every row (statistics that do not apply) are left out
        keep = [i for i in range(len(header)) if i == 0 or any(r[i] for r in rows)]
        header, rows = [header[i] for i in keep], [[r[i] for i in keep] for r in rows]
        text_cols = [keep.index(i) for i in text_cols if i in keep]
    head = "".join(f'<th class="t">{e(h)}</th>' if i in text_cols else f"<th>{e(h)}</th>" for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f'<td class="v">{c}</td>' if i in text_cols and i else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _splits_html(m: manifest.Manifest) -> str:
    rows, cards = [], []
    for name, info in m.splits.items():
        records = [s.num_records for s in info.shards]
        sizes = [s.num_bytes for s in info.shards]
        if not records:
            rows.append([e(name), "0", _num(info.num_records), human_bytes(info.num_bytes), "", "", ""])
            continue
        labels = [f"{name} shard {i}" for i in range(len(records))]
        ratio = f"{max(sizes) / min(sizes):.3f}" if min(sizes) else "n/a"
        rows.append([e(name), _num(len(records)), _num(info.num_records), human_bytes(info.num_bytes),
                     f"{min(records):,} – {max(records):,} (spread {max(records) - min(records):,})",
                     f"{human_bytes(min(sizes))} – {human_bytes(max(sizes))} (spread {human_bytes(max(sizes) - min(sizes))})",
                     ratio])
        cards.append(
            f'<div class="card"><h3>{e(name)} <span class="tag">{len(records):,} shards</span></h3>'
            f'<div class="charts"><figure>{bar_chart(records, title=f"records per shard of {name}", labels=labels)}'
            f"<figcaption>records per shard (spread {max(records) - min(records):,})</figcaption></figure>"
            f'<figure>{bar_chart(sizes, title=f"bytes per shard of {name}", labels=labels, color="#54a24b")}'
            f"<figcaption>bytes per shard (spread {human_bytes(max(sizes) - min(sizes))})</figcaption></figure></div></div>")
    table = _table(["split", "shards", "records", "bytes", "records per shard", "bytes per shard", "bytes max/min"], rows)
    return f'<div class="card">{table}</div><div class="grid">{"".join(cards)}</div>'


def _dead_letters_html(root: str, m: manifest.Manifest) -> str:
    acc = m.accounting
    head = (f"<p>read {acc.read:,} = written {acc.written:,} + rejected {acc.rejected:,}"
            f'{"" if acc.read == acc.written + acc.rejected else " <span class=bad>(does not add up)</span>"}</p>')
    if not m.rejected.num_records and not m.rejected.by_reason:
        return f'<div class="card">{head}<p class="ok">No dead letters: every record read was written.</p></div>'
    examples, notes = dead_letter_examples(root, m)
    parts = [head]
    parts.append("<p>files: " + ", ".join(f"<code>{e(p)}</code>" for p in m.rejected.paths) + "</p>")
    reasons = dict(m.rejected.by_reason) or {r: len(x) for r, x in examples.items()}
    parts.append(_table(["reason", "records", "share of read"],
                        [[e(r), _num(c), f"{100 * _share(c, acc.read):.2f}%"] for r, c in reasons.items()]))
    for reason in reasons:
        rows = []
        for entry in examples.get(reason, []):
            raw = entry.get("raw")
            if raw is None and "raw_base64" in entry:
                raw = f"(binary, base64) {entry['raw_base64']}"
            raw = str(raw if raw is not None else "")
            raw = raw if len(raw) <= _RAW_CHARS else raw[:_RAW_CHARS] + f"… (+{len(raw) - _RAW_CHARS:,} characters)"
            rows.append([e(str(entry.get("source", ""))), _num(entry.get("position")), e(str(entry.get("unit", ""))),
                         e(str(entry.get("detail", ""))), e(raw)])
        if rows:
            parts.append(f"<h3>{e(reason)}: examples</h3>")
            parts.append(_table(["source", "position", "unit", "detail", "raw record"], rows, text_cols=(0, 3, 4)))
    parts += [f'<p class="bad">{e(n)}</p>' for n in notes]
    return f'<div class="card">{"".join(parts)}</div>'


def _stats_rows(name: str, m: manifest.Manifest, divs: dict[str, tuple[float, str]]) -> list[list[str]]:
    rows = []
    for split, features in m.statistics.items():
        s = features.get(name)
        if not isinstance(s, dict):
            continue
        count, missing = s.get("count") or 0, s.get("missing") or 0
        share = _share(missing, count + missing)
        distinct = ""
        if "distinct" in s:
            distinct = _num(s["distinct"]) + ("+" if s.get("distinct_capped") else "") + (
                " (est.)" if s.get("distinct_estimated") else "")
        lengths = f"{s['length_min']:,} – {s['length_max']:,}" if "length_min" in s and "length_max" in s else ""
        sizes = ""
        if "bytes_mean" in s:
            sizes = f"{_num(s.get('bytes_min'))} / {_num(s.get('bytes_mean'))} / {_num(s.get('bytes_max'))}"
        div = ""
        if split in divs:
            d, basis = divs[split]
            div = f'<span class="{"bad" if d > DIVERGENCE_LIMIT else "ok"}" title="{e(basis)}">{d:.3f}</span>'
        rows.append([e(split), _num(count), f'<span class="{"bad" if share > MISSING_LIMIT else ""}">{100 * share:.1f}%</span>',
                     _num(s.get("min")), _num(s.get("max")), _num(s.get("mean")), _num(s.get("std")), _num(s.get("zeros")),
                     distinct, lengths, sizes, div])
    return rows


def _quantile_rows(name: str, m: manifest.Manifest) -> list[list[str]]:
    rows = []
    for split, features in m.statistics.items():
        q = (features.get(name) or {}).get("quantiles")
        if isinstance(q, dict):
            rows.append([e(split), *(_num(q.get(k)) for k in _QUANTILES)])
    return rows


def _any_histogram(h: Any) -> tuple[list[float], list[float]] | None:
    """A histogram given as ``{edges, counts}`` (or ``{boundaries, counts}``), or as ``[[low, high, count], ...]``."""
    if isinstance(h, dict):
        return _histogram({"histogram": {"edges": h.get("edges", h.get("boundaries")), "counts": h.get("counts")}})
    if isinstance(h, list) and h and all(isinstance(b, (list, tuple)) and len(b) == 3 for b in h):
        try:
            return [float(b[0]) for b in h] + [float(h[-1][1])], [float(b[2]) for b in h]
        except (TypeError, ValueError):
            return None
    return None


def _feature_charts(name: str, m: manifest.Manifest) -> str:
    ref = _reference_split(m)
    base = _histogram(m.statistics.get(ref, {}).get(name) or {})
    figures = []
    for split, features in m.statistics.items():
        s = features.get(name)
        if not isinstance(s, dict):
            continue
        for key, what in (("histogram", "histogram"), ("quantile_histogram", "quantile histogram"),
                          ("length_histogram", "list lengths")):
            h = _histogram(s) if key == "histogram" else _any_histogram(s.get(key))
            if not h:
                continue
            other = rebin(*base, h[0]) if key == "histogram" and base and split != ref else None
            caption = f"{split}: {what}" + (f" (line: {ref})" if other else "")
            figures.append(f"<figure>{histogram_chart(*h, title=f'{name} {caption}', other=other)}"
                           f"<figcaption>{e(caption)}</figcaption></figure>")
    return f'<div class="charts">{"".join(figures)}</div>' if figures else ""


def _top_tables(name: str, m: manifest.Manifest, limit: int = 10) -> str:
    tables = []
    for split, features in m.statistics.items():
        s = features.get(name)
        top = _top(s) if isinstance(s, dict) else []
        if not top:
            continue
        total = (s.get("count") or 0) if m.features.get(name, {}).get("shape") == [] else sum(c for _, c in top)
        rows = [[e(v if len(v) <= 80 else v[:80] + "…"), _num(c), f"{100 * _share(c, total):.1f}%"] for v, c in top[:limit]]
        more = f"<p class=meta>+{len(top) - limit:,} more listed</p>" if len(top) > limit else ""
        tables.append(f"<div><b>{e(split)}</b>: top values{_table(['value', 'count', 'share'], rows, text_cols=(0,))}{more}</div>")
    return f'<div class="charts">{"".join(tables)}</div>' if tables else ""


def _features_html(m: manifest.Manifest, flags: list[Flag]) -> str:
    divs = divergences(m)
    flagged = {f.where.split(" in ", 1)[0][len("feature "):] for f in flags if f.where.startswith("feature ")}
    cards = []
    for name, spec in m.features.items():
        shape = "scalar" if spec.get("shape") == [] else json.dumps(spec.get("shape"))
        tags = [e(str(spec.get("dtype"))), e(shape)]
        if spec.get("nullable"):
            tags.append("nullable")
        if spec.get("names"):
            names = [str(x) for x in spec["names"]]
            tags.append(e(f"{len(names)} classes: " + ", ".join(names[:8]) + (" …" if len(names) > 8 else "")))
        if name in flagged:
            tags.append('<span class="bad">red flag</span>')
        body = [f'<h3>{e(name)}{"".join(f"<span class=tag>{t}</span>" for t in tags)}</h3>']
        rows = _stats_rows(name, m, divs.get(name, {}))
        if rows:
            body.append(_table(["split", "count", "missing", "min", "max", "mean", "std", "zeros", "distinct", "lengths",
                                "bytes min/mean/max", f"divergence from {_reference_split(m)}"], rows, drop_empty=True))
        q = _quantile_rows(name, m)
        if q:
            body.append(_table(["split", *_QUANTILES], q, drop_empty=True))
        body.append(_feature_charts(name, m))
        body.append(_top_tables(name, m))
        cards.append(f'<div class="card" id="feature-{e(name)}">{"".join(body)}</div>')
    note = "" if m.statistics else ('<p class="meta">The manifest holds no statistics: rerun '
                                    "<code>shardprep.run</code> with <code>--statistics on</code> to see them here.</p>")
    return note + "".join(cards)


def render(root: str, m: manifest.Manifest, *, label: str | None = None) -> str:
    """The report of the data set at ``root`` (its manifest ``m``) as one HTML document."""
    flags = red_flags(m, label=label)
    total = sum(s.num_records for s in m.splits.values())
    if flags:
        items = "".join(f"<li><b>{e(f.where)}</b>: {e(f.why)}</li>" for f in flags)
        flags_html = f'<div class="card"><ul class="flags">{items}</ul></div>'
    else:
        flags_html = '<div class="card"><p class="ok">No red flags.</p></div>'
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">",
        f"<title>shardprep report: {e(root)}</title><style>{_CSS}</style></head><body><main>",
        f"<h1>shardprep report</h1><p class=\"meta\"><code>{e(root)}</code><br>{total:,} records in "
        f"{len(m.splits)} splits ({', '.join(e(s) for s in m.splits)}), {len(m.features)} features, compression "
        f"{e(m.compression)}, seed {m.seed}, {'shuffled' if m.shuffled else 'input order'}, created {e(m.created)}, "
        f"tool {e(m.tool_version)}</p>",
        f'<h2 id="flags">Red flags ({len(flags)})</h2>', flags_html,
        '<h2 id="splits">Splits and shards</h2>', _splits_html(m),
        '<h2 id="dead-letters">Dead letters</h2>', _dead_letters_html(root, m),
        f'<h2 id="features">Features ({len(m.features)})</h2>', _features_html(m, flags),
        "</main></body></html>\n",
    ])


def _manifest_label(root: str) -> str | None:
    """The manifest's ``label`` key, where a writer recorded one (not part of ``manifest.Manifest``)."""
    try:
        doc = json.loads(fs.read_bytes(naming.join(root, naming.MANIFEST)))
    except (OSError, ValueError):
        return None
    label = doc.get("label") if isinstance(doc, dict) else None
    return label if isinstance(label, str) else None


def build(root: str, *, label: str | None = None) -> str:
    """The HTML report of the data set at ``root``."""
    m = manifest.load(root)
    return render(root, m, label=label or _manifest_label(root))


def _main(argv: Sequence[str] | None) -> int:
    p = argparse.ArgumentParser(prog="python -m shardprep.report", description=__doc__.split("\n", 1)[0].split(": ", 1)[1])
    p.add_argument("dir", metavar="DIR", help="data set folder (local, NFS or gs://)")
    p.add_argument("-o", "--output", default="report.html", metavar="FILE",
                   help="the HTML file to write, local or gs:// (default: %(default)s in the current folder)")
    p.add_argument("--label", metavar="NAME", help="the label feature, checked for class imbalance "
                   "(default: the manifest's label, else features named label, class, target, ...)")
    p.add_argument("--verbose", action="store_true", help="tracebacks of unexpected errors")
    args = p.parse_args(argv)
    cli.configure_logging(args.verbose)
    m = manifest.load(args.dir)
    if args.label and args.label not in m.features:
        raise UsageError(f"--label {args.label!r} is not a feature of {args.dir} (features: {', '.join(sorted(m.features))})")
    if fs.is_local(args.output):
        folder = os.path.dirname(os.path.abspath(args.output))
        if not os.path.isdir(folder):
            raise UsageError(f"-o {args.output}: folder {folder} does not exist")
        if os.path.isdir(args.output):
            raise UsageError(f"-o {args.output} is a folder: give a file name (e.g. {os.path.join(args.output, 'report.html')})")
    text = render(args.dir, m, label=args.label or _manifest_label(args.dir))
    with fs.write_atomic(args.output) as f:
        f.write(text.encode("utf-8"))
    flags = len(red_flags(m, label=args.label or _manifest_label(args.dir)))
    print(f"wrote {args.output} ({human_bytes(len(text.encode()))}, {flags} red flag{'s' if flags != 1 else ''})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main("shardprep.report", _main, argv)


if __name__ == "__main__":
    sys.exit(main())

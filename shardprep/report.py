"""``python -m shardprep.report DIR -o report.html``: one self-contained HTML page of a data set (splits, shards, dead letters, feature statistics and red flags).

The page has inline CSS and inline SVG charts drawn here: no JavaScript, nothing fetched, so it
opens from a file, a mail attachment or a bucket. Every string from the data or the manifest
(feature, split and class names, values, dead letters' raw records, file names) goes through
``display.html_text``: control, bidi and zero-width characters escaped, then HTML; element ids are
index-based. Statistics fields a manifest lacks (an older tool, ``--statistics off``) are left out,
never guessed. At any feature count the page stays light: up to ``FULL_FEATURES`` features are
drawn in full (flagged ones first), the rest are compact rows in closed pages of ``PAGE_FEATURES``
that a browser lays out only when opened, and red flags past ``FLAGS_LISTED`` fold away likewise.
"""
from __future__ import annotations

import argparse
import html
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

from shardprep import cli, fs, manifest, members, naming
from shardprep.display import html_text, shown
from shardprep.errors import UsageError
from shardprep.report_charts import bar_chart, histogram_chart, rebin
from shardprep.report_flags import (
    DIVERGENCE_LIMIT,
    MISSING_LIMIT,
    Flag,
    divergences,
    histogram,
    red_flags,
    reference_split,
    share_of,
    shown_value,
    top_values,
)
from shardprep.summary import human_bytes

__all__ = ["FLAGS_LISTED", "FULL_FEATURES", "PAGE_FEATURES", "build", "dead_letter_examples", "drawn_features", "main", "render"]

EXAMPLES_PER_REASON = 3
FULL_FEATURES = 100  # features drawn in full (charts, quantiles, top values); the rest as compact rows
PAGE_FEATURES = 500  # compact rows' features per page (a <details> element, laid out only when opened)
FLAGS_LISTED = 100  # red flags listed at the top; the rest in a closed <details> under them
_MAX_DEAD_LETTER_LINES = 100_000  # read at most this many dead letters for examples
_MAX_DEAD_LETTER_BYTES = 64 << 20  # and at most this many bytes of each dead-letter file
_RAW_CHARS = 300
_QUANTILES = ("p1", "p5", "p25", "p50", "p75", "p95", "p99")

e = html_text  # every string from the data or the manifest: bidi and zero-width controls escaped, then HTML


def _num(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return ""
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.6g}"
    return e(str(v))


# ---------------------------------------------------------------- dead letters

def dead_letter_examples(root: str, m: manifest.Manifest, per_reason: int = EXAMPLES_PER_REASON) -> tuple[dict[str, list[dict]], list[str]]:
    """Up to ``per_reason`` dead letters of each reason (``writer.dead_letter_line`` entries), read from
    the run's ``rejected/`` files; and a note per file that could not be read."""
    out: dict[str, list[dict]] = {}
    notes: list[str] = []
    wanted = set(m.rejected.by_reason) or None
    seen = 0
    for i, path in enumerate(m.rejected.paths):
        try:  # a FIFO, a device, a link out of DIR: MemberError (exit 2); a large file: its first bytes
            with members.open_member(root, path, field=f"rejected.paths[{i}]", cap=_MAX_DEAD_LETTER_BYTES,
                                     prefix=True) as f:
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
details.page{margin:8px 0}details.page>summary{cursor:pointer;font-weight:600;padding:4px 0}
pre.rows{font:12px/1.35 ui-monospace,Menlo,Consolas,monospace;margin:4px 0;overflow-x:auto}
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
                        [[e(r), _num(c), f"{100 * share_of(c, acc.read):.2f}%"] for r, c in reasons.items()]))
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
        share = share_of(missing, count + missing)
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


def _anyhistogram(h: Any) -> tuple[list[float], list[float]] | None:
    """A histogram given as ``{edges, counts}`` (or ``{boundaries, counts}``), or as ``[[low, high, count], ...]``."""
    if isinstance(h, dict):
        return histogram({"histogram": {"edges": h.get("edges", h.get("boundaries")), "counts": h.get("counts")}})
    if isinstance(h, list) and h and all(isinstance(b, (list, tuple)) and len(b) == 3 for b in h):
        try:
            return [float(b[0]) for b in h] + [float(h[-1][1])], [float(b[2]) for b in h]
        except (TypeError, ValueError):
            return None
    return None


def _feature_charts(name: str, m: manifest.Manifest) -> str:
    ref = reference_split(m)
    base = histogram(m.statistics.get(ref, {}).get(name) or {})
    figures = []
    for split, features in m.statistics.items():
        s = features.get(name)
        if not isinstance(s, dict):
            continue
        for key, what in (("histogram", "histogram"), ("quantile_histogram", "quantile histogram"),
                          ("length_histogram", "list lengths")):
            h = histogram(s) if key == "histogram" else _anyhistogram(s.get(key))
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
        top = top_values(s) if isinstance(s, dict) else []
        if not top:
            continue
        total = (s.get("count") or 0) if m.features.get(name, {}).get("shape") == [] else sum(c for _, c in top)
        shown = [(shown_value(v), c) for v, c in top[:limit]]
        rows = [[e(v if len(v) <= 80 else v[:80] + "…"), _num(c), f"{100 * share_of(c, total):.1f}%"] for v, c in shown]
        more = f"<p class=meta>+{len(top) - limit:,} more listed</p>" if len(top) > limit else ""
        tables.append(f"<div><b>{e(split)}</b>: top values{_table(['value', 'count', 'share'], rows, text_cols=(0,))}{more}</div>")
    return f'<div class="charts">{"".join(tables)}</div>' if tables else ""


def _feature_card(index: int, name: str, m: manifest.Manifest, *, divs: dict[str, tuple[float, str]], flagged: bool) -> str:
    """One feature drawn in full: its tags, statistics per split, quantiles, charts and top values."""
    spec = m.features[name]
    shape = "scalar" if spec.get("shape") == [] else json.dumps(spec.get("shape"))
    tags = [e(str(spec.get("dtype"))), e(shape)]
    if spec.get("unit"):
        tags.append(e(str(spec["unit"])))
    if spec.get("nullable"):
        tags.append("nullable")
    if spec.get("names"):
        names = [str(x) for x in spec["names"]]
        tags.append(e(f"{len(names)} classes: " + ", ".join(names[:8]) + (" …" if len(names) > 8 else "")))
    if flagged:
        tags.append('<span class="bad">red flag</span>')
    body = [f'<h3>{e(name)}{"".join(f"<span class=tag>{t}</span>" for t in tags)}</h3>']
    rows = _stats_rows(name, m, divs)
    if rows:
        body.append(_table(["split", "count", "missing", "min", "max", "mean", "std", "zeros", "distinct", "lengths",
                            "bytes min/mean/max", f"divergence from {reference_split(m)}"], rows, drop_empty=True))
    q = _quantile_rows(name, m)
    if q:
        body.append(_table(["split", *_QUANTILES], q, drop_empty=True))
    body.append(_feature_charts(name, m))
    body.append(_top_tables(name, m))
    return f'<div class="card" id="{_feature_id(index)}">{"".join(body)}</div>'


def _feature_id(index: int) -> str:
    """The anchor of the feature at ``index`` in the manifest: unique and safe whatever its name holds."""
    return f"feature-{index}"


def _short(v: Any) -> str:
    """A number of the compact rows: four significant digits, integers in full."""
    if isinstance(v, float):
        return f"{v:.4g}"
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else ""


class _Row(NamedTuple):
    """One line of a compact page: its cells as plain text (``display.shown`` applied, not yet HTML)
    and whether it belongs to a flagged feature (drawn in red)."""

    cells: list[str]
    flagged: bool


_COMPACT_HEAD = ("#", "feature", "type", "split", "count", "missing", "min", "max", "mean", "std", "divergence",
                 "distinct", "most frequent")
_COMPACT_LEFT = frozenset({1, 2, 3, 12})  # text columns, aligned left (the longest last: lines end early)
_NAME_WIDTH = 48  # longer names are written in full, pushing their own line's later columns right


def _compact_rows(index: int, name: str, m: manifest.Manifest, *, divs: dict[str, tuple[float, str]],
                  flagged: bool) -> list[_Row]:
    """The feature at ``index`` as lines of a compact page, one per split with statistics."""
    spec = m.features[name]
    shape = "" if spec.get("shape") == [] else " " + json.dumps(spec.get("shape"))
    head = [f"{index + 1:,}", shown(name), shown(f"{spec.get('dtype')}{shape}")]
    rows = []
    for split, features in m.statistics.items():
        s = features.get(name)
        if not isinstance(s, dict):
            continue
        count, missing = s.get("count") or 0, s.get("missing") or 0
        top = top_values(s)
        most = ""
        if top:
            v = shown_value(top[0][0])
            most = (v if len(v) <= 24 else v[:24] + "…") + (f" ({100 * share_of(top[0][1], count):.0f}%)" if count else "")
        d = divs.get(split)
        distinct = _short(s.get("distinct")) + ("+" if s.get("distinct") is not None and s.get("distinct_capped") else "")
        rows.append(_Row([*(head if not rows else ["", "", ""]), shown(split), f"{count:,}",
                          f"{100 * share_of(missing, count + missing):.1f}%", _short(s.get("min")), _short(s.get("max")),
                          _short(s.get("mean")), _short(s.get("std")), f"{d[0]:.3f}" if d else "", distinct, most], flagged))
    return rows or [_Row([*head, *[""] * (len(_COMPACT_HEAD) - 3)], flagged)]


def _compact_page(rows: list[_Row], *, first: int, last: int, flagged: int, is_open: bool) -> str:
    """A page of compact rows: a ``<details>`` holding one preformatted text block (one DOM node, not a
    table of thousands of cells), laid out only once it is opened. Columns blank on every line are left out."""
    keep = [i for i in range(len(_COMPACT_HEAD)) if i < 2 or any(r.cells[i] for r in rows)]
    widths = {i: max(len(_COMPACT_HEAD[i]), *(len(r.cells[i]) for r in rows)) for i in keep}
    widths[1] = min(widths[1], _NAME_WIDTH)

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cells[i].ljust(widths[i]) if i in _COMPACT_LEFT else cells[i].rjust(widths[i])
                         for i in keep).rstrip()

    text = [html.escape(line(_COMPACT_HEAD))]
    for r in rows:
        shown_line = html.escape(line(r.cells))
        text.append(f'<span class="bad">{shown_line}</span>' if r.flagged else shown_line)
    note = f", {flagged:,} with red flags" if flagged else ""
    return (f'<details class="page"{" open" if is_open else ""}><summary>features {first:,} – {last:,}{note}</summary>'
            f'<pre class="rows">{chr(10).join(text)}</pre></details>')


def drawn_features(m: manifest.Manifest, flagged: set[str], *, limit: int = FULL_FEATURES) -> list[int]:
    """The indexes (manifest order) of the features drawn in full: all of them up to ``limit``; beyond,
    the flagged ones first, then the first features, ``limit`` in all."""
    names = list(m.features)
    if len(names) <= limit:
        return list(range(len(names)))
    chosen = [i for i, name in enumerate(names) if name in flagged][:limit]
    taken = set(chosen)
    chosen += [i for i in range(len(names)) if i not in taken][:limit - len(chosen)]
    return sorted(chosen)


def _features_html(m: manifest.Manifest, flags: list[Flag], divs: dict[str, dict[str, tuple[float, str]]]) -> str:
    flagged = {f.where.split(" in ", 1)[0][len("feature "):] for f in flags if f.where.startswith("feature ")}
    names = list(m.features)
    drawn = drawn_features(m, flagged)
    cards = [_feature_card(i, names[i], m, divs=divs.get(names[i], {}), flagged=names[i] in flagged) for i in drawn]
    note = "" if m.statistics else ('<p class="meta">The manifest holds no statistics: rerun '
                                    "<code>shardprep.run</code> with <code>--statistics on</code> to see them here.</p>")
    if len(drawn) == len(names):
        return note + "".join(cards)
    in_full = set(drawn)
    rest = [i for i in range(len(names)) if i not in in_full]
    pages = []
    for start in range(0, len(rest), PAGE_FEATURES):
        page = rest[start:start + PAGE_FEATURES]
        rows = [row for i in page for row in _compact_rows(i, names[i], m, divs=divs.get(names[i], {}),
                                                           flagged=names[i] in flagged)]
        pages.append(_compact_page(rows, first=page[0] + 1, last=page[-1] + 1, is_open=not start,
                                   flagged=sum(names[i] in flagged for i in page)))
    flagged_drawn = sum(names[i] in flagged for i in drawn)
    intro = (f'<p class="meta">{len(names):,} features: {len(drawn):,} are drawn in full below'
             f'{f" ({flagged_drawn:,} with red flags first)" if flagged_drawn else ""}; the other {len(rest):,} '
             f"are listed after them, one line per split, in pages of {PAGE_FEATURES:,} (open a page to see it; "
             "the browser's find searches closed pages too). Numbers are the manifest's statistics; "
             "quantiles, histograms and top values beyond the first are in "
             "<code>python -m shardprep.inspect DIR --json</code>.</p>")
    return note + intro + "".join(cards) + f'<h3 id="more-features">The other {len(rest):,} features</h3>' + "".join(pages)


def render(root: str, m: manifest.Manifest, *, label: str | None = None) -> str:
    """The report of the data set at ``root`` (its manifest ``m``) as one HTML document."""
    return _page(root, m, label=label)[0]


def _page(root: str, m: manifest.Manifest, *, label: str | None) -> tuple[str, list[Flag]]:
    """The HTML document and the red flags it lists."""
    divs = divergences(m)
    flags = red_flags(m, label=label, divs=divs)
    total = sum(s.num_records for s in m.splits.values())
    if flags:
        items = "".join(f"<li><b>{e(f.where)}</b>: {e(f.why)}</li>" for f in flags[:FLAGS_LISTED])
        more = ""
        if len(flags) > FLAGS_LISTED:
            rest = "".join(f"<li><b>{e(f.where)}</b>: {e(f.why)}</li>" for f in flags[FLAGS_LISTED:])
            more = (f'<details class="page"><summary>{len(flags) - FLAGS_LISTED:,} more red flags</summary>'
                    f'<ul class="flags">{rest}</ul></details>')
        flags_html = f'<div class="card"><ul class="flags">{items}</ul>{more}</div>'
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
        f'<h2 id="features">Features ({len(m.features)})</h2>', _features_html(m, flags, divs),
        "</main></body></html>\n",
    ]), flags


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
        names = sorted(m.features)
        listed = ", ".join(names[:20]) + (f", ... (+{len(names) - 20:,} more)" if len(names) > 20 else "")
        raise UsageError(f"--label {args.label!r} is not a feature of {args.dir} (features: {listed})")
    if fs.is_local(args.output):
        folder = os.path.dirname(os.path.abspath(args.output))
        if not os.path.isdir(folder):
            raise UsageError(f"-o {args.output}: folder {folder} does not exist")
        if os.path.isdir(args.output):
            raise UsageError(f"-o {args.output} is a folder: give a file name (e.g. {os.path.join(args.output, 'report.html')})")
    text, found = _page(args.dir, m, label=args.label or _manifest_label(args.dir))
    with fs.write_atomic(args.output) as f:
        f.write(text.encode("utf-8"))
    flags = len(found)
    print(f"wrote {args.output} ({human_bytes(len(text.encode()))}, {flags} red flag{'s' if flags != 1 else ''})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main("shardprep.report", _main, argv)


if __name__ == "__main__":
    sys.exit(main())

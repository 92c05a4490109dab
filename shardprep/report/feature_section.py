"""The features section of ``shardprep.report``, light at any feature count.

Up to ``FULL_FEATURES`` features are drawn in full: statistics per split, quantiles, histograms and
top values. Beyond, that many are drawn (the flagged ones first, then the first in manifest order)
and every other feature is one line per split in pages of ``PAGE_FEATURES``: each page a closed
``<details>`` holding one preformatted text block, which a browser parses as one node and lays out
only when opened. Ids are by index (``feature-12``), never from a name.
"""
from __future__ import annotations

import html
import json
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from shardprep import manifest
from shardprep.display import shown
from shardprep.report.charts import histogram_chart, rebin
from shardprep.report.html import e, num, table
from shardprep.report.red_flags import (
    DIVERGENCE_LIMIT,
    MISSING_LIMIT,
    Flag,
    histogram,
    reference_split,
    share_of,
    shown_value,
    top_values,
)

__all__ = ["FULL_FEATURES", "PAGE_FEATURES", "drawn_features", "features_html"]

FULL_FEATURES = 100  # features drawn in full (charts, quantiles, top values); the rest as compact lines
PAGE_FEATURES = 500  # compact lines' features per page (a <details> element, laid out only when opened)
_QUANTILES = ("p1", "p5", "p25", "p50", "p75", "p95", "p99")


def _split_stats(name: str, m: manifest.Manifest) -> Iterator[tuple[str, dict, int, int]]:
    """(split, statistics, count, missing) of feature ``name`` in each split that has its statistics."""
    for split, features in m.statistics.items():
        s = features.get(name)
        if isinstance(s, dict):
            yield split, s, s.get("count") or 0, s.get("missing") or 0


def _stats_rows(name: str, m: manifest.Manifest, divs: dict[str, tuple[float, str]]) -> list[list[str]]:
    rows = []
    for split, s, count, missing in _split_stats(name, m):
        share = share_of(missing, count + missing)
        distinct = ""
        if "distinct" in s:
            distinct = num(s["distinct"]) + ("+" if s.get("distinct_capped") else "") + (
                " (est.)" if s.get("distinct_estimated") else "")
        lengths = f"{s['length_min']:,} – {s['length_max']:,}" if "length_min" in s and "length_max" in s else ""
        sizes = ""
        if "bytes_mean" in s:
            sizes = f"{num(s.get('bytes_min'))} / {num(s.get('bytes_mean'))} / {num(s.get('bytes_max'))}"
        div = ""
        if split in divs:
            d, basis = divs[split]
            div = f'<span class="{"bad" if d > DIVERGENCE_LIMIT else "ok"}" title="{e(basis)}">{d:.3f}</span>'
        rows.append([e(split), num(count), f'<span class="{"bad" if share > MISSING_LIMIT else ""}">{100 * share:.1f}%</span>',
                     num(s.get("min")), num(s.get("max")), num(s.get("mean")), num(s.get("std")), num(s.get("zeros")),
                     distinct, lengths, sizes, div])
    return rows


def _quantile_rows(name: str, m: manifest.Manifest) -> list[list[str]]:
    rows = []
    for split, features in m.statistics.items():
        q = (features.get(name) or {}).get("quantiles")
        if isinstance(q, dict):
            rows.append([e(split), *(num(q.get(k)) for k in _QUANTILES)])
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
        rows = [[e(v if len(v) <= 80 else v[:80] + "…"), num(c), f"{100 * share_of(c, total):.1f}%"] for v, c in shown]
        more = f"<p class=meta>+{len(top) - limit:,} more listed</p>" if len(top) > limit else ""
        tables.append(f"<div><b>{e(split)}</b>: top values{table(['value', 'count', 'share'], rows, text_cols=(0,))}{more}</div>")
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
        body.append(table(["split", "count", "missing", "min", "max", "mean", "std", "zeros", "distinct", "lengths",
                            "bytes min/mean/max", f"divergence from {reference_split(m)}"], rows, drop_empty=True))
    q = _quantile_rows(name, m)
    if q:
        body.append(table(["split", *_QUANTILES], q, drop_empty=True))
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
    for split, s, count, missing in _split_stats(name, m):
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


def features_html(m: manifest.Manifest, flags: list[Flag], divs: dict[str, dict[str, tuple[float, str]]]) -> str:
    flagged = {f.where.split(" in ", 1)[0][len("feature "):] for f in flags if f.where.startswith("feature ")}
    names = list(m.features)
    drawn = drawn_features(m, flagged)
    cards = [_feature_card(i, names[i], m, divs=divs.get(names[i], {}), flagged=names[i] in flagged) for i in drawn]
    note = "" if m.statistics else ('<p class="meta">A text run\'s features are BERT\'s ids, fixed by its settings: '
                                    'its corpus and sequences are under <a href="#text">Text</a>.</p>' if m.text else
                                    '<p class="meta">The manifest holds no statistics: rerun '
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

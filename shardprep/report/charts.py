"""Inline SVG charts for ``shardprep.report``, drawn in Python: no JavaScript, no network.

Every label that reaches the SVG goes through ``display.html_text`` (data is hostile); numbers are
formatted here, so a chart reads the same in any browser and in the HTML source.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from shardprep.display import html_text

__all__ = ["bar_chart", "histogram_chart", "js_divergence", "rebin", "short_number"]

_BAR = "#4c78a8"
_ALT = "#f58518"


_UNITS = ((1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T"))


def short_number(v: float) -> str:
    """An axis or tooltip label of three significant digits: ``145011`` -> ``145k``, ``999999`` -> ``1M``,
    ``1234567`` -> ``1.23M``, ``999`` -> ``999``, ``0.000123`` -> ``0.000123``."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return html_text(v)
    a = abs(v)
    if a < 999.5:  # three digits without a unit (999.5 would round to 1000)
        return f"{int(v)}" if isinstance(v, int) or float(v).is_integer() else f"{v:.3g}"
    sign = "-" if v < 0 else ""
    for size, unit in _UNITS[:-1]:  # the smallest unit that keeps the rounded figure under 1000 (999,999: 1M)
        rounded = float(f"{a / size:.3g}")
        if rounded < 1000:
            return f"{sign}{rounded:g}{unit}"
    size, unit = _UNITS[-1]
    return f"{sign}{float(f'{a / size:.3g}'):g}{unit}"


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}" role="img" aria-label="{html_text(title)}">'
            f"<title>{html_text(title)}</title>{''.join(body)}</svg>")


def bar_chart(values: Sequence[float], *, title: str, labels: Sequence[str] | None = None,
              width: int = 520, height: int = 150, color: str = _BAR) -> str:
    """One bar per value (a shard's records or bytes), the axis from 0 to the largest value."""
    n = len(values)
    if not n:
        return ""
    left, bottom, top = 48, 22, 10
    plot_w, plot_h = width - left - 6, height - bottom - top
    peak = max(max(values), 0) or 1
    step = plot_w / n
    gap = min(2.0, step * 0.2)
    body = [f'<line x1="{left}" y1="{top + plot_h}" x2="{width - 6}" y2="{top + plot_h}" stroke="#888"/>',
            f'<text x="{left - 4}" y="{top + 8}" text-anchor="end" class="ax">{short_number(peak)}</text>',
            f'<text x="{left - 4}" y="{top + plot_h}" text-anchor="end" class="ax">0</text>']
    for i, v in enumerate(values):
        h = max(0.0, v / peak * plot_h)
        x = left + i * step + gap / 2
        label = labels[i] if labels else str(i)
        body.append(f'<rect x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{max(step - gap, 0.5):.1f}" '
                    f'height="{h:.1f}" fill="{color}"><title>{html_text(label)}: {short_number(v)}</title></rect>')
    for i in sorted({0, n // 2, n - 1}):  # a few labels under the bars, the end ones kept inside the chart
        x, anchor = left + (i + 0.5) * step, "middle"
        if n > 1 and i == 0:
            x, anchor = left + i * step, "start"
        elif n > 1 and i == n - 1:
            x, anchor = left + (i + 1) * step, "end"
        body.append(f'<text x="{x:.1f}" y="{height - 6}" text-anchor="{anchor}" class="ax">'
                    f"{html_text(labels[i] if labels else str(i))}</text>")
    return _svg(width, height, body, title)


def histogram_chart(edges: Sequence[float], counts: Sequence[float], *, title: str,
                    other: Sequence[float] | None = None, width: int = 300, height: int = 110) -> str:
    """Bars of ``counts`` between ``edges`` (len(counts) + 1 of them); ``other`` (the same bins, in
    another colour, as shares) overlays a second split for comparison."""
    n = len(counts)
    if not n or len(edges) != n + 1:
        return ""
    left, bottom, top = 6, 18, 6
    plot_w, plot_h = width - 2 * left, height - bottom - top
    total = sum(counts) or 1
    shares = [c / total for c in counts]
    other_shares = None
    if other is not None and len(other) == n:
        other_total = sum(other) or 1
        other_shares = [c / other_total for c in other]
    peak = max([*shares, *(other_shares or [])]) or 1
    step = plot_w / n
    body = [f'<line x1="{left}" y1="{top + plot_h}" x2="{width - left}" y2="{top + plot_h}" stroke="#888"/>']
    for i, (c, s) in enumerate(zip(counts, shares)):
        h = s / peak * plot_h
        body.append(f'<rect x="{left + i * step + 1:.1f}" y="{top + plot_h - h:.1f}" width="{max(step - 2, 0.5):.1f}" '
                    f'height="{h:.1f}" fill="{_BAR}"><title>[{short_number(edges[i])}, {short_number(edges[i + 1])}): '
                    f"{short_number(c)}</title></rect>")
    if other_shares is not None:
        points = " ".join(f"{left + (i + 0.5) * step:.1f},{top + plot_h - s / peak * plot_h:.1f}"
                          for i, s in enumerate(other_shares))
        body.append(f'<polyline points="{points}" fill="none" stroke="{_ALT}" stroke-width="2"/>')
    body.append(f'<text x="{left}" y="{height - 4}" class="ax">{short_number(edges[0])}</text>')
    body.append(f'<text x="{width - left}" y="{height - 4}" text-anchor="end" class="ax">{short_number(edges[-1])}</text>')
    return _svg(width, height, body, title)


def rebin(edges: Sequence[float], counts: Sequence[float], target: Sequence[float]) -> list[float]:
    """``counts`` between ``edges`` spread onto the bins of ``target`` (ascending edges), assuming values
    uniform within a bin (a bin of zero width is a point mass): histograms of two splits with their own
    edges compared. Each source bin visits only the target bins it overlaps."""
    out = [0.0] * (len(target) - 1)
    for i, c in enumerate(counts):
        lo, hi = float(edges[i]), float(edges[i + 1])
        if not c:
            continue
        at = bisect.bisect_right(target, lo) - 1  # the target bin holding lo (-1: below the first edge)
        if hi <= lo:  # a point mass
            if 0 <= at < len(out):
                out[at] += c
            elif out and lo == target[-1]:
                out[-1] += c
            continue
        for j in range(max(at, 0), len(out)):
            if target[j] >= hi:
                break
            overlap = min(hi, target[j + 1]) - max(lo, target[j])
            if overlap > 0:
                out[j] += c * overlap / (hi - lo)
    return out


def js_divergence(p: Sequence[float], q: Sequence[float]) -> float:
    """Jensen-Shannon divergence (base 2: 0 = the same distribution, 1 = disjoint) of two count vectors."""
    sp, sq = sum(p), sum(q)
    if sp <= 0 or sq <= 0 or len(p) != len(q):
        return 0.0
    total = 0.0
    for a, b in zip(p, q):
        a, b = a / sp, b / sq
        m = (a + b) / 2
        if a > 0:
            total += 0.5 * a * math.log2(a / m)
        if b > 0:
            total += 0.5 * b * math.log2(b / m)
    return max(0.0, min(1.0, total))

"""HTML building blocks of ``shardprep.report``: the one escape of untrusted text, numbers, tables."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shardprep.display import html_text

__all__ = ["e", "num", "table"]

e = html_text  # every string from the data or the manifest: bidi and zero-width controls escaped, then HTML


def num(v: Any) -> str:
    """A statistic as the tables show it: integers with thousands separators, floats to 6 digits."""
    if isinstance(v, bool) or v is None:
        return ""
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.6g}"
    return e(str(v))


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, text_cols: Sequence[int] = (),
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

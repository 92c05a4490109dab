"""What the report finds in a data set's manifest: red flags, each saying why, and how far each
split's features are from the reference split's (Jensen-Shannon divergence of histograms or top
values). Pure functions of a ``manifest.Manifest``; ``shardprep.report`` draws them.
"""
from __future__ import annotations

import re

from shardprep import manifest
from shardprep.display import shown
from shardprep.report.charts import js_divergence, rebin
from shardprep.summary import human_bytes

__all__ = ["BYTES_RATIO_LIMIT", "DIVERGENCE_LIMIT", "IMBALANCE_LIMIT", "MAGIC", "MIN_COMPARED", "MISSING_LIMIT", "Flag",
           "divergence", "divergences", "histogram", "reference_split", "red_flags", "share_of", "shown_value", "top_values"]

MISSING_LIMIT = 0.2  # missing share above which a feature is flagged
IMBALANCE_LIMIT = 10.0  # most / least frequent class of a label
DIVERGENCE_LIMIT = 0.1  # Jensen-Shannon divergence (base 2) of a feature between train and another split
MIN_COMPARED = 100  # records a split needs in a feature for its divergence to mean more than noise
BYTES_RATIO_LIMIT = 1.1  # a split's largest / smallest shard in bytes
_LABEL_NAMES = {"label", "labels", "class", "target", "y", "category"}


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



def share_of(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


# ---------------------------------------------------------------- divergence and red flags

def histogram(s: dict) -> tuple[list[float], list[float]] | None:
    """``(edges, counts)`` of a statistics entry's ``histogram``, when it is well formed."""
    h = s.get("histogram")
    if not isinstance(h, dict):
        return None
    edges, counts = h.get("edges"), h.get("counts")
    if (isinstance(edges, list) and isinstance(counts, list) and len(edges) == len(counts) + 1 and counts
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in [*edges, *counts])):
        return [float(x) for x in edges], [float(x) for x in counts]
    return None


def shown_value(value: str) -> str:
    """A top value as a reader should see it: text through ``display.shown`` (control, bidi and
    zero-width characters escaped); bytes that are not UTF-8 (kept backslash-escaped by the statistics: an image,
    a serialized message) by their kind, never raw."""
    if _ESCAPED_BYTE.search(value):
        kind = next((k for magic, k in _ESCAPED_MAGIC if value.startswith(magic)), "binary")
        return f"<{kind} bytes>"
    return shown(value)


# the file kinds a bytes value is known by (``inspect`` shows its values by them too)
MAGIC = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"), (b"GIF8", "GIF"), (b"BM", "BMP"),
         (b"RIFF", "RIFF"), (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"), (b"\x1f\x8b", "gzip"))
_ESCAPED_MAGIC = tuple((magic.decode("utf-8", "backslashreplace"), kind) for magic, kind in MAGIC)  # as stats keeps them
_ESCAPED_BYTE = re.compile(r"\\x[0-9a-f]{2}")  # a byte that is not UTF-8, as backslashreplace writes it


def top_values(s: dict) -> list[tuple[str, int]]:
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
    ha, hb = histogram(a), histogram(b)
    if ha and hb:
        lo, hi = min(ha[0][0], hb[0][0]), max(ha[0][-1], hb[0][-1])
        if hi <= lo:
            return 0.0, "histogram"
        grid = [lo + (hi - lo) * i / 20 for i in range(21)]
        return js_divergence(rebin(*ha, grid), rebin(*hb, grid)), "histogram"
    ta, tb = top_values(a), top_values(b)
    if ta and tb and not _identifier_like(a) and not _identifier_like(b):
        keys = sorted({v for v, _ in ta} | {v for v, _ in tb})
        da, db = dict(ta), dict(tb)
        p, q = [da.get(k, 0) for k in keys], [db.get(k, 0) for k in keys]
        if scalar:  # values outside the listed top ones, as one more bucket
            p.append(max(0, (a.get("count") or 0) - sum(p)))
            q.append(max(0, (b.get("count") or 0) - sum(q)))
        return js_divergence(p, q), "top values"
    return None


def reference_split(m: manifest.Manifest) -> str:
    return "train" if "train" in m.splits else next(iter(m.splits))


def divergences(m: manifest.Manifest) -> dict[str, dict[str, tuple[float, str]]]:
    """feature -> other split -> (divergence from the reference split, basis)."""
    ref = reference_split(m)
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


def red_flags(m: manifest.Manifest, *, label: str | None = None,
              divs: dict[str, dict[str, tuple[float, str]]] | None = None) -> list[Flag]:
    """Everything in the data set a person should look at before training, each saying why; ``divs``:
    ``divergences(m)`` where the caller has it already."""
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
            share = share_of(missing, count + missing)
            if share > MISSING_LIMIT:
                flags.append(Flag(where, (
                    f"{100 * share:.1f}% of records miss it ({missing:,} of {count + missing:,}; more than "
                    f"{100 * MISSING_LIMIT:.0f}%): a model sees a default in its place; impute it, drop it or "
                    "check the source")))
            if count and (("min" in s and s.get("min") == s.get("max"))
                          or (s.get("distinct") == 1 and not s.get("distinct_capped"))):
                value = s.get("min") if "min" in s else (top_values(s)[0][0] if top_values(s) else "")
                flags.append(Flag(where, (
                    f"constant: every record holds {value!r}; it carries no information for a model "
                    "(a column filled with a default, or a filter upstream)")))
            top = top_values(s)
            if name in labels and len(top) >= 2 and len(top) == s.get("distinct", len(top)):
                most, least = top[0], min(top, key=lambda t: t[1])
                if least[1] and most[1] / least[1] > IMBALANCE_LIMIT:
                    flags.append(Flag(where, (
                        f"label imbalance: the most frequent class {most[0]!r} has {most[1]:,} records, "
                        f"{most[1] / least[1]:.1f}x the least frequent {least[0]!r} ({least[1]:,}; more than "
                        f"{IMBALANCE_LIMIT:.0f}x): accuracy says little; weight the classes or resample")))
    ref = reference_split(m)
    for name, by_split in (divergences(m) if divs is None else divs).items():
        for split, (d, basis) in by_split.items():
            if d > DIVERGENCE_LIMIT:
                flags.append(Flag(f"feature {name} in {split}", (
                    f"its distribution differs from {ref}'s (Jensen-Shannon divergence {d:.3f} of the {basis}, more "
                    f"than {DIVERGENCE_LIMIT}): the split does not measure what training saw; check how the "
                    "data was split")))
    return flags

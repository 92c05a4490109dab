"""The generations of an appended data set (``shardprep.generations``), as the report and ``inspect`` show them.

One ``GenerationRow`` per generation, oldest first (``Manifest.all_generations``): its run, when it
was committed, the manifest version that added it, its records by split, its shards and their bytes
(the shards in its run folder), the records it read and rejected, and its ``--dedup exact``
duplicates. A data set made by one run (no ``generations`` in its manifest) is one generation and
``generations_html`` draws nothing for it. Every string from the manifest goes through the
report's one escape (``html.e``) here, or ``display.shown`` in ``summary.table`` (``inspect``).
"""
from __future__ import annotations

import dataclasses

from shardprep import manifest
from shardprep.report.html import e, num, table
from shardprep.summary import human_bytes

__all__ = ["GenerationRow", "generation_rows", "generations_html", "statistics_note", "text_rows"]


@dataclasses.dataclass(frozen=True)
class GenerationRow:
    """One generation of a data set: what its run added, and where (its shards in ``run_id``'s folder)."""

    run_id: str
    data_version: int  # the manifest version that added it
    created: str  # when it was committed ("" where the manifest does not say)
    records: dict[str, int]  # by split
    shards: dict[str, int]  # by split
    num_bytes: int  # of its shards
    read: int
    rejected: int
    duplicates: int  # --dedup exact's dead letters among ``rejected``
    hashes: bool  # whether it keeps its records' hashes for later --dedup exact appends


def generation_rows(m: manifest.Manifest) -> list[GenerationRow]:
    """The data set's generations, oldest first; their shards counted from the shards' run folders."""
    shards: dict[str, dict[str, int]] = {}
    sizes: dict[str, int] = {}
    for split, info in m.splits.items():
        for s in info.shards:
            run = s.path.split("/", 1)[0]
            by_split = shards.setdefault(run, {})
            by_split[split] = by_split.get(split, 0) + 1
            sizes[run] = sizes.get(run, 0) + s.num_bytes
    return [GenerationRow(g.run_id, g.data_version, g.created, {k: g.num_records.get(k, 0) for k in m.splits},
                          {k: shards.get(g.run_id, {}).get(k, 0) for k in m.splits}, sizes.get(g.run_id, 0),
                          g.read, g.rejected, g.duplicates, g.hashes is not None)
            for g in m.all_generations()]


def statistics_note(m: manifest.Manifest) -> str:
    """How the statistics relate to the generations (plain text; escape it to show it)."""
    count = len(m.all_generations())
    if not m.statistics:
        return (f"The manifest holds no statistics of its {count} generations (a side made with --statistics off "
                "or before appends): python -m shardprep.compact DIR computes them over every record.")
    if count == 1:
        return "The statistics are of the one generation's records."
    return (f"The statistics are merged across all {count} generations, from each one's stored sketches: counts, "
            "missing, min, max and mean exact; quantiles, histograms and distinct counts within the sketches' bounds.")


def _header(m: manifest.Manifest) -> list[str]:
    return ["generation", "run", "committed", "added by version", *(f"{s} records" for s in m.splits),
            *(f"{s} shards" for s in m.splits), "bytes", "read", "rejected", "duplicates dropped", "record hashes"]


def text_rows(m: manifest.Manifest) -> tuple[list[str], list[list[str]]]:
    """The generations table as plain text cells (``summary.table`` escapes them): header and rows."""
    rows = [[str(i + 1), g.run_id, g.created or "not recorded", str(g.data_version), *(f"{g.records[s]:,}" for s in m.splits),
             *(f"{g.shards[s]:,}" for s in m.splits), human_bytes(g.num_bytes), f"{g.read:,}", f"{g.rejected:,}",
             f"{g.duplicates:,}", "kept" if g.hashes else ""] for i, g in enumerate(generation_rows(m))]
    return _header(m), rows


def generations_html(m: manifest.Manifest) -> str:
    """The report's generations section: "" for a data set made by one run (no ``generations``)."""
    if not m.generations:
        return ""
    rows = [[str(i + 1), e(g.run_id), e(g.created or "not recorded"), num(g.data_version), *(num(g.records[s]) for s in m.splits),
             *(num(g.shards[s]) for s in m.splits), human_bytes(g.num_bytes), num(g.read), num(g.rejected),
             num(g.duplicates), "kept" if g.hashes else ""] for i, g in enumerate(generation_rows(m))]
    parent = f", made from version {m.parent:,}" if m.parent is not None else ""
    return (f'<h2 id="generations">Generations ({len(rows)})</h2><div class="card">'
            f"<p>manifest version {m.data_version:,}{parent}; each generation's shards are exactly balanced within "
            "each split.</p>"
            f"{table(_header(m), rows, text_cols=(1, 2))}<p>{e(statistics_note(m))}</p></div>")

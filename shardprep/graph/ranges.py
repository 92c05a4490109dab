"""The CountRanges step: the quote and newline counts of every nominal unit, for Parse to find its cuts.

The launcher plans large CSV / JSON Lines files from their sizes alone (``formats.cuts``): nominal
byte ranges whose first record is not known yet. This step reads each nominal range once, in
parallel, and emits its ``RangeCount``; Parse takes them all as a side input (``AsList``), builds
one ``CutTable`` (prefix sums, numpy) per worker and resolves each nominal unit to its exact byte
range and first line before reading it. Exact units (small or gzip files, other formats) pass no
element here.

A text pre-training unit (``--task bert-pretraining``) not tokenized as its store part was built
is tokenized here, once for the run (``formats.text.tokenize_unit``, ``text.tokens``; which units
those are, the text run's job decides: ``text.store_stages``): Parse, which reads random documents
of every unit, starts once this step has ended, so every worker finds every unit's tokens written.
"""
from __future__ import annotations

from collections.abc import Iterator

from shardprep.formats import WorkUnit
from shardprep.formats.cuts import RangeCount, count_range
from shardprep.graph.counting import Counter

__all__ = ["CountRanges"]


class CountRanges:
    """A work unit in; its ``RangeCount`` out if it is nominal, nothing otherwise (a text unit's tokens written)."""

    def __init__(self) -> None:
        self._bytes = Counter("bytes_counted_for_cuts")
        self._documents = Counter("documents_tokenized")

    @staticmethod
    def cost(unit: WorkUnit) -> int:
        """What an element costs, for the order of a pool's tasks (``pipelines.driver``): the bytes it reads here."""
        return unit.end - unit.start if unit.nominal or unit.file.text is not None else 0

    def process(self, unit: WorkUnit) -> Iterator[RangeCount]:
        if unit.nominal:
            self._bytes.inc(unit.end - unit.start)
            yield count_range(unit)
        elif unit.file.text is not None:
            from shardprep.formats.text import tokenize_unit

            self._documents.inc(tokenize_unit(unit))

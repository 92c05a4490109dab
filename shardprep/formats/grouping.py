"""Many small files as one work unit: ``group_small``, pure planning over the units of each file.

Every unit costs a fixed amount wherever it runs (a pool task's share, a spill file per split, a
dead-letter check, a fact the commit reads): a millisecond or more, which a file of two rows
does not repay. So, as image files are batched (``formats.images``), consecutive files of the
input list that are planned as one whole-file unit each and hold at most ``SMALL_FILE_BYTES``
(and at most ``unit_bytes``) are gathered into a ``FileGroup`` of at most ``FILES_PER_GROUP``
files and ``unit_bytes`` bytes. Larger files, and the byte-range or row-group units of a file cut
into several, stay as they are.

Nothing about the records changes: a group's members are read one after another, each as its own
unit would be (its cuts, CRCs and positions in its file), their records in input order; the
group takes the key of its first file's unit, so the order of every batch's records in its
split, and so the shuffle and the shards, are those of the files' own units. Dead letters name
their file and position and the unit (``file:0``) as before. Files of another fixed split (TFDS)
or a text run's units are never gathered with each other.
"""
from __future__ import annotations

from collections.abc import Sequence

from shardprep.formats.base import FileGroup, WorkUnit

__all__ = ["FILES_PER_GROUP", "SMALL_FILE_BYTES", "group_small", "small"]

FILES_PER_GROUP = 512  # as ``formats.images.FILES_PER_UNIT``: a group's plan pickles to some 100 KB at most
SMALL_FILE_BYTES = 1 << 20  # a larger file's parse repays its own unit


def small(units: Sequence[WorkUnit], unit_bytes: int) -> bool:
    """Whether a file planned as ``units`` may join a group: one exact whole-file unit of a small file."""
    if len(units) != 1:
        return False
    unit = units[0]
    file = unit.file
    return (type(unit) is WorkUnit and unit.index == 0 and not unit.nominal and file.text is None
            and file.size <= min(SMALL_FILE_BYTES, unit_bytes))


def group_small(planned: Sequence[Sequence[WorkUnit]], unit_bytes: int) -> list[WorkUnit]:
    """The units of ``planned`` (each file's units, in input order) with runs of small files gathered:
    a ``FileGroup`` of at most ``FILES_PER_GROUP`` files and ``unit_bytes`` bytes, all of one fixed
    split (``InputFile.split``); a run of one file stays its own unit. Order is kept."""
    units: list[WorkUnit] = []
    run: list[WorkUnit] = []
    held = 0  # the bytes of the files in ``run``

    def close() -> None:
        if len(run) == 1:
            units.append(run[0])
        elif run:
            units.append(FileGroup(run[0].file, 0, 0, held, 1, files=tuple(run)))
        run.clear()

    for file_units in planned:
        if not small(file_units, unit_bytes):
            close()
            held = 0
            units.extend(file_units)
            continue
        unit = file_units[0]
        if run and (len(run) >= FILES_PER_GROUP or held + unit.file.size > unit_bytes
                    or unit.file.split != run[0].file.split):
            close()
            held = 0
        run.append(unit)
        held += unit.file.size
    close()
    return units

"""Manifest versions: every committed manifest of a data set stays readable while it is kept.

Each commit writes the manifest with its number (``Manifest.data_version``: 1 for a first run, one
more for each append, compaction or --overwrite) and keeps a copy in the folder of the run that
committed it (``manifest.run_copy_path(head_run)``); ``load`` finds a version among them.
``--keep-previous`` (a commit) and ``shardprep.clean --keep-versions`` decide how long they stay.
"""
from __future__ import annotations

from shardprep import fs, manifest, naming
from shardprep.errors import ManifestError

__all__ = ["load", "versions"]


def load(root: str, *, version: int | None = None, run_id: str | None = None) -> manifest.Manifest:
    """The current manifest of ``root``; with ``version`` the kept manifest of that number; with
    ``run_id`` the copy that run committed (``manifest.load``). ``ManifestError`` names the versions kept."""
    if version is None:
        return manifest.load(root, run_id=run_id)
    return _by_number(root, version)


def _by_number(root: str, version: int) -> manifest.Manifest:
    """The kept manifest whose ``data_version`` is ``version``: the current one, or a run's copy."""
    if type(version) is not int or version < 1:
        raise ManifestError(f"version {version!r}: expected a manifest version, 1 or more")
    current = manifest.load(root)
    if current.data_version == version:
        return current
    if version > current.data_version:
        raise ManifestError(f"{root} has no version {version}: its current manifest is version {current.data_version}")
    for run in [g.run_id for g in current.all_generations() if g.data_version == version]:  # no listing
        try:
            m = manifest.load(root, run_id=run)
        except ManifestError:
            continue
        if m.data_version == version:
            return m
    found = versions(root)
    for _, m in found:
        if m.data_version == version:
            return m
    kept = sorted({m.data_version for _, m in found} | {current.data_version})
    raise ManifestError(f"version {version} of {root} is not kept (kept: {', '.join(map(str, kept))}): a later commit "
                        f"(--keep-previous) or shardprep.clean --keep-versions removed it")


def versions(root: str) -> list[tuple[str, manifest.Manifest]]:
    """Every readable run copy in ``root`` as (run, its manifest), oldest version first: the kept versions
    besides the current manifest (whose copy is among them once its commit finished)."""
    out = []
    for name in sorted(fs.listdir(root)):
        if not naming.is_run_id(name):
            continue
        try:
            m = manifest.load(root, run_id=name)
        except ManifestError:
            continue
        out.append((name, m))
    return sorted(out, key=lambda item: (item[1].data_version, item[0]))

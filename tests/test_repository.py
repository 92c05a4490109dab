"""Nothing committed points outside the repository: a clean clone in any folder on any machine is
what a new user gets. A committed symbolic link must resolve inside the tree, and no text file names
a path of one machine (the folder of a checkout, a home folder)."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Paths that exist on one machine only: a developer's home or work folder, a CI checkout.
_MACHINE_PATH = re.compile(r"(?<![\w.])(/work/|/home/[a-z][\w-]*/|/root/|/Users/[A-Za-z]|/tmp/pytest-)")


def _committed() -> list[tuple[str, str]]:
    """``(mode, path)`` of every file git tracks here."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-s", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    rows = []
    for entry in out.decode().split("\0"):
        if entry:
            meta, path = entry.split("\t", 1)
            rows.append((meta.split()[0], path))
    return rows


def link_leaves_tree(path: str, target: str) -> bool:
    """Whether a link at ``path`` (relative to the root) to ``target`` resolves outside the tree."""
    if os.path.isabs(target):
        return True
    resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
    return resolved == ".." or resolved.startswith("../")


def test_link_check_sees_what_leaves():
    assert link_leaves_tree("benchmarks/data", "/work/bench-data")
    assert link_leaves_tree("a/b", "../../outside")
    assert not link_leaves_tree("a/b", "../c")
    assert _MACHINE_PATH.search("cd /work/wt/h40 && python")
    assert not _MACHINE_PATH.search("gs://bucket/work/x and ./work/y")


def test_no_committed_link_leaves_the_tree():
    leaving = []
    for mode, path in _committed():
        if mode == "120000":  # a symbolic link: git stores its target as the blob
            target = subprocess.run(["git", "cat-file", "-p", f":{path}"], cwd=ROOT, capture_output=True,
                                    check=True).stdout.decode()
            if link_leaves_tree(path, target):
                leaving.append(f"{path} -> {target}")
    assert not leaving, f"committed links that leave the repository: {leaving}"


def test_no_committed_text_names_a_machine_path():
    found = []
    for mode, path in _committed():
        if mode == "120000" or path == "tests/test_repository.py":
            continue
        try:
            text = (ROOT / path).read_text()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if _MACHINE_PATH.search(line):
                found.append(f"{path}:{n}: {line.strip()[:100]}")
    assert not found, "paths of one machine in committed files:\n" + "\n".join(found[:20])

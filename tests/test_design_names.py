"""docs/design.md names only modules that exist: every dotted ``shardprep.x``, ``pipelines.x`` or
``trainer.x`` it mentions resolves to a module of the tree, or to a name a module defines (an
attribute's own existence is not checked here: modules only)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
SETUP = (ROOT / "setup.py").read_text()  # its compiled extensions, by dotted name
_DOTTED = re.compile(r"(?<![\w./-])((?:shardprep|pipelines|trainer)(?:\.[A-Za-z_]\w*)+)")
_FILES = re.compile(r"\.(py|md|json|txt|npy|html|c|h|tok|jsonl|tfrecord|index)$")


def _unresolved(name: str) -> str | None:
    """Why ``name`` names no module of the tree (None: its module exists)."""
    parts = name.split(".")
    path = ROOT / parts[0]
    for i, part in enumerate(parts[1:], start=1):
        if (path / part).is_dir() and (path / part / "__init__.py").exists():
            path = path / part
        elif (path / f"{part}.py").exists() or f'"{".".join(parts[:i + 1])}"' in SETUP:
            return None  # a module (or a compiled one setup.py builds); whatever follows is its attribute
        else:  # a package's attribute (its __init__ defines or imports it), else no such module
            init = (path / "__init__.py").read_text()
            return None if re.search(rf"\b{re.escape(part)}\b", init) else f"no module {'.'.join(parts[:i + 1])}"
    return None


def test_design_names_existing_modules():
    stale = []
    for number, line in enumerate(DESIGN.read_text().splitlines(), start=1):
        for name in _DOTTED.findall(line):
            name = _FILES.sub("", name)
            if (why := _unresolved(name)) is not None:
                stale.append(f"docs/design.md:{number}: {name} ({why})")
    assert not stale, "\n".join(stale)

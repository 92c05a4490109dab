"""What the report's tests build their data set from (``conftest.dataset``): rows with a constant, a
mostly-missing and an imbalanced feature, markup in a value and in a column name; its schema; and the
manifest as a document to change."""
from __future__ import annotations

import json
from pathlib import Path

__all__ = ["HOSTILE", "HOSTILE_NAME", "manifest_doc", "rows", "schema"]

HOSTILE = "<script>alert('x')</script>"
HOSTILE_NAME = "<img src=x onerror=alert(1)>"  # a CSV column name


def rows(n: int) -> list[dict]:
    """``n`` CSV rows: a constant, a two-thirds-missing and a 29:1 label feature, markup in one text value."""
    out = []
    for i in range(n):
        out.append({"id": i, "x": round((i % 17) / 17 - 0.5, 4), "const": 7,
                     "sparse": i if i % 3 == 0 else "",  # two thirds missing
                     "label": "dog" if i % 30 == 0 else "cat",  # 29:1
                     "text": HOSTILE if i == 3 else f"word {i % 5}", HOSTILE_NAME: i % 4})
    return out


def schema(path: Path) -> Path:
    """The rows' schema, written to ``path``."""
    path.write_text(json.dumps({
        "id": {"dtype": "int64", "shape": []}, "x": {"dtype": "float32", "shape": []},
        "const": {"dtype": "int64", "shape": []}, "sparse": {"dtype": "int64", "shape": [], "nullable": True},
        "label": {"dtype": "string", "shape": []}, "text": {"dtype": "string", "shape": []},
        HOSTILE_NAME: {"dtype": "int64", "shape": []}}))
    return path


def manifest_doc(dataset: Path) -> dict:
    """The data set's manifest as a JSON document, to change and load again."""
    return json.loads((dataset / "manifest.json").read_text())

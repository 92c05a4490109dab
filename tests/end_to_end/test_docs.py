"""The docs stay true: docs/cli.md is what the commands' ``--help`` says now, every relative link
in README.md and docs/ resolves, and every ``python -m MODULE`` they name answers ``--help``."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "RELIABILITY.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_MODULE = re.compile(r"python -m ([a-z_]+(?:\.[a-z_]+)*)")


def test_cli_reference_is_current():
    proc = subprocess.run([sys.executable, "docs/make_cli.py", "--check"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        for target in _LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = target.split("#", 1)[0]
            if path and not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


def _modules() -> list[str]:
    found = {m for page in PAGES for m in _MODULE.findall(page.read_text())}
    return sorted(m for m in found if m.split(".")[0] in ("shardprep", "pipelines", "trainer", "benchmarks"))


@pytest.mark.slow
@pytest.mark.parametrize("module", _modules())
def test_every_command_the_docs_name_answers_help(module):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "usage" in proc.stdout.lower(), (module, proc.stderr[-2000:])

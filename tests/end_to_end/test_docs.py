"""The docs stay true: docs/cli.md is what the commands' ``--help`` says now, every relative link
and ``#anchor`` in README.md and docs/ resolves (GitHub's heading slugs), every ``python -m MODULE``
they name answers ``--help``, the README's quickstart runs as written on the demo's CSV, every
dead-letter reason the code can emit is in docs/formats.md, and docs/make_charts.py draws its charts."""
from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "RELIABILITY.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_MODULE = re.compile(r"python -m ([a-z_]+(?:\.[a-z_]+)*)")
_FENCE = re.compile(r"^(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ID = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def test_cli_reference_is_current():
    proc = subprocess.run([sys.executable, "docs/make_cli.py", "--check"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr


def _prose(text: str) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup and punctuation dropped (``-`` and ``_`` kept), lower
    case, each space a ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor of a page: its headings' slugs (repeats get ``-1``, ``-2``...) and ``<a id>``s."""
    seen: dict[str, int] = {}
    found = set(_HTML_ID.findall(page.read_text()))
    for line in _prose(page.read_text()):
        m = _HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_slug_follows_github():
    assert slug("5. Load") == "5-load"
    assert slug("Dask: where the CPU goes (`python -m benchmarks.dask_cpu`)") == "dask-where-the-cpu-goes-python--m-benchmarksdask_cpu"
    assert slug("CSV / JSON Lines cuts") == "csv--json-lines-cuts"
    assert slug("## not [a link](x.md)".lstrip("# ")) == "not-a-link"


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for page in PAGES:
        for target in _LINK.findall("\n".join(_prose(page.read_text()))):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path) if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such anchor)")
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


# --- the README's quickstart, as written, on the demo's CSV ----------------------------------------


def quickstart_commands() -> list[list[str]]:
    """The ``python -m`` lines of the first code block under the README's "## Quickstart"."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```[a-z]*\n(.*?)```", section, re.S).group(1)
    return [shlex.split(line) for line in block.splitlines() if line.startswith("python -m ")]


def _run_quickstart(tmp_path: Path, commands: list[list[str]], timeout: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    for argv in commands:
        proc = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=timeout)
        assert proc.returncode == 0, (argv, proc.stdout[-2000:], proc.stderr[-3000:])


@pytest.fixture()
def user_csv(tmp_path: Path) -> Path:
    """The demo's uneven CSV files, where the quickstart's glob (``data/*.csv``) finds them."""
    from trainer import demo

    demo.write_raw(str(tmp_path / "data"), rows=600)
    return tmp_path


def test_quickstart_has_the_whole_path():
    modules = [argv[2] for argv in quickstart_commands()]
    assert modules == ["shardprep.run", "shardprep.verify", "shardprep.inspect", "shardprep.report", "trainer.launch"]
    assert "'data/*.csv'" in (ROOT / "README.md").read_text()  # the user's own CSV, by a quoted glob


def readme_reader_snippet() -> str:
    """The README's TF-free read of the shards: its Python block that imports ``shardprep.reader``."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    (snippet,) = [b for b in blocks if "from shardprep import reader" in b]
    return snippet


def test_quickstart_prepares_checks_and_reports_a_data_set(user_csv):
    _run_quickstart(user_csv, [a for a in quickstart_commands() if a[2].startswith("shardprep.")], timeout=120)
    assert (user_csv / "ds" / "manifest.json").exists() and (user_csv / "report.html").stat().st_size > 1000
    proc = subprocess.run([sys.executable, "-c", readme_reader_snippet()], cwd=user_csv, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 0 and "tensorflow" not in proc.stderr.lower(), proc.stderr
    assert int(proc.stdout.split()[0]) > 0  # the README's read printed the split's record count first


@pytest.mark.slow
def test_quickstart_trains(user_csv):
    _run_quickstart(user_csv, quickstart_commands(), timeout=600)
    assert list(user_csv.glob("model-ds/summary/worker-*.json"))


# --- every dead-letter reason is documented ---------------------------------------------------------

_REASON_CTORS = {"Bad", "RecordError", "CorruptRecordError", "ImageProblem"}  # what carries a reason code
_SNAKE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)+$")


def _string_constants(tree: ast.Module) -> dict[str, str]:
    return {t.id: node.value.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for t in node.targets if isinstance(t, ast.Name)}


def emitted_reasons() -> dict[str, str]:
    """reason -> a module that emits it: the snake_case strings passed to a reason-carrying
    constructor (as a literal or a module constant), and the ``(reason, detail)`` pairs built in a
    module that constructs one (csv's reader hands its reason on that way)."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "shardprep").rglob("*.py")) + sorted((ROOT / "pipelines").rglob("*.py")):
        tree = ast.parse(path.read_text())
        consts = _string_constants(tree)
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and getattr(n.func, "id", getattr(n.func, "attr", None)) in _REASON_CTORS]
        candidates = [a.value if isinstance(a, ast.Constant) else consts.get(a.id) if isinstance(a, ast.Name) else None
                      for call in calls for a in call.args]
        if calls:
            candidates += [n.elts[0].value for n in ast.walk(tree) if isinstance(n, ast.Tuple) and len(n.elts) == 2
                           and isinstance(n.elts[0], ast.Constant) and isinstance(n.elts[1], (ast.Constant, ast.JoinedStr))]
        for value in candidates:
            if isinstance(value, str) and _SNAKE.match(value):
                found.setdefault(value, str(path.relative_to(ROOT)))
    return found


def test_every_dead_letter_reason_is_in_formats_md():
    reasons = emitted_reasons()
    assert {"csv_parse", "csv_columns", "tfrecord_truncated", "image_too_large", "type_mismatch"} <= set(reasons)
    section = (ROOT / "docs" / "formats.md").read_text().split("## Dead-letter reasons", 1)[1]
    missing = {r: where for r, where in reasons.items() if f"| `{r}` |" not in section}
    assert missing == {}, f"add these to docs/formats.md's dead-letter table: {missing}"


# --- the charts -------------------------------------------------------------------------------------


def test_make_charts_draws_non_blank_images(tmp_path):
    proc = subprocess.run([sys.executable, "docs/make_charts.py", "--out", str(tmp_path), "--rows", "400"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    from PIL import Image

    for name in ("balance.png", "scaling.png"):
        with Image.open(tmp_path / name) as image:
            lo, hi = image.convert("L").getextrema()
            assert image.width > 300 and hi - lo > 100, (name, image.size, lo, hi)  # drawn, not one colour


def test_the_readme_is_one_screen():
    """Install, the two commands, a quickstart and two short reads; the reference lives in docs/."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 100, f"README.md is {len(lines)} lines: move the reference to docs/overview.md"
    assert any(line.startswith("Or into your own environment") and "pip install" in line for line in lines)

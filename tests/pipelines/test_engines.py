"""The engines (``pipelines.engines``): one registry of runner names, nothing else that compares
them, the Beam graph on Beam's own runner giving the local engine's bytes (images here; every
tabular format in ``test_identity``), and a Beam run that never tries Beam's Prism runner."""
from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipelines import engines
from shardprep import manifest, run
from trainer.demo_images import write_images

ROOT = Path(__file__).resolve().parents[2]


def test_every_runner_name_has_an_engine_and_help_names_them(capsys):
    for name in engines.RUNNERS:
        chosen = engines.engine(name)
        for method in ("checked", "on_this_machine", "runs", "run"):
            assert callable(getattr(chosen, method)), (name, method)
    with pytest.raises(SystemExit):
        run.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(name in text for name in engines.RUNNERS)


def test_no_module_but_the_registry_compares_runner_names():
    """A comparison with a runner's name (``runner == "dask"``, ``in ("direct", ...)``) anywhere
    in the product outside ``pipelines/engines.py`` would be a second place that knows them."""
    found = []
    for path in [*ROOT.glob("shardprep/**/*.py"), *ROOT.glob("pipelines/*.py")]:
        if path.name == "engines.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                names = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
                if any(n in engines.RUNNERS for n in names) and any("runner" in ast.unparse(x) for x in
                                                                    (node.left, *node.comparators)):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert found == []


def test_local_and_dask_engines_refuse_beams_flags_in_one_line(tmp_path, capsys):
    src = tmp_path / "a.csv"
    src.write_text("a\n1\n")
    for runner in ("direct", "dask"):
        assert run.main(["--input", str(src), "--output", str(tmp_path / "ds"), "--runner", runner,
                         "--dask_npartitions=4"]) == 2
        err = capsys.readouterr().err
        assert "unknown argument '--dask_npartitions=4'" in err and "--runner beam" in err, err


@pytest.mark.slow
def test_images_on_beams_runner_give_the_local_engines_bytes(tmp_path):
    raw = tmp_path / "raw"
    write_images(str(raw), per_class=20)
    out = {}
    for runner in ("direct", "beam"):
        folder = tmp_path / runner
        assert run.main(["--input", str(raw), "--format", "images", "--output", str(folder), "--num-shards", "4",
                         "--runner", runner, "--unit-mb", "0.05"]) == 0
        m = manifest.load(str(folder))
        out[runner] = {n: [(s.crc32c, s.num_records) for s in sp.shards] for n, sp in m.splits.items()}
    assert out["direct"] == out["beam"] and sum(n for _, n in out["beam"]["train"]) > 0


@pytest.mark.slow
def test_a_beam_run_goes_straight_to_the_in_process_runner(tmp_path):
    """Beam's DirectRunner would first try its Prism runner (a binary downloaded from GitHub):
    ``--runner beam`` names Beam's ``FnApiRunner`` and goes straight to it."""
    src = tmp_path / "in.csv"
    src.write_text("a,b\n" + "".join(f"{i},{i % 3}\n" for i in range(50)))
    code = textwrap.dedent(f"""
        import sys
        from shardprep import run
        rc = run.main(["--input", {str(src)!r}, "--output", {str(tmp_path / 'ds')!r}, "--num-shards", "2",
                       "--runner", "beam"])
        prism = "apache_beam.runners.portability.prism_runner" in sys.modules  # imported only to try Prism
        print("RESULT", rc, prism)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "RESULT 0 False", proc.stdout[-2000:]
    assert "Parse: 50 records read (0 rejected)" in proc.stderr, proc.stderr[-2000:]

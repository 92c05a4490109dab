"""``pipelines.startup``: a local run's first import of Beam leaves the cloud connectors' client
libraries out, and only for Beam: gcsfs (gs:// paths) still imports them, and the run works.

Each case runs in a fresh interpreter: what a process has imported cannot be undone.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from pipelines.startup import CONNECTOR_LIBRARIES, CONNECTOR_MODULES

PROBE = textwrap.dedent("""
    import json, sys
    from pipelines import startup
    startup.import_beam(sys.argv[1], lean=sys.argv[2] == "lean")
    from pipelines import reshard  # noqa: F401
    loaded = sorted({".".join(m.split(".")[:2 if m.startswith("google.") else 1])
                     for m in sys.modules if m.startswith(startup.CONNECTOR_LIBRARIES) and m != "google.cloud"})
    loaded += sorted(m for m in startup.CONNECTOR_MODULES if m in sys.modules)
    import apache_beam as beam
    with beam.Pipeline() as p:
        _ = p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * 2)
    after_run = sorted(m for m in sys.modules if m.startswith(startup.CONNECTOR_LIBRARIES) and m != "google.cloud")
    import gcsfs  # its own imports of google.cloud / google.api_core are not refused
    import google.api_core.exceptions
    print(json.dumps({"loaded": loaded, "after_run": after_run, "runners": list(startup.RUNNERS)}))
""")


def _probe(runner: str, mode: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, runner, mode], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not any(note in proc.stderr for note in ("apitools not found", "left out of Beam", "compatible bson")), \
        proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_local_run_imports_beam_without_the_connectors_and_gcsfs_still_works():
    lean = _probe("direct", "lean")
    assert lean["loaded"] == []
    assert lean["after_run"] == []  # running a pipeline does not bring them in either
    assert "direct" in lean["runners"]


def test_dask_run_imports_beam_and_its_dask_runner_without_the_connectors():
    assert _probe("dask", "lean")["loaded"] == []


def test_other_runners_and_non_lean_callers_import_beam_whole():
    for runner, mode in (("direct", "whole"), ("dataflow", "lean")):
        whole = _probe(runner, mode)
        assert {"google.cloud", "pymongo", *CONNECTOR_MODULES} <= set(whole["loaded"]), (runner, mode, whole["loaded"])


def test_the_command_line_run_is_lean_and_never_tries_prism(tmp_path):
    """Beam's DirectRunner would first try its Prism runner (a binary downloaded from GitHub):
    ``pipelines.local.in_process_runner`` goes straight to the FnApiRunner."""
    src = tmp_path / "in.csv"
    src.write_text("a,b\n" + "".join(f"{i},{i % 3}\n" for i in range(50)))
    code = textwrap.dedent(f"""
        import sys
        sys.argv = ["shardprep.run", "--input", {str(src)!r}, "--output", {str(tmp_path / 'ds')!r}, "--num-shards", "2"]
        from shardprep import run
        rc = run.main(lean=True)
        left = sorted(m for m in sys.modules if m.startswith({CONNECTOR_LIBRARIES!r}) and m != "google.cloud")
        prism = "apache_beam.runners.portability.prism_runner" in sys.modules  # imported only to try Prism
        print("RESULT", rc, left, prism)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "apitools" not in proc.stderr and "bson" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "RESULT 0 [] False", proc.stdout[-2000:]
    assert (tmp_path / "ds" / "manifest.json").exists()

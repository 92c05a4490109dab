"""No product module reaches into a private or internal API of Beam, Dask, TensorFlow or Keras: an
upgrade of one of them may change or remove such a name without notice. Found in the source itself
(``ast``), as the runner-name test finds comparisons: an import of an internal module
(``apache_beam.runners.portability``, ``apache_beam.internal``, ``tensorflow.python``, ``keras.src``,
a module of these packages whose name starts with ``_``), a private name imported from them, a
``._name`` attribute of anything imported from them, or an internal module's name in a string
(``importlib.import_module("keras.src...")``).

The trainer's workarounds of Keras and TensorFlow bugs that have no public API are listed, each
with its reason, in ``KNOWN``; Beam and Dask have none."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("shardprep", "pipelines", "trainer")
PACKAGES = ("apache_beam", "dask", "distributed", "tensorflow", "keras")
INTERNAL = ("apache_beam.runners.portability", "apache_beam.internal", "tensorflow.python", "keras.src")
_INTERNAL_TEXT = re.compile(rf"^(?:{'|'.join(map(re.escape, INTERNAL))})(?:\.|$)"
                            rf"|^(?:{'|'.join(PACKAGES)})(?:\.\w+)*\._[A-Za-z]")

# (file, what is used): the trainer's documented workarounds, for which Keras and TensorFlow have no
# public API. A new use anywhere, or one of these in another file, fails.
KNOWN = {
    # keras-team/keras#20585, tensorflow/tensorflow#72388: Model.fit under multi-worker MWMS
    # (trainer.keras_compat patches these only inside its block and checks they still exist).
    ("trainer/keras_compat.py", "keras.src.backend.tensorflow.trainer"),
    # The coordination service's heartbeat timeout, which MWMS sets with no public option.
    ("trainer/strategy.py", "tensorflow.python.distribute"),
    ("trainer/strategy.py", "tensorflow.python.eager"),
}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _internal_module(module: str) -> bool:
    parts = module.split(".")
    return parts[0] in PACKAGES and (any(_is_private(p) for p in parts)
                                     or any(module == p or module.startswith(p + ".") for p in INTERNAL))


def _dotted(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; None for anything else (a call, a subscript)."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return [node.id, *reversed(names)] if isinstance(node, ast.Name) else None


def private_uses(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` of every private or internal use of the packages in ``source``."""
    tree = ast.parse(source)
    bound: dict[str, str] = {}  # a local name -> the dotted path it was imported as
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
                if _internal_module(alias.name):
                    found.append((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                if _internal_module(node.module) or _internal_module(f"{node.module}.{alias.name}"):
                    found.append((node.lineno, f"from {node.module} import {alias.name}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _INTERNAL_TEXT.match(node.value):
            found.append((node.lineno, node.value))
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or id(node) in inner:
            continue  # each chain ``a.b.c`` once, as a whole
        names = _dotted(node)
        if names is None or names[0] not in bound:
            continue
        path = ".".join([bound[names[0]], *names[1:]])
        if path.split(".")[0] in PACKAGES and _internal_module(path):
            found.append((node.lineno, path))
    return sorted(set(found))


def test_the_check_finds_what_it_looks_for():
    source = """
import apache_beam as beam
import tensorflow as tf
from apache_beam.options import pipeline_options as po
from apache_beam.runners.portability.fn_api_runner import fn_runner
from dask import _task_spec
from distributed._concurrent_futures_thread import ThreadPoolExecutor
import keras.src.backend
parser = po._BeamArgumentParser(allow_abbrev=False)
po.PipelineOptions._add_argparse_args(parser)
runner = beam.runners.portability.fn_api_runner.FnApiRunner()
tf.python.eager.context
module = "keras.src.backend.tensorflow.trainer"
ok = (beam.Pipeline, po.PipelineOptions, tf.__version__, "distributed.admin.tick.interval", self._x, "_y")
"""
    found = [what for _, what in private_uses(source)]
    assert found == [
        "from apache_beam.runners.portability.fn_api_runner import fn_runner",
        "from dask import _task_spec",
        "from distributed._concurrent_futures_thread import ThreadPoolExecutor",
        "import keras.src.backend",
        "apache_beam.options.pipeline_options._BeamArgumentParser",
        "apache_beam.options.pipeline_options.PipelineOptions._add_argparse_args",
        "apache_beam.runners.portability.fn_api_runner.FnApiRunner",
        "tensorflow.python.eager.context",
        "keras.src.backend.tensorflow.trainer",
    ], found


def test_no_product_module_uses_a_private_or_internal_api():
    found, known = [], set()
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            for line, what in private_uses(path.read_text()):
                key = next(((f, w) for f, w in KNOWN if f == name and w in what), None)
                if key is None:
                    found.append(f"{name}:{line}: {what}")
                else:
                    known.add(key)
    assert found == [], "private or internal API used:\n" + "\n".join(found)
    assert known == KNOWN, f"listed in KNOWN but no longer used (remove them): {sorted(KNOWN - known)}"


# Where Beam may be imported: its engine and Dataflow's flags (``pipelines``), and the command line's
# check of the flags it passes to Beam (``shardprep.run_checks``, imported there only when given).
# The job's stages count through ``shardprep.graph.counting``: Beam's metrics only in its engine.
BEAM_IMPORTERS = {"pipelines/beam_graph.py", "pipelines/dataflow_flags.py", "shardprep/run_checks.py"}
BEAM_METRICS = {"pipelines/beam_graph.py"}


def beam_imports(source: str) -> list[tuple[int, str]]:
    """``(line, module)`` of every import of ``apache_beam`` or a module of it in ``source``, at any depth."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "apache_beam"]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level \
                and node.module.split(".")[0] == "apache_beam":
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def test_the_beam_import_check_finds_imports_at_any_depth():
    source = """
import apache_beam as beam
def count(n):
    from apache_beam.metrics import Metrics
    Metrics.counter("ns", "n").inc(n)
from shardprep.graph import counting
"""
    assert beam_imports(source) == [(2, "apache_beam"), (4, "apache_beam.metrics.Metrics")]


def test_beam_is_imported_only_by_its_engine_and_its_flags():
    importers, metrics = set(), set()
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found = beam_imports(path.read_text())
            name = path.relative_to(ROOT).as_posix()
            importers |= {name} if found else set()
            metrics |= {name} if any(m.startswith("apache_beam.metrics") for _, m in found) else set()
    assert importers <= BEAM_IMPORTERS, f"Beam imported outside its engine: {sorted(importers - BEAM_IMPORTERS)}"
    assert metrics <= BEAM_METRICS, f"Beam's metrics outside its engine: {sorted(metrics - BEAM_METRICS)}"
    assert "pipelines/beam_graph.py" in metrics  # the check still sees the one place that uses them

"""Tests are found from a module's name: every module of ``shardprep``, ``pipelines`` and ``trainer``
with logic (a function or a method) has ``tests/<package>/test_<module>.py``, or is on ``UNTESTED_BY_NAME``;
and a module's name is used once across the three packages, but for ``NAMES_USED_TWICE``.

The list only shrinks: the test fails when a module that is not on it lacks its test file (give it one),
and when one on it has gained its test file or is gone (take it off). ``__init__.py`` and ``__main__.py``
are left out; modules of constants and types alone need no file of their own.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("shardprep", "pipelines", "trainer")

# Modules with logic but no test file of their name yet. Each comment names the test files that import
# it (the first two, then how many more), where its behaviour is checked today.
UNTESTED_BY_NAME = frozenset({
    "pipelines/beam_graph.py",  # pipelines/test_dataflow.py, pipelines/test_launch_bounded.py
    "pipelines/dask_worker.py",  # pipelines/test_dask_engine.py
    "pipelines/dataflow_flags.py",  # no test imports it: reached through the modules that call it
    "pipelines/driver.py",  # pipelines/test_dask_engine.py, pipelines/test_pool.py and 2 more
    "shardprep/cli.py",  # end_to_end/test_hostile_input.py, pipelines/test_dataflow.py and 1 more
    "shardprep/compact.py",  # end_to_end/test_appends.py
    "shardprep/config.py",  # end_to_end/test_crash_safety.py, pipelines/test_dataflow.py and 8 more
    "shardprep/example/columnar.py",  # shardprep/formats/csv/test_arrow.py, shardprep/native/test_layout.py and 1 more
    "shardprep/example/encoder.py",  # end_to_end/test_hostile_input.py, shardprep/example/test_codec.py and 2 more
    "shardprep/formats/csv/source.py",  # end_to_end/test_hostile_input.py, shardprep/formats/csv/test_dialect.py and 1 more
    "shardprep/formats/image_listing.py",  # shardprep/formats/test_images_reader.py
    "shardprep/formats/jsonl_block.py",  # shardprep/formats/test_jsonl.py, shardprep/native/test_jsonl.py
    "shardprep/fs.py",  # end_to_end/test_bad_input.py, shardprep/formats/test_files.py and 3 more
    "shardprep/generations.py",  # no test imports it: reached through the modules that call it
    "shardprep/graph/elements.py",  # end_to_end/test_crash_safety.py, pipelines/test_pool.py and 4 more
    "shardprep/graph/parse.py",  # shardprep/formats/csv/test_arrow.py
    "shardprep/graph/ranges.py",  # no test imports it: reached through the modules that call it
    "shardprep/graph/units.py",  # pipelines/test_launch_bounded.py, shardprep/text/test_store_stages.py
    "shardprep/inspect.py",  # end_to_end/test_docs.py, end_to_end/test_manifest_paths.py and 5 more
    "shardprep/manifest_generations.py",  # no test imports it: reached through the modules that call it
    "shardprep/native/fallback.py",  # shardprep/native/test_jsonl.py, shardprep/native/test_layout.py and 3 more
    "shardprep/report/feature_section.py",  # shardprep/report/test_page.py
    "shardprep/run.py",  # end_to_end/test_appends.py, end_to_end/test_bad_input.py and 45 more
    "shardprep/stats/state.py",  # no test imports it: reached through the modules that call it
    "shardprep/text/corpus.py",  # shardprep/text/test_dedup.py, shardprep/text/test_minhash.py
    "shardprep/text/documents.py",  # shardprep/text/test_pretraining.py, shardprep/text/test_store.py
    "shardprep/text/spec.py",  # shardprep/text/test_tokens.py
    "shardprep/versions.py",  # end_to_end/test_appends.py
    "trainer/bert_task.py",  # end_to_end/test_manifest_paths.py, trainer/test_bert.py
    "trainer/checkpoints.py",  # no test imports it: reached through the modules that call it
    "trainer/defaults.py",  # trainer/test_eta.py, trainer/test_units.py
    "trainer/demo.py",  # end_to_end/test_docs.py, end_to_end/test_gcs.py and 1 more
    "trainer/demo_corpus.py",  # trainer/test_bert.py
    "trainer/demo_images.py",  # pipelines/test_engines.py, shardprep/formats/test_images.py and 4 more
    "trainer/demo_text.py",  # trainer/test_bert.py
    "trainer/features.py",  # shardprep/formats/test_images.py, trainer/test_units.py
    "trainer/fit.py",  # no test imports it: reached through the modules that call it
    "trainer/idlog.py",  # trainer/test_elastic.py, trainer/test_faults.py and 2 more
    "trainer/image_rate.py",  # no test imports it: reached through the modules that call it
    "trainer/keras_compat.py",  # trainer/test_units.py
    "trainer/loop.py",  # no test imports it: reached through the modules that call it
    "trainer/metrics.py",  # end_to_end/test_gcs.py, trainer/test_e2e.py and 4 more
    "trainer/model_card.py",  # trainer/test_collaborators.py, trainer/test_evaluate.py
    "trainer/models.py",  # end_to_end/test_tabular.py, trainer/test_collaborators.py and 1 more
    "trainer/objective.py",  # trainer/test_collaborators.py
    "trainer/preflight.py",  # end_to_end/test_corruption.py, trainer/test_data.py and 1 more
    "trainer/resume.py",  # end_to_end/test_hostile_input.py, trainer/test_faults.py and 1 more
    "trainer/scoring.py",  # no test imports it: reached through the modules that call it
    "trainer/session.py",  # no test imports it: reached through the modules that call it
    "trainer/settings.py",  # trainer/test_cluster.py, trainer/test_collaborators.py and 2 more
    "trainer/staging.py",  # trainer/test_data.py
    "trainer/strategy.py",  # trainer/test_units.py
    "trainer/train.py",  # end_to_end/test_corruption.py, end_to_end/test_crash_safety.py and 13 more
    "trainer/worker.py",  # end_to_end/test_hostile_input.py, trainer/test_collaborators.py and 1 more
})


# Module names that two modules still share (``__init__`` and ``__main__`` aside); this list only shrinks too.
NAMES_USED_TWICE: frozenset[str] = frozenset()


def _has_logic(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) for node in ast.walk(tree))


def modules_without_a_test_file() -> set[str]:
    """Each module with logic (a path from the repository root) whose ``tests/<package>/test_<module>.py`` is missing."""
    missing = set()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name in ("__init__.py", "__main__.py") or not _has_logic(path):
                continue
            relative = path.relative_to(ROOT)
            if not (ROOT / "tests" / relative.parent / f"test_{path.name}").exists():
                missing.add(relative.as_posix())
    return missing


def test_every_module_with_logic_has_a_test_file_of_its_name():
    missing = modules_without_a_test_file()
    new = sorted(missing - UNTESTED_BY_NAME)
    assert not new, f"modules without tests/<package>/test_<module>.py: {new}; add the test file (or move the tests that exist)"


def test_the_list_of_modules_without_one_only_shrinks():
    done = sorted(UNTESTED_BY_NAME - modules_without_a_test_file())
    assert not done, f"these now have a test file of their name, or are gone: take them off UNTESTED_BY_NAME: {done}"


def test_a_module_name_is_used_once():
    names: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name not in ("__init__.py", "__main__.py"):
                names.setdefault(path.name, []).append(path.relative_to(ROOT).as_posix())
    twice = {name for name, paths in names.items() if len(paths) > 1}
    new = {name: names[name] for name in sorted(twice - NAMES_USED_TWICE)}
    assert not new, f"module names used twice: {new}; give one a name of its own"
    done = sorted(NAMES_USED_TWICE - twice)
    assert not done, f"these names are used once now: take them off NAMES_USED_TWICE: {done}"

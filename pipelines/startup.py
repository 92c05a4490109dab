"""What a run needs before Beam is imported: the runner names, and a leaner first import of Beam.

Importing Apache Beam takes 1.5-2 s, about half of a small run. A third of that is client libraries
Beam imports only for its Google Cloud and MongoDB connectors (google-cloud-*, google-api-core,
apitools, pymongo), each inside ``try/except ImportError``, and another ~0.12 s its BigQuery
connector itself, which ``apache_beam.io`` imports inside such a ``try``. A run on the
direct runner or on Dask uses none of those connectors: its files go through fsspec (``shardprep.fs``).
So ``import_beam`` imports Beam, for such a run launched from the command line (and in the workers
of the local Dask cluster it starts: ``pipelines.dask_worker``), while a finder refuses those
libraries and modules to Beam's own modules; Beam then leaves the connectors out, as it does where
the libraries are not installed. Anything else (gcsfs, for gs:// paths) still imports them, and the
finder is gone once Beam is in. Other runners, and processes that already hold Beam, import it whole.
"""
from __future__ import annotations

import contextlib
import importlib.abc
import logging
import sys
from collections.abc import Iterator
from types import FrameType

__all__ = ["CONNECTOR_LIBRARIES", "CONNECTOR_MODULES", "RUNNERS", "import_beam"]

RUNNERS = ("direct", "dask", "dataflow", "flink", "spark", "portable")
CONNECTOR_LIBRARIES = ("google.cloud", "google.api_core", "googleapiclient", "apitools", "pymongo", "bson")
CONNECTOR_MODULES = ("apache_beam.io.gcp.bigquery",)  # Beam's own, imported inside apache_beam.io's try
_LEFT_OUT = "left out of Beam's import for a local run (pipelines.startup)"
_LOCAL = ("apache_beam", "apache_beam.io.gcp.pubsub")  # apache_beam.io's try gives up at BigQuery, before pubsub
_BEAM_MODULES = {  # what a local run imports, by runner: all of it before the finder goes
    "direct": (*_LOCAL, "apache_beam.runners.direct.direct_runner",
               "apache_beam.runners.portability.fn_api_runner.fn_runner"),
    "dask": (*_LOCAL, "apache_beam.runners.dask.dask_runner", "apache_beam.runners.dask.overrides",
             "apache_beam.runners.dask.transform_evaluator"),
}


def import_beam(runner: str, *, lean: bool) -> None:
    """Imports Beam; with ``lean`` (the process is the command alone, or a worker of its own local
    Dask cluster: ``pipelines.dask_worker``) and a runner of this machine's or of Dask, without the connectors."""
    if lean and runner in _BEAM_MODULES and "apache_beam" not in sys.modules:
        with _refused_to_beam(CONNECTOR_LIBRARIES + CONNECTOR_MODULES):
            for name in _BEAM_MODULES[runner]:
                __import__(name)


class _RefuseToBeam(importlib.abc.MetaPathFinder):
    """Fails the import of ``libraries`` (and their submodules) when one of Beam's modules asks for it."""

    def __init__(self, libraries: tuple[str, ...]) -> None:
        self._libraries = libraries

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if any(name == lib or name.startswith(lib + ".") for lib in self._libraries) and _importer().startswith("apache_beam"):
            raise ImportError(f"{name} {_LEFT_OUT}")
        return None  # the other finders decide


def _importer() -> str:
    """The module whose code runs the import under way (the first frame outside importlib's machinery)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        frame = frame.f_back
    return frame.f_globals.get("__name__", "") if frame is not None else ""


_BEAM_NOTES = {  # logger -> the start of Beam's warning that a connector is missing (here: left out on purpose)
    "apache_beam.io.filesystems": "Failed to import GCSFileSystem",
    "apache_beam.io.mongodbio": "Could not find a compatible bson package",
    "": "apitools not found",  # the root logger
}


def _not_left_out(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(tuple(_BEAM_NOTES.values()))


@contextlib.contextmanager
def _refused_to_beam(libraries: tuple[str, ...]) -> Iterator[None]:
    finder = _RefuseToBeam(libraries)
    logs = [logging.getLogger(name or None) for name in _BEAM_NOTES]
    sys.meta_path.insert(0, finder)
    for log in logs:
        log.addFilter(_not_left_out)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for log in logs:
            log.removeFilter(_not_left_out)

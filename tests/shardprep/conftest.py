"""Fixtures shared by the tests of ``shardprep``."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tfds():
    """The tensorflow-datasets library, imported once for a module (its import takes seconds); in the
    dev extra, so a missing install fails here rather than skipping the proof."""
    import tensorflow_datasets

    return tensorflow_datasets

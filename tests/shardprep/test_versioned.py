"""``shardprep.versioned``: conditional writes, on local files, fsspec's memory store and the GCS
emulator: a create-only write succeeds once, a version token names the content read, and a replace
or remove succeeds only while the file still is that version (never once it changed or is gone).
On the emulator the generation conditions are GCS's through ``tests.gcs_emulator.PreconditionProxy``."""
from __future__ import annotations

import concurrent.futures
import os
import uuid

import pytest

from shardprep import naming, versioned
from tests.gcs_emulator import gcs, gcs_emulator  # noqa: F401 - fixtures


def _writes_of_the_version_read_succeed(url: str) -> None:
    assert versioned.read_versioned(url) is None
    assert versioned.create_exclusive(url, b"one") is True
    assert versioned.create_exclusive(url, b"two") is False  # something is there: left as it is
    data, first = versioned.read_versioned(url)
    assert data == b"one"
    assert versioned.replace_if_version(url, b"three", first) is True
    data, second = versioned.read_versioned(url)
    assert data == b"three" and second != first
    assert versioned.remove_if_version(url, second) is True
    assert versioned.read_versioned(url) is None
    assert versioned.create_exclusive(url, b"four") is True  # and created again once gone


def _writes_of_a_stale_version_change_nothing(url: str) -> None:
    assert versioned.create_exclusive(url, b"one") is True
    _, first = versioned.read_versioned(url)
    assert versioned.replace_if_version(url, b"three", first) is True
    current = versioned.read_versioned(url)
    assert versioned.replace_if_version(url, b"four", first) is False
    assert versioned.remove_if_version(url, first) is False
    assert versioned.read_versioned(url) == current
    assert versioned.remove_if_version(url, current[1]) is True
    assert versioned.remove_if_version(url, current[1]) is False  # gone
    assert versioned.replace_if_version(url, b"five", current[1]) is False
    assert versioned.read_versioned(url) is None


def test_local_files_hold_the_contract_and_leave_no_temp_file(tmp_path) -> None:
    _writes_of_the_version_read_succeed(str(tmp_path / "ds" / "a"))
    _writes_of_a_stale_version_change_nothing(str(tmp_path / "ds" / "b"))
    assert sorted(os.listdir(tmp_path / "ds")) == ["a"]


def test_a_store_without_conditions_holds_it_one_writer_at_a_time() -> None:
    root = f"memory://versioned-{uuid.uuid4().hex[:12]}"
    _writes_of_the_version_read_succeed(naming.join(root, "a"))
    _writes_of_a_stale_version_change_nothing(naming.join(root, "b"))


def test_gcs_writes_of_the_version_read_succeed(gcs) -> None:  # noqa: F811
    _writes_of_the_version_read_succeed(naming.join(gcs.url("ds"), "a"))


def test_gcs_writes_of_a_stale_version_change_nothing(gcs) -> None:  # noqa: F811
    _writes_of_a_stale_version_change_nothing(naming.join(gcs.url("ds"), "b"))
    assert gcs.refusals() == {"media": 2, "delete": 1}  # GCS's 412s, where the binary alone would write


@pytest.mark.parametrize("writers", [2, 16])
def test_of_writers_replacing_one_gcs_version_at_once_exactly_one_wins(gcs, writers) -> None:  # noqa: F811
    url = naming.join(gcs.url("ds"), "lease")
    assert versioned.create_exclusive(url, b"first") is True
    _, version = versioned.read_versioned(url)
    with concurrent.futures.ThreadPoolExecutor(writers) as pool:
        won = list(pool.map(lambda i: versioned.replace_if_version(url, b"%d" % i, version), range(writers)))
    assert won.count(True) == 1
    data, now = versioned.read_versioned(url)
    assert data == b"%d" % won.index(True) and now != version
    with concurrent.futures.ThreadPoolExecutor(writers) as pool:
        removed = list(pool.map(lambda _: versioned.remove_if_version(url, now), range(writers)))
    assert removed.count(True) == 1 and versioned.read_versioned(url) is None


@pytest.mark.parametrize("writers", [2, 16])
def test_of_writers_creating_one_local_file_at_once_exactly_one_wins(tmp_path, writers) -> None:
    url = str(tmp_path / "lease")
    with concurrent.futures.ThreadPoolExecutor(writers) as pool:
        won = list(pool.map(lambda i: versioned.create_exclusive(url, b"%d" % i), range(writers)))
    assert won.count(True) == 1
    assert versioned.read_versioned(url)[0] == b"%d" % won.index(True)
    assert os.listdir(tmp_path) == ["lease"]

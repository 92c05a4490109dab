"""shardprep.members: a file a manifest names is read only if it is a plain path inside the data set
folder after resolving links, a regular file and at most its recorded size (or the caller's cap)."""
from __future__ import annotations

import os
from pathlib import Path

import fsspec
import pytest

from shardprep import members
from shardprep.errors import ManifestError

FIELD = "splits.train.shards[0].path"


@pytest.fixture
def ds(tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    (root / "run").mkdir(parents=True)
    (root / "run" / "a.bin").write_bytes(b"0123456789")
    (tmp_path / "outside.txt").write_bytes(b"secret of another folder")
    return root


def _refused(root: Path, relative: str, **kwargs) -> str:
    kwargs.setdefault("size", 10)
    for call in (members.resolve_member, members.read_member):
        with pytest.raises(members.MemberError) as e:
            call(str(root), relative, field=FIELD, **kwargs)
        assert isinstance(e.value, ManifestError)  # exit 2 through shardprep.cli.main
    return str(e.value)


def test_a_regular_member_is_read_whole(ds):
    assert members.read_member(str(ds), "run/a.bin", field=FIELD, size=10) == b"0123456789"
    member = members.resolve_member(str(ds), "run/a.bin", field=FIELD, size=10)
    assert (member.size, member.limit) == (10, 10) and member.url.endswith("run/a.bin")
    with members.open_member(str(ds), "run/a.bin", field=FIELD, cap=1 << 20) as f:
        assert f.read(3) == b"012" and f.read() == b"3456789"


@pytest.mark.parametrize("relative", ["../../etc/passwd", "run/../../outside.txt", "/etc/passwd", "file:///etc/passwd",
                                      "gs://other/x", "./run/a.bin", "run//a.bin", "C:/x", "\\\\server\\x", "", ".."])
def test_paths_that_are_not_plain_relative_paths_are_refused_before_any_file_call(ds, relative):
    message = _refused(ds, relative)
    assert "is not a plain path inside the data set folder" in message and FIELD in message


def test_a_path_that_is_not_a_string_is_malformed(ds):
    with pytest.raises(members.MemberError, match=r"^manifest is malformed: text\.vocab: expected a path"):
        members.check_relative(["vocab.txt"], field="text.vocab")


def test_a_link_to_a_file_outside_the_data_set_is_refused(ds):
    (ds / "run" / "a.bin").unlink()
    (ds / "run" / "a.bin").symlink_to(ds.parent / "outside.txt")
    message = _refused(ds, "run/a.bin", size=100)
    assert "outside the data set folder" in message and "run/a.bin" in message and FIELD in message
    assert "secret" not in message


def test_a_run_folder_linked_outside_is_refused(ds, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "b.bin").write_bytes(b"x")
    (ds / "other").symlink_to(elsewhere)
    assert "outside the data set folder" in _refused(ds, "other/b.bin")


def test_a_link_to_dev_zero_is_refused(ds):
    (ds / "run" / "zero").symlink_to("/dev/zero")
    assert "outside the data set folder" in _refused(ds, "run/zero")


def test_a_device_inside_the_data_set_is_refused(tmp_path):
    # the folder / is a data set here only to put /dev/zero inside it: a device, not a regular file
    assert "a device, not a regular file" in _refused(Path("/"), "dev/zero")


@pytest.mark.timeout(60)
def test_a_fifo_is_refused_without_blocking(ds):
    os.mkfifo(ds / "run" / "pipe")  # nobody writes: an open for reading would block for ever
    assert "a FIFO, not a regular file" in _refused(ds, "run/pipe")
    with pytest.raises(members.MemberError, match="a FIFO"):
        with members.open_member(str(ds), "run/pipe", field=FIELD, cap=10, prefix=True):
            pass


def test_a_folder_is_refused(ds):
    assert "a folder, not a regular file" in _refused(ds, "run")


def test_a_link_loop_is_refused(ds):
    (ds / "run" / "loop").symlink_to(ds / "run" / "loop")
    assert "a loop of symbolic links" in _refused(ds, "run/loop")


def test_a_file_larger_than_recorded_is_refused(ds):
    message = _refused(ds, "run/a.bin", size=9)
    assert "10 bytes, more than the 9 the manifest records" in message
    message = _refused(ds, "run/a.bin", size=None, cap=4)
    assert "more than the 4 such a file may hold" in message


def test_a_prefix_read_stops_at_the_limit(ds):
    assert members.read_member(str(ds), "run/a.bin", field=FIELD, cap=4, prefix=True) == b"0123"
    with members.open_member(str(ds), "run/a.bin", field=FIELD, cap=4, prefix=True) as f:
        assert list(f) == [b"0123"]


def test_links_inside_the_data_set_are_followed(ds):
    (ds / "vocab.txt").symlink_to(ds / "run" / "a.bin")
    assert members.read_member(str(ds), "vocab.txt", field="text.vocab", cap=100) == b"0123456789"


def test_a_missing_member_is_file_not_found(ds):
    with pytest.raises(FileNotFoundError):
        members.resolve_member(str(ds), "run/none.bin", field=FIELD, size=1)
    with pytest.raises(FileNotFoundError):
        members.read_member(str(ds), "run/none.bin", field=FIELD, size=1)


def test_a_size_or_a_cap_is_required(ds):
    with pytest.raises(TypeError):
        members.read_member(str(ds), "run/a.bin", field=FIELD)


def test_another_document_names_its_field(ds):
    os.mkfifo(ds / "run" / "pipe")
    with pytest.raises(members.MemberError, match=r"^dataset_info\.json field splits 'train' shard 0: 'run/pipe' is a FIFO"):
        members.resolve_member(str(ds), "run/pipe", field="splits 'train' shard 0", cap=1, document="dataset_info.json")


def test_object_store_members_are_checked_by_their_listing():
    store = fsspec.filesystem("memory")
    store.pipe("/members-test/ds/run/a.bin", b"0123456789")
    store.mkdir("/members-test/ds/run/sub")
    store.pipe("/members-test/ds/run/sub/x", b"x")
    root = "memory://members-test/ds"
    try:
        assert members.read_member(root, "run/a.bin", field=FIELD, size=10) == b"0123456789"
        with pytest.raises(members.MemberError, match="not a regular file"):
            members.read_member(root, "run/sub", field=FIELD, cap=10)
        with pytest.raises(members.MemberError, match="more than the 5 the manifest records"):
            members.read_member(root, "run/a.bin", field=FIELD, size=5)
        with pytest.raises(members.MemberError, match="not a plain path"):
            members.read_member(root, "../other/a.bin", field=FIELD, size=10)
        with pytest.raises(FileNotFoundError):
            members.read_member(root, "run/none", field=FIELD, size=10)
    finally:
        store.rm("/members-test", recursive=True)

"""Issue 35: local ``--input`` wildcards walk trees holding link loops and unreadable folders: loops
are never walked (links to folders are not followed, as fsspec's glob), an unreadable folder is
skipped with one log line; what is found is what fsspec's glob finds."""
from __future__ import annotations

import logging
import os
import re

import fsspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardprep import fs
from shardprep.errors import InputError
from shardprep.formats import expand_inputs

PATTERNS = ["**/*.csv", "*/*.csv", "**", "a*/**/x?.csv", "[ab]/*", "*.csv", "b/**/*.jsonl"]


def _tree(root, files, links):
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("c\n1\n")
    for rel, target in links:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        if not os.path.lexists(root / rel):
            os.symlink(target, root / rel)


def _fsspec(pattern):
    local = fsspec.filesystem("file")
    return sorted(p for p in local.glob(pattern) if local.isfile(p))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["a/x1.csv", "a/b/x2.csv", "b/y.jsonl", "b/c/d/x3.csv", "z.csv", "a b/x4.csv",
                                 ".h/x5.csv", "b/_x.csv"]), min_size=1, unique=True),
       st.lists(st.sampled_from([("a/up", ".."), ("b/c/self", "."), ("b/loop", "../b"), ("a/gone", "/nonexistent"),
                                 ("a/file.csv", "x1.csv")]), unique=True))
def test_local_wildcards_find_what_fsspec_finds(tmp_path_factory, files, links):
    root = tmp_path_factory.mktemp("tree")
    _tree(root, files, links)
    for pattern in PATTERNS:
        assert fs.glob(f"{root}/{pattern}") == _fsspec(f"{root}/{pattern}"), pattern


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", ".h", "ab", "a.csv", "*", "**", "?", "a*", "*.csv", "[ab]", "[!a]*", "x?z",
                                 "[]a]", "[a-c]*"]), min_size=1, max_size=4),
       st.lists(st.sampled_from(["a", "b", ".h", "ab", "a.csv", "b.csv", "xyz", "]", "c1"]), min_size=1, max_size=5))
def test_glob_match_is_fsspecs_rule(parts, names):
    """``fs.glob_match`` (local wildcards without importing fsspec) against fsspec's own pattern, on the
    paths a folder walk gives (no empty names: there fsspec's ``[!a]`` also matches a slash)."""
    import re

    from fsspec.utils import glob_translate

    pattern, path = "/r/" + "/".join(parts), "/r/" + "/".join(names)
    assert fs.glob_match(pattern.split("/"), path.split("/")) == bool(re.match(glob_translate(pattern), path))


def test_a_link_loop_is_never_walked_and_a_relative_pattern_works(tmp_path, monkeypatch):
    _tree(tmp_path, ["d/a.csv", "d/e/b.csv"], [("d/e/up", ".."), ("d/e/again", "../../d")])
    monkeypatch.chdir(tmp_path)
    got = [f.url for f in expand_inputs(["d/**/*.csv"])]
    assert got == [str(tmp_path / "d/a.csv"), str(tmp_path / "d/e/b.csv")]


def test_an_unreadable_folder_is_skipped_with_one_line(tmp_path, monkeypatch, caplog):
    _tree(tmp_path, ["d/a.csv", "d/locked/b.csv", "d/locked/deeper/c.csv"], [])
    locked, scandir = str(tmp_path / "d" / "locked"), os.scandir

    def refusing(path):
        if str(path) == locked:
            raise PermissionError(13, "Permission denied", path)
        return scandir(path)
    monkeypatch.setattr(os, "scandir", refusing)  # root may read anything: refuse in the walk instead
    with caplog.at_level(logging.WARNING, logger="shardprep"):
        got = [f.url for f in expand_inputs([f"{tmp_path}/d/**/*.csv"])]
    assert got == [str(tmp_path / "d/a.csv")]
    lines = [r.getMessage() for r in caplog.records if "cannot be listed" in r.getMessage()]
    assert lines == [f"skipped {locked}: cannot be listed (Permission denied)"]


def _hostile_tree(root):
    """A folder of *.csv names, three of them no regular file: a FIFO, a link to /dev/zero, a folder."""
    (root / "good.csv").write_text("c\n1\n")
    os.mkfifo(root / "pipe.csv")
    os.symlink("/dev/zero", root / "zero.csv")
    os.symlink(root / "missing", root / "dangling.csv")
    (root / "folder.csv").mkdir()
    (root / "folder.csv" / "inner.csv").write_text("c\n2\n")


def test_a_wildcard_names_each_match_it_leaves_out_with_why(tmp_path, caplog):
    """Issue 57 item 5: every non-regular match is logged with what it is, none is opened (a FIFO would hang)."""
    _hostile_tree(tmp_path)
    found = fs.match(str(tmp_path / "*.csv"))
    assert found.files == [str(tmp_path / "good.csv")]
    assert dict(found.left_out) == {str(tmp_path / "dangling.csv"): "a link to nothing",
                                    str(tmp_path / "folder.csv"): "a folder",
                                    str(tmp_path / "pipe.csv"): "a FIFO (named pipe)",
                                    str(tmp_path / "zero.csv"): "a character device"}
    with caplog.at_level(logging.WARNING, logger="shardprep"):
        files = expand_inputs([str(tmp_path / "*.csv")])
    assert [f.url for f in files] == [str(tmp_path / "good.csv")]
    lines = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(lines) == 4 and all("not a regular file" in line for line in lines), lines
    assert any("pipe.csv: a FIFO" in line for line in lines) and any("zero.csv: a character device" in line
                                                                      for line in lines)
    assert fs.match(str(tmp_path / "**" / "*.csv")).files == [str(tmp_path / "folder.csv" / "inner.csv"),
                                                               str(tmp_path / "good.csv")]  # ** reaches inside


def test_a_fifo_or_device_named_directly_is_one_error_saying_what_it_is(tmp_path):
    _hostile_tree(tmp_path)
    for name, what in [("pipe.csv", "a FIFO (named pipe)"), ("zero.csv", "a character device"),
                       ("dangling.csv", "a link to nothing")]:
        with pytest.raises(InputError, match=rf"is {re.escape(what)}, not a regular file") as e:
            expand_inputs([str(tmp_path / name)])
        assert "\n" not in str(e.value)
    os.remove(tmp_path / "good.csv")
    with pytest.raises(InputError, match=r"matches no regular file: 4 match\(es\) left out"):
        expand_inputs([str(tmp_path / "*.csv")])

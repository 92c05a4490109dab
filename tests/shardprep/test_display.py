"""``display.shown`` and ``display.html_text``: untrusted names escaped for their medium (issue 57 item 4),
and end to end: a feature name holding U+202E and U+200B through run, inspect and report."""
from __future__ import annotations

import logging
import unicodedata

import pytest

from shardprep import cli, display
from shardprep.display import html_text, shown
from tests.conftest import run_cli, write_csv

BIDI = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f",
        "\u061c"]
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff"]
RAW = set(BIDI + ZERO_WIDTH + ["\x1b", "\x00", "\x7f", "\x85", "\u2028", "\u2029"])


@pytest.mark.parametrize("char", BIDI + ZERO_WIDTH)
def test_bidi_and_zero_width_characters_are_escaped(char):
    assert shown(f"a{char}b") == f"a\\u{ord(char):04x}b"


@pytest.mark.parametrize(("text", "expected"), [
    ("two\nlines\r\tx", "two\\nlines\\r\\tx"),
    ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
    ("\x00\x7f\x85", "\\x00\\x7f\\x85"),  # C0, DEL, C1
    ("\u00ad", "\\xad"),  # soft hyphen: a format character that hides itself
    ("a\u2028b\u2029c", "a\\u2028b\\u2029c"),  # line and paragraph separators
    ("tag\U000e0041", "tag\\U000e0041"),  # a tag character (Cf above the BMP)
    ("\ud800", "\\ud800"),  # a lone surrogate (from surrogateescape)
    ("", ""),
    (17, "17"),
])
def test_controls_and_separators_are_escaped(text, expected):
    assert shown(text) == expected


@pytest.mark.parametrize("text", ["label", "café", "日本語の名前", "имя", "اسم", "שם", "emoji 🚀", "no\u00a0break",
                                  "back\\slash", "<b>&'\""])
def test_printable_text_is_left_as_it_is(text):
    assert shown(text) == text


def test_every_control_format_and_separator_character_is_escaped_to_printable_ascii():
    for code in range(0x110000):
        c = chr(code)
        if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            out = shown(c)
            assert out.isascii() and out.isprintable() and out.startswith("\\"), hex(code)
    assert shown(shown("a\u202eb")) == shown("a\u202eb")  # escaping twice changes nothing


def test_html_text_escapes_markup_after_the_controls():
    assert html_text("<a href=\"x\">\u202e&'") == "&lt;a href=&quot;x&quot;&gt;\\u202e&amp;&#x27;"


def test_log_lines_and_error_lines_use_the_same_function(capsys):
    assert cli.safe is display.shown
    logger = logging.getLogger("shardprep.test_display")
    cli.configure_logging()
    logger.info("feature %s", "a\u2060b\u202ec")  # U+2060 (word joiner): missed by the escape before issue 57
    assert "feature a\\u2060b\\u202ec" in capsys.readouterr().err


@pytest.fixture(scope="module")
def bidi_dataset(tmp_path_factory):
    """A CSV whose column name holds U+202E (right-to-left override) and U+200B (zero width space), and
    whose text column holds U+202E in its most frequent value."""
    tmp = tmp_path_factory.mktemp("bidi")
    name = "price\u202eusd\u200b"
    rows = [{"id": i, name: i % 7, "note": "x\u202ey" if i % 2 else "plain", "label": i % 2} for i in range(60)]
    src = write_csv(tmp / "in.csv", rows)
    run = run_cli("shardprep.run", "--input", src, "--output", tmp / "ds", "--num-shards", "2", "--statistics", "on",
                  "--split", "train=0.5,eval=0.5", check=True)
    return tmp, name, run


def _no_raw(text: str) -> None:
    raw = sorted({hex(ord(c)) for c in text if c in RAW})
    assert not raw, f"raw control characters: {raw}"


def test_a_feature_name_with_bidi_controls_is_escaped_in_inspect_and_the_report(bidi_dataset):
    tmp, name, run = bidi_dataset
    _no_raw(run.stdout + run.stderr)
    inspect = run_cli("shardprep.inspect", tmp / "ds", check=True)
    _no_raw(inspect.stdout + inspect.stderr)
    assert "price\\u202eusd\\u200b" in inspect.stdout  # the features table, the statistics, the samples' header
    assert inspect.stdout.count("price\\u202eusd\\u200b") >= 4
    assert "x\\u202ey" in inspect.stdout  # a top value, through the same function
    report = run_cli("shardprep.report", tmp / "ds", "-o", tmp / "report.html", check=True)
    _no_raw(report.stdout + report.stderr)
    page = (tmp / "report.html").read_text(encoding="utf-8")
    _no_raw(page)
    assert "<h3>price\\u202eusd\\u200b<span" in page and "x\\u202ey" in page
    assert 'id="feature-' in page and 'id="feature-price' not in page  # ids by index, never from a name
    refused = run_cli("shardprep.report", tmp / "ds", "--label", "nope\u202e", "-o", tmp / "r.html")
    assert refused.returncode == 2 and "price\\u202eusd\\u200b" in refused.stderr
    _no_raw(refused.stderr)



def test_verify_lines_quoting_a_manifest_feature_name_are_escaped(bidi_dataset, tmp_path):
    import json
    import shutil

    tmp, _, _ = bidi_dataset
    ds = tmp_path / "ds"
    shutil.copytree(tmp / "ds", ds)
    doc = json.loads((ds / "manifest.json").read_text(encoding="utf-8"))
    doc["features"]["ghost\u202e\u2066"] = {"dtype": "int64", "shape": []}  # a feature no record holds
    (ds / "manifest.json").write_text(json.dumps(doc), encoding="utf-8")
    proc = run_cli("shardprep.verify", ds)
    assert proc.returncode == 1 and "ghost\\u202e\\u2066" in proc.stdout, proc.stdout + proc.stderr
    _no_raw(proc.stdout + proc.stderr)

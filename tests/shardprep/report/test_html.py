"""``shardprep.report.html``: the report's one escape (HTML, with bidi and zero-width controls made
visible), its numbers (thousands separators, 6 significant digits, nothing for None and booleans)
and its tables (the header escaped, text columns marked, columns blank in every row dropped)."""
from __future__ import annotations

import pytest

from shardprep.report.html import e, num, table


def test_the_escape_leaves_no_markup_and_no_hidden_control():
    shown = e('<script>alert("x")</script> \u202egnp.exe & \u200b')
    assert "<" not in shown and ">" not in shown and '"' not in shown and "\u202e" not in shown
    assert "\u200b" not in shown and "&amp;" in shown and "&lt;script&gt;" in shown


@pytest.mark.parametrize("value, text", [(1234567, "1,234,567"), (-5, "-5"), (0.1 + 0.2, "0.3"), (1e-9, "1e-09"),
                                         (123456789.0, "1.23457e+08"), (None, ""), (True, ""), (False, ""),
                                         ("<b>", "&lt;b&gt;")])
def test_numbers_as_the_tables_show_them(value, text):
    assert num(value) == text


def test_a_table_escapes_its_header_and_marks_its_text_columns():
    html = table(["feature", "<count>", "top value"], [["a", "1", "x"], ["b", "2", "y"]], text_cols=[0, 2])
    assert html.startswith("<table><thead><tr>") and html.endswith("</tbody></table>")
    assert '<th class="t">feature</th><th>&lt;count&gt;</th><th class="t">top value</th>' in html
    assert '<tr><td>a</td><td>1</td><td class="v">x</td></tr>' in html  # the first column is never a value cell
    assert html.count("<tr>") == 3


def test_columns_blank_in_every_row_are_dropped_on_request():
    rows = [["a", "", "3", ""], ["b", "", "4", "z"]]
    kept = table(["name", "mean", "count", "top"], rows, text_cols=[3], drop_empty=True)
    assert "mean" not in kept and '<th class="t">top</th>' in kept and '<td class="v">z</td>' in kept
    assert "mean" in table(["name", "mean", "count", "top"], rows)
    assert table(["only"], [], drop_empty=True) == "<table><thead><tr><th>only</th></tr></thead><tbody></tbody></table>"

"""``shardprep.schema_text``: a text (CSV) column's dtype decided for the whole column at once, and the
whole-table shortcut, never answer otherwise than the value-by-value rules; a float column of lists
warns of big integers."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep.schema import infer_schema


@given(st.lists(st.lists(st.one_of(st.none(), st.floats(), st.integers(min_value=-(1 << 30), max_value=1 << 30)),
                         max_size=3), min_size=1, max_size=8))
@settings(max_examples=300, deadline=None)
def test_a_float_column_of_lists_warns_of_big_integers_as_before(values):
    from shardprep import schema_text

    flat = [v for row in values for v in row]
    found = schema_text.big_int_candidates(values)
    assert (found == []) == all(type(v) is float or v is None for v in flat)


_TEXT_VALUES = st.one_of(
    st.none(), st.integers(min_value=-(1 << 70), max_value=1 << 70).map(str), st.floats().map(repr),
    st.sampled_from(["", " ", " 7 ", "+3", "1_000", "007", "1e5", "nan", "-inf", "Infinity", "0x10", "١٢", "1.5.2",
                     "9" * 19, "1" * 5000, "abc", "e", "12ab", "½", " \t"]),
    st.text(alphabet="0123456789.-+e _", max_size=6),
)


@given(st.lists(_TEXT_VALUES, max_size=12))
@settings(max_examples=600, deadline=None)
def test_the_whole_column_text_rule_infers_what_the_value_by_value_rule_does(values):
    """A wide CSV's inference decides each column in a few passes: never otherwise than value by value."""
    from shardprep.schema_text import kinds_dtype, text_dtype

    assert text_dtype(values) == kinds_dtype(values)


_ONE_KIND = [st.integers(min_value=-(1 << 64), max_value=1 << 64), st.integers(min_value=0, max_value=10**19),
             st.floats(), st.booleans(), st.text(max_size=2), st.binary(max_size=2), st.none(), st.sampled_from(["", "7"])]


@given(st.one_of(st.lists(st.one_of(*_ONE_KIND), min_size=1, max_size=8),
                 *(st.lists(kind, min_size=1, max_size=8) for kind in _ONE_KIND)),
       st.integers(min_value=1, max_value=4), st.booleans())
@settings(max_examples=300, deadline=None)
def test_a_table_of_one_type_is_inferred_as_column_by_column(values, width, as_text):
    """The whole-table shortcut (all one plain type, or all plain digits as text) never answers otherwise."""
    import shardprep.schema_text as schema_text

    if as_text:
        values = [None if v is None else str(v) for v in values]
    rows = [{f"c{j}": values[(i + j) % len(values)] for j in range(width)} for i in range(len(values))]
    saved = schema_text.uniform_dtype
    schema_text.uniform_dtype = lambda columns, text: None
    try:
        expected = infer_schema(rows, text=as_text)
    finally:
        schema_text.uniform_dtype = saved
    assert infer_schema(rows, text=as_text) == expected

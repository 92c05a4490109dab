"""``shardprep.example.generated``: the encoder generated for an all-scalar schema gives the generic
encoder's bytes for every row, or its exact error (missing values, lists, bad numbers, unknown
fields go to the generic encoder)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep.example import RecordError, encoder, example_encoder
from shardprep.schema import FeatureSpec

_SCALARS = {"a": FeatureSpec("float32", ()), "b": FeatureSpec("float32", ()), "c": FeatureSpec("int64", ()),
            "d": FeatureSpec("string", ()), "e": FeatureSpec("float32", ())}
_VALUES = st.one_of(st.none(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, width=64), st.booleans(),
                    st.text(max_size=5), st.binary(max_size=5), st.lists(st.integers(0, 3), max_size=2))


def _outcome(encode, row):
    try:
        return encode(row)
    except RecordError as e:
        return e.reason


def test_generated_scalar_encoder_matches_the_generic_one(monkeypatch):
    """The generated all-scalar encoder gives the generic encoder's bytes, or its exact error."""
    fast = example_encoder(_SCALARS)
    monkeypatch.setattr(encoder, "scalar_row_encoder", lambda *a, **k: None)
    generic = example_encoder(_SCALARS)

    @settings(max_examples=500, deadline=None)
    @given(st.dictionaries(st.sampled_from(sorted(_SCALARS) + ["zz"]), _VALUES))
    def check(row):
        assert _outcome(fast, row) == _outcome(generic, row)

    check()

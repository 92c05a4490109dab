"""``text.dedup``: a store entry's text is the one its part's sketch hashed (pre-training documents;
a classification record's text and pair); the leader rule over the job's edges."""
from __future__ import annotations

import numpy as np

from shardprep.text.bands import ESTIMATE, EXACT, NOT_EXACT, Edges, merge_edges
from shardprep.text.corpus import entry_text
from shardprep.text.dedup import follow_edges


def test_a_classification_entry_text_is_its_text_and_pair():
    """As ``BuildPart`` gives it to the sketch: the text, a newline and the pair where there is one."""
    assert entry_text({"p": 2, "a": "first text", "b": "its pair", "l": "x"}) == "first text\nits pair"
    assert entry_text({"p": 3, "a": "no pair", "b": "", "l": "y"}) == "no pair"
    assert entry_text({"p": 4, "a": "no pair", "l": "y"}) == "no pair"


def test_the_rule_takes_the_lowest_kept_similar_edge_and_an_exact_verdict_over_an_estimate():
    """Edges (ids, by (second, first)): 1~0 similar; 2~1 similar but 1 is dropped, 2~0 refuted by
    its exact check; 3~2 by the estimate, 3~0 similar by the shingles: 3 goes for 0."""
    first, second = np.array([0, 1, 0, 2, 0, 0]), np.array([1, 2, 2, 3, 3, 3])
    verdicts = np.array([ESTIMATE, ESTIMATE, NOT_EXACT, ESTIMATE, EXACT, ESTIMATE], np.int8)
    parts = [Edges(first[k::2], second[k::2], np.full(len(first[k::2]), 100, np.int32), verdicts[k::2], 112)
             for k in (0, 1)]
    edges = merge_edges(parts, 112)
    assert list(zip(edges.first.tolist(), edges.second.tolist(), edges.exact.tolist())) == \
        [(0, 1, ESTIMATE), (0, 2, NOT_EXACT), (1, 2, ESTIMATE), (0, 3, EXACT), (2, 3, ESTIMATE)]
    assert follow_edges(edges, 5).tolist() == [0, 0, 2, 0, 4]

"""``text.dedup.StoreShingles``: a document's shingles read back from its store part are those of the
text its part's sketch hashed (pre-training documents; a classification record's text and pair)."""
from __future__ import annotations

import numpy as np

from shardprep import formats
from shardprep.formats.base import InputFile
from shardprep.text.corpus import DedupSettings, entry_text
from shardprep.text.dedup import StoreShingles
from shardprep.text.minhash import MinHasher
from shardprep.text.store import BuildPart


def _shingles(text: str) -> np.ndarray:
    return np.unique(MinHasher(1, 1).shingles([text])[0])


def test_a_document_read_back_has_the_shingles_of_its_text(tmp_path):
    docs = [["The cat sat on the mat.", "A dog ran far, far away!"], ["Ünïcode wörds here too."], ["one"],
            ["river stone music night the cat sat on"]]
    (tmp_path / "a.txt").write_text("\n\n".join("\n".join(d) for d in docs) + "\n")
    file = InputFile(0, str(tmp_path / "a.txt"), (tmp_path / "a.txt").stat().st_size, "text", False)
    work = BuildPart(str(tmp_path / "s"), 1 << 20, (None, None, None), 1000, formats.read_unit,
                     dedup=DedupSettings("near"))
    parts = list(work.process((file, (), None)))
    with StoreShingles(parts, 5) as shingles_of:
        for i, d in enumerate(docs):
            assert np.array_equal(shingles_of(i), _shingles("\n".join(d)))


def test_a_classification_entry_text_is_its_text_and_pair():
    """As ``BuildPart`` gives it to the sketch: the text, a newline and the pair where there is one."""
    assert entry_text({"p": 2, "a": "first text", "b": "its pair", "l": "x"}) == "first text\nits pair"
    assert entry_text({"p": 3, "a": "no pair", "b": "", "l": "y"}) == "no pair"
    assert entry_text({"p": 4, "a": "no pair", "l": "y"}) == "no pair"

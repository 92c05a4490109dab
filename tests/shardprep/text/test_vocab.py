"""shardprep.text.vocab: the HF tokenizer against BERT's reference algorithm, vocab loading and training."""
from __future__ import annotations

import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardprep.text.vocab import SPECIAL_TOKENS, case_warning, load_vocab, parse_vocab, train_vocab, write_vocab

# --- google-research/bert tokenization.py, BasicTokenizer + WordpieceTokenizer, pure Python (the reference) ---


def _is_whitespace(c: str) -> bool:
    return c in " \t\n\r" or unicodedata.category(c) == "Zs"


def _is_control(c: str) -> bool:
    if c in "\t\n\r":
        return False
    return unicodedata.category(c) in ("Cc", "Cf")


def _is_punctuation(c: str) -> bool:
    cp = ord(c)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(c).startswith("P")


def _is_chinese_char(cp: int) -> bool:
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or 0x2A700 <= cp <= 0x2B73F
            or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or 0xF900 <= cp <= 0xFAFF
            or 0x2F800 <= cp <= 0x2FA1F)


def _whitespace_tokenize(text: str) -> list[str]:
    text = text.strip()
    return text.split() if text else []


def _basic(text: str, lower: bool) -> list[str]:
    out = []
    for c in text:  # _clean_text
        if ord(c) == 0 or ord(c) == 0xFFFD or _is_control(c):
            continue
        out.append(" " if _is_whitespace(c) else c)
    text = "".join(f" {c} " if _is_chinese_char(ord(c)) else c for c in out)  # _tokenize_chinese_chars
    split_tokens = []
    for token in _whitespace_tokenize(text):
        if lower:
            token = token.lower()
            token = "".join(c for c in unicodedata.normalize("NFD", token) if unicodedata.category(c) != "Mn")
        pieces: list[list[str]] = []
        new = True
        for c in token:  # _run_split_on_punc
            if _is_punctuation(c):
                pieces.append([c])
                new = True
            else:
                if new:
                    pieces.append([])
                new = False
                pieces[-1].append(c)
        split_tokens.extend("".join(p) for p in pieces)
    return _whitespace_tokenize(" ".join(split_tokens))


def _wordpiece(text: str, vocab: set[str], max_chars: int = 100) -> list[str]:
    out = []
    for token in _whitespace_tokenize(text):
        chars = list(token)
        if len(chars) > max_chars:
            out.append("[UNK]")
            continue
        start, subs, bad = 0, [], False
        while start < len(chars):
            end, cur = len(chars), None
            while start < end:
                sub = "".join(chars[start:end])
                if start > 0:
                    sub = "##" + sub
                if sub in vocab:
                    cur = sub
                    break
                end -= 1
            if cur is None:
                bad = True
                break
            subs.append(cur)
            start = end
        out.extend(["[UNK]"] if bad else subs)
    return out


def reference_tokenize(text: str, vocab: set[str], lower: bool = True) -> list[str]:
    """BERT's FullTokenizer.tokenize."""
    return [p for t in _basic(text, lower) for p in _wordpiece(t, vocab)]


# --- a vocabulary that exercises it: letters, pieces, words, accents, CJK, punctuation ---

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_WORDS = ["the", "quick", "brown", "fox", "un", "##able", "##ing", "##s", "play", "##ed", "cafe", "naive", "hello",
          "world", "你", "好", "中", "文", ".", ",", "!", "?", "'", '"', "(", ")", "-", "¿", "«", "»", "…", "0", "1",
          "2", "##0", "##1", "über", "é", "##é"]


def _vocab_tokens(cased: bool = False) -> list[str]:
    letters = _LETTERS + (_LETTERS.upper() if cased else "")
    words = _WORDS + (["The", "Hello", "Über", "É"] if cased else [])
    return list(dict.fromkeys(list(SPECIAL_TOKENS) + list(letters) + ["##" + c for c in letters] + words))


VOCAB = parse_vocab(_vocab_tokens())
CASED = parse_vocab(_vocab_tokens(True), cased=True)
_ALPHABET = (_LETTERS + _LETTERS.upper() + " \t\n\r.,!?'\"()-¿«»…0123456789" + "éèêëÉüÜñçÅ" + "\u0301\u0308"
             + "你好中文字" + "\u3000\u00a0\u200b\x00\ufffd\x07")
_FIXED = [
    "", "   ", "Hello, world!", "The quick brown fox.", "unplayable playing played", "Café naïve ÜBER Über",
    "你好中文", "ab你好cd", "¿Qué? «Oui» … (x) - y", "e\u0301 cafe\u0301", "a\u3000b\u00a0c\u200bd\x00e\ufffdf",
    "x" * 100, "x" * 101, "q" * 250 + " fox", "tab\there\nnew\rline", "[MASK] [CLS] [SEP]", "1,000.01", "Ünïcödé",
    "\u212b ANGSTROM \u00c5", "ﬁne ligature", "İstanbul",
]


@pytest.mark.parametrize("text", _FIXED)
def test_fixed_cases_match_reference(text: str) -> None:
    assert VOCAB.tokenize(text) == reference_tokenize(text, set(VOCAB.tokens)), text
    assert CASED.tokenize(text) == reference_tokenize(text, set(CASED.tokens), lower=False), text


def test_long_word_is_unk_and_accents_and_cjk() -> None:
    assert VOCAB.tokenize("x" * 101) == ["[UNK]"]
    assert VOCAB.tokenize("x" * 100) == ["x"] + ["##x"] * 99
    assert VOCAB.tokenize("Café") == ["cafe"]
    assert CASED.tokenize("Café") == ["C", "##a", "##f", "##é"]  # cased: the accent stays
    assert VOCAB.tokenize("ab你好") == ["a", "##b", "你", "好"]
    assert VOCAB.tokenize("[MASK]") == ["[UNK]", "m", "##a", "##s", "##k", "[UNK]"]  # "[" is not in this vocabulary
    assert VOCAB.encode("the fox") == [VOCAB.ids["the"], VOCAB.ids["fox"]]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=_ALPHABET, max_size=60))
def test_random_text_matches_reference(text: str) -> None:
    assert VOCAB.tokenize(text) == reference_tokenize(text, set(VOCAB.tokens)), repr(text)
    assert CASED.tokenize(text) == reference_tokenize(text, set(CASED.tokens), lower=False), repr(text)


# Arbitrary code points but the documented differences (vocab.py's docstring): private use, which the
# Rust normalizer drops and BERT keeps (surrogates are no text), and code points whose Unicode data
# changed since Unicode 3.2 (the Rust tables are an older Unicode than Python's): characters assigned
# in 3.2 with the same category now (95,088 of them agree; 4 re-categorised ones, e.g. U+1734, do not).
_OLD = unicodedata.ucd_3_2_0
_ANY = st.characters(exclude_categories=("Co", "Cs")).filter(
    lambda c: _OLD.category(c) != "Cn" and _OLD.category(c) == unicodedata.category(c))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.one_of(st.sampled_from(_ALPHABET), _ANY), max_size=40))
def test_unicode_text_matches_reference(text: str) -> None:
    assert VOCAB.tokenize(text) == reference_tokenize(text, set(VOCAB.tokens)), repr(text)


def test_known_difference_private_use() -> None:
    """Pinned: a private-use character is dropped by the Rust normalizer; BERT keeps it (an [UNK])."""
    text = "fox\ue000fox"
    assert reference_tokenize(text, set(VOCAB.tokens)) == ["[UNK]"]
    assert VOCAB.tokenize(text) == ["fox", "##f", "##o", "##x"]
    for same in ("fox\u0378fox", "fox\u2028fox", "fox\x85fox"):  # unassigned, line separator, NEL: no difference
        assert VOCAB.tokenize(same) == reference_tokenize(same, set(VOCAB.tokens))


def test_missing_special_tokens_named() -> None:
    with pytest.raises(ValueError, match=r"\[MASK\], \[PAD\]"):
        parse_vocab(["[CLS]", "[SEP]", "[UNK]", "a"])
    with pytest.raises(ValueError, match="repeats"):
        parse_vocab(list(SPECIAL_TOKENS) + ["a", "a"])


def test_case_warning() -> None:
    assert VOCAB.warning is None and CASED.warning is None
    assert "looks cased" in parse_vocab(_vocab_tokens(True)).warning
    assert "looks uncased" in parse_vocab(_vocab_tokens(), cased=True).warning
    assert case_warning(SPECIAL_TOKENS, False) is None  # [CLS] is no upper-case token


_CORPUS = ["The quick brown fox jumps over the lazy dog.", "Héllo wörld, 你好! Naïve café owners play.",
           "Unplayable games were played; the players are playing.", "Numbers 1234 and 5678, again 1234."]


def test_train_vocab_deterministic_and_loadable(tmp_path) -> None:
    lines = [f"{s} {i % 7}" for i in range(300) for s in _CORPUS]
    a = train_vocab(iter(lines), 160)
    b = train_vocab(iter(lines), 160)
    assert a == b
    assert tuple(a[:5]) == SPECIAL_TOKENS and len(a) <= 160 and len(set(a)) == len(a)
    write_vocab(a, tmp_path / "v1.txt")
    write_vocab(b, tmp_path / "v2.txt")
    assert (tmp_path / "v1.txt").read_bytes() == (tmp_path / "v2.txt").read_bytes()
    v = load_vocab(tmp_path / "v1.txt")
    assert v.tokens == tuple(a) and v.pad_id == 0 and v.warning is None
    assert v.tokenize("the quick brown fox") == reference_tokenize("the quick brown fox", set(a))
    assert "[UNK]" not in v.tokenize(" ".join(_CORPUS))
    cased = train_vocab(iter(lines), 160, cased=True)
    assert any(t != t.lower() for t in cased) and parse_vocab(cased, cased=True).warning is None


def test_load_vocab_errors(tmp_path) -> None:
    (tmp_path / "bad.txt").write_bytes(b"[CLS]\n\xff\n")
    with pytest.raises(ValueError, match="not valid UTF-8"):
        load_vocab(tmp_path / "bad.txt")
    (tmp_path / "nomask.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\na\n")
    with pytest.raises(ValueError, match=r"lacks the special token\(s\) \[MASK\]"):
        load_vocab(tmp_path / "nomask.txt")


# --- encode_batch's ASCII path (its own split, a memo of each word's pieces) against the tokenizer ---

_ASCII = "".join(map(chr, range(128)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(alphabet=_ASCII + "éü你", max_size=40), max_size=6))
def test_encode_batch_ascii_path_is_the_tokenizers(texts: list[str]) -> None:
    for vocab in (VOCAB, CASED):
        assert vocab.encode_batch(texts) == [vocab.tokenizer.encode(t, add_special_tokens=False).ids for t in texts]


def test_encode_batch_word_memo_is_bounded(monkeypatch) -> None:
    import shardprep.text.vocab as v

    vocab = parse_vocab(_vocab_tokens())
    monkeypatch.setattr(v, "WORD_CACHE", 3)
    texts = ["the quick brown fox", "Hello, world!\x07 unplayable\x00x", "a\x1cb\x0bc\x0cd\x7fe", "x" * 101 + " fox"]
    assert vocab.encode_batch(texts) == [vocab.encode(t) for t in texts]
    assert len(vocab._word_cache) <= 3 + len(vocab._whole_words)


@pytest.mark.parametrize("cased", [False, True])
def test_the_word_memo_starts_with_whole_tokens_as_the_tokenizer_gives_them(cased: bool) -> None:
    odd = ["Upper", "mixedCase", "a.b", "don't", "...", "x" * 100, "y" * 101, "tab\tin", "ctl\x07x", "ünï", "##only",
           "[bracketed]", "with space", "d\x7f"]
    vocab = parse_vocab(_vocab_tokens(cased) + odd, cased=cased)
    assert vocab._whole_words, "no token was seeded"
    for word, ids in vocab._whole_words.items():
        assert vocab.tokenizer.encode(word, add_special_tokens=False).ids == list(ids), word
    texts = [" ".join(vocab.tokens), " ".join(odd), " ".join(t.upper() for t in odd)]
    assert vocab.encode_batch(texts) == [vocab.encode(t) for t in texts]


def test_a_byte_order_mark_is_no_part_of_the_first_token(tmp_path):
    """Issue 57 item 8: a vocab.txt saved with a UTF-8 byte-order mark reads as the same vocabulary."""
    tokens = [*SPECIAL_TOKENS, "cat", "##s"]
    plain, marked = tmp_path / "plain.txt", tmp_path / "marked.txt"
    write_vocab(tokens, plain)
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert load_vocab(marked).tokens == load_vocab(plain).tokens == tuple(tokens)
    assert parse_vocab(["\ufeff[PAD]", *tokens[1:]]).ids["[PAD]"] == 0

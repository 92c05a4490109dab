"""BERT's WordPiece vocabulary and tokenizer, on the compiled HF ``tokenizers`` package.

``load_vocab`` reads BERT's ``vocab.txt`` (one token per line, the line number is the id) and
builds the tokenizer google-research/bert's ``FullTokenizer`` is: BasicTokenizer (clean text, CJK
characters apart, lower case and accents stripped unless ``cased``, punctuation split) then
greedy longest-match-first WordPiece with ``##`` continuations and ``[UNK]`` for a word of more
than 100 characters or one the vocabulary cannot spell. ``train_vocab`` makes such a vocabulary
from text, deterministically.

Known differences from BERT's pure-Python tokenizer (tests/test_text_tokenize.py pins them): the
Rust normalizer drops private-use and unassigned code points (BERT keeps them, as ``[UNK]``), and
counts U+0085, U+2028 and U+2029 as white space (BERT keeps them inside a word); Unicode tables
may differ where Python's and Rust's Unicode versions differ.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator, Sequence

import tokenizers
from tokenizers import models, normalizers, pre_tokenizers, trainers

__all__ = ["SPECIAL_TOKENS", "Vocab", "case_warning", "load_vocab", "parse_vocab", "train_vocab", "write_vocab"]

# BERT's special tokens, in the order train_vocab gives them ids ([PAD] is 0: BERT pads ids with 0).
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MAX_INPUT_CHARS_PER_WORD = 100


def _is_special(token: str) -> bool:
    return len(token) > 2 and token[0] == "[" and token[-1] == "]"


def case_warning(tokens: Iterable[str], cased: bool) -> str | None:
    """A message when the vocabulary's case does not fit ``cased``, else None.

    An uncased tokenizer lower-cases its input, so upper-case tokens can never be produced; a cased
    tokenizer over an all-lower-case vocabulary turns every capital into a sub-word or ``[UNK]``."""
    upper = [t for t in tokens if not _is_special(t) and t != t.lower()]
    if upper and not cased:
        return (f"the vocabulary looks cased ({len(upper)} tokens hold upper-case letters, e.g. {upper[:3]}) but the "
                "tokenizer is uncased: those tokens are never produced; pass cased=True (--cased) if that is meant")
    if cased and not upper:
        return ("the vocabulary looks uncased (no token holds an upper-case letter) but the tokenizer is cased: every "
                "capital becomes a sub-word or [UNK]; pass cased=False if that is not meant")
    return None


def _tokenizer(ids: dict[str, int], cased: bool) -> tokenizers.Tokenizer:
    tok = tokenizers.Tokenizer(models.WordPiece(
        vocab=ids, unk_token="[UNK]", continuing_subword_prefix="##", max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=not cased, lowercase=not cased)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    # No added (special) tokens: "[MASK]" in the text is split as BERT splits it, "[", "mask", "]".
    return tok


@dataclasses.dataclass(frozen=True, eq=False)
class Vocab:
    """A loaded vocabulary: its tokens in id order, and the tokenizer over them."""

    tokens: tuple[str, ...]
    ids: dict[str, int]
    cased: bool
    warning: str | None  # case_warning's message, or None
    tokenizer: tokenizers.Tokenizer = dataclasses.field(repr=False)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def pad_id(self) -> int:
        return self.ids["[PAD]"]

    @property
    def unk_id(self) -> int:
        return self.ids["[UNK]"]

    @property
    def cls_id(self) -> int:
        return self.ids["[CLS]"]

    @property
    def sep_id(self) -> int:
        return self.ids["[SEP]"]

    @property
    def mask_id(self) -> int:
        return self.ids["[MASK]"]

    def tokenize(self, text: str) -> list[str]:
        """The word pieces of ``text``, as BERT's ``FullTokenizer.tokenize``."""
        return self.tokenizer.encode(text, add_special_tokens=False).tokens

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``'s word pieces (no [CLS]/[SEP])."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` of each text, in one call (the Rust side may use threads; the result is the same)."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]


def parse_vocab(lines: Iterable[str], *, cased: bool = False) -> Vocab:
    """A ``Vocab`` from the lines of a vocab.txt; ValueError when a special token is missing or a token repeats."""
    tokens: list[str] = []
    for line in lines:
        tokens.append(line.strip())  # as BERT's load_vocab
    while tokens and not tokens[-1]:
        tokens.pop()  # a trailing blank line is no token
    ids: dict[str, int] = {}
    repeated: list[str] = []
    for i, t in enumerate(tokens):
        if t in ids:
            repeated.append(t)
        else:
            ids[t] = i
    missing = [t for t in ("[CLS]", "[SEP]", "[MASK]", "[UNK]", "[PAD]") if t not in ids]
    if missing:
        raise ValueError(f"the vocabulary ({len(tokens)} tokens) lacks the special token(s) {', '.join(missing)}: "
                         "BERT pre-training needs [CLS] [SEP] [MASK] [UNK] [PAD], one per line")
    if repeated:
        raise ValueError(f"the vocabulary repeats {len(repeated)} token(s), e.g. {repeated[:5]}: each line must be "
                         "a distinct token (its line number is its id)")
    return Vocab(tuple(tokens), ids, cased, case_warning(tokens, cased), _tokenizer(ids, cased))


def load_vocab(url: str | os.PathLike, *, cased: bool = False) -> Vocab:
    """``parse_vocab`` of a vocab.txt file (a local path or any URL shardprep.fs opens), read as UTF-8."""
    from shardprep import fs

    with fs.open_file(os.fspath(url), "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{url}: the vocabulary is not valid UTF-8 (byte {e.start})") from None
    return parse_vocab(text.split("\n"), cased=cased)


def train_vocab(lines: Iterable[str], size: int, *, cased: bool = False, min_frequency: int = 2,
                limit_alphabet: int = 1000) -> list[str]:
    """A WordPiece vocabulary of at most ``size`` tokens learnt from ``lines``: its tokens in id order.

    The special tokens come first (``SPECIAL_TOKENS``, so [PAD] is id 0); the text is normalized and
    pre-tokenized as ``load_vocab``'s tokenizer does. Deterministic: the same lines give the same list
    (the trainer counts words, then merges by count with ties broken by the pair itself). Memory:
    the distinct words and their counts, not the text.
    """
    if size <= len(SPECIAL_TOKENS):
        raise ValueError(f"size {size}: a vocabulary needs more than the {len(SPECIAL_TOKENS)} special tokens")
    tok = _tokenizer({}, cased)
    tok.model = models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##",
                                 max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD)
    trainer = trainers.WordPieceTrainer(vocab_size=size, min_frequency=min_frequency, show_progress=False,
                                        special_tokens=list(SPECIAL_TOKENS), limit_alphabet=limit_alphabet,
                                        continuing_subword_prefix="##")
    tok.train_from_iterator(_strings(lines), trainer=trainer)
    vocab = tok.get_vocab(with_added_tokens=False)
    tokens = sorted(vocab, key=vocab.__getitem__)
    assert tuple(tokens[: len(SPECIAL_TOKENS)]) == SPECIAL_TOKENS, tokens[:8]
    return tokens


def _strings(lines: Iterable[str]) -> Iterator[str]:
    for line in lines:
        if line.strip():
            yield line


def write_vocab(tokens: Sequence[str], url: str | os.PathLike) -> None:
    """Writes ``tokens`` as a vocab.txt: one per line, in id order, UTF-8."""
    from shardprep import fs

    bad = [t for t in tokens if not t or t != t.strip() or "\n" in t]
    if bad:
        raise ValueError(f"tokens {bad[:5]!r} cannot be written one per line")
    with fs.write_atomic(os.fspath(url)) as f:
        f.write("".join(t + "\n" for t in tokens).encode("utf-8"))

"""BERT's WordPiece vocabulary and tokenizer, on the compiled HF ``tokenizers`` package.

``load_vocab`` reads BERT's ``vocab.txt`` (one token per line, the line number is the id) and
builds the tokenizer google-research/bert's ``FullTokenizer`` is: BasicTokenizer (clean text, CJK
characters apart, lower case and accents stripped unless ``cased``, punctuation split) then
greedy longest-match-first WordPiece with ``##`` continuations and ``[UNK]`` for a word of more
than 100 characters or one the vocabulary cannot spell. ``train_vocab`` makes such a vocabulary
from text, deterministically. ``vocab_of``: a run's vocabulary once per process (the launcher's,
handed to the processes it forks by ``remember_vocab``).

Known difference from BERT's pure-Python tokenizer (tests/shardprep/text/test_vocab.py pins it and checks
the rest on random Unicode text): the Rust normalizer drops private-use code points (U+E000..U+F8FF
and the supplementary planes' private use), where BERT keeps them inside a word (then usually
``[UNK]``); and the Rust tables are an older Unicode than Python 3.11's (14.0), so a code point
assigned or re-categorised since (U+0898..U+089F, U+1E130, U+1734, ...: 759 of U+0020..U+2FFFF,
measured with tokenizers 0.23.3) may be split or stripped differently. Text in characters of
Unicode 3.2 that kept their category agrees exactly.
"""
from __future__ import annotations

import dataclasses
import functools
import heapq
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence

import tokenizers
from tokenizers import models, normalizers, pre_tokenizers

__all__ = ["SPECIAL_TOKENS", "Vocab", "case_warning", "load_vocab", "parse_vocab", "remember_vocab", "train_vocab",
           "vocab_of", "write_vocab"]

# BERT's special tokens, in the order train_vocab gives them ids ([PAD] is 0: BERT pads ids with 0).
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MAX_INPUT_CHARS_PER_WORD = 100
PROGRESS_SECONDS = 10.0  # train_vocab's progress lines, at most one this often
BOM = "\ufeff"  # a byte-order mark, as UTF-8 (EF BB BF) opens some files: no part of a token


# BERT's BasicTokenizer on ASCII: control characters (Cc but tab, newline, carriage return) dropped,
# punctuation (33-47, 58-64, 91-96, 123-126) a word of its own, the other characters words between whitespace
_ASCII_CONTROL = {c: None for c in [*range(0, 9), 11, 12, *range(14, 32), 127]}
_ASCII_WORDS = re.compile(r"[!-/:-@\[-`{-~]|[^ \t\n\r!-/:-@\[-`{-~]+")
WORD_CACHE = 1 << 19


def _is_special(token: str) -> bool:
    return len(token) > 2 and token[0] == "[" and token[-1] == "]"


def case_warning(tokens: Iterable[str], cased: bool) -> str | None:
    """A message when the vocabulary's case does not fit ``cased``, else None.

    An uncased tokenizer lower-cases its input, so upper-case tokens can never be produced; a cased
    tokenizer over an all-lower-case vocabulary turns every capital into a sub-word or ``[UNK]``."""
    upper = [t for t in tokens if t != t.lower() and not _is_special(t)]
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

    @functools.cached_property
    def continuation(self) -> tuple[bool, ...]:
        """Per id: whether the token continues a word (``##...``); made once per vocabulary, not per document."""
        return tuple(t.startswith("##") for t in self.tokens)

    @functools.cached_property
    def continuation_bytes(self) -> bytes:
        """``continuation`` as one byte (0 or 1) per id, for the compiled instance maker."""
        return bytes(self.continuation)

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
        """``encode`` of each text, in one call (the Rust side may use threads; the result is the same).

        An ASCII text is split here as BERT's BasicTokenizer splits ASCII (control characters
        dropped, lower case unless cased, each punctuation character a word, whitespace between
        words) and each word's pieces come from ``_pieces``, a memo of the tokenizer's own answer
        for that word: the same ids, faster on text of a natural vocabulary. Other texts go to
        the tokenizer whole (``encode_batch_fast`` where the package has it: no character offsets)."""
        out: list[list[int] | None] = []
        rest: list[str] = []
        pieces, cache, split = self._pieces, self._word_cache, _ASCII_WORDS.findall
        lower = not self.cased
        for text in texts:
            if not text.isascii():
                out.append(None)
                rest.append(text)
                continue
            text = text.translate(_ASCII_CONTROL)
            ids: list[int] = []
            for word in split(text.lower() if lower else text):
                got = cache.get(word)
                ids.extend(got if got is not None else pieces(word))
            out.append(ids)
        if rest:
            batch = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
            done = iter([e.ids for e in batch(rest, add_special_tokens=False)])
            out = [ids if ids is not None else next(done) for ids in out]
        return out  # type: ignore[return-value]

    @functools.cached_property
    def _word_cache(self) -> dict[str, tuple[int, ...]]:
        return dict(self._whole_words)

    @functools.cached_property
    def _whole_words(self) -> dict[str, tuple[int, ...]]:
        """The vocabulary's tokens that ``encode_batch``'s split can give as a word (a punctuation
        character, or ASCII letters and digits, lower case unless cased), each its own id: greedy
        longest-match-first WordPiece gives a word that is a token whole. The memo starts with them."""
        letters = "0-9A-Za-z" if self.cased else "0-9a-z"
        word = re.compile(rf"[!-/:-@\[-`{{-~]|[{letters}]{{1,{MAX_INPUT_CHARS_PER_WORD}}}").fullmatch
        return {t: (i,) for t, i in self.ids.items() if word(t)}

    def _pieces(self, word: str) -> tuple[int, ...]:
        """The ids of one ASCII word (as ``_ASCII_WORDS`` splits them), remembered (``WORD_CACHE`` words at most,
        besides the vocabulary's whole words).

        Asked of the tokenizer's WordPiece model alone: the normalizer and pre-tokenizer leave such
        a word as it is (no control character, whitespace, accent or CJK character; lower case
        already unless cased; no punctuation but a word of its own), and the model's answer is
        cheaper than the whole pipeline's, which counts while a worker's memo is cold."""
        cache = self._word_cache
        if len(cache) >= WORD_CACHE + len(self._whole_words):
            cache.clear()  # bounded memory whatever the corpus's vocabulary of words
            cache.update(self._whole_words)
        got = cache[word] = tuple(token.id for token in self._model.tokenize(word))
        return got

    @functools.cached_property
    def _model(self) -> models.Model:
        return self.tokenizer.model


def parse_vocab(lines: Iterable[str], *, cased: bool = False) -> Vocab:
    """A ``Vocab`` from the lines of a vocab.txt; ValueError when a special token is missing or a token repeats.
    A UTF-8 byte-order mark (U+FEFF) before the first line is the file's encoding mark, not part of its
    first token: it is dropped (editors on Windows write one)."""
    tokens = [line.strip() for line in lines]  # as BERT's load_vocab
    if tokens and tokens[0].startswith(BOM):
        tokens[0] = tokens[0][len(BOM):].strip()
    while tokens and not tokens[-1]:
        tokens.pop()  # a trailing blank line is no token
    ids = dict(zip(tokens, range(len(tokens))))
    repeated: list[str] = []
    if len(ids) < len(tokens):  # a token repeats: each one's first id, the repeats named
        ids = {}
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


_VOCABS: dict[tuple[str, bool], Vocab] = {}  # this process's vocabularies by (URL, cased), at most 4


def vocab_of(url: str, cased: bool) -> Vocab:
    """The vocabulary at ``url``, loaded once per process (or as the launcher shared it: ``remember_vocab``)."""
    got = _VOCABS.get((url, cased))
    if got is None:
        if len(_VOCABS) >= 4:
            _VOCABS.clear()
        got = _VOCABS[url, cased] = load_vocab(url, cased=cased)
    return got


def remember_vocab(url: str, vocab: Vocab | None) -> None:
    """``vocab`` is what ``url`` will hold (the run's vocab.txt, written from its tokens): this
    process, and the pool processes it forks next, take it as it is instead of loading the file
    (None: forget ``url``'s, a vocabulary yet to be trained)."""
    for cased in (False, True):
        _VOCABS.pop((url, cased), None)
    if vocab is not None:
        _VOCABS[url, vocab.cased] = vocab


def train_vocab(lines: Iterable[str], size: int, *, cased: bool = False, min_frequency: int = 2,
                limit_alphabet: int = 1000, progress: Callable[[str], None] | None = None) -> list[str]:
    """A WordPiece vocabulary of at most ``size`` tokens learnt from ``lines``: its tokens in id order.

    The algorithm of tokenizers' WordPieceTrainer (byte-pair merges over ``##``-continued
    characters, the most frequent pair first), written here because that trainer is not
    deterministic: it numbers the ``##`` pieces in hash-map order and breaks ties between pairs of
    equal count by those numbers, so two runs over the same text give different vocabularies. Here
    ties go to the pair that sorts first, and the alphabet is ordered by count then character: the
    same lines give the same list. The text is normalized and pre-tokenized by ``load_vocab``'s
    tokenizer (the Rust side); memory is the distinct words and their counts, not the text.

    The special tokens come first (``SPECIAL_TOKENS``, so [PAD] is id 0), then the alphabet (the
    ``limit_alphabet`` most frequent characters, each alone and as a ``##`` continuation where seen
    so), then the merges in order; pairs seen fewer than ``min_frequency`` times are not merged.
    ``progress`` (a line for the log) is called once the words are counted and then about every
    ``PROGRESS_SECONDS`` of merging.
    """
    if size <= len(SPECIAL_TOKENS):
        raise ValueError(f"size {size}: a vocabulary needs more than the {len(SPECIAL_TOKENS)} special tokens")
    tok = _tokenizer({"[UNK]": 0}, cased)
    normalize, split = tok.normalizer.normalize_str, tok.pre_tokenizer.pre_tokenize_str
    counts: dict[str, int] = {}
    for line in lines:
        if line.strip():
            for word, _ in split(normalize(line)):
                counts[word] = counts.get(word, 0) + 1
    chars: dict[str, int] = {}
    for word, n in counts.items():
        if len(word) <= MAX_INPUT_CHARS_PER_WORD:
            for c in word:
                chars[c] = chars.get(c, 0) + n
    alphabet = frozenset(sorted(chars, key=lambda c: (-chars[c], c))[:limit_alphabet])
    words: list[list[str]] = []
    freq: list[int] = []
    for word in sorted(counts):
        if len(word) <= MAX_INPUT_CHARS_PER_WORD and alphabet.issuperset(word):
            words.append([word[0]] + ["##" + c for c in word[1:]])
            freq.append(counts[word])
    vocab: list[str] = list(SPECIAL_TOKENS)
    seen = set(vocab)
    for symbol in sorted({s for w in words for s in w}, key=lambda s: (s.startswith("##"), -chars[s[-1]], s)):
        if symbol not in seen:
            seen.add(symbol)
            vocab.append(symbol)
    pairs: dict[tuple[str, str], int] = {}
    where: dict[tuple[str, str], set[int]] = {}
    for k, w in enumerate(words):
        for pair in zip(w, w[1:]):
            pairs[pair] = pairs.get(pair, 0) + freq[k]
            where.setdefault(pair, set()).add(k)
    heap = [(-n, pair) for pair, n in pairs.items()]
    heapq.heapify(heap)
    if progress is not None:
        progress(f"--train-vocab: {len(counts):,} distinct words counted; learning up to {size:,} tokens")
    last = time.monotonic()
    while len(vocab) < size and heap:
        if progress is not None and time.monotonic() - last >= PROGRESS_SECONDS:
            last = time.monotonic()
            progress(f"--train-vocab: {len(vocab):,} of at most {size:,} tokens learnt")
        neg, pair = heapq.heappop(heap)
        if pairs.get(pair, 0) != -neg:
            continue  # stale: its count changed since it was pushed
        if -neg < min_frequency:
            break
        a, b = pair
        merged = a + b[2:] if b.startswith("##") else a + b
        if merged not in seen:
            seen.add(merged)
            vocab.append(merged)
        changed: dict[tuple[str, str], int] = {}
        for k in sorted(where.pop(pair, ())):
            w, n = words[k], freq[k]
            j = 0
            out: list[str] = []
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(merged)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            for p in zip(w, w[1:]):
                pairs[p] -= n
                changed[p] = 0
            for p in zip(out, out[1:]):
                pairs[p] = pairs.get(p, 0) + n
                where.setdefault(p, set()).add(k)
                changed[p] = 0
            words[k] = out
        pairs.pop(pair, None)
        for p in changed:
            n = pairs.get(p, 0)
            if n > 0:
                heapq.heappush(heap, (-n, p))
            elif p in pairs:
                del pairs[p]
    return vocab


def write_vocab(tokens: Sequence[str], url: str | os.PathLike) -> tuple[int, str]:
    """Writes ``tokens`` as a vocab.txt: one per line, in id order, UTF-8. Returns the file's size and
    crc32c (hex), for the manifest."""
    from shardprep import fs, native

    bad = [t for t in tokens if not t or t != t.strip() or "\n" in t]
    if bad:
        raise ValueError(f"tokens {bad[:5]!r} cannot be written one per line")
    data = "".join(t + "\n" for t in tokens).encode("utf-8")
    with fs.write_atomic(os.fspath(url)) as f:
        f.write(data)
    return len(data), f"{native.crc32c(data):08x}"

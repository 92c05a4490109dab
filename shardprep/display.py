"""Untrusted text (names and values from data or a manifest) as people are shown it.

``shown`` is the one escape for a terminal, a log line or an error message: every control and
format character (Unicode categories Cc and Cf, which hold the bidi controls U+202A-U+202E,
U+2066-U+2069, U+200E/F, U+061C and the zero-width U+200B-U+200D, U+2060, U+FEFF), the line and
paragraph separators and lone surrogates are written as Python escapes (``\\n``, ``\\x1b``,
``\\u202e``), so a name can neither forge a line nor reorder or hide what is shown around it.
Printable text, accents and scripts included, is left as it is. ``html_text`` is ``shown`` then
``html.escape``: the same text in an HTML page, safe in element text and quoted attributes.
"""
from __future__ import annotations

import html
import unicodedata

__all__ = ["html_text", "shown"]

_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(c: str) -> str:
    if unicodedata.category(c) not in _ESCAPED_CATEGORIES:
        return c
    if c in _SHORT:
        return _SHORT[c]
    code = ord(c)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def shown(text: object) -> str:
    """``str(text)`` with control, format (bidi, zero-width) and separator characters escaped."""
    s = str(text)
    if s.isprintable():  # no character of those categories (nor a space other than U+0020): as it is
        return s
    return "".join(map(_escape, s))


def html_text(text: object) -> str:
    """``shown(text)`` escaped for HTML element text and quoted attribute values."""
    return html.escape(shown(text))

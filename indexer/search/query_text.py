"""A recall question as the query grammars read it: NFKC, case-folded, without control
characters, sentence punctuation, politeness openers or a trailing "please".

Routing (`routing.py`), the period grammar (`periods.py`), the direct-fact gate and the floor
all match their patterns against this one normal form. Pure: no I/O.
"""

from __future__ import annotations

import re
import unicodedata

_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2064\ufeff]")
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u02bc": "'", "`": "'", "\u201c": '"', "\u201d": '"'})
#: sentence punctuation at a word end ("so, what", "reply?") but not inside "10:00" or "2.4"
_PUNCT_RE = re.compile(r"[,;:!?.]+(?=\s|$)|[\"()\[\]{}*_]")
_SPACE_RE = re.compile(r"\s+")
_PREFIX_RE = re.compile(
    r"(?:hey|hi|hello|ok|okay|so|um|uh|well|sorry|btw|by the way|quick question|please|"
    r"can you|could you|would you|will you|can u|pls|plz|tell me|remind me|let me know|"
    r"do you remember|do you know|i wonder|i want to know|i'd like to know) "
)
_SUFFIX_RE = re.compile(r" (?:please|pls|plz|thanks|thank you|for me|real quick|then)$")


def normalize_query(query: str) -> str:
    """Lower-case NFKC text without control characters, sentence punctuation, politeness
    openers ("hey, can you tell me ...") or trailing "please"; whitespace collapsed."""
    text = unicodedata.normalize("NFKC", query).translate(_QUOTES)
    text = _CONTROL_RE.sub(" ", text).casefold()
    text = _SPACE_RE.sub(" ", _PUNCT_RE.sub(" ", text)).strip()
    for _ in range(6):  # bounded: "ok so hey can you tell me ..."
        stripped = _SUFFIX_RE.sub("", _PREFIX_RE.sub("", text, count=1) if _PREFIX_RE.match(text) else text)
        if stripped == text:
            break
        text = stripped.strip()
    return text

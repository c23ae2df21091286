"""The builtin model's token ids, a word at a time, with the words it has seen remembered.

The builtin tokenizer has no pre-tokenizer: it normalizes a text (a word-boundary mark `▁` before
it and for every space) and runs BPE over the whole of it, so every text is tokenized from scratch
and the library's word cache never hits. About 40 µs a memory: a fifth of a rebuild's CPU.

BPE never merges across a boundary that no vocabulary token spans. No token of this vocabulary
(and no merge) holds a `▁` right after another character, so the normalized text splits before
each `▁` that follows another character, into pieces ("▁the", "▁▁cat", a trailing "▁") that BPE
tokenizes alone to exactly the ids it gives them inside the text. Each piece's ids are kept in a
bounded table: most pieces of a memory are common words. `WordPieces.usable` checks that the
vocabulary has that property (a model without it tokenizes whole texts, as before); a text holding
a special token's spelling (`<s>`, which the tokenizer matches before normalizing) is tokenized
whole. tests/test_embeddings_builtin.py compares the two on generated and real text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

BOUNDARY = "\u2581"
_PIECE = re.compile(f"{BOUNDARY}+[^{BOUNDARY}]*")
#: pieces whose ids are remembered; the table is emptied when full (about 150 bytes an entry)
MAX_PIECES = 16_384
#: longer pieces (a URL, a hash, a run of text without spaces) are tokenized every time
MAX_PIECE_CHARS = 48


class WordPieces:
    def __init__(self, tokenizer: Any):
        self._tokenizer = tokenizer
        self._model = tokenizer.model
        self._specials = [token.content for token in tokenizer.get_added_tokens_decoder().values()]
        self._ids: dict[str, list[int]] = {}

    @staticmethod
    def usable(tokenizer: Any, vocabulary: dict[str, int] | None = None) -> bool:
        """True when no token of this tokenizer holds a `▁` after another character (so no merge
        makes one), it splits nothing before normalizing, and its normalizer is the one assumed
        here (a `▁` before the text and for each space). `vocabulary`: its `get_vocab()`, when
        the caller has it (building it is most of this check's time)."""
        if tokenizer.pre_tokenizer is not None or tokenizer.normalizer is None:
            return False
        if tokenizer.normalizer.normalize_str("a b  c") != f"{BOUNDARY}a{BOUNDARY}b{BOUNDARY * 2}c":
            return False
        tokens = tokenizer.get_vocab() if vocabulary is None else vocabulary
        return not any(BOUNDARY in token.lstrip(BOUNDARY) for token in tokens)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids `tokenizer.encode_batch(texts, add_special_tokens=False)` gives, per text."""
        return [self._encode(text) for text in texts]

    def _encode(self, text: str) -> list[int]:
        if "<" in text and any(special in text for special in self._specials):
            return self._tokenizer.encode(text, add_special_tokens=False).ids
        if not text:  # the normalizer puts no mark before an empty text
            return self._tokenizer.encode(text, add_special_tokens=False).ids
        ids: list[int] = []
        known = self._ids
        for piece in _PIECE.findall(BOUNDARY + text.replace(" ", BOUNDARY)):
            piece_ids = known.get(piece)
            if piece_ids is None:
                piece_ids = [token.id for token in self._model.tokenize(piece)]
                if len(piece) <= MAX_PIECE_CHARS:
                    if len(known) >= MAX_PIECES:
                        known.clear()
                    known[piece] = piece_ids
            ids.extend(piece_ids)
        return ids

"""A memory that asks what the question asks does not answer it.

"What instruments does Melanie play?" meets BM25's best match in "Thanks, Melanie! Appreciate it.
You play any instruments?": every question word is there, inside a question the memory itself
asks. The answer ("Yeah, I play clarinet!") shares fewer of them. So each fused candidate whose
text holds a question sentence loses a share of its score: ASKED_DISCOUNT times the idf-weighted
share of the question terms it matches that it holds *only* inside its own questions. A memory
that asks and also tells ("I went camping. Have you?") keeps what its statements match; one
that only asks about something else loses nothing.

It re-orders what the retrievers found and adds none; `strength` (the auto-mode band's
evidence) is left as it was. Only the fused head (ASKED_HEAD) is looked at, and of it only the
candidates whose stored row the retrievers already read (no row is loaded for it); a text
without "?" costs one substring test. Words are stemmed as `en_stem` does, each distinct word
once (memoised), so a text that asks costs a regular-expression pass and dictionary lookups.
The question's terms and their idf are the relevance floor's (`floor.py`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from memvault.indexer.backend.analysis import CJK_RUN_RE, WORD_RE
from memvault.indexer.search.bm25 import stemmed_terms
from memvault.indexer.search.floor import MIN_WEIGHT, idf, question_terms
from memvault.indexer.search.hybrid import Fused
from memvault.indexer.search.periods import Period

#: the most a memory that only asks loses of its fused score
ASKED_DISCOUNT = 0.3
#: fused candidates looked at: the answer's head, twice the deepest cut the bench reads (recall@25)
ASKED_HEAD = 50
#: distinct words whose stem is remembered; the memo starts over when full
MEMO_LIMIT = 50_000
_STEMS: dict[str, str | None] = {}
_SENTENCE_RE = re.compile(r"[^.!?]*[.!?]+|[^.!?]+$")


def asked_share(text: str, weights: dict[str, float]) -> float:
    """Of the question terms `text` holds (idf `weights`), the weighted share it holds only in
    its question sentences; 0 for a text that asks nothing or holds none of them."""
    if "?" not in text:
        return 0.0
    asked: set[str] = set()
    told: set[str] = set()
    for sentence in _SENTENCE_RE.findall(text):
        (asked if sentence.rstrip().endswith("?") else told).update(_terms(sentence))
    matched = [term for term in weights if term in asked or term in told]
    mass = sum(weights[term] for term in matched)
    if not asked or mass <= 0:
        return 0.0
    return sum(weights[term] for term in matched if term not in told) / mass


def _terms(sentence: str) -> set[str]:
    """`en_stem`'s terms of a sentence (the index's own analysis, one word at a time, memoised)."""
    terms = set()
    for word in WORD_RE.findall(sentence.lower()):
        stem = _STEMS.get(word, "")
        if stem == "":
            if len(_STEMS) >= MEMO_LIMIT:
                _STEMS.clear()
            found = stemmed_terms(word)
            stem = _STEMS[word] = found[0] if found else None
        if stem is not None:
            terms.add(stem)
    return terms


def discount_asked(
    fused: list[Fused],
    texts: dict[str, str],
    question: str,
    doc_freqs: Callable[[str, list[str]], tuple[int, dict[str, int]]],
    periods: tuple[Period, ...] = (),
) -> list[Fused]:
    """`fused` re-ordered with each asking memory's discount (`texts`: key → the memory's own
    text, for the candidates whose rows are already read; the others are left as they are)."""
    asking = [entry for entry in fused[:ASKED_HEAD] if "?" in texts.get(entry.key, "")]
    if not asking:
        return fused
    terms = [term for term in question_terms(question, periods) if not CJK_RUN_RE.match(term)]
    total, frequencies = doc_freqs("text", terms)  # the floor's own lookup (recall asks it once)
    weights = {term: max(MIN_WEIGHT, idf(frequencies.get(term, 0), total)) for term in terms}
    rank = 0
    for entry in asking:
        share = asked_share(texts[entry.key], weights)
        if share > 0:
            rank += 1
            entry.score *= 1.0 - ASKED_DISCOUNT * share
            entry.evidence["asked"] = (rank, share)
    return sorted(fused, key=lambda entry: (-entry.score, entry.key))

"""A memory that asks what the question asks does not answer it.

"What instruments does Melanie play?" meets BM25's best match in "Thanks, Melanie! Appreciate it.
You play any instruments?": every question word is there, inside a question the memory itself
asks. The answer ("Yeah, I play clarinet!") shares fewer of them. So each fused candidate whose
text holds a question sentence loses a share of its score: ASKED_DISCOUNT times the idf-weighted
share of the question terms it matches that it holds *only* inside its own questions. A memory
that asks and also tells ("I went camping. Have you?") keeps what its statements match; one
that only asks about something else loses nothing.

It re-orders what the retrievers found and adds none; `strength` (the auto-mode band's
evidence) is left as it was. Only candidates whose stored row the retrievers already read are
looked at (no row is loaded for it), and a text without "?" costs one substring test. The
question's terms and their idf are the relevance floor's (`floor.py`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from memvault.indexer.search.floor import MIN_WEIGHT, idf, question_terms, terms_of
from memvault.indexer.search.hybrid import Fused
from memvault.indexer.search.periods import Period

#: the most a memory that only asks loses of its fused score
ASKED_DISCOUNT = 0.3
_SENTENCE_RE = re.compile(r"[^.!?]*[.!?]+|[^.!?]+$")
_IMAGE_RE = re.compile(r"\s*\[image:[^\]]*\]\s*$")  # a photo's caption is not the memory asking


def asked_share(text: str, weights: dict[str, float]) -> float:
    """Of the question terms `text` holds (idf `weights`), the weighted share it holds only in
    its question sentences; 0 for a text that asks nothing or holds none of them."""
    if "?" not in text:
        return 0.0
    asked: set[str] = set()
    told: set[str] = set()
    for sentence in _SENTENCE_RE.findall(_IMAGE_RE.sub("", text)):
        (asked if sentence.rstrip().endswith("?") else told).update(terms_of(sentence))
    matched = [term for term in weights if term in asked or term in told]
    mass = sum(weights[term] for term in matched)
    if not asked or mass <= 0:
        return 0.0
    return sum(weights[term] for term in matched if term not in told) / mass


def discount_asked(fused: list[Fused], texts: dict[str, str], question: str,
                   doc_freqs: Callable[[str, list[str]], tuple[int, dict[str, int]]],
                   periods: tuple[Period, ...] = ()) -> list[Fused]:
    """`fused` re-ordered with each asking memory's discount (`texts`: key → the memory's own
    text, for the candidates whose rows are already read; the others are left as they are)."""
    asking = [entry for entry in fused if "?" in texts.get(entry.key, "")]
    if not asking:
        return fused
    terms = question_terms(question, periods)
    total, frequencies = doc_freqs("text", terms)
    weights = {term: max(MIN_WEIGHT, idf(frequencies.get(term, 0), total)) for term in terms}
    rank = 0
    for entry in asking:
        share = asked_share(texts[entry.key], weights)
        if share > 0:
            rank += 1
            entry.score *= 1.0 - ASKED_DISCOUNT * share
            entry.evidence["asked"] = (rank, share)
    return sorted(fused, key=lambda entry: (-entry.score, entry.key))

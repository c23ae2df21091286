"""The relevance floor: does the vault hold any real evidence for this question?

Ranking always finds *something*: on a small vault every question returns every memory, and a
question about a person the vault never met returns whatever shares its commonest words. Fused
scores cannot say "nothing" (each retriever's list is scaled to its own best candidate), so the
floor reads two absolute quantities instead.

* The **evidence share** of the answer's best hit:

      share(memory) = Σ idf(t) over the question's terms t found in the memory (its own words,
                      or its note neighbours at NEIGHBOUR_WEIGHT)  /  Σ idf(t) over all its terms

  with the index's own BM25 idf, where a term the vault has never seen has the largest idf of all.
  Terms are the index's own (`en_stem` analysis: "dogs" meets "dog" as BM25 does), without BM25's
  stop words, pronouns and modal verbs, and without the words of a period the question names
  (dates live in note names, not in the text; date-aware recall reads them).
* **Unknown names**: the capitalised words inside the question ("Caroline", "Door Dash"). When
  the question names someone or something and *none* of its names occurs anywhere in the vault,
  the vault has not heard of what it asks about.

* **Silence** (issue 46): a near word counts only when it is one. A word spelt from the question
  word's own first sub-word piece ("authentically" is auth+ent+ically for the question's "auth",
  "Rotterdam" for "rot", "mann" for "man", whatever the case) is close only through the piece
  they share, and a one-letter word (the "m" of "I'm") is near to anything: neither earns credit
  (`coverage.word_matches`). Whether any of the question's terms occurs in the vault is reported
  (`knownTerms`), but does not empty an answer: a floor of 0.3 on near words alone, tried, emptied
  real one-word paraphrases ("kitten" for a cat, "puppy" for a rescue dog).

An answer is empty when its share is below FLOOR, when all of its names are unknown and the
share is below NAME_FLOOR. On the LoCoMo development set (`bench/locomo.py`, 5 vaults) the
near-word cut alone empties 95.3% of 1,000 strings of 1-4 real words absent from the vault (89.6%
before it; with the withdrawn 0.3 floor, 98.6%), and 3 of 997 real questions (as before).
A question written in lower case has no names: only the share then applies.

No model call: one term-dictionary lookup per question term and one analysis of each hit's text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memvault.indexer.backend.analysis import CJK_RUN_RE, STOPWORDS, cjk_bigrams
from memvault.indexer.search.bm25 import stemmed_terms
from memvault.indexer.search.periods import Period
from memvault.indexer.search.routing import normalize_query
from memvault.vault.errors import ProviderUnavailable

if TYPE_CHECKING:
    import numpy as np

#: the share below which an answer is empty
FLOOR = 0.2
#: ... and below which it is empty when none of the question's names is known to the vault
NAME_FLOOR = 0.6
#: a term found only among the note neighbours counts this much
NEIGHBOUR_WEIGHT = 0.5
#: the least a question term weighs: the idf of a term a fifth of the memories hold. In a small
#: vault where every word is in every memory idf says nothing, and one unknown word (a typo, a
#: word cut in half) would otherwise outweigh all the rest
MIN_WEIGHT = math.log(5.0)
#: word-vector similarity at which a near word ("dog" for "puppy") starts to count
SOFT_FLOOR = 0.4
#: hits whose share is read (the answer's head)
SHARE_HITS = 10
MAX_TERMS = 32
#: names this long or longer are also looked up one letter shorter (a misspelt name)
MIN_VARIANT_LENGTH = 4
#: what tool mode says when the floor empties an answer
EMPTY_REASON = "nothing in memory matches"


@dataclass(frozen=True)
class Evidence:
    """The best share among the hits, the question's terms with their idf, and its names."""

    share: float
    terms: dict[str, float]
    names: tuple[str, ...] = ()
    unknown_names: bool = False
    #: whether any of the question's terms occurs in the vault (False: only near words can count)
    known_terms: bool = True

    @property
    def empty(self) -> bool:
        """Below the floor: the vault holds no real evidence for the question."""
        return self.share < FLOOR or (self.unknown_names and self.share < NAME_FLOOR)

    def to_json(self) -> dict:
        return {
            "share": round(self.share, 4),
            "floor": FLOOR,
            "nameFloor": NAME_FLOOR,
            "names": list(self.names),
            "unknownNames": self.unknown_names,
            "knownTerms": self.known_terms,
            "terms": {term: round(idf, 3) for term, idf in self.terms.items()},
        }


_QUIET = frozenset(
    t
    for word in (
        "s he she him her hers his they them their theirs its would could should might may can must shall "
        "will also just about something anything everything nothing thing things stuff tell know remember"
    ).split()
    for t in stemmed_terms(word)
)  # carry no topic: a hit need not hold them
_WORD_RE = re.compile(r"[^\W_][\w'’-]*")


def terms_of(text: str) -> list[str]:
    """The index's terms for text (`en_stem`: "dogs" is "dog", as BM25 reads it); a run of CJK
    characters is its bigrams, as BM25's `cjk` field holds it ("東京に" → 東京, 京に)."""
    if not text:
        return []
    if not CJK_RUN_RE.search(text):
        return stemmed_terms(text)
    return stemmed_terms(CJK_RUN_RE.sub(" ", text)) + cjk_bigrams(text)


def _asked(question: str, periods: tuple[Period, ...]) -> str:
    """The question without the periods it names (their words are dates, read elsewhere)."""
    text = normalize_query(question)
    for period in periods:
        text = text.replace(period.phrase, " ")
    return text


def question_terms(question: str, periods: tuple[Period, ...] = ()) -> list[str]:
    """The question's distinct index terms without stop words (all of them if that is all)."""
    words = _asked(question, periods).split()
    content = [word for word in words if word not in STOPWORDS] or words
    terms = [term for term in dict.fromkeys(terms_of(" ".join(content))) if len(term) > 1 and term not in _QUIET]
    return terms[:MAX_TERMS]


def question_names(question: str) -> list[str]:
    """Index terms of the capitalised words after the first (names, titles); not all-caps words."""
    words = _WORD_RE.findall(question[: 4 * MAX_TERMS * 10])
    names = [word for word in words[1:] if word[0].isupper() and not word.isupper()]
    return [t for t in dict.fromkeys(terms_of(" ".join(names))) if len(t) > 1 and t not in _QUIET][:MAX_TERMS]


def evidence(
    doc_freqs: Callable[[str, list[str]], tuple[int, dict[str, int]]],
    question: str,
    passages: list[tuple[str, str]],
    periods: tuple[Period, ...] = (),
    *,
    near_words: bool = True,
    silence: bool = True,
) -> Evidence:
    """The evidence for `question` in the best of `passages` ((text, context) pairs, best first).
    `doc_freqs(field, terms)` gives the index's row count and each term's document frequency in
    `field` (`text`; `cjk` for CJK bigrams). Without
    `near_words` (Lite, which loads no model table) only exact terms count."""
    terms = question_terms(question, periods)
    names = [name for name in question_names(question) if name in terms]
    bigrams = [term for term in terms if CJK_RUN_RE.match(term)]
    total, frequencies = doc_freqs("text", [term for term in terms if term not in bigrams])
    if bigrams:
        frequencies = {**frequencies, **doc_freqs("cjk", bigrams)[1]}
    weights = {term: max(MIN_WEIGHT, idf(frequencies.get(term, 0), total)) for term in terms}
    mass = sum(weights.values())
    passages = passages[:SHARE_HITS] if mass > 0 else []
    soft = _soft_matches(_asked(question, periods), weights, passages, silence) if near_words else {}
    best, seen = 0.0, set()
    for column, (text, context) in enumerate(passages):
        own, around = set(terms_of(text)), set(terms_of(context))
        seen |= own | around
        found = 0.0
        for term, weight in weights.items():
            exact = 1.0 if term in own else NEIGHBOUR_WEIGHT if term in around else 0.0
            found += weight * max(exact, soft[term][column] if term in soft else 0.0)
        best = max(best, float(found / mass))
    # a hit holding the name knows it even before its row is committed (the owner's pending rows)
    known = not silence or any(frequencies.get(term, 0) > 0 or term in seen for term in weights)
    unknown = bool(names) and all(frequencies.get(name, 0) == 0 and name not in seen for name in names)
    if unknown and not _spelt_otherwise(doc_freqs, names, seen):
        return Evidence(best, weights, tuple(names), True, known)
    return Evidence(best, weights, tuple(names), False, known)


def looked_up_terms(question: str, periods: tuple[Period, ...] = ()) -> list[str]:
    """Every term `evidence` (and recall's asked-question discount) may ask `doc_freqs` about for
    `question`: its terms and its names' other spellings, so a caller can fetch them all at once
    (a search across vaults reads every vault's in one statement)."""
    terms = question_terms(question, periods)
    names = [name for name in question_names(question) if name in terms]
    variants = [variant for name in names for variant in _spellings(name)]
    return list(dict.fromkeys([*terms, *variants]))


def _spelt_otherwise(doc_freqs, names: list[str], seen: set[str]) -> bool:
    """Whether the vault knows one of `names` in a common other spelling: without a silent "h"
    ("Jon" for the question's "John", "Sara" for "Sarah"), a doubled letter written once ("Mathew",
    "Ana") or a final "e" ("Ann" for "Anne"). Any one-letter-shorter spelling would find too many
    strangers: "Dave" would match "Dae", and 5% more of the negative questions were answered."""
    variants = list(dict.fromkeys(variant for name in names for variant in _spellings(name)))
    if not variants:
        return False
    if any(variant in seen for variant in variants):
        return True
    return any(doc_freqs("text", variants)[1].get(variant, 0) > 0 for variant in variants)


def _spellings(name: str) -> list[str]:
    if len(name) < MIN_VARIANT_LENGTH or not name.isalpha():
        return []
    cuts = [i for i in range(1, len(name)) if name[i] == "h" or name[i] == name[i - 1]]
    if name.endswith("e"):
        cuts.append(len(name) - 1)
    return [name[:i] + name[i + 1 :] for i in dict.fromkeys(cuts)]


def _soft_matches(
    asked: str, weights: dict[str, float], passages: list[tuple[str, str]], cut: bool = True
) -> dict[str, np.ndarray]:
    """Per question term, per passage: the credit for its closest word there ("puppy" → "dog"),
    from coverage's static word vectors: 0 at SOFT_FLOOR similarity or less, 1 at identity."""
    if not passages or not weights:
        return {}
    import numpy as np  # only a question whose terms a passage lacks asks for soft matches

    from memvault.indexer.search.coverage import word_matches  # numpy and the word table: the same

    try:
        # each term is matched as the question spells it and as its stem: "pets" is two tokens of
        # the word table and lands far from "dog", "pet" is one and lands near it
        words, best = word_matches(
            " ".join([*asked.split(), *weights]),
            [text for text, _ in passages],
            [context for _, context in passages],
            cut=cut,
        )
    except ProviderUnavailable:
        return {}  # no word table: exact matches only (recall says coverage is unavailable)
    credit = np.clip((best - SOFT_FLOOR) / (1.0 - SOFT_FLOOR), 0.0, 1.0)
    soft: dict[str, np.ndarray] = {}
    for row, word in enumerate(words):
        for term in terms_of(word)[:1]:
            if term in weights:
                soft[term] = np.maximum(soft.get(term, np.zeros(len(passages), dtype=np.float32)), credit[row])
    return soft


def idf(doc_freq: int, total: int) -> float:
    """BM25's idf; a term no memory holds gets the largest."""
    return math.log(1.0 + (total - doc_freq + 0.5) / (doc_freq + 0.5))

"""The auto-mode gate: what a host may inject into a prompt without being asked.

    result = gate_auto("What is Morgan's phone number?", candidates)
    result.hits      # () unless one canonical record states exactly that fact
    result.reason    # content-free: "admitted", "below_band", "abstain:coordination", ...

Automatic recall rides the user's message, so a wrong binding there is worse than none: the
model cannot see that the record only *resembled* the question. The spec ("Recall scoring")
therefore treats retrieval scores as ranking evidence, not probabilities, and admits a record
only when (1) it sits in the score band and (2) a deterministic direct-fact gate finds that the
question's shape and the record's shape match on subject and property. Everything else stays
available to the MemoryRecall tool, where the model sees separate results and provenance.

Score band. Providers' raw scores live on different scales, so the band reads each candidate's
`strength`: an evidence value in [0, 1] that the fusion computes on one provider-independent
scale (the same record and query give roughly the same strength whatever the embedding
provider). It is ranking evidence, not a probability; the gate's shapes do the rest. A candidate is in the band
when strength >= 0.65 and strength >= 0.77 x the best strength among the candidates. The gate
then looks at no more than the first `WINDOW` in-band candidates, in the order given (the
fused ranking, best first). `score` is never read for gating; it is carried for diagnostics.

Direct-fact shapes (question <-> record), compared case-insensitively with light normalisation
(possessive 's, plurals, colour/color, choose/chose/chosen, live/lives/lived, work/works/worked):

    possessive property   What is Morgan's phone number?  <-> Morgan's phone number is ...
    direct choice         Which color did Morgan choose for deployment?
                                                          <-> Morgan selected blue as the deployment color
    event date/time       When is the offsite?            <-> The offsite is on 14 January (at 10:00)
    work/live location    Where does Priya live?          <-> Priya lives in Rotterdam

It abstains on coordination (and/or/both/either), reported or ditransitive speech (said, told,
gave, sent, showed, "Speaker: ..."), negated, unknown, hedged or stale values (not, never,
unknown, isn't sure, maybe, no longer, until), actor and relationship questions (Who chose
blue? Who is Morgan's manager?), subordinate clauses (because, although, which, that, if, ...),
multi-hop questions (Morgan's manager's phone number; anything whose answer needs two records),
pronoun subjects, multi-sentence records, and records in the window that disagree on the value.
No embedding or chat call; pure and deterministic; linear in its (bounded) input.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from memvault.indexer.search.directfacts import Question, classify_question, record_value
from memvault.indexer.search.routing import Route, route_query

#: the band: absolute floor and share of the best candidate's strength
BAND_FLOOR = 0.65
BAND_RELATIVE = 0.77
#: in-band candidates the direct-fact gate inspects
WINDOW = 10
#: what one automatic injection may carry
MAX_HITS = 5
MAX_BYTES = 8 * 1024


@dataclass(frozen=True)
class Candidate:
    """One retrieval result offered to the gate, in fused rank order (best first)."""

    id: str
    text: str
    #: the fused ranking score: higher is better, any scale; never used for gating
    score: float
    #: evidence strength in [0, 1] on one provider-independent scale; drives the score band.
    #: A value that is not a finite number in [0, 1] keeps the candidate out of the band.
    strength: float
    source: str = ""
    at: datetime | None = None


@dataclass(frozen=True)
class GateResult:
    #: what to inject: at most MAX_HITS candidates and MAX_BYTES bytes of UTF-8 text
    hits: tuple[Candidate, ...]
    #: content-free diagnostic: "admitted", "route:<route>", "abstain:<shape>", "below_band", ...
    reason: str
    route: Route
    #: the question's direct-fact shape, when it has one
    shape: str | None = None
    in_band: int = 0
    window: int = 0
    bytes: int = 0

    @property
    def admitted(self) -> bool:
        return bool(self.hits)

    def to_json(self) -> dict:
        """Diagnostics without any query or memory text (safe for logs)."""
        return {
            "reason": self.reason,
            "route": self.route.value,
            "shape": self.shape,
            "inBand": self.in_band,
            "window": self.window,
            "hits": len(self.hits),
            "bytes": self.bytes,
        }


def gate_auto(query: str, candidates: Sequence[Candidate]) -> GateResult:
    """Decide what automatic recall injects for `query`; empty hits unless a direct fact matches."""
    route = route_query(query) if isinstance(query, str) else Route.TARGETED
    if route is not Route.TARGETED:
        return GateResult((), f"route:{route.value}", route)
    question, reason = _classify(query)
    if question is None:
        return GateResult((), reason, route)
    if not candidates:
        return GateResult((), "no_candidates", route, question.shape)
    band = score_band(candidates)
    if not band:
        return GateResult((), "below_band", route, question.shape)
    window = band[:WINDOW]
    base = dict(route=route, shape=question.shape, in_band=len(band), window=len(window))
    try:
        matches = _matches(question, window)
    except Exception:  # noqa: BLE001 - a record the parser cannot read is not a direct fact
        return GateResult((), "abstain:unparsed_record", **base)
    if not matches:
        return GateResult((), "no_direct_fact", **base)
    if len({value for value, _ in matches}) > 1:
        return GateResult((), "conflicting_facts", **base)
    hits, used = _within_caps([candidate for _, candidate in matches])
    return GateResult(hits, "admitted" if hits else "over_budget", bytes=used, **base)


def _classify(query: str) -> tuple[Question | None, str]:
    """`classify_question`, abstaining instead of raising: this runs on every host turn, and a
    question the parser cannot read must cost the host nothing but an empty injection."""
    try:
        return classify_question(query)
    except Exception:  # noqa: BLE001 - the parser's own bugs must never reach a host's turn
        return None, "abstain:unparsed_question"


def score_band(candidates: Sequence[Candidate]) -> list[Candidate]:
    """In-band candidates in the given order: strength >= 0.65 and >= 77% of the best."""
    valid = [candidate for candidate in candidates if _valid_strength(candidate)]
    if not valid:
        return []
    top = max(candidate.strength for candidate in valid)
    floor = max(BAND_FLOOR, BAND_RELATIVE * top)
    return [candidate for candidate in valid if candidate.strength >= floor]


def _valid_strength(candidate: Candidate) -> bool:
    value = getattr(candidate, "strength", None)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) and 0.0 <= value <= 1.0


def _matches(question: Question, window: Sequence[Candidate]) -> list[tuple[str, Candidate]]:
    """(value, candidate) for every window record that states the asked fact, one per id/text."""
    found: list[tuple[str, Candidate]] = []
    seen: set[str] = set()
    for candidate in window:
        if not isinstance(candidate.text, str) or not isinstance(candidate.id, str):
            continue
        value = record_value(question, candidate.text)
        if value is None:
            continue
        key = " ".join(candidate.text.split()).casefold()
        if candidate.id in seen or key in seen:
            continue  # the same fact stored twice says nothing new
        seen.update((candidate.id, key))
        found.append((value, candidate))
    return found


def _within_caps(candidates: Sequence[Candidate]) -> tuple[tuple[Candidate, ...], int]:
    """The longest ranked prefix within MAX_HITS and MAX_BYTES (UTF-8) of text."""
    hits: list[Candidate] = []
    used = 0
    for candidate in candidates[:MAX_HITS]:
        size = len(candidate.text.encode("utf-8", "replace"))
        if used + size > MAX_BYTES:
            break
        hits.append(candidate)
        used += size
    return tuple(hits), used

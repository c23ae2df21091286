"""Recall budgets for one executing agent turn (the Layered strategy's admission envelope).

    turn = TurnRecall(search=..., granted=("default", "s-1a2b3c4d"), documents=...)
    turn.recall("which color did we pick?")        # initial: <= 4 results / 3,600 characters
    turn.recall("deployment colour decision")      # one materially different refinement
    turn.recall("anything else")                   # a third distinct query replays the latest

Both attempts share at most 6 results, 1,200 characters each, 4,800 in total. Repeating a query
(or one that is not materially different) replays what it admitted; concurrent calls share the
turn's state and a repeat of an in-flight query waits for it and replays. Replays are filtered to
the memory spaces the call asked for. The single document-search slot admits at most 4 records,
2,600 query-local characters each and 6,000 in total; later document searches replay it.

One Related traversal may follow, only from a (memoryBodyId, id) either attempt admitted: at
most 4 results, 1,200 characters each, 3,600 in total (memvault's bound; the spec names none),
deduplicated against the recall evidence; a repeat replays it.

Each turn gets its own `TurnRecall`: sibling tasks, later turns and resumed activations never
share evidence or budget.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

INITIAL_RESULTS, INITIAL_CHARS = 4, 3_600
TURN_RESULTS, RESULT_CHARS, TURN_CHARS = 6, 1_200, 4_800
DOC_RECORDS, DOC_RECORD_CHARS, DOC_TOTAL_CHARS = 4, 2_600, 6_000
RELATED_RESULTS, RELATED_CHARS = 4, 3_600
#: below this many characters a truncated piece is noise, not evidence
MIN_FRAGMENT_CHARS = 80
#: queries whose content words overlap at least this much (Jaccard) are the same question
SAME_QUERY_OVERLAP = 0.75
_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)
_STOPWORDS = frozenset(
    "a an and are at be by did do does for from how i in is it me my of on or our so that the this to "
    "us was we were what when where which who why will with you your".split()
)


@dataclass(frozen=True)
class Evidence:
    space_id: str  # memoryBodyId
    id: str
    text: str
    source: str

    def to_json(self) -> dict:
        return {"memoryBodyId": self.space_id, "id": self.id, "text": self.text, "source": self.source}


@dataclass(frozen=True)
class RecallAnswer:
    query: str
    attempt: str  # initial | refinement
    status: str  # searched | replayed | replayed-latest
    evidence: tuple[Evidence, ...]
    closed: bool  # no further provider query this turn
    used_results: int
    used_chars: int
    degraded: tuple[str, ...] = ()  # one line per space that could not answer fully

    def to_json(self) -> dict:
        return {"query": self.query, "attempt": self.attempt, "status": self.status, "closed": self.closed,
                "usedResults": self.used_results, "usedCharacters": self.used_chars,
                "evidence": [e.to_json() for e in self.evidence], "degraded": list(self.degraded)}  # fmt: skip


@dataclass(frozen=True)
class DocumentRecord:
    id: str
    title: str
    path: str
    excerpt: str


@dataclass(frozen=True)
class DocumentAnswer:
    query: str
    status: str  # searched | replayed
    records: tuple[DocumentRecord, ...]

    @property
    def used_chars(self) -> int:
        return sum(len(record.excerpt) for record in self.records)


@dataclass(frozen=True)
class RelatedAnswer:
    origin: Evidence
    status: str  # searched | replayed
    evidence: tuple[Evidence, ...]

    def to_json(self) -> dict:
        return {"from": {"memoryBodyId": self.origin.space_id, "id": self.origin.id}, "status": self.status,
                "usedResults": len(self.evidence), "usedCharacters": _chars(self.evidence),
                "evidence": [e.to_json() for e in self.evidence]}  # fmt: skip


class NotAdmitted(ValueError):
    """A Related traversal asked to start from a record no Recall attempt of this turn admitted."""


class Found(list):
    """A search's candidates, best first, with the spaces that could not answer fully."""

    def __init__(self, items=(), degraded: Sequence[str] = ()) -> None:
        super().__init__(items)
        self.degraded = tuple(degraded)


def _degraded(found: Sequence[Evidence]) -> tuple[str, ...]:
    return getattr(found, "degraded", ())


Search = Callable[[str, tuple[str, ...]], Sequence[Evidence]]
RelatedSearch = Callable[[Evidence], Sequence[Evidence]]
DocumentSearch = Callable[[str, int], Sequence[DocumentRecord]]


def content_words(query: str) -> frozenset[str]:
    words = {w.casefold() for w in _WORD_RE.findall(query)}
    return frozenset(words - _STOPWORDS) or frozenset(words)


def materially_different(first: str, second: str) -> bool:
    a, b = content_words(first), content_words(second)
    if not a or not b:
        return a != b
    return len(a & b) / len(a | b) < SAME_QUERY_OVERLAP


def admit(
    candidates: Sequence[Evidence], *, results: int, chars: int, per_result: int = RESULT_CHARS
) -> list[Evidence]:
    """The first candidates that fit: at most `results`, each cut to `per_result`, `chars` in total."""
    admitted: list[Evidence] = []
    left = chars
    for item in candidates:
        if len(admitted) >= results or left < MIN_FRAGMENT_CHARS:
            break
        cut = min(per_result, left)
        text = item.text if len(item.text) <= cut else item.text[:cut]
        admitted.append(replace(item, text=text))
        left -= len(text)
    return admitted


class TurnRecall:
    def __init__(
        self,
        search: Search,
        granted: Sequence[str],
        documents: DocumentSearch | None = None,
        related: RelatedSearch | None = None,
    ) -> None:
        self._search = search
        self._related = related
        self._related_answer: RelatedAnswer | None = None
        self._granted = tuple(dict.fromkeys(granted))
        self._documents = documents
        self._lock = threading.Lock()  # parallel calls share this turn's state, one at a time
        self._attempts: list[tuple[str, RecallAnswer]] = []  # (query, answer as admitted)
        self._document_answer: DocumentAnswer | None = None

    @property
    def provider_queries(self) -> int:
        return len(self._attempts)

    def scope(self, space_ids: Sequence[str] | None) -> tuple[str, ...]:
        """The requested spaces when they are a subset of the granted ones; otherwise all of them."""
        if space_ids and set(space_ids) <= set(self._granted):
            return tuple(dict.fromkeys(space_ids))
        return self._granted

    def recall(self, query: str, space_ids: Sequence[str] | None = None) -> RecallAnswer:
        scope = self.scope(space_ids)
        with self._lock:
            closed = len(self._attempts) >= 2
            for previous, answer in self._attempts:
                if not materially_different(previous, query):
                    return _replay(answer, scope, "replayed", closed)
            if closed:
                return _replay(self._attempts[-1][1], scope, "replayed-latest", closed)
            answer = self._initial(query, scope) if not self._attempts else self._refine(query, scope)
            self._attempts.append((query, answer))
            return answer

    def _initial(self, query: str, scope: tuple[str, ...]) -> RecallAnswer:
        found = self._search(query, scope)
        admitted = admit(found, results=INITIAL_RESULTS, chars=INITIAL_CHARS)
        return RecallAnswer(query, "initial", "searched", tuple(admitted), False, len(admitted), _chars(admitted),
                            _degraded(found))  # fmt: skip

    def _refine(self, query: str, scope: tuple[str, ...]) -> RecallAnswer:
        first = self._attempts[0][1]
        seen = {(e.space_id, e.id) for e in first.evidence}
        found = self._search(query, scope)
        fresh = [e for e in found if (e.space_id, e.id) not in seen]
        admitted = admit(fresh, results=TURN_RESULTS - first.used_results, chars=TURN_CHARS - first.used_chars)
        used_results, used_chars = first.used_results + len(admitted), first.used_chars + _chars(admitted)
        return RecallAnswer(query, "refinement", "searched", tuple(admitted), True, used_results, used_chars,
                            _degraded(found))  # fmt: skip

    def search_documents(self, query: str) -> DocumentAnswer:
        """The turn's single document-search slot; every later call replays its answer."""
        with self._lock:
            if self._document_answer is not None:
                return replace(self._document_answer, status="replayed")
            found = list(self._documents(query, DOC_RECORD_CHARS)) if self._documents else []
            records, left = [], DOC_TOTAL_CHARS
            for record in found[:DOC_RECORDS]:
                if left < MIN_FRAGMENT_CHARS:
                    break
                piece = record.excerpt[: min(DOC_RECORD_CHARS, left)]
                records.append(replace(record, excerpt=piece))
                left -= len(piece)
            self._document_answer = DocumentAnswer(query, "searched", tuple(records))
            return self._document_answer

    def related(self, space_id: str, memory_id: str) -> RelatedAnswer:
        """The turn's one Related traversal, from an admitted (memoryBodyId, id); repeats replay it."""
        with self._lock:
            admitted = {(e.space_id, e.id): e for _, answer in self._attempts for e in answer.evidence}
            origin = admitted.get((space_id, memory_id))
            if origin is None:
                raise NotAdmitted(
                    f"({space_id!r}, {memory_id!r}) was not admitted by a Recall attempt this turn: Related starts"
                    " only from a memoryBodyId and id that Recall returned"
                )
            if self._related_answer is not None:
                return replace(self._related_answer, status="replayed")
            found = [e for e in (self._related(origin) if self._related else ()) if (e.space_id, e.id) not in admitted]
            kept = admit(found, results=RELATED_RESULTS, chars=RELATED_CHARS)
            self._related_answer = RelatedAnswer(origin, "searched", tuple(kept))
            return self._related_answer

    def admitted(self) -> set[tuple[str, str]]:
        """(memoryBodyId, id) pairs either attempt admitted: the only valid Related starting points."""
        with self._lock:
            return {(e.space_id, e.id) for _, answer in self._attempts for e in answer.evidence}


def _chars(items: Sequence[Evidence]) -> int:
    return sum(len(item.text) for item in items)


def _replay(answer: RecallAnswer, scope: tuple[str, ...], status: str, closed: bool) -> RecallAnswer:
    kept = tuple(e for e in answer.evidence if e.space_id in scope)
    return replace(answer, status=status, evidence=kept, closed=closed)

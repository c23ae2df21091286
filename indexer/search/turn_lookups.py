"""One backend lookup per question per agent turn, shared by automatic recall and the tool.

The specification ("How it is provisioned"): identical normalized automatic and tool queries
share one per-turn lookup; a different tool query may search again. A host turn's automatic
recall (`mode="auto"`) and a MemoryRecall call (`mode="tool"`) rank the same candidates
differently (the auto gate; the tool's limit, floor and reranker), but the candidates come from
the same two backend reads: the BM25 search and the vector search (the query's embedding
included). `TurnLookups.around` wraps the index and the semantic service so that the second
recall of a question reads both from the first one's answers: no second search, no second
embedding request.

A question's key is its NFKC, case-folded form with whitespace collapsed. `lookups` counts the
questions that reached the backend this turn, `shared` the recalls answered from a lookup the
turn had already made. A failed read caches nothing: the next recall tries the backend again.
"""

from __future__ import annotations

import threading
import unicodedata


def normalized(query: str) -> str:
    """The form two questions share a lookup by: NFKC, case-folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", query).casefold().split())


class TurnLookups:
    """The backend reads one agent turn made, by normalized question."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lexical: dict[tuple, tuple] = {}
        self._vectors: dict[tuple, tuple] = {}
        self.lookups = 0  # questions that reached the backend
        self.shared = 0  # recalls answered from a lookup already made

    def around(self, query: str, bm25, semantic):
        """`(bm25, semantic)` for one recall of `query`, answering from this turn's lookups."""
        key = normalized(query)
        return _SharedBm25(bm25, self, key), (None if semantic is None else _SharedVectors(semantic, self, key))

    def _remembered(self, table: dict, key: tuple, read, *, counts: bool):
        with self._lock:
            found = table.get(key)
            if found is not None and counts:
                self.shared += 1
        if found is not None:
            return found
        answer = read()  # raises: nothing is kept, the next recall asks the backend again
        with self._lock:
            table[key] = answer
            if counts:
                self.lookups += 1
        return answer


class _SharedBm25:
    """The index with its candidate search shared; every other read goes to the index itself."""

    def __init__(self, bm25, lookups: TurnLookups, key: str) -> None:
        self._bm25, self._lookups, self._key = bm25, lookups, key

    def search_docs(self, query: str, limit: int, kinds=("curated",)):
        def read():
            hits, docs = self._bm25.search_docs(query, limit, kinds)
            return tuple(hits), dict(docs)

        hits, docs = self._lookups._remembered(self._lookups._lexical, (self._key, limit, tuple(kinds)), read,
                                               counts=True)  # fmt: skip
        return list(hits), dict(docs)  # recall adds rows to `docs`: each recall gets its own copy

    def __getattr__(self, name: str):
        return getattr(self._bm25, name)


class _SharedVectors:
    """The semantic service with its vector searches (and the query's embedding) shared."""

    def __init__(self, semantic, lookups: TurnLookups, key: str) -> None:
        self._semantic, self._lookups, self._key = semantic, lookups, key

    def search(self, query: str, depth: int):
        return self._shared("search", query, depth)

    def _shared(self, method: str, query: str, depth: int):
        def read():
            hits, degraded = getattr(self._semantic, method)(query, depth)
            return (None if hits is None else tuple(hits)), degraded

        hits, degraded = self._lookups._remembered(self._lookups._vectors, (self._key, method, depth), read,
                                                   counts=False)  # fmt: skip
        return (None if hits is None else list(hits)), degraded

    def __getattr__(self, name: str):
        found = getattr(self._semantic, name)  # a service without a second list has no search_extra
        if name == "search_extra":
            return lambda query, depth: self._shared("search_extra", query, depth)
        return found

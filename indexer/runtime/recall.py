"""Memory spaces as data planes: verified writes, fused recall across spaces, document search.

Writes go through Remember (`MemoryStore.remember`) on the space's own vault, then are verified
from the files: the receipt's note must hold a bullet with that id and the same content. A
"duplicate" receipt (the content was already there) must also be found by recall, the exact
evidence the spec asks of a skipped write. Only then is the space marked written (activated).

Recall searches the granted spaces concurrently and normalises each space's scores by its own
best hit (so engines and score scales never need to agree), drops hits far weaker than their
space's best, and fuses with reciprocal-rank fusion over each space's own ranking plus one
global ranking by normalised quality; the same content found in two spaces counts once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.results import RecallHit
from memvault.vault.documents import Document, DocumentStore
from memvault.vault.errors import InvalidRecord, VaultError
from memvault.vault.fsio import read_bytes_nofollow
from memvault.vault.ids import content_hash
from memvault.vault.note import parse
from memvault.vault.paths import resolve_inside
from memvault.vault.spaces import SpaceCatalog

RRF_K = 60
#: a hit scoring under this fraction of its space's best hit is dropped as low relevance
MIN_QUALITY = 0.25
PER_SPACE_LIMIT = 12
MAX_WORKERS = 8
_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)


@dataclass(frozen=True)
class SpaceWrite:
    space_id: str
    id: str
    source: str
    status: str  # added | completed | duplicate (as Remember reports it)


@dataclass(frozen=True)
class SpaceHit:
    space_id: str  # the memoryBodyId
    id: str
    text: str
    source: str
    raw_score: float
    quality: float
    score: float  # fused

    def to_json(self) -> dict:
        return {"memoryBodyId": self.space_id, "id": self.id, "text": self.text, "source": self.source,
                "score": round(self.score, 6), "quality": round(self.quality, 4)}  # fmt: skip


@dataclass(frozen=True)
class FusedRecall:
    hits: tuple[SpaceHit, ...]
    degraded: tuple[str, ...]  # one line per space that could not answer fully


def _open(path: Path, *, sync: bool) -> MemoryStore:
    # a space is configured by its own memvault.json alone; the caller's environment is not its config
    return MemoryStore.open(path, env={}, sync=sync)


def write_to_space(catalog: SpaceCatalog, space_id: str, text: str) -> SpaceWrite:
    """Remember `text` exactly in `space_id`, verify it durably landed, then mark the space written."""
    path = catalog.path_of(space_id)
    with _open(path, sync=False) as store:
        receipt = store.remember(text)
        _verify_in_files(path, space_id, receipt.id, receipt.source, text)
        if receipt.status == "duplicate":
            _verify_by_recall(store, space_id, receipt.id, text)
    catalog.mark_written(space_id)
    return SpaceWrite(space_id, receipt.id, receipt.source, receipt.status)


def _verify_in_files(root: Path, space_id: str, memory_id: str, source: str, text: str) -> None:
    relpath = source.split("#^", 1)[0]
    try:
        note = parse(read_bytes_nofollow(resolve_inside(root, relpath)).decode("utf-8"))
    except (FileNotFoundError, UnicodeDecodeError) as exc:
        raise _unverified(space_id, f"{relpath} cannot be read back ({type(exc).__name__})") from None
    wanted = content_hash(text)
    if not any(b.id == memory_id and content_hash(b.text) == wanted for b in note.bullets):
        raise _unverified(space_id, f"{relpath} holds no bullet ^{memory_id} with that text")


def _verify_by_recall(store: MemoryStore, space_id: str, memory_id: str, text: str) -> None:
    result = store.recall(text, limit=50)
    if not any(hit.id == memory_id for hit in result.hits):
        raise _unverified(space_id, f"recall does not find the existing copy ^{memory_id}")


def _unverified(space_id: str, problem: str) -> VaultError:
    return InvalidRecord(
        f"the write to memory space {space_id!r} could not be verified: {problem}. Nothing was removed from"
        f" runtime memory. Fix: run `memvault --vault <space> rebuild` on that space and retry"
    )


# --- recall across spaces -----------------------------------------------------------------------


def recall_spaces(
    catalog: SpaceCatalog, query: str, space_ids: Sequence[str], limit: int = PER_SPACE_LIMIT
) -> FusedRecall:
    """Search every space in `space_ids` concurrently; fused, deduplicated, weak hits dropped."""
    ids = list(dict.fromkeys(space_ids))
    if not ids:
        return FusedRecall((), ())
    with ThreadPoolExecutor(max_workers=min(MAX_WORKERS, len(ids))) as pool:
        answers = list(pool.map(lambda sid: _search_one(catalog, sid, query, limit), ids))
    degraded = tuple(problem for _, problem in answers if problem)
    per_space = {sid: hits for sid, (hits, _) in zip(ids, answers, strict=True)}
    return FusedRecall(fuse(per_space), degraded)


def _search_one(catalog: SpaceCatalog, space_id: str, query: str, limit: int) -> tuple[list[RecallHit], str | None]:
    try:
        with _open(catalog.path_of(space_id), sync=True) as store:
            result = store.recall(query, limit=limit)
    except VaultError as exc:
        return [], f"{space_id}: {exc}"
    return list(result.hits), (f"{space_id}: {result.degraded}" if result.degraded else None)


def fuse(per_space: Mapping[str, Sequence[RecallHit]]) -> tuple[SpaceHit, ...]:
    """Quality-normalise, drop weak hits, deduplicate by content, and fuse by RRF (pure)."""
    candidates: dict[str, dict] = {}
    rankings: list[list[str]] = []
    for space_id, hits in per_space.items():
        ranking = []
        best = max((hit.score for hit in hits), default=0.0)
        for hit in hits:
            q = hit.score / best if best > 0 else 0.0
            if q < MIN_QUALITY:
                continue
            key = content_hash(hit.text)
            seen = candidates.get(key)
            if seen is None or (q, space_id) > (seen["quality"], seen["space_id"]):
                candidates[key] = {"space_id": space_id, "hit": hit, "quality": q}
            if key not in ranking:
                ranking.append(key)
        rankings.append(ranking)
    rankings.append(sorted(candidates, key=lambda k: (-candidates[k]["quality"], k)))
    fused = {key: sum(1.0 / (RRF_K + r.index(key) + 1) for r in rankings if key in r) for key in candidates}
    order = sorted(candidates, key=lambda k: (-fused[k], -candidates[k]["quality"], candidates[k]["space_id"], k))
    return tuple(
        SpaceHit(c["space_id"], c["hit"].id, c["hit"].text, c["hit"].source, c["hit"].score, c["quality"], fused[k])
        for k in order
        for c in (candidates[k],)
    )


# --- document search ----------------------------------------------------------------------------


@dataclass(frozen=True)
class DocumentHit:
    id: str
    title: str
    path: str
    excerpt: str  # query-local: the window of the body around the query's words
    score: float

    def to_json(self) -> dict:
        return {"id": self.id, "title": self.title, "path": self.path, "excerpt": self.excerpt}


def search_documents(store: DocumentStore, query: str, window: int) -> list[DocumentHit]:
    """Active documents that mention the query's words, best first, each with a local excerpt."""
    words = {w.casefold() for w in _WORD_RE.findall(query)}
    if not words:
        return []
    hits = []
    for doc in store.list():
        score = _doc_score(doc, words)
        if score > 0:
            hits.append(DocumentHit(doc.id, doc.title, doc.path, excerpt(doc.body, words, window), score))
    return sorted(hits, key=lambda hit: (-hit.score, hit.id))


def _doc_score(doc: Document, words: set[str]) -> float:
    title = [w.casefold() for w in _WORD_RE.findall(doc.title + " " + doc.summary)]
    body = [w.casefold() for w in _WORD_RE.findall(doc.body)]
    matched = {w for w in words if w in title or w in body}
    return len(matched) * 10 + 3 * sum(w in words for w in title) + min(sum(w in words for w in body), 50) * 0.1


def excerpt(body: str, words: set[str], window: int) -> str:
    """At most `window` characters of `body`, starting a little before the first query word."""
    if len(body) <= window:
        return body
    lowered = body.casefold()
    positions = [m.start() for m in _WORD_RE.finditer(lowered) if m.group(0) in words]
    first = positions[0] if positions else 0
    start = max(0, min(first - window // 8, len(body) - window))
    return body[start : start + window]

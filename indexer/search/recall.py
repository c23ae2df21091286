"""Recall: BM25 and (for Journal/BuJo) vector candidates, fused, mapped to hits with sources.

Two modes share the retrieval:
* `tool` (MemoryRecall, `memvault search`): up to `limit` hits with their fusion evidence.
* `auto` (what a host injects each turn): the score band and the deterministic direct-fact gate
  (`memvault.indexer.search.autogate`), at most 5 hits / 8 KB, nothing for unsupported questions.
Questions about the active chat and requests to resume interrupted work never reach the index:
they get guidance instead (`memvault.indexer.search.routing`).
"""

import dataclasses
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import date

from memvault.indexer.results import RecallHit, RecallResult
from memvault.indexer.search.asked import ASKED_HEAD, discount_asked
from memvault.indexer.search.autogate import WINDOW, Candidate, gate_auto
from memvault.indexer.search.bm25 import Bm25Hit, Bm25Index, passage_of, row_of
from memvault.indexer.search.dated import favour_periods
from memvault.indexer.search.floor import EMPTY_REASON, evidence
from memvault.indexer.search.graph_expansion import direct_depth, expand_recall
from memvault.indexer.search.hits import to_recall_hit
from memvault.indexer.search.hybrid import CANDIDATE_DEPTH, Fused, fuse
from memvault.indexer.search.periods import Period, question_periods
from memvault.indexer.search.rerank import fuse_rerank
from memvault.indexer.search.routing import Route, guidance_for, route_query, run_history_handoff
from memvault.indexer.search.supersession import retired_ids
from memvault.vault.errors import ProviderUnavailable, VaultError

#: rows loaded beyond the limit, to stand in for vectors whose rows were deleted meanwhile
_SPARE_ROWS = 5
#: candidates of each retriever that question coverage scores
COVERAGE_POOL = 40


def retrieve(
    bm25: Bm25Index,
    semantic,
    query: str,
    depth: int = CANDIDATE_DEPTH,
    rows_for: int | None = None,
    *,
    one_per_text: bool = False,
    periods: tuple[Period, ...] = (),
    reranker=None,
    notes: dict | None = None,
    extra_list: bool = True,
    asked: bool = True,
    doc_freqs=None,
):
    """Fused candidates with their stored rows, and why the answer is degraded (or None).

    `semantic` is the SemanticService for Journal/BuJo, None for Lite (which never embeds and so
    fuses BM25 alone). With vectors, the best COVERAGE_POOL candidates of each retriever are
    also scored by question coverage, which joins the fusion as a third ranked list.
    Full rows are loaded for the best `rows_for` candidates (all of them when None). Retrieval
    depth is fixed (`depth`), never derived from `rows_for`: a limit only cuts the ranked list, so
    limit 25 and limit 10 agree on the first 10. With `one_per_text`, a row whose text another,
    better-ranked row already has is skipped (the caller lists every source of a text).
    `periods` (the question's, resolved) favour memories dated in them (`dated.py`); a `reranker`
    re-scores the best candidates as one more ranked list (`rerank.py`), and what it did goes in
    `notes["rerank"]`. With memory.extraEmbeddings, the second model's vectors join the fusion as
    one more list (`extra_list=False` leaves them out: the bench's "defaults" side). A candidate
    that only asks what the question asks is discounted (`asked.py`; `asked=False`: not), with
    `doc_freqs` (default: the index's) for the question terms' idf.
    """
    beside = None
    if semantic is not None and semantic.searches_beside_bm25:
        beside = beside_bm25(semantic.search, query, depth)
    lexical, docs = bm25.search_docs(query, depth)
    if semantic is None:
        fused, degraded = fuse(lexical, None), None
    else:
        vectors, degraded = beside.result() if beside is not None else semantic.search(query, depth)
        extra, extra_degraded = _extra_vectors(semantic, query, depth, extra_list)
        covered, unavailable = _coverage(bm25, query, (lexical, vectors or [], extra or []), docs)
        fused = fuse(lexical, vectors, covered, extra)
        degraded = degraded or extra_degraded or unavailable
    if asked:
        head = {entry.key: passage_of(docs[entry.key])[0] for entry in fused[:ASKED_HEAD] if entry.key in docs}
        fused = discount_asked(fused, head, query, doc_freqs or bm25.doc_freqs, periods)
    fused = favour_periods(fused, periods)
    fused, retired = exclude_superseded(bm25, fused)
    unranked = None
    if reranker is not None:
        fused, unranked = _reranked(bm25, reranker, query, fused, docs, notes if notes is not None else {})
    return load_rows(bm25, fused, docs, rows_for, one_per_text), degraded or retired or unranked


def beside_bm25(search, *args) -> Future:
    """`search(*args)` started in a worker thread, so the query's embedding and the vector graph
    run while the calling thread searches BM25 (Tantivy and hnswlib release the GIL: on two
    cores the slower of the two lists sets a recall's pace, not their sum). The pool belongs to
    the process that made it: a forked child makes its own."""
    global _BESIDE
    if _BESIDE is None or _BESIDE[0] != os.getpid():
        _BESIDE = (os.getpid(), ThreadPoolExecutor(max_workers=4, thread_name_prefix="memvault-vectors"))
    return _BESIDE[1].submit(search, *args)


_BESIDE: tuple[int, ThreadPoolExecutor] | None = None


def _extra_vectors(semantic, query: str, depth: int, wanted: bool):
    """The second model's hits and why they are missing (or None); (None, None) when the vault has
    no second list (or a server's vectors, which hold one model)."""
    search_extra = getattr(semantic, "search_extra", None)
    if not wanted or search_extra is None:
        return None, None
    return search_extra(query, depth)


def _reranked(bm25: Bm25Index, reranker, query: str, fused: list[Fused], docs: dict, notes: dict):
    """The fused list with the reranker's scores joined, and why not (or None)."""
    head = [entry.key for entry in fused[: reranker.candidates]]
    docs.update(bm25.docs_by_keys([key for key in head if key not in docs]))
    keys = [key for key in head if key in docs]
    started = time.perf_counter()
    try:
        answer = reranker.scores(query, [passage_of(docs[key])[0] for key in keys])
    except ProviderUnavailable as exc:
        notes["rerank"] = {"model": reranker.model, "ms": _ms_since(started), "error": str(exc)}
        return fused, f"reranker unavailable, answered without it ({exc})"
    notes["rerank"] = {
        "model": reranker.model,
        "ms": _ms_since(started),
        "documents": len(keys),
        "scored": len(answer.scores),
    }
    return fuse_rerank(fused, keys, answer), None


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)


def load_rows(bm25: Bm25Index, fused: list[Fused], docs: dict, want: int | None, one_per_text: bool = False):
    """(candidate, row) for the best `want` candidates that still have a row, in fused order.

    A vector whose row is gone (deleted since it was embedded) is skipped, and rows are read in
    chunks until `want` are found, so how many are wanted never changes which ones come first.
    """
    want = len(fused) if want is None else want
    found: list[tuple[Fused, Bm25Hit]] = []
    texts: set[str] = set()
    start = 0
    while len(found) < want and start < len(fused):
        chunk = fused[start : start + want - len(found) + _SPARE_ROWS]
        start += len(chunk)
        docs.update(bm25.docs_by_keys([entry.key for entry in chunk if entry.key not in docs]))
        for entry in chunk:
            if entry.key not in docs or len(found) == want:
                continue
            row = row_of(docs[entry.key])
            if one_per_text:
                if row.content_hash in texts:
                    continue
                texts.add(row.content_hash)
            found.append((entry, row))
    return found


def _coverage(bm25: Bm25Index, query: str, lists, docs: dict) -> tuple[list | None, str | None]:
    """Question coverage of the best COVERAGE_POOL candidates of each retriever's list, or None
    and why. Documents it had to read are added to `docs`."""
    pool = list(dict.fromkeys(key for hits in lists for key, _ in hits[:COVERAGE_POOL]))
    docs.update(bm25.docs_by_keys([key for key in pool if key not in docs]))
    try:
        from memvault.indexer.search.coverage import coverage  # numpy: only tiers with vectors cover

        return coverage(query, [(key, *passage_of(docs[key])) for key in pool if key in docs]), None
    except ProviderUnavailable as exc:
        return None, f"question coverage unavailable ({exc})"


def exclude_superseded(bm25: Bm25Index, fused: list[Fused]) -> tuple[list[Fused], str | None]:
    """Curated recall returns current facts only: drop candidates whose memory id a BuJo capture
    superseded or updated (the generation's replay projection, `indexer/search/supersession.py`:
    beside a local generation's folder, or in a server generation's row). Returns the kept
    candidates and, if the projection cannot be read, why the answer is degraded."""
    try:
        retired = retired_ids(bm25)
    except (VaultError, OSError) as exc:
        return fused, f"replay projection unreadable, superseded memories may show ({exc}): run `memvault rebuild`"
    if not retired:
        return fused, None
    return [entry for entry in fused if entry.key.rpartition("#")[2] not in retired], None


def routed_away(query: str, mode: str, run_history: str | None = None) -> RecallResult | None:
    """Guidance without a backend call for active-chat and resume questions, else None.
    `run_history`: the host's run-history tool when it offers one (`tools.hostTools.runHistory`)."""
    route = route_query(query)
    if route in (Route.ACTIVE_CHAT, Route.RESUME_WORK):
        return RecallResult(query, mode, (), guidance=guidance_for(route, run_history))
    return None


def answer_recall(
    bm25: Bm25Index,
    semantic,
    query: str,
    limit: int,
    mode: str,
    *,
    tier: str,
    root,
    run_history: str | None,
    today: date,
    reranker=None,
) -> RecallResult:
    """A checked recall request answered over `bm25` (the committed index, pending rows beside
    it) and `semantic`, as the vault's tier asks: `auto` gates; BuJo's explicit recall adds
    one-hop graph neighbours of the direct hits (graph.jsonl under `root`)."""
    if mode == "auto":
        return recall_auto(bm25, semantic, query, today=today)
    if tier != "bujo":
        return recall_tool(bm25, semantic, query, limit, run_history=run_history, today=today, reranker=reranker)
    result = recall_tool(
        bm25, semantic, query, direct_depth(limit), run_history=run_history, today=today, reranker=reranker
    )
    return expand_recall(root, bm25, result, limit)


def recall_tool(
    bm25: Bm25Index,
    semantic,
    query: str,
    limit: int,
    run_history: str | None = None,
    today: date | None = None,
    floor: bool = True,
    reranker=None,
    extra_list: bool = True,
    asked: bool = True,
    silence: bool = True,
) -> RecallResult:
    """MemoryRecall: up to `limit` hits, each with text, date, source and its fusion evidence.

    `today` (the caller's date in the vault's zone) resolves the periods the question names, which
    favour memories dated in them; None reads no periods. With `floor`, an answer whose evidence
    is below the relevance floor (`floor.py`) is empty and says why in `empty_reason`. A
    `reranker` (`rerank.py`) re-scores the fused head; if it fails the answer says `degraded`.
    `silence=False` is the floor before issue 46 (the bench's "no silence" side)."""
    periods = question_periods(query, today) if today is not None else ()
    notes: dict = {}
    doc_freqs = _remembered(bm25.doc_freqs)  # the discount and the floor look up the same terms
    candidates, degraded = retrieve(
        bm25,
        semantic,
        query,
        rows_for=limit,
        one_per_text=True,
        periods=periods,
        reranker=reranker,
        notes=notes,
        extra_list=extra_list,
        asked=asked,
        doc_freqs=doc_freqs,
    )
    found = evidence(
        doc_freqs,
        query,
        [(row.text, row.context) for _, row in candidates],
        periods,
        near_words=semantic is not None,
        silence=silence,
    )
    explain = {"periods": [period.to_json() for period in periods], "evidence": found.to_json(), **notes}
    empty_reason = None
    if floor and candidates and found.empty:
        candidates, empty_reason = [], EMPTY_REASON
    hits = tuple(_one_hit_per_text(bm25, candidates))
    route = route_query(query)
    guidance = guidance_for(route) if route is Route.BROAD_PERIOD else None
    if not hits:  # an empty answer repeats the run-history handoff so the agent stops rephrasing
        guidance = "\n".join(filter(None, (guidance, run_history_handoff(run_history))))
        empty_reason = empty_reason or EMPTY_REASON
    return RecallResult(
        query, "tool", hits, degraded=degraded, guidance=guidance, empty_reason=empty_reason, explain=explain
    )


def _remembered(doc_freqs):
    """`doc_freqs` answering a lookup it made before from memory (one recall, one searcher)."""
    answers: dict = {}

    def lookup(field: str, terms: list[str]):
        key = (field, tuple(terms))
        if key not in answers:
            answers[key] = doc_freqs(field, terms)
        return answers[key]

    return lookup


def recall_auto(bm25: Bm25Index, semantic, query: str, today: date | None = None) -> RecallResult:
    """What a host injects: only gated direct facts; the gate's reason goes in `gate`."""
    periods = question_periods(query, today) if today is not None else ()
    candidates, degraded = retrieve(bm25, semantic, query, rows_for=2 * WINDOW, periods=periods)
    offered = [
        Candidate(row.id, row.text, entry.score, entry.strength, row.source, row.at) for entry, row in candidates
    ]
    decision = gate_auto(query, offered)
    by_source = {row.source: (entry, row) for entry, row in candidates}
    hits = tuple(_hit(*by_source[candidate.source]) for candidate in decision.hits)
    return RecallResult(query, "auto", hits, degraded=degraded, gate=decision.to_json())


def _one_hit_per_text(bm25: Bm25Index, candidates: list[tuple[Fused, Bm25Hit]]) -> list[RecallHit]:
    """One hit per text, ranked where its best copy ranked, listing every note that holds it.

    The copy a hit shows is the first source in order (the earliest note), not the best-scored
    one: copies of one text score alike, and which scores higher can flip with index statistics
    (deleted rows linger until segments merge), so a rebuild and an incrementally kept index
    would otherwise name different copies of the same memory.
    """
    sources = bm25.sources_by_content_hash([row.content_hash for _, row in candidates])
    shown = {row.content_hash: found[0] for _, row in candidates if len(found := sources.get(row.content_hash, ())) > 1}
    rows = bm25.get_by_keys([source.replace("#^", "#", 1) for source in shown.values()])
    hits = []
    for entry, row in candidates:
        copies = sources.get(row.content_hash, ())
        if len(copies) > 1:
            row = rows.get(shown[row.content_hash].replace("#^", "#", 1), row)
        hit = _hit(entry, row)
        hits.append(dataclasses.replace(hit, sources=tuple(copies)) if len(copies) > 1 else hit)
    return hits


def _hit(entry: Fused, row: Bm25Hit) -> RecallHit:
    return to_recall_hit(row, entry.score, entry.explain)

"""Search across a team's vaults on one index server: one fused list, each hit naming its vault.

    from memvault import search_across
    result = search_across(["team-notes", "ops"], "who owns the deploy keys?", dsn="service=memvault")

Each vault is ranked by its own recall pipeline (BM25 from its own statistics, its own vectors,
question coverage, weighted fusion), then the lists are merged by fused score, which is
rank-based and so comparable between vaults. What the pipelines read is fetched for every vault
at once: two statements on one pooled connection, whatever the number of vaults (the vaults'
serving generations, then every vault's lists, rows and term statistics:
indexer/backend/postgres/across.py), and each vault's pipeline runs over what they fetched, so
the ranking is the one a search of each vault alone gives (`across_per_vault.py`, the reference).
Only vaults the connecting role may read are searched: the server's row-level security decides,
and a vault it hides is named in the error. Needs no vault folder: the embedding model each vault
was built with is stored on the server.
"""

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass

from memvault.indexer.backend import across_plan, open_across_reader
from memvault.indexer.engine.across_rows import FetchedProjection, FetchedRows, FetchedVectors
from memvault.indexer.engine.across_vault import embedder_for, open_vault_index
from memvault.indexer.results import RecallHit
from memvault.indexer.search.floor import looked_up_terms
from memvault.indexer.search.hybrid import CANDIDATE_DEPTH
from memvault.indexer.search.recall import recall_tool
from memvault.vault.config import IndexConfig
from memvault.vault.config_schema import INDEX_NAME_RE
from memvault.vault.errors import IndexUnavailable, InvalidRecord, VaultError

MAX_ACROSS_VAULTS = 32
#: a name shown in an error is cut to this many characters (a hostile one may be long)
_SHOWN = 60


@dataclass(frozen=True)
class AcrossHit:
    vault: str
    hit: RecallHit

    def to_json(self, explain: bool = False) -> dict:
        return {"vault": self.vault, **self.hit.to_json(explain)}


@dataclass(frozen=True)
class AcrossResult:
    query: str
    vaults: tuple[str, ...]
    hits: tuple[AcrossHit, ...]
    degraded: str | None = None

    def to_json(self, explain: bool = False) -> dict:
        return {"query": self.query, "vaults": list(self.vaults), "degraded": self.degraded,
                "hits": [hit.to_json(explain) for hit in self.hits]}  # fmt: skip


def parse_vault_names(text: str) -> list[str]:
    """`--across a,b,…` as vault names, checked (see `parse_names`)."""
    return parse_names(name.strip() for name in text.split(",") if name.strip())


def parse_names(names: Iterable[str]) -> list[str]:
    """Distinct vault names in order; InvalidRecord for none, more than MAX_ACROSS_VAULTS, or a
    name that is not a vault's (a vault's name on the server: 1-40 of a-z, 0-9, '-', '_')."""
    names = list(dict.fromkeys(names))
    if not names:
        raise InvalidRecord("--across needs at least one vault name, e.g. --across team-notes,ops")
    if len(names) > MAX_ACROSS_VAULTS:
        raise InvalidRecord(f"--across names {len(names)} vaults; the limit is {MAX_ACROSS_VAULTS}")
    bad = [name for name in names if not isinstance(name, str) or not INDEX_NAME_RE.fullmatch(name)]
    if bad:
        shown = ", ".join(repr(_shown(name)) for name in bad[:5])
        raise InvalidRecord(f"--across: {shown} is not a vault name: a vault's name on the index server is 1-40 "
                            "lower-case letters, digits, '-' or '_', starting with a letter or digit "
                            "(e.g. --across team-notes,ops)")  # fmt: skip
    return names


def _shown(name) -> str:
    text = re.sub(r"[^\x20-\x7e]", "?", str(name))
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "…"


def check_query(query) -> None:
    if not isinstance(query, str) or not query.strip():
        raise InvalidRecord("the query must be non-empty text")


def search_across(
    names: Iterable[str], query: str, *, dsn: str = "", limit: int = 10, like: IndexConfig | None = None
) -> AcrossResult:
    """One fused list over the named vaults (see the module docstring). Raises IndexUnavailable
    naming every vault the server does not hold or this role may not read, and InvalidRecord for
    names that are no vault's. `like`: an index block whose bounds (pool size, timeout) the
    connection takes."""
    names = parse_names(names)
    check_query(query)
    terms = looked_up_terms(query)
    with open_across_reader(dsn, index=like) as reader:
        serving = reader.serving(names)
        _refuse_missing(names, serving)
        vectors = _query_vectors(query, serving)
        plans = [across_plan(vault, *vectors[vault.name][:2], terms) for vault in serving]
        fetched = reader.candidates(plans, query, CANDIDATE_DEPTH)
        results = [(vault.name, _recall(vault, found, vectors[vault.name], query, limit, dsn, like))
                   for vault, found in zip(serving, fetched, strict=True)]  # fmt: skip
        replica = reader.read_degraded  # the read replica failed: the primary answered
    found = merged(query, names, results, limit)
    if replica is not None:
        found = dataclasses.replace(found, degraded="; ".join(filter(None, [found.degraded, replica])))
    return found


def _recall(vault, found, vector: tuple, query: str, limit: int, dsn: str, like):
    """The vault's own recall over what the batch fetched of it (`across_rows.py`)."""
    live = _LiveVault(vault.name, dsn, like)
    projection = FetchedProjection(vault.name, vault.generation, vault.replay_sha256, vault.replay)
    rows = FetchedRows(found, projection, live.rows)
    semantic = None
    if vault.embedding is not None:  # the list read, or why there is none (as its own recall says)
        hits, degraded = (found.vectors, None) if vector[0] is not None else vector[2]
        semantic = FetchedVectors(hits, degraded, CANDIDATE_DEPTH, live.vectors)
    try:
        return recall_tool(rows, semantic, query, limit)
    finally:
        live.close()


def _refuse_missing(names: list[str], serving: list) -> None:
    hidden = [name for name, vault in zip(names, serving, strict=True) if vault is None]
    if hidden:
        raise IndexUnavailable(
            f"vault(s) {', '.join(hidden)} are not on the index server, or this role may not "
            "read them: ask the server's admin to GRANT memvault_read_<name> TO your role"
        )
    unbuilt = [vault.name for vault in serving if vault.generation is None]
    if unbuilt:
        raise IndexUnavailable(f"vault(s) {', '.join(unbuilt)} have no index on the server yet: run `memvault "
                               "rebuild` on each one's home machine")  # fmt: skip


def _query_vectors(query: str, serving: list) -> dict[str, tuple]:
    """Per vault: (the query's vector in its model's space or None, its dim, (hits, why not) when
    there is no vector). One embedding per model, as each vault's recall would make it."""
    providers: dict = {}
    embedded: dict = {}
    found = {}
    for vault in serving:
        if vault.embedding is None:
            found[vault.name] = (None, None, (None, None))
            continue
        key = (vault.embedding["provider"], vault.embedding["model"], int(vault.embedding["dim"]))
        if key not in embedded:
            embedded[key] = _embed(embedder_for(vault.embedding, providers), query)
        vector, why = embedded[key]
        if vector is None:
            found[vault.name] = (None, None, (None, why))
        elif not vector.any():  # nothing to compare: an empty list, as a vault's own recall
            found[vault.name] = (None, None, ([], None))
        else:
            found[vault.name] = (vector, key[2], None)
    return found


def _embed(embedder, query: str):
    try:
        return embedder().embed_query(query), None
    except VaultError as exc:
        return None, f"vector search unavailable ({exc})"


class _LiveVault:
    """A vault's own backend, opened only if recall asks for something the batch did not fetch."""

    def __init__(self, name: str, dsn: str, like):
        self.name, self.dsn, self.like = name, dsn, like
        self._index = None

    def _open(self):
        if self._index is None:
            self._index = open_vault_index(self.name, self.dsn, self.like)
        return self._index

    def rows(self):
        return self._open()[0].bm25

    def vectors(self):
        return self._open()[1]

    def close(self) -> None:
        if self._index is not None:
            self._index[0].backend.close()


def merged(query: str, names: list[str], results: list, limit: int) -> AcrossResult:
    """The vaults' recall results as one list, by fused score (then vault, then source)."""
    hits: list[AcrossHit] = []
    degraded = []
    for name, result in results:
        if result.degraded:
            degraded.append(f"{name}: {result.degraded}")
        hits.extend(AcrossHit(name, hit) for hit in result.hits)
    hits.sort(key=lambda found: (-found.hit.score, found.vault, found.hit.source))
    return AcrossResult(query, tuple(names), tuple(hits[:limit]), "; ".join(degraded) or None)

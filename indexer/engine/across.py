"""Search across a team's vaults on one index server: one fused list, each hit naming its vault.

    from memvault import search_across
    result = search_across(["team-notes", "ops"], "who owns the deploy keys?", dsn="service=memvault")

Each vault is searched with its own recall pipeline (BM25 from its own statistics, its own
vectors, question coverage, weighted fusion), then the lists are merged by fused score, which is
rank-based and so comparable between vaults. Only vaults the connecting role may read are
searched: the server's row-level security decides, and a vault it hides is named in the error.
Needs no vault folder: the embedding model each vault was built with is stored on the server.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from memvault.indexer.backend import open_backend
from memvault.indexer.maintenance.server_index import ServerIndex, ServerVectors
from memvault.indexer.results import RecallHit
from memvault.indexer.search.recall import recall_tool
from memvault.vault.config import IndexConfig
from memvault.vault.errors import IndexUnavailable, InvalidRecord
from memvault.vault.layout import VaultLayout

MAX_ACROSS_VAULTS = 32
#: a vault searched across has no folder here: only rows are read, never file states
_NO_FOLDER = Path("/nonexistent-memvault-vault")


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
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise InvalidRecord("--across needs at least one vault name, e.g. --across team-notes,ops")
    if len(names) > MAX_ACROSS_VAULTS:
        raise InvalidRecord(f"--across names {len(names)} vaults; the limit is {MAX_ACROSS_VAULTS}")
    return list(dict.fromkeys(names))


def search_across(
    names: Iterable[str], query: str, *, dsn: str = "", limit: int = 10, like: IndexConfig | None = None
) -> AcrossResult:
    """One fused list over the named vaults (see the module docstring). Raises IndexUnavailable
    naming every vault the server does not hold or this role may not read. `like`: an index block
    whose bounds (pool size, timeout) the connections take."""
    names = list(dict.fromkeys(names))
    if not isinstance(query, str) or not query.strip():
        raise InvalidRecord("the query must be non-empty text")
    opened, hidden = [], []
    try:
        for name in names:
            backend = open_backend(IndexConfig.server(name, dsn, like=like), create=False)
            opened.append(backend)
            generation = _serving(backend)
            if generation is None:
                hidden.append(name)
                continue
        if hidden:
            raise IndexUnavailable(
                f"vault(s) {', '.join(hidden)} are not on the index server, or this role may not "
                "read them: ask the server's admin to GRANT memvault_read_<name> TO your role"
            )
        return _merged(query, names, opened, limit)
    finally:
        for backend in opened:
            backend.close()


def _serving(backend) -> int | None:
    try:
        return backend.serving_generation()
    except IndexUnavailable as exc:
        if "is not on the index server" in str(exc):
            return None
        raise


def _merged(query: str, names: list[str], backends: list, limit: int) -> AcrossResult:
    hits: list[AcrossHit] = []
    degraded = []
    for name, backend in zip(names, backends, strict=True):
        number = backend.serving_generation()
        embedding = backend.generation_embedding(number)
        embedder = None if embedding is None else _embedder_for(embedding)
        index = ServerIndex(backend, number, VaultLayout(_NO_FOLDER), embedder, file_states=False)
        vectors = None
        if embedder is not None:
            vectors = ServerVectors(embedder)
            vectors.attach_serving(index)
        result = recall_tool(index.bm25, vectors, query, limit)
        if result.degraded:
            degraded.append(f"{name}: {result.degraded}")
        hits.extend(AcrossHit(name, hit) for hit in result.hits)
    hits.sort(key=lambda found: (-found.hit.score, found.vault, found.hit.source))
    return AcrossResult(query, tuple(names), tuple(hits[:limit]), "; ".join(degraded) or None)


def _embedder_for(embedding: dict):
    cache: list = []

    def embedder():
        if not cache:
            from memvault.indexer.search.embeddings import make_provider

            cache.append(make_provider(embedding["provider"], embedding["model"], int(embedding["dim"]), None))
        return cache[0]

    return embedder

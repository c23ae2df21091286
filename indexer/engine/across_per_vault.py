"""The reference for a search across vaults: each vault searched on a backend of its own with its
own recall pipeline, about twenty statements a vault, one after the other (how `search_across`
worked until issue 42). `search_across` (across.py) reads the same lists, rows and statistics
in two statements whatever the number of vaults; tests/test_postgres_across.py compares the two
rankings on a real server and bench/bench_team.py times both in one run."""

from collections.abc import Iterable

from memvault.indexer.backend import open_backend
from memvault.indexer.engine.across import AcrossHit, AcrossResult, check_query, merged, parse_names
from memvault.indexer.engine.across_vault import vault_index
from memvault.indexer.search.recall import recall_tool
from memvault.vault.config import IndexConfig
from memvault.vault.errors import IndexUnavailable


def search_across_per_vault(
    names: Iterable[str], query: str, *, dsn: str = "", limit: int = 10, like: IndexConfig | None = None
) -> AcrossResult:
    names = parse_names(names)
    check_query(query)
    opened, hidden = [], []
    try:
        for name in names:
            backend = open_backend(IndexConfig.server(name, dsn, like=like), create=False)
            opened.append(backend)
            if _serving(backend) is None:
                hidden.append(name)
        if hidden:
            raise IndexUnavailable(
                f"vault(s) {', '.join(hidden)} are not on the index server, or this role may not "
                "read them: ask the server's admin to GRANT memvault_read_<name> TO your role"
            )
        results = [(name, _recall(backend, query, limit)) for name, backend in zip(names, opened, strict=True)]
        return merged(query, names, results, limit)
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


def _recall(backend, query: str, limit: int):
    index, vectors = vault_index(backend)
    return recall_tool(index.bm25, vectors, query, limit)


__all__ = ["AcrossHit", "search_across_per_vault"]

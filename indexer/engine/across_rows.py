"""One vault's reads for a search across vaults, answered from what the batched statements
fetched (indexer/backend/postgres/across.py), in the shapes recall reads a server's rows in
(`ServerRows`, `ServerVectors`, `ServerProjection`): each vault's recall then runs the very
pipeline a search of that vault alone runs, over the same rows, scores and statistics.

A read the batch did not fetch (recall asking for something new) is answered by the vault's own
backend, as before, so the ranking never depends on what was prefetched; the tests count the
statements, so such a read would show.
"""

from memvault.indexer.backend.base import StoredRow
from memvault.indexer.maintenance.server_index import as_hit, row_document


class FetchedProjection:
    """A generation's replay projection as the first statement read it (`KeptProjection`)."""

    def __init__(self, vault: str, generation: int, sha256: str | None, data: bytes | None):
        self.where = f"generation {generation} of vault {vault!r} on the index server"
        self._sha256, self._data = sha256, data

    def sha256(self) -> str | None:
        return self._sha256

    def read(self) -> bytes | None:
        return self._data

    def held_sha256(self) -> str | None:
        return self._sha256

    def write(self, data: bytes | None) -> bool:
        raise NotImplementedError("a search across vaults only reads")


class FetchedRows:
    """Recall's row and lexical reads of one vault (`ServerRows`' calls) from fetched data."""

    def __init__(self, fetched, projection: FetchedProjection, live):
        self.fetched = fetched  # backend.postgres.across.VaultCandidates
        self.kept_projection = projection
        self._live = live  # () -> the vault's ServerRows, for reads the batch did not fetch
        self.folder = None

    def search_docs(self, query: str, limit: int, kinds=("curated",)):
        if limit != self.fetched.depth or tuple(kinds) != ("curated",):  # another depth reads other lists
            return self._live().search_docs(query, limit, kinds)
        hits = self.fetched.lexical[:limit]
        return hits, {key: row_document(self.fetched.rows[key]) for key, _ in hits}

    def docs_by_keys(self, keys: list[str]) -> dict:
        found, missing = self._rows(keys)
        docs = {key: row_document(row) for key, row in found.items()}
        if missing:
            docs.update(self._live().docs_by_keys(missing))
        return docs

    def get_by_keys(self, keys: list[str]) -> dict:
        found, missing = self._rows(keys)
        hits = {key: as_hit(row) for key, row in found.items()}
        if missing:
            hits.update(self._live().get_by_keys(missing))
        return hits

    def _rows(self, keys: list[str]) -> tuple[dict[str, StoredRow], list[str]]:
        rows = self.fetched.rows
        return {key: rows[key] for key in keys if key in rows}, [key for key in keys if key not in rows]

    def doc_freqs(self, field: str, terms) -> tuple[int, dict[str, int]]:
        terms = sorted(set(terms))
        known = self.fetched.frequencies
        if any(term not in known and term not in self.fetched.asked for term in terms):
            return self._live().doc_freqs(field, terms)
        column = 1 if field == "cjk" else 0
        return self.fetched.total, {term: known[term][column] if term in known else 0 for term in terms}

    def sources_by_content_hash(self, hashes: list[str], kind: str = "curated") -> dict[str, list[str]]:
        sources = self.fetched.sources
        missing = [digest for digest in hashes if digest not in sources]
        if kind != "curated" or missing:
            return self._live().sources_by_content_hash(hashes, kind)
        return {digest: sources[digest] for digest in hashes}


class FetchedVectors:
    """Recall's vector calls for one vault: the list the batch read, or why there is none."""

    searches_beside_bm25 = False

    def __init__(self, hits: list[tuple[str, float]] | None, degraded: str | None, depth: int, live):
        self.hits, self.degraded, self.depth = hits, degraded, depth
        self._live = live  # () -> the vault's ServerVectors, for a list of another depth

    def search(self, query: str, depth: int):
        if self.hits is not None and depth != self.depth:
            return self._live().search(query, depth)
        return (None if self.hits is None else self.hits[:depth]), self.degraded

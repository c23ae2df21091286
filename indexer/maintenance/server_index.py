"""A server backend's generation, shaped like `DerivedIndex`, so sync, rebuild, recall, journal
and health run on it unchanged.

`ServerIndex.apply` is the same single entry for file changes as `DerivedIndex.apply`: it diffs
each file's records against the rows the server really holds, embeds the curated rows it
writes, and hands rows, vectors and file states to the backend in one commit (so on the server
the manifest can never lag the rows). `rows` (the `bm25` attribute) answers recall's row and
lexical calls from the backend; `ServerVectors` answers its vector calls. `ServerProjection`
is a generation's replay projection (BuJo), kept in the generation's own row on the server.
"""

import hashlib
from dataclasses import dataclass
from pathlib import Path

from memvault.indexer.backend.base import BackendDelta, IndexBackend, RowWrite, ServerIndexBackend, StoredRow
from memvault.indexer.maintenance.derived import BoundaryHook, FileIndexing
from memvault.indexer.maintenance.generations import FileState
from memvault.indexer.maintenance.sync import IndexDelta, KnownRows, Row, diff_known, diff_rows, needs_reading
from memvault.indexer.search.bm25 import Bm25Hit, context_hash, record_key
from memvault.vault.errors import IndexUnavailable, ProviderUnavailable, VaultError
from memvault.vault.layout import VaultLayout, parse_note_relpath
from memvault.vault.limits import SHUTDOWN_DRAIN_SECONDS
from memvault.vault.records import MemoryRecord


class RowDocument(dict):
    """A stored row in the shape recall reads documents in (`row_of`, `passage_of`)."""

    def get_all(self, name: str) -> list:
        return self.get(name, [])


def row_document(row: StoredRow) -> RowDocument:
    return RowDocument(key=[row.key], id=[row.id], path=[row.path], kind=[row.kind], day=[row.day.isoformat()],
                       at=[int(row.at.timestamp())], text=[row.text], chash=[row.content_hash],
                       ctxh=[row.context_hash], ctx=[row.context] if row.context else [])  # fmt: skip


def as_hit(row: StoredRow, score: float = 0.0) -> Bm25Hit:
    return Bm25Hit(row.key, row.id, row.path, row.kind, row.day, row.at, row.text, row.content_hash,
                   float(score), row.context_hash, row.context)  # fmt: skip


def as_row(row: StoredRow) -> Row:
    return Row(row.key, row.id, row.path, row.kind, row.day.isoformat(), row.content_hash, row.text,
               int(row.at.timestamp()), row.context_hash)  # fmt: skip


#: duplicate checks since the last commit after which all curated hashes are fetched at once
_BULK_LOOKUPS = 16
#: Tantivy's raw field names → StoredRow attributes (what `term_counts` may be asked about)
_RAW_FIELDS = {"key": "key", "id": "id", "path": "path", "kind": "kind", "day": "day", "chash": "content_hash",
               "ctxh": "context_hash"}  # fmt: skip


#: a projection's digest not read yet
_UNSEEN = object()


class ServerProjection:
    """A server generation's replay projection (`supersession.KeptProjection`): the sidecar's
    bytes in the generation's row, so it switches with the generation and goes with it."""

    def __init__(self, backend: ServerIndexBackend, number: int):
        self.backend = backend
        self.number = number
        self.where = f"generation {number} of vault {getattr(backend, 'vault', '?')!r} on the index server"
        self._sha256 = _UNSEEN

    def seen(self, sha256: str | None) -> None:
        """The digest a reader just read with the serving pointer (no round trip of its own)."""
        self._sha256 = sha256

    def sha256(self) -> str | None:
        if self._sha256 is _UNSEEN:
            self._sha256 = self.backend.replay_sha256(self.number)
        return self._sha256

    def read(self) -> bytes | None:
        data = self.backend.replay_projection(self.number)
        self._sha256 = None if data is None else hashlib.sha256(data).hexdigest()
        return data

    def held_sha256(self) -> str | None:
        """The digest of the bytes the server holds, computed there (capture's read-back)."""
        return self.backend.replay_held_sha256(self.number)

    def write(self, data: bytes | None) -> bool:
        wanted = None if data is None else hashlib.sha256(data).hexdigest()
        if self.backend.replay_sha256(self.number) == wanted:
            self._sha256 = wanted
            return False
        self.backend.set_replay_projection(self.number, data)
        self._sha256 = wanted
        return True


class ServerRows:
    """Recall's row and lexical reads (the calls it makes of a Tantivy index), from a backend."""

    def __init__(
        self, backend: ServerIndexBackend, generation: int, folder: Path, projection: ServerProjection | None = None
    ):
        self.backend = backend
        self.generation = generation
        #: the path standing for the generation's folder (a server generation has none)
        self.folder = folder
        #: the generation's replay projection: recall's supersession filter reads it
        self.kept_projection = projection or ServerProjection(backend, generation)
        #: content hash → first key of every curated row, once a bulk import has asked often
        #: enough that one fetch beats a round trip per fact; dropped at every commit
        self._hash_keys: dict[str, str] | None = None
        self._hash_lookups = 0

    def forget_cached(self) -> None:
        """Called after every commit (this process's or, on reload, another's)."""
        self._hash_keys, self._hash_lookups = None, 0

    def refresh(self) -> None:
        """Every read asks the server: nothing to reload."""

    def search_docs(self, query: str, limit: int, kinds=("curated",)):
        hits, rows = self.backend.lexical_rows(self.generation, query, limit, tuple(kinds))  # one round trip
        return hits, {key: row_document(row) for key, row in rows.items()}

    def search_keys(self, query: str, limit: int, kinds=("curated",)) -> list[tuple[str, float]]:
        return self.backend.lexical_candidates(self.generation, query, limit, tuple(kinds))

    def search(self, query: str, limit: int, kinds=("curated",)) -> list[Bm25Hit]:
        hits = self.backend.lexical_candidates(self.generation, query, limit, tuple(kinds))
        rows = self.backend.rows_by_keys(self.generation, [key for key, _ in hits])
        return [as_hit(rows[key], score) for key, score in hits if key in rows]

    def docs_by_keys(self, keys: list[str]) -> dict[str, RowDocument]:
        return {key: row_document(row) for key, row in self.backend.rows_by_keys(self.generation, keys).items()}

    def get_by_keys(self, keys: list[str]) -> dict[str, Bm25Hit]:
        return {key: as_hit(row) for key, row in self.backend.rows_by_keys(self.generation, keys).items()}

    def find_by_content_hash(self, content_hash: str, kind: str = "curated") -> Bm25Hit | None:
        if kind == "curated":
            if self._hash_keys is None and self._hash_lookups >= _BULK_LOOKUPS:
                self._hash_keys = self.backend.content_hash_keys(self.generation)
            self._hash_lookups += 1
            if self._hash_keys is not None:
                key = self._hash_keys.get(content_hash)
                row = None if key is None else self.backend.rows_by_keys(self.generation, [key]).get(key)
                return None if row is None else as_hit(row)
        rows = self.backend.rows_by_content_hash(self.generation, [content_hash], kind)
        return as_hit(min(rows, key=lambda row: row.key)) if rows else None

    def sources_by_content_hash(self, hashes: list[str], kind: str = "curated") -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for row in self.backend.rows_by_content_hash(self.generation, hashes, kind):
            found.setdefault(row.content_hash, []).append(f"{row.path}#^{row.id}")
        return {h: sorted(sources) for h, sources in found.items()}

    def hits_for_path(self, path: str) -> list[Bm25Hit]:
        return [as_hit(row) for row in self.backend.rows_of(self.generation, path)]

    def all_hits(self) -> list[Bm25Hit]:
        return [as_hit(row) for row in self.backend.all_rows(self.generation)]

    def doc_freqs(self, field: str, terms) -> tuple[int, dict[str, int]]:
        """BM25's statistics for a score computed outside the engine: a row's own text, or its CJK
        bigrams (`cjk`), as the local index's fields (its neighbours' words are not asked for)."""
        if field == "cjk":  # a server backend's own keyword (the seam's call has no field)
            return self.backend.term_frequencies(self.generation, terms, field="cjk")
        return self.backend.term_frequencies(self.generation, terms)

    def count(self) -> int:
        return self.backend.counts(self.generation).rows

    def count_kind(self, kind: str) -> int:
        return self.backend.counts(self.generation).by_kind.get(kind, 0)

    def term_counts(self, field: str, kind: str | None = None) -> dict[str, int]:
        """Rows per value of a raw field (`path`, `kind`, `day`, `chash`, …), optionally of one kind."""
        if field == "path" and kind is None:
            return self.backend.counts(self.generation).by_path
        attribute = _RAW_FIELDS[field]
        counts: dict[str, int] = {}
        for row in self.backend.all_rows(self.generation):
            if kind is None or row.kind == kind:
                value = getattr(row, attribute)
                value = value.isoformat() if attribute == "day" else value
                counts[value] = counts.get(value, 0) + 1
        return counts

    def deleted_rows(self) -> int:
        return 0  # a deleted row leaves the server's statistics at once


class ServerManifest:
    """The files the server's generation has seen (kept on the server, written with the rows)."""

    def __init__(self, files: dict[str, FileState], embedding: dict | None):
        self.files = files
        self.embedding = embedding
        self.schema = None

    def save(self, path) -> None:
        """Nothing to write: `apply` records file states in its own commit."""


def generation_name(backend: IndexBackend, number: int) -> str:
    """The name standing for a server generation where a folder's would be (health, paths)."""
    return f"{backend.engine}-{getattr(backend, 'vault', 'vault')}-g{number:06d}"


def generation_number(backend: IndexBackend, name: str) -> int | None:
    """The generation a `generation_name` of this backend's vault names, else None."""
    prefix = f"{backend.engine}-{getattr(backend, 'vault', 'vault')}-g"
    digits = name[len(prefix) :] if name.startswith(prefix) else ""
    return int(digits) if digits.isdigit() else None


@dataclass(frozen=True)
class PreparedApply:
    """One `ServerIndex.apply` between its halves: the diff, the file states, the backend's delta."""

    delta: IndexDelta
    files: dict[str, FileState | None]
    backend_delta: BackendDelta


class ServerIndex:
    """One generation of a server backend, for MemoryStore, sync, journal and health."""

    #: vectors live in the rows (no `vectors/` folder to check, nothing to embed in the background)
    has_local_vectors = False
    #: the server's versions, vault and generation, once health asked (shown in its details)
    server_details: dict | None = None

    def __init__(
        self, backend: ServerIndexBackend, number: int, layout: VaultLayout, embedder=None, *, file_states: bool = True
    ):
        self.backend = backend
        self.number = number
        self.layout = layout
        self.embedder = embedder  # () -> EmbeddingProvider, or None for a tier without vectors
        self.generation = layout.index_dir / generation_name(backend, number)
        #: its replay projection (BuJo), on the server beside its rows
        self.replay = ServerProjection(backend, number)
        self.bm25 = ServerRows(backend, number, self.generation / "bm25", self.replay)
        self.components: list = []
        self.manifest = ServerManifest({}, None)
        if file_states:  # a reader of other vaults (search across) has no right to them, nor need
            self.reload()

    def reload(self) -> None:
        """Read the file states and embedding identity again (another process committed)."""
        files = {path: FileState.from_json(state) for path, state in self.backend.file_states(self.number).items()}
        self.manifest = ServerManifest(files, self.backend.generation_embedding(self.number))
        self.bm25.forget_cached()

    # --- writing -------------------------------------------------------------------------------

    def apply(self, indexed: list[FileIndexing], hook: BoundaryHook | None = None) -> IndexDelta:
        """`DerivedIndex.apply` on the server."""
        prepared = self.prepare(indexed)
        if prepared is not None:
            self.write(prepared)
            self.written(prepared, hook)
        return IndexDelta() if prepared is None else prepared.delta

    def prepare(self, indexed: list[FileIndexing]) -> PreparedApply | None:
        """`apply`'s first half, on the calling thread: the diff against the rows the server holds
        and the vectors of the rows to write; None when nothing changes."""
        delta = IndexDelta()
        if not indexed:
            return None
        held = self._rows_by_path([item.path for item in indexed])
        for item in indexed:
            delta.extend(diff_rows(item.path, held.get(item.path, {}), item.records))
        files = self._changed_states(indexed)
        if delta.is_empty and not files:
            return None
        return PreparedApply(
            delta,
            files,
            BackendDelta(
                tuple(sorted(delta.deleted)),
                self._writes(delta),
                {p: (s.to_json() if s else None) for p, s in files.items()},
            ),
        )

    def write(self, prepared: PreparedApply) -> None:
        """`apply`'s commit on the server (safe on another thread than `prepare`'s: a rebuild's
        load writes one batch while it reads and embeds the next)."""
        try:
            self.backend.apply(self.number, prepared.backend_delta)
        finally:
            self.bm25.forget_cached()

    def written(self, prepared: PreparedApply, hook: BoundaryHook | None = None) -> None:
        """After `write`, on the thread that prepares: the file states it recorded."""
        if hook is not None and not prepared.delta.is_empty:
            hook("apply.committed")
        for path, state in prepared.files.items():
            if state is None:
                self.manifest.files.pop(path, None)
            else:
                self.manifest.files[path] = state

    def _rows_by_path(self, paths: list[str]) -> dict[str, dict[str, Row]]:
        held: dict[str, dict[str, Row]] = {}
        for row in self.backend.journal_rows(self.number, paths):
            held.setdefault(row.path, {})[row.key] = as_row(row)
        return held

    def _changed_states(self, indexed: list[FileIndexing]) -> dict[str, FileState | None]:
        changed: dict[str, FileState | None] = {}
        for item in indexed:
            before = self.manifest.files.get(item.path)
            if item.state is None and before is not None:
                changed[item.path] = None
            elif item.state is not None and before != item.state:
                changed[item.path] = item.state
        return changed

    def _writes(self, delta: IndexDelta) -> tuple[RowWrite, ...]:
        curated = [record for record in delta.upserts if record.kind == "curated"]
        vectors = {}
        if self.embedder is not None and curated:
            from memvault.indexer.maintenance.semantic import embed_passages

            try:
                embedded = embed_passages(self.embedder(), curated)
            except VaultError as exc:  # nothing was written: the files are read again next time
                raise ProviderUnavailable(
                    f"could not embed {len(curated)} memories for the index server ({exc})"
                ) from exc
            vectors = {record_key(r.path, r.id): embedded[i] for i, r in enumerate(curated)}
        return tuple(
            RowWrite(record_key(r.path, r.id), r, context_hash(r.context), vectors.get(record_key(r.path, r.id)))
            for r in delta.upserts
        )

    # --- reading -------------------------------------------------------------------------------

    def rows_of(self, path: str) -> dict[str, Row]:
        return {row.key: as_row(row) for row in self.backend.rows_of(self.number, path)}

    def diff_note(self, path: str, records: list[MemoryRecord]) -> tuple[IndexDelta, KnownRows]:
        """What turns this file's rows on the server into `records` (`DerivedIndex.diff_note`)."""
        return diff_known(path, KnownRows(self.rows_of(path)), records)

    def row_counts(self) -> dict[str, int]:
        return self.backend.counts(self.number).by_path

    def all_rows(self) -> list[Row]:
        return sorted(as_row(row) for row in self.backend.all_rows(self.number))

    def deleted_rows(self) -> int:
        return 0

    def stale_paths(self, layout: VaultLayout, paths: list[str] | None = None) -> list[str]:
        """As `DerivedIndex.stale_paths`: changed, new and vanished notes (the stat fast path)."""
        if paths is None:
            candidates = set(layout.note_relpaths()) | set(self.manifest.files) | set(self.row_counts())
        else:
            candidates = {path for path in paths if parse_note_relpath(path) is not None}
        return sorted(p for p in candidates if needs_reading(layout.root / p, self.manifest.files.get(p)))


class ServerVectors:
    """Recall's vector calls (a SemanticService's), answered by the backend's vector candidates.

    Vectors are written by `ServerIndex.apply` in the rows' own commit, so the background queue's
    lifecycle calls have nothing to do here."""

    catch_up_source = None
    lag_reason = None
    waiting = 0

    def __init__(self, embedder):
        self.embedder = embedder
        self.index: ServerIndex | None = None

    def attach_serving(self, index) -> None:
        self.index = index

    @property
    def searches_beside_bm25(self) -> bool:
        """Whether recall may ask for this list while its lexical list runs: when the backend
        runs statements of different threads at once (each on a connection of its own)."""
        return self.index is not None and self.index.backend.concurrent_statements >= 2

    def catch_up(self, index, vault_zone: str, *, thorough: bool = False) -> int:
        return 0  # no row is ever written without its vector

    def stop(self, timeout: float = SHUTDOWN_DRAIN_SECONDS) -> bool:
        return True

    def drain(self, timeout: float = SHUTDOWN_DRAIN_SECONDS) -> bool:
        return True

    def search(self, query: str, depth: int):
        if self.index is None:
            return None, "vector index not loaded"
        try:
            provider = self.embedder()
            mismatch = _identity_mismatch(self.index, provider)
            if mismatch is not None:  # another model's vectors are never compared with this one's
                return None, f"vector search unavailable ({mismatch})"
            vector = provider.embed_query(query)
        except VaultError as exc:
            return None, f"vector search unavailable ({exc})"
        if not vector.any():
            return [], None
        try:
            return self.index.backend.vector_candidates(self.index.number, vector, depth), None
        except IndexUnavailable as exc:
            return None, f"vector search unavailable ({exc})"


def _identity_mismatch(index: ServerIndex, provider) -> str | None:
    """Why the generation's vectors cannot answer this provider's queries, or None."""
    stored, identity = index.manifest.embedding, getattr(provider, "identity", None)
    if not stored or identity is None:
        return None
    built = f"{stored.get('provider')}/{stored.get('model')}/{stored.get('dim')}"
    if built == identity.describe():
        return None
    vault = getattr(index.backend, "vault", "?")
    return (
        f"the vectors of vault {vault!r} on the index server were built with {built} but config says "
        f"{identity.describe()}: run `memvault rebuild`"
    )

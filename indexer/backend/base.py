"""The index backend seam: what the engine needs from a vault's derived index, in its own words.

`IndexGenerations` (at the end) is what `MemoryStore` drives, whatever the engine: the serving
generation, a new one built beside it, the swap, health. Each engine implements it once:
Tantivy + hnswlib in `.index/` (`maintenance/local_generations.py`, the default) and an index
server (`maintenance/server_generations.py`), chosen from the config in
`maintenance/index_engines.py`. Nothing above this module imports an engine's own classes;
where the engines differ it says so in a capability its callers read, never `if backend == …`.

`IndexBackend` is what a server engine stores for one vault: generations of rows (one row per
memory bullet, keyed `path#id`), each row's vector, and the index's account of which file bytes
it has seen. `ServerGenerations` drives it through `maintenance/server_index.py`, which diffs
files against the rows a backend returns and hands it deltas; recall asks it for ranked
candidate lists and fuses them itself, so fusion, question coverage and the modes are the same
as on the local engine. PostgreSQL + pgvector (`indexer/backend/postgres/`) is its engine; the
conformance suite (tests/test_backend_conformance.py) runs the same checks on it and on the
local engine's own components behind the same calls (tests/local_row_backend.py), so both
rank alike row for row.

Guarantees every engine keeps:
* `apply` is one commit: when it returns, the rows, their vectors and the file states are
  durable together; when it raises, none of them changed. Applying the same delta twice leaves
  the same rows (idempotent), so a crash is repaired by applying the files again.
* Readers see only activated generations, each one whole: `activate_generation` switches the
  serving generation in one step, and a generation being built is never served.
* Candidate lists are best first, ties broken by key, at most `depth` long, and only ever hold
  rows of the vault and generation asked about.
"""

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import date, datetime
from typing import Protocol, runtime_checkable

from memvault.vault.errors import StorageError
from memvault.vault.records import MemoryRecord


class IndexServerUnavailable(StorageError):
    """The index server cannot be reached (down, restarting, a network fault). A storage error,
    like a full disk: the notes stay written, the index lags, and every later call retries, so
    an owner catches up by itself once the server is back. Never a reason to rebuild."""

    code = "index_server_unavailable"


@dataclass(frozen=True)
class StoredRow:
    """One row as a backend stores it (the fields sync compares, plus its neighbours' text)."""

    key: str  # "daily/2026-11-30.md#m-1f3a9c0d2e"
    id: str
    path: str
    kind: str  # "curated" | "audit"
    day: date
    at: datetime  # UTC
    text: str
    content_hash: str
    context_hash: str = ""
    context: str = ""


@dataclass(frozen=True)
class RowWrite:
    """A row to (re)write: the record, its key and context hash, and its vector (None: no vectors
    in this tier, or the row is not curated)."""

    key: str
    record: MemoryRecord
    context_hash: str
    vector: Sequence[float] | None = None


@dataclass(frozen=True)
class BackendDelta:
    """What one `apply` changes: keys to delete, rows to write, file states to record (a path
    mapped to None forgets it). File states are opaque JSON objects to a backend."""

    deleted: tuple[str, ...] = ()
    writes: tuple[RowWrite, ...] = ()
    files: dict | None = None


@dataclass(frozen=True)
class BackendCounts:
    """Counts for health: live rows, rows per kind, rows per file, rows lacking a vector."""

    rows: int
    by_kind: dict
    by_path: dict
    without_vector: int = 0


@runtime_checkable
class IndexBackend(Protocol):
    """One vault's index on one engine. Methods without `generation` act on the serving one."""

    #: the engine's name in messages and `health` ("local", "postgres")
    engine: str

    # --- generations --------------------------------------------------------------------------

    def serving_generation(self) -> int | None:
        """The generation readers use, or None before the first build."""

    def create_generation(self, embedding: dict | None) -> int:
        """A new, empty generation that no reader sees until it is activated."""

    def activate_generation(self, generation: int) -> None:
        """Make `generation` the serving one, atomically; older ones may be dropped after."""

    def drop_generation(self, generation: int) -> None:
        """Remove a generation that is not serving (a killed or failed build). Idempotent."""

    def generation_embedding(self, generation: int) -> dict | None:
        """The embedding identity a generation was created for ({"provider","model","dim"})."""

    # --- writes -------------------------------------------------------------------------------

    def apply(self, generation: int, delta: BackendDelta) -> None:
        """Delete `delta.deleted`, write `delta.writes` (replacing rows of the same key) and record
        the file states, durably, in one commit (see the module docstring)."""

    # --- reads --------------------------------------------------------------------------------

    def rows_of(self, generation: int, path: str) -> list[StoredRow]:
        """Every row of one note file."""

    def rows_by_keys(self, generation: int, keys: Iterable[str]) -> dict[str, StoredRow]:
        """Rows for these keys; absent keys are missing from the result."""

    def rows_by_content_hash(self, generation: int, hashes: Iterable[str], kind: str = "curated") -> list[StoredRow]:
        """Every row of `kind` whose text has one of these content hashes (Remember's duplicate check)."""

    def content_hash_keys(self, generation: int) -> dict[str, str]:
        """Every curated row's content hash with its smallest key (bulk imports check many facts
        for duplicates at once)."""

    def journal_rows(self, generation: int, paths: Iterable[str]) -> list[StoredRow]:
        """Every row of these notes (MemoryJournal reads a date range as its daily notes)."""

    def all_rows(self, generation: int) -> list[StoredRow]:
        """Every row (health --strict, parity tests): not for hot paths."""

    def file_states(self, generation: int) -> dict:
        """path → the file state last recorded by `apply`."""

    def lexical_candidates(
        self, generation: int, query: str, depth: int, kinds: Sequence[str] = ("curated",)
    ) -> list[tuple[str, float]]:
        """(key, BM25 score) of the best `depth` rows for user text, best first, ties by key."""

    def term_frequencies(self, generation: int, terms: Iterable[str]) -> tuple[int, dict[str, int]]:
        """(rows in the generation, how many rows' own text holds each term): BM25's statistics,
        for scores computed outside the engine. Terms are already analysed (lower-cased, stemmed)."""

    def vector_candidates(self, generation: int, vector: Sequence[float], depth: int) -> list[tuple[str, float]]:
        """(key, cosine similarity) of the `depth` nearest curated rows, best first. Never fewer
        than min(depth, curated rows with a vector): a filter must not starve the list."""

    def counts(self, generation: int) -> BackendCounts:
        """Live counts for health and rebuild reports."""

    def stamp(self) -> object:
        """A value that changes with every commit by any process (readers reload on a change)."""

    def close(self) -> None:
        """Release connections; the backend can be opened again later."""


class ServerIndexBackend(IndexBackend, Protocol):
    """An IndexBackend whose generations live on an index server (`ServerIndex` reads them; the
    local engine keeps the same things in its generation folders instead): what a server must
    offer beyond the seam's calls."""

    #: statements of different threads it runs at once (recall's vector list beside its lexical
    #: list needs 2; 1: one at a time)
    concurrent_statements: int

    def lexical_rows(
        self, generation: int, query: str, depth: int, kinds: Sequence[str] = ("curated",)
    ) -> tuple[list[tuple[str, float]], dict[str, StoredRow]]:
        """`lexical_candidates` and the rows of its hits, in one round trip and one snapshot."""

    def term_frequencies(
        self, generation: int, terms: Iterable[str], field: str = "text"
    ) -> tuple[int, dict[str, int]]:
        """As the seam's, and with field "cjk" the rows holding each CJK bigram."""

    def keys_without_vector(self, generation: int) -> list[str]:
        """Curated rows of a generation with vectors that hold none (strict health names them)."""

    # --- the replay projection (BuJo): the sidecar's exact bytes, kept with its generation ----

    def serving_replay(self) -> tuple[int | None, str | None]:
        """(the serving generation, the SHA-256 of its projection or None) in one round trip."""

    def replay_sha256(self, generation: int) -> str | None:
        """The SHA-256 recorded with a generation's projection, None when it holds none."""

    def replay_held_sha256(self, generation: int) -> str | None:
        """The SHA-256 the server computes of the bytes it holds (proves them without sending them)."""

    def replay_projection(self, generation: int) -> bytes | None:
        """A generation's projection bytes, None when it holds none."""

    def set_replay_projection(self, generation: int, data: bytes | None) -> None:
        """Make the generation hold exactly `data` (None: no projection), in one statement."""


class IndexGenerations(Protocol):
    """What `MemoryStore` asks of its engine: the serving generation, a new one built beside it,
    the swap, health and closing. Generations are the engine's index objects (`DerivedIndex`,
    `ServerIndex`); the store diffs notes into them through their `apply`."""

    #: the serving generation this process last opened, or None
    current: object | None
    #: the engine's vectors (`semantic_service.SemanticService`, `server_index.ServerVectors`), or None
    vectors: object | None
    #: the server's rows of the vault (`ServerIndexBackend`), or None on the local engine
    backend: object | None
    #: the index is files on this machine: another process of the vault (a client of the owner,
    #: the web pages) may open and read them itself; False: the owner answers its reads
    files_on_this_machine: bool

    def serving(self, create_missing: bool) -> object:
        """The serving generation, built first when `create_missing` and there is none yet."""

    def writable(self) -> object:
        """The serving generation, current with other processes' commits. Vault lock held."""

    def seen(self, generation: object) -> None:
        """This process committed to `generation` (the serving one): not another's commit."""

    def building(self) -> AbstractContextManager[None]:
        """Around a rebuild's build and swap (rebuild lock held): leftovers of killed builds go
        first, and a failure leaves the serving generation as it was."""

    def build(self, progress, hook=None) -> object:
        """A new generation holding every note, not serving yet."""

    def swap_in(self, generation: object, hook=None, progress=None) -> None:
        """Catch up with writes made while building, then make it serving. Vault lock held."""

    def compact(self, hook=None) -> bool:
        """Rewrite the serving generation from its own rows; False when there was nothing to do."""

    def health_report(self, config, *, strict: bool, extra) -> dict:
        """`memvault health` as JSON (`maintenance/health.py`) under the store's `config` as it is
        now, with `extra` findings (the owner's own state)."""

    def close(self) -> None:
        """Let go of the serving generation and any connection."""

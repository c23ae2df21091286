"""`PostgresBackend`: one vault's index on PostgreSQL + pgvector (the `IndexBackend` seam).

Up to two connections of the process's pool for the backend's DSN at once (connection.py: the
pool is bounded by `index.poolSize` over every store of the process). A connection the server
dropped while idle (a restart) is replaced before the next call uses it; one that breaks during
a call fails that call with IndexServerUnavailable, and files stay the truth, so the next sync
catches the server up.

A backend that never writes rows (a connected client's) may read a standby instead (`read_dsn`,
replica.py): its read methods go through `self._reads`, and run once more on the primary when
the standby fails during one (`read_retried`).
"""

import hashlib
import json
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime

from memvault.indexer.backend.base import BackendCounts, BackendDelta, StoredRow
from memvault.indexer.backend.postgres import schema
from memvault.indexer.backend.postgres.connection import (
    ServerBounds,
    ServerSession,
    index_builds,
    owner_dsn_checked,
    require_psycopg,
)
from memvault.indexer.backend.postgres.lexical import (
    BM25_SQL,
    cjk_bigrams,
    kind_codes,
    query_bigrams,
    query_words,
    read_sizes,
    words,
)
from memvault.indexer.backend.postgres.postings import DELETE_ROWS, INSERT_STAGED, merge_delta, merge_if_due
from memvault.indexer.backend.postgres.replica import ReadRoute, read_retried
from memvault.vault.errors import IndexUnavailable

_ROW_COLUMNS = "key, id, path, kind, day, at, text, content_hash, context_hash, context"
_STAGING = (
    "CREATE TEMP TABLE IF NOT EXISTS memvault_staging (vault text, generation integer, key text, id text, "
    "path text, kind text, day date, at bigint, text text, content_hash text, context_hash text, "
    "context text, own text, around text, text_len integer, ctx_len integer, embedding vector, grams text[], "
    "cjk_len integer) "
    "ON COMMIT DELETE ROWS"
)
_STAGING_TYPES = [
    "text",
    "int4",
    "text",
    "text",
    "text",
    "text",
    "date",
    "int8",
    "text",
    "text",
    "text",
    "text",
    "text",
    "text",
    "int4",
    "int4",
    "vector",
    "text[]",
    "int4",
]
#: HNSW's candidate list: pgvector returns at most ef_search rows, so it is the depth asked for
#: (recall asks 100: the session's setting, no SET per query); its default, 40, would cap the list
_MIN_EF_SEARCH = 40
_SESSION_EF_SEARCH = 100
_MAX_EF_SEARCH = 1000
#: a batch of at least this many rows, and at least as many as the generation holds, builds its
#: HNSW and postings indexes again after the load instead of inserting into them (bulk imports
#: into small vaults)
_REBUILD_INDEXES_FROM = 256
#: connections a backend opens at most (each when first needed): a recall's lexical and vector
#: lists run at once, one on each
_CONNECTIONS = 2


class PostgresBackend:
    engine = "postgres"

    def __init__(
        self, dsn: str, vault: str, *, create: bool = True, bounds: ServerBounds | None = None, read_dsn: str = ""
    ):
        """`read_dsn`: a standby the reads go to (replica.py), for a backend that never writes rows
        (a connected client's): an owner reads the rows its writes are diffed against from the
        primary."""
        require_psycopg()
        self.dsn = dsn
        self.vault = schema.check_vault_name(vault)
        self._session = ServerSession(
            dsn, prepare=_prepare_session, refusal=self._refusal, size=_CONNECTIONS, bounds=bounds
        )
        #: where reads go: the primary, or a route to a standby that falls back to it
        self._reads = self._session
        if read_dsn:
            self._reads = ReadRoute(
                self._session, read_dsn, prepare=_prepare_session, refusal=self._refusal, size=_CONNECTIONS
            )
        #: statements of different threads this backend runs at once
        self.concurrent_statements = min(_CONNECTIONS, self._session.pool.bounds.pool_size)
        self._dims: dict[int, int | None] = {}
        self._with_postings: set[int] = set()
        self._create = create
        if create:  # what writes the index holds sessions: a rebuild's index builds, the owner's fence
            owner_dsn_checked(dsn, self._session.pool.bounds, f"writing vault {self.vault!r}'s index")
        with self._session(wrote=create) as conn:
            if create:
                schema.ensure_schema(conn)
                schema.ensure_vault(conn, self.vault)

    # --- connection ----------------------------------------------------------------------------

    def _refusal(self, exc) -> IndexUnavailable | None:
        """A table of the index gone from the server (dropped, a database restored without it)."""
        if isinstance(exc, require_psycopg().errors.UndefinedTable):
            return IndexUnavailable(f"the index tables of vault {self.vault!r} are missing on the index server: run "
                                    "`memvault rebuild` on the vault's machine (or `memvault init --index postgres` "
                                    "for a new vault)")  # fmt: skip
        return None

    @property
    def read_degraded(self) -> str | None:
        """Why the last read went to the primary instead of the read replica (None: it did not)."""
        return getattr(self._reads, "degraded", None)

    def close(self) -> None:
        self._session.close()
        if self._reads is not self._session:
            self._reads.close()

    # --- generations ---------------------------------------------------------------------------

    @read_retried
    def serving_generation(self) -> int | None:
        try:
            with self._reads() as conn:
                row = conn.execute("SELECT serving FROM memvault_vaults WHERE name = %s", (self.vault,)).fetchone()
        except IndexUnavailable:
            if self._made_again():
                return None
            raise
        if row is None:
            if self._made_again():
                return None
            raise IndexUnavailable(f"vault {self.vault!r} is not on the index server (or this role may not read it)")
        return row[0]

    def _made_again(self) -> bool:
        """An owner's database lost memvault's tables or this vault's row (emptied, restored
        without them): make them again and forget what was cached of the old generations, so no
        generation serves and the next write builds one, as after a lost `.index/`. True if so."""
        if not self._create:
            return False
        with self._session(wrote=True) as conn:
            if schema.tables_present(conn) and conn.execute("SELECT 1 FROM memvault_vaults WHERE name = %s",
                                                            (self.vault,)).fetchone() is not None:  # fmt: skip
                return False
            schema.ensure_schema(conn)
            schema.ensure_vault(conn, self.vault)
        self._dims.clear()
        self._with_postings.clear()
        return True

    @read_retried
    def generations(self) -> list[int]:
        with self._reads() as conn:
            rows = conn.execute("SELECT generation FROM memvault_generations WHERE vault = %s ORDER BY generation",
                                (self.vault,)).fetchall()  # fmt: skip
        return [row[0] for row in rows]

    def create_generation(self, embedding: dict | None) -> int:
        dim = None if embedding is None else int(embedding["dim"])
        with self._session(wrote=True) as conn, conn.transaction():
            number = conn.execute(
                "UPDATE memvault_vaults SET next_generation = next_generation + 1 WHERE name = %s "
                "RETURNING next_generation - 1", (self.vault,)).fetchone()[0]  # fmt: skip
            schema.create_leaf(conn, self.vault, number)
            conn.execute(
                "INSERT INTO memvault_generations (vault, generation, embedding, dim) VALUES (%s, %s, %s, %s)",
                (self.vault, number, None if embedding is None else json.dumps(embedding), dim),
            )
        self._dims[number] = dim
        self._with_postings.add(number)
        return number

    def activate_generation(self, generation: int) -> None:
        """Build the leaf's vector index (before the switch: readers never wait on it), then move
        the pointer in one transaction and drop generations older than the previous one."""
        dim = self._dim(generation)
        with self._session(wrote=True) as conn, index_builds(conn):  # minutes on a large vault: no statement bound
            schema.ensure_postings_indexes(conn, self.vault, generation)
            with conn.transaction():  # the load's delta sealed into blocks once (lexical.py)
                merge_delta(conn, self._lexical_leaves(generation)[0], self.vault, generation)
            if dim is not None:
                schema.ensure_vector_index(conn, self.vault, generation, dim)
            schema.analyze_leaf(conn, self.vault, generation)
            with conn.transaction():
                previous = conn.execute("SELECT serving FROM memvault_vaults WHERE name = %s FOR UPDATE",
                                        (self.vault,)).fetchone()[0]  # fmt: skip
                conn.execute(
                    "UPDATE memvault_vaults SET serving = %s, stamp = stamp + 1 WHERE name = %s",
                    (generation, self.vault),
                )
                older = conn.execute(
                    "SELECT generation FROM memvault_generations WHERE vault = %s AND generation < %s "
                    "AND generation IS DISTINCT FROM %s", (self.vault, generation, previous)).fetchall()  # fmt: skip
                for (number,) in older:
                    schema.drop_leaf(conn, self.vault, number)

    def drop_generation(self, generation: int) -> None:
        with self._session(wrote=True) as conn, conn.transaction():
            serving = conn.execute("SELECT serving FROM memvault_vaults WHERE name = %s FOR UPDATE",
                                   (self.vault,)).fetchone()[0]  # fmt: skip
            if serving == generation:
                raise IndexUnavailable(f"generation {generation} of vault {self.vault!r} is serving: not dropped")
            schema.drop_leaf(conn, self.vault, generation)

    def stray_generations(self) -> list[int]:
        """Generations neither serving nor the one before it: left by killed or failed builds.
        Only a caller holding the vault's rebuild lock may treat them as dead."""
        serving = self.serving_generation()
        numbers = self.generations()
        older = [n for n in numbers if serving is not None and n < serving]
        keep = {serving, max(older, default=None)}
        return [n for n in numbers if n not in keep]

    @read_retried
    def generation_embedding(self, generation: int) -> dict | None:
        with self._reads() as conn:
            row = conn.execute("SELECT embedding FROM memvault_generations WHERE vault = %s AND generation = %s",
                               (self.vault, generation)).fetchone()  # fmt: skip
        if row is None:
            raise IndexUnavailable(f"generation {generation} of vault {self.vault!r} is gone: run `memvault rebuild`")
        return row[0]

    # --- the replay projection (BuJo) ----------------------------------------------------------

    @read_retried
    def serving_replay(self) -> tuple[int | None, str | None]:
        """(the serving generation or None, the SHA-256 of its replay projection or None) in one
        round trip: a reader learns whether the projection changed without fetching it."""
        try:
            with self._reads() as conn:
                row = conn.execute("SELECT v.serving, g.replay_sha256, g.generation IS NOT NULL FROM memvault_vaults v "
                                   "LEFT JOIN memvault_generations g ON g.vault = v.name AND g.generation = v.serving "
                                   "WHERE v.name = %s",
                                   (self.vault,)).fetchone()  # fmt: skip
        except IndexUnavailable:
            if self._made_again():
                return None, None
            raise
        if row is None:
            if self._made_again():
                return None, None
            raise IndexUnavailable(f"vault {self.vault!r} is not on the index server (or this role may not read it)")
        if row[0] is not None and not row[2]:  # the pointer names a generation someone deleted
            raise IndexUnavailable(f"the serving generation {row[0]} of vault {self.vault!r} is gone from the index "
                                   "server: run `memvault rebuild`")  # fmt: skip
        return row[0], row[1]

    def replay_sha256(self, generation: int) -> str | None:
        """The SHA-256 of a generation's replay projection, None when it holds none."""
        return self._replay(generation, "replay_sha256")

    def replay_held_sha256(self, generation: int) -> str | None:
        """The SHA-256 the server computes of the projection bytes it holds (a read-back that
        proves them without sending them), None when it holds none."""
        return self._replay(generation, "encode(sha256(replay), 'hex')")

    def replay_projection(self, generation: int) -> bytes | None:
        """A generation's replay projection (the sidecar's exact bytes), None when it holds none."""
        found = self._replay(generation, "replay")
        return None if found is None else bytes(found)

    def set_replay_projection(self, generation: int, data: bytes | None) -> None:
        """Make the generation hold exactly `data` (None: no projection), in one statement."""
        digest = None if data is None else hashlib.sha256(data).hexdigest()
        with self._session(wrote=True) as conn:
            found = conn.execute(
                "UPDATE memvault_generations SET replay = %s, replay_sha256 = %s WHERE vault = %s "
                "AND generation = %s RETURNING 1",
                (data, digest, self.vault, generation),
            ).fetchone()
        if found is None:
            raise IndexUnavailable(f"generation {generation} of vault {self.vault!r} is gone: run `memvault rebuild`")

    @read_retried
    def _replay(self, generation: int, column: str):
        with self._reads() as conn:
            row = conn.execute(f"SELECT {column} FROM memvault_generations WHERE vault = %s AND generation = %s",
                               (self.vault, generation)).fetchone()  # fmt: skip
        if row is None:
            raise IndexUnavailable(f"generation {generation} of vault {self.vault!r} is gone: run `memvault rebuild`")
        return row[0]

    @read_retried
    def _require_postings(self, generation: int) -> None:
        """A generation built by a memvault before the postings table (schema 1) has none: its
        lexical list cannot be computed, and a rebuild makes one that has."""
        if generation in self._with_postings:
            return
        leaf = schema.leaf_table(self.vault, generation, "memvault_postings")
        with self._reads() as conn:
            found = conn.execute("SELECT to_regclass(%s)", (f'"{leaf}"',)).fetchone()[0]
        if found is None:
            raise IndexUnavailable(f"generation {generation} of vault {self.vault!r} on the index server was built "
                                   "by an older memvault (older postings): run `memvault rebuild`")  # fmt: skip
        self._with_postings.add(generation)

    def _dim(self, generation: int) -> int | None:
        if generation not in self._dims:
            embedding = self.generation_embedding(generation)
            self._dims[generation] = None if embedding is None else int(embedding["dim"])
        return self._dims[generation]

    # --- writes --------------------------------------------------------------------------------

    def apply(self, generation: int, delta: BackendDelta) -> None:
        keys = list(dict.fromkeys([*delta.deleted, *(write.key for write in delta.writes)]))
        params = [self._insert_params(generation, write) for write in delta.writes]
        postings, terms = self._lexical_leaves(generation)
        leaves = {"postings": postings, "terms": terms, "rows": _quoted(schema.leaf_table(self.vault, generation))}
        where = {"vault": self.vault, "generation": generation}
        with self._session(wrote=True) as conn, conn.transaction():
            # one writer of a generation's lexical index at a time (term ids, doc numbers); readers pass
            conn.execute(f"LOCK TABLE {terms} IN SHARE ROW EXCLUSIVE MODE")
            gone_rows = gone_text = gone_ctx = gone_cjk = 0
            keys = self._held_keys(conn, generation, keys)
            if keys:
                schema.ensure_postings_indexes(conn, self.vault, generation)  # deletes find their blocks by it
                gone_rows, gone_text, gone_ctx, gone_cjk = conn.execute(
                    DELETE_ROWS.format(**leaves), {**where, "keys": keys}).fetchone()  # fmt: skip
            if params:
                conn.execute(_STAGING)
                with conn.cursor() as cursor:
                    with cursor.copy("COPY memvault_staging FROM STDIN (FORMAT BINARY)") as copy:
                        copy.set_types(_STAGING_TYPES)
                        for row in params:
                            copy.write_row(row)
                dropped = self._drop_indexes_for_load(conn, generation, params)
                conn.execute(INSERT_STAGED.format(**leaves), where)
                if "postings" in dropped:
                    schema.ensure_postings_indexes(conn, self.vault, generation)
                if "vectors" in dropped:
                    schema.ensure_vector_index(conn, self.vault, generation, self._dim(generation))
            if params or keys:  # bounded: a merge rewrites only the blocks its delta falls into
                merge_if_due(conn, postings, self.vault, generation)
            added_text = sum(p[14] for p in params)
            added_ctx = sum(p[15] for p in params)
            added_cjk = sum(p[18] for p in params)
            counted = conn.execute(
                "UPDATE memvault_generations SET rows = rows + %s, text_tokens = text_tokens + %s, "
                "ctx_tokens = ctx_tokens + %s, cjk_tokens = cjk_tokens + %s WHERE vault = %s AND generation = %s",
                (len(params) - gone_rows, added_text - gone_text, added_ctx - gone_ctx, added_cjk - gone_cjk,
                 self.vault, generation))  # fmt: skip
            if counted.rowcount != 1:  # its statistics are gone: a write there would serve nothing (rolled back)
                raise IndexUnavailable(f"generation {generation} of vault {self.vault!r} is gone from the index "
                                       "server: run `memvault rebuild`")  # fmt: skip
            self._record_files(conn, generation, delta.files or {})
            conn.execute("UPDATE memvault_vaults SET stamp = stamp + 1 WHERE name = %s", (self.vault,))

    def _held_keys(self, conn, generation: int, keys: list[str]) -> list[str]:
        """Those of `keys` the generation holds rows for (from its primary key): only they are
        deleted, so a batch of new rows (a rebuild's load, an import) never needs the postings'
        key index, which a rebuild builds once after its load."""
        if not keys:
            return []
        leaf = _quoted(schema.leaf_table(self.vault, generation))
        held = conn.execute(f"SELECT key FROM {leaf} WHERE vault = %s AND generation = %s AND key = ANY(%s)",
                            (self.vault, generation, keys)).fetchall()  # fmt: skip
        return [key for (key,) in held]

    def _drop_indexes_for_load(self, conn, generation: int, params: list[tuple]) -> set[str]:
        """Drop the generation's HNSW index and its postings' two indexes, in this transaction,
        when the batch holds at least as many rows as the generation (and enough to matter);
        returns which were dropped ("vectors", "postings"), to build again after the load.
        Building an index once over the loaded rows costs less than inserting each row's
        vector and its forty postings into them one by one (a bulk import into a new or small
        vault). Readers of the leaf wait for the commit meanwhile, and then see the new indexes."""
        if len(params) < _REBUILD_INDEXES_FROM:
            return set()
        held = conn.execute("SELECT rows FROM memvault_generations WHERE vault = %s AND generation = %s",
                            (self.vault, generation)).fetchone()  # fmt: skip
        if held is None or held[0] > len(params):
            return set()
        leaf = schema.leaf_table(self.vault, generation)
        indexes = {
            "vectors": [f"{leaf}_hnsw"] if any(row[16] is not None for row in params) else [],
            "postings": [f"mvpl_{self.vault}_g{generation}"],
        }
        dropped = set()
        for part, names in indexes.items():
            present = [
                name
                for name in names
                if conn.execute("SELECT to_regclass(%s)", (_quoted(name),)).fetchone()[0] is not None
            ]
            if present and len(present) == len(names):
                conn.execute(f"DROP INDEX {', '.join(_quoted(name) for name in present)}")
                dropped.add(part)
        return dropped

    def _lexical_leaves(self, generation: int) -> tuple[str, str]:
        """The quoted names of a generation's postings and terms leaves (statements write them
        directly: the terms' upsert needs the leaf's own unique index)."""
        self._require_postings(generation)
        return tuple(_quoted(schema.leaf_table(self.vault, generation, table))
                     for table in ("memvault_postings", "memvault_terms"))  # fmt: skip

    def _insert_params(self, generation: int, write) -> tuple:
        record = write.record
        own, context, grams = words(record.text), words(record.context), cjk_bigrams(record.text)
        vector = None if write.vector is None else _as_vector(write.vector)
        return (self.vault, generation, write.key, record.id, record.path, record.kind, record.day,
                int(record.at.timestamp()), record.text, record.content_hash, write.context_hash,
                record.context, " ".join(own), " ".join(context), len(own), len(context), vector, grams,
                len(grams))  # fmt: skip

    def _record_files(self, conn, generation: int, files: dict) -> None:
        forget = [path for path, state in files.items() if state is None]
        keep = [(self.vault, generation, path, json.dumps(state)) for path, state in files.items() if state is not None]
        if forget:
            conn.execute(
                "DELETE FROM memvault_files WHERE vault = %s AND generation = %s AND path = ANY(%s)",
                (self.vault, generation, forget),
            )
        if keep:
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO memvault_files (vault, generation, path, state) VALUES (%s, %s, %s, %s) "
                    "ON CONFLICT (vault, generation, path) DO UPDATE SET state = EXCLUDED.state",
                    keep,
                )

    # --- reads ---------------------------------------------------------------------------------

    @read_retried
    def _rows(self, where: str, params: tuple) -> list[StoredRow]:
        with self._reads() as conn:
            found = conn.execute(f"SELECT {_ROW_COLUMNS} FROM memvault_rows WHERE vault = %s AND generation = %s "
                                 f"AND {where}", (self.vault, *params)).fetchall()  # fmt: skip
        return [_stored_row(row) for row in found]

    @read_retried
    def _leaf_rows(self, generation: int, where: str, params: tuple) -> list[StoredRow]:
        """Rows of a generation read from its leaf by name, as the lexical and vector lists read
        theirs: through the parent, pruning the partitions at run time cost a third of recall's
        100-row reads at 100k rows (1.6 vs 2.3 ms, measured). A generation dropped meanwhile holds
        no rows, as through the parent."""
        psycopg = require_psycopg()
        leaf = _quoted(schema.leaf_table(self.vault, generation))
        with self._reads() as conn:
            try:
                # the vault and generation too: the leaf's indexes lead with them (before
                # PostgreSQL 18 and its skip scans, an index is not searched without them)
                found = conn.execute(f"SELECT {_ROW_COLUMNS} FROM {leaf} WHERE vault = %s AND generation = %s "
                                     f"AND {where}", (self.vault, generation, *params)).fetchall()  # fmt: skip
            except psycopg.errors.UndefinedTable:
                found = []
        return [_stored_row(row) for row in found]

    def rows_of(self, generation: int, path: str) -> list[StoredRow]:
        return self._rows("path = %s", (generation, path))

    def rows_by_keys(self, generation: int, keys: Iterable[str]) -> dict[str, StoredRow]:
        keys = list(keys)
        if not keys:
            return {}
        return {row.key: row for row in self._leaf_rows(generation, "key = ANY(%s)", (keys,))}

    def rows_by_content_hash(self, generation: int, hashes: Iterable[str], kind: str = "curated") -> list[StoredRow]:
        hashes = list(set(hashes))
        if not hashes:
            return []
        return self._leaf_rows(generation, "content_hash = ANY(%s) AND kind = %s", (hashes, kind))

    @read_retried
    def content_hash_keys(self, generation: int) -> dict[str, str]:
        with self._reads() as conn:
            found = conn.execute(
                "SELECT content_hash, min(key) FROM memvault_rows WHERE vault = %s AND generation = %s "
                "AND kind = 'curated' GROUP BY content_hash",
                (self.vault, generation),
            ).fetchall()
        return dict(found)

    def journal_rows(self, generation: int, paths: Iterable[str]) -> list[StoredRow]:
        paths = list(paths)
        if not paths:
            return []
        return sorted(self._rows("path = ANY(%s)", (generation, paths)), key=lambda r: (r.path, r.key))

    def all_rows(self, generation: int) -> list[StoredRow]:
        return sorted(self._rows("true", (generation,)), key=lambda row: row.key)

    @read_retried
    def file_states(self, generation: int) -> dict:
        with self._reads() as conn:
            found = conn.execute("SELECT path, state FROM memvault_files WHERE vault = %s AND generation = %s",
                                 (self.vault, generation)).fetchall()  # fmt: skip
        return {path: state for path, state in found}

    def lexical_candidates(
        self, generation: int, query: str, depth: int, kinds: Sequence[str] = ("curated",)
    ) -> list[tuple[str, float]]:
        return self._lexical(generation, query, depth, kinds, with_rows=False)[0]

    def lexical_rows(
        self, generation: int, query: str, depth: int, kinds: Sequence[str] = ("curated",)
    ) -> tuple[list[tuple[str, float]], dict[str, StoredRow]]:
        """`lexical_candidates` and the rows of its hits (`rows_by_keys`), in one statement and one
        snapshot: recall reads both (a round trip and a statement's planning less per recall)."""
        return self._lexical(generation, query, depth, kinds, with_rows=True)

    @read_retried
    def _lexical(self, generation: int, query: str, depth: int, kinds: Sequence[str], *, with_rows: bool):
        statement = lexical_statement(self.vault, generation, query, depth, kinds, with_rows=with_rows)
        if statement is None:
            return [], {}
        self._require_postings(generation)
        with self._reads() as conn:
            found_rows = conn.execute(*statement).fetchall()
        if not with_rows:
            return sorted(((key, float(score)) for key, score in found_rows), key=lambda hit: (-hit[1], hit[0])), {}
        rows = {row.key: row for row in (_stored_row(values[1:]) for values in found_rows)}
        hits = sorted(((values[1], float(values[0])) for values in found_rows), key=lambda hit: (-hit[1], hit[0]))
        return hits, rows

    @read_retried
    def term_frequencies(
        self, generation: int, terms: Iterable[str], field: str = "text"
    ) -> tuple[int, dict[str, int]]:
        """(rows in the generation, rows whose own text holds each already-analysed term, or with
        field "cjk" each CJK bigram): one round trip, from the terms table."""
        terms = sorted(set(terms))
        column = "df_cjk" if field == "cjk" else "df_text"
        self._require_postings(generation)
        with self._reads() as conn:
            found = conn.execute(
                f"SELECT g.rows, t.lexeme, t.{column} FROM memvault_generations g LEFT JOIN memvault_terms t "
                "ON t.vault = g.vault AND t.generation = g.generation AND t.lexeme = ANY(%s) "
                "WHERE g.vault = %s AND g.generation = %s", (terms, self.vault, generation)).fetchall()  # fmt: skip
        total = found[0][0] if found else 0
        counts = {term: 0 for term in terms}
        counts.update({lexeme: df for _, lexeme, df in found if lexeme is not None})
        return total, counts

    @read_retried
    def vector_candidates(self, generation: int, vector: Sequence[float], depth: int) -> list[tuple[str, float]]:
        dim = self._dim(generation)
        if dim is None or depth <= 0:
            return []
        sql, arguments = vector_statement(self.vault, generation, dim, vector, depth)
        ef = ef_search(depth)
        with self._reads() as conn:
            rows = searched_at_depth(conn, ef, lambda: conn.execute(sql, arguments).fetchall())
        return sorted(((key, float(score)) for key, score in rows), key=lambda hit: (-hit[1], hit[0]))

    @read_retried
    def counts(self, generation: int) -> BackendCounts:
        with self._reads() as conn:
            kinds = conn.execute("SELECT kind, count(*) FROM memvault_rows WHERE vault = %s AND generation = %s "
                                 "GROUP BY kind", (self.vault, generation)).fetchall()  # fmt: skip
            paths = conn.execute("SELECT path, count(*) FROM memvault_rows WHERE vault = %s AND generation = %s "
                                 "GROUP BY path", (self.vault, generation)).fetchall()  # fmt: skip
            missing = conn.execute(
                "SELECT count(*) FROM memvault_rows WHERE vault = %s AND generation = %s "
                "AND kind = 'curated' AND embedding IS NULL",
                (self.vault, generation),
            ).fetchone()[0]
        by_kind = dict(kinds)
        without = missing if self._dim(generation) is not None else 0
        return BackendCounts(sum(by_kind.values()), by_kind, dict(paths), without)

    @read_retried
    def keys_without_vector(self, generation: int) -> list[str]:
        """Curated rows of a generation with vectors that hold none (strict health names them)."""
        if self._dim(generation) is None:
            return []
        with self._reads() as conn:
            found = conn.execute("SELECT key FROM memvault_rows WHERE vault = %s AND generation = %s "
                                 "AND kind = 'curated' AND embedding IS NULL ORDER BY key",
                                 (self.vault, generation)).fetchall()  # fmt: skip
        return [key for (key,) in found]

    @read_retried
    def stamp(self) -> object:
        with self._reads() as conn:
            return conn.execute("SELECT serving, stamp FROM memvault_vaults WHERE name = %s", (self.vault,)).fetchone()


def lexical_statement(
    vault: str, generation: int, query: str, depth: int, kinds: Sequence[str], *, with_rows: bool = False
) -> tuple[str, dict] | None:
    """A generation's BM25 list as one statement and its arguments: rows of (key, score), or with
    `with_rows` (score, then the row's columns, `_ROW_COLUMNS`); None when the query has no words
    to search. Named parameters only, so that several vaults' lists compose into one statement
    (search across vaults: backend/postgres/across.py)."""
    found, grams = query_words(query), query_bigrams(query)
    if not (found or grams) or depth <= 0:
        return None
    postings, terms = (_quoted(schema.leaf_table(vault, generation, table))
                       for table in ("memvault_postings", "memvault_terms"))  # fmt: skip
    arguments = {"words": " ".join(found), "grams": grams, "vault": vault, "generation": generation,
                 "kinds": kind_codes(kinds), "depth": depth, **read_sizes(depth)}  # fmt: skip
    leaf = _quoted(schema.leaf_table(vault, generation))
    sql = BM25_SQL.format(postings=postings, terms=terms, rows=leaf)
    if with_rows:  # each hit's row from the leaf by its primary key
        sql = (
            f"SELECT h.score, {', '.join('r.' + c for c in _ROW_COLUMNS.split(', '))} FROM ({sql}) h "
            f"JOIN {leaf} r ON r.vault = %(vault)s AND r.generation = %(generation)s AND r.key = h.key"
        )
    return sql, arguments


def vector_statement(vault: str, generation: int, dim: int, vector, depth: int) -> tuple[str, dict]:
    """A generation's vector list as one statement (rows of (key, score)), with named parameters
    (as `lexical_statement`); it needs `ef_search(depth)` (the session's is `_SESSION_EF_SEARCH`)."""
    # the leaf by name: a plan through the parent prunes partitions at run time, several
    # times slower than the leaf's own HNSW scan
    leaf = _quoted(schema.leaf_table(vault, generation))
    sql = (f"SELECT key, 1 - (embedding::vector({dim}) <=> %(q)s::vector({dim})) AS score FROM {leaf} "
           "WHERE embedding IS NOT NULL "
           f"ORDER BY embedding::vector({dim}) <=> %(q)s::vector({dim}) LIMIT %(depth)s")  # fmt: skip
    return sql, {"q": _as_vector(vector), "depth": depth}


def ef_search(depth: int) -> int:
    """HNSW's candidate list for a vector list `depth` rows long."""
    return min(_MAX_EF_SEARCH, max(_MIN_EF_SEARCH, depth))


def _quoted(name: str) -> str:
    """A leaf's name as an SQL identifier (vault names are checked: letters, digits, '-', '_')."""
    return '"' + name + '"'


def _as_vector(values):
    import numpy as np
    from pgvector import Vector

    return Vector(np.asarray(values, dtype=np.float32))


def _stored_row(row: tuple) -> StoredRow:
    key, id_, path, kind, day, at, text, chash, ctxh, context = row
    return StoredRow(key, id_, path, kind, day if isinstance(day, date) else date.fromisoformat(day),
                     datetime.fromtimestamp(at, UTC), text, chash, ctxh, context)  # fmt: skip


def searched_at_depth(conn, ef: int, run):
    """`run()`'s rows with HNSW's candidate list at `ef`: the session's setting when it will do,
    else SET LOCAL in a transaction (always behind a transaction-mode pooler, where a session's
    setting is another client's: the one-off `SET` on a connection lands on one server session)."""
    if ef <= _SESSION_EF_SEARCH and not getattr(conn, "memvault_pooled", False):
        return run()
    with conn.transaction():
        conn.execute(f"SET LOCAL hnsw.ef_search = {max(ef, _SESSION_EF_SEARCH)}")
        return run()


def _prepare_session(conn) -> bool:
    """pgvector's types on a new connection, and the search depth recall needs; False when not yet."""
    psycopg = require_psycopg()
    try:
        from pgvector.psycopg.vector import register_vector_info
        from psycopg.types import TypeInfo

        # the one pgvector type memvault uses, in one round trip: pgvector's register_vector
        # looks up four types, each in a transaction of its own (12 round trips a new connection)
        found = conn.execute("SELECT oid, typarray FROM pg_type WHERE oid = to_regtype('vector')").fetchone()
        if found is None:
            return False  # no vector type yet: ensure_schema creates it; the next call registers it
        register_vector_info(conn, TypeInfo("vector", found[0], found[1]))
        # recall asks for 100 vector candidates: one round trip, no SET LOCAL per query (behind a
        # transaction-mode pooler each query sets it locally: `searched_at_depth`)
        if not getattr(conn, "memvault_pooled", False):
            conn.execute(f"SET hnsw.ef_search = {_SESSION_EF_SEARCH}")
    except psycopg.Error:
        return False
    return True

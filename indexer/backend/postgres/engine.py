"""`PostgresBackend`: one vault's index on PostgreSQL + pgvector (the `IndexBackend` seam).

One connection per backend object, used under a lock (the owner serves requests from several
threads). A connection the server dropped (a restart, a failover) is replaced on the next call:
the caller's operation fails once with IndexUnavailable, and files stay the truth, so the next
sync catches the server up.
"""

import json
from collections.abc import Iterable, Sequence
from datetime import date, datetime, timezone

from memvault.indexer.backend.base import BackendCounts, BackendDelta, StoredRow
from memvault.indexer.backend.postgres import schema
from memvault.indexer.backend.postgres.connection import ServerSession, require_psycopg
from memvault.indexer.backend.postgres.lexical import BM25_SQL, query_words, words
from memvault.vault.errors import IndexUnavailable

_ROW_COLUMNS = "key, id, path, kind, day, at, line, text, content_hash, context_hash, context"
_STAGING = (
    "CREATE TEMP TABLE IF NOT EXISTS memvault_staging (vault text, generation integer, key text, id text, "
    "path text, kind text, day date, at bigint, line integer, text text, content_hash text, context_hash text, "
    "context text, own text, around text, text_len integer, ctx_len integer, embedding vector) "
    "ON COMMIT DELETE ROWS"
)
_STAGING_TYPES = ["text", "int4", "text", "text", "text", "text", "date", "int8", "int4", "text", "text", "text",
                  "text", "text", "text", "int4", "int4", "vector"]
_TF = "(SELECT coalesce(jsonb_object_agg(lexeme, coalesce(array_length(positions, 1), 1)), '{{}}') FROM unnest({}))"
#: rows arrive by COPY into the session's staging table, then are analysed in one set-based
#: statement (each tsvector parsed once, its term frequencies taken from it)
_INSERT_STAGED = (
    "INSERT INTO memvault_rows (vault, generation, key, id, path, kind, day, at, line, text, content_hash, "
    "context_hash, context, text_tsv, ctx_tsv, text_len, ctx_len, embedding, text_tf, ctx_tf) "
    "SELECT s.vault, s.generation, s.key, s.id, s.path, s.kind, s.day, s.at, s.line, s.text, s.content_hash, "
    f"s.context_hash, s.context, t.tsv, c.tsv, s.text_len, s.ctx_len, s.embedding, {_TF.format('t.tsv')}, "
    f"{_TF.format('c.tsv')} FROM memvault_staging s "
    f"CROSS JOIN LATERAL to_tsvector('{schema.TEXT_SEARCH_CONFIG}', s.own) AS t(tsv) "
    f"CROSS JOIN LATERAL to_tsvector('{schema.TEXT_SEARCH_CONFIG}', s.around) AS c(tsv)"
)
#: HNSW's candidate list; pgvector's default (40) would cap every vector list at 40 rows
_MIN_EF_SEARCH = 40
_SESSION_EF_SEARCH = 200
_MAX_EF_SEARCH = 1000


class PostgresBackend:
    engine = "postgres"
    supports_compaction = False
    supports_vectors_in_commit = True
    supports_many_vaults = True

    def __init__(self, dsn: str, vault: str, *, create: bool = True):
        require_psycopg()
        self.dsn = dsn
        self.vault = schema.check_vault_name(vault)
        self._session = ServerSession(dsn, prepare=_prepare_session)
        self._dims: dict[int, int | None] = {}
        self._create = create
        with self._session() as conn:
            if create:
                schema.ensure_schema(conn)
                schema.ensure_vault(conn, self.vault)

    # --- connection ----------------------------------------------------------------------------

    def close(self) -> None:
        self._session.close()

    # --- generations ---------------------------------------------------------------------------

    def serving_generation(self) -> int | None:
        with self._session() as conn:
            row = conn.execute("SELECT serving FROM memvault_vaults WHERE name = %s", (self.vault,)).fetchone()
        if row is None:
            raise IndexUnavailable(f"vault {self.vault!r} is not on the index server (or this role may not read it)")
        return row[0]

    def generations(self) -> list[int]:
        with self._session() as conn:
            rows = conn.execute("SELECT generation FROM memvault_generations WHERE vault = %s ORDER BY generation",
                                (self.vault,)).fetchall()  # fmt: skip
        return [row[0] for row in rows]

    def create_generation(self, embedding: dict | None) -> int:
        dim = None if embedding is None else int(embedding["dim"])
        with self._session() as conn, conn.transaction():
            number = conn.execute(
                "UPDATE memvault_vaults SET next_generation = next_generation + 1 WHERE name = %s "
                "RETURNING next_generation - 1", (self.vault,)).fetchone()[0]  # fmt: skip
            schema.create_leaf(conn, self.vault, number)
            conn.execute("INSERT INTO memvault_generations (vault, generation, embedding, dim) VALUES (%s, %s, %s, %s)",
                         (self.vault, number, None if embedding is None else json.dumps(embedding), dim))
        self._dims[number] = dim
        return number

    def activate_generation(self, generation: int) -> None:
        """Build the leaf's vector index (before the switch: readers never wait on it), then move
        the pointer in one transaction and drop generations older than the previous one."""
        dim = self._dim(generation)
        with self._session() as conn:
            if dim is not None:
                schema.ensure_vector_index(conn, self.vault, generation, dim)
            schema.analyze_leaf(conn, self.vault, generation)
            with conn.transaction():
                previous = conn.execute("SELECT serving FROM memvault_vaults WHERE name = %s FOR UPDATE",
                                        (self.vault,)).fetchone()[0]  # fmt: skip
                conn.execute("UPDATE memvault_vaults SET serving = %s, stamp = stamp + 1 WHERE name = %s",
                             (generation, self.vault))
                older = conn.execute(
                    "SELECT generation FROM memvault_generations WHERE vault = %s AND generation < %s "
                    "AND generation IS DISTINCT FROM %s", (self.vault, generation, previous)).fetchall()  # fmt: skip
                for (number,) in older:
                    schema.drop_leaf(conn, self.vault, number)

    def drop_generation(self, generation: int) -> None:
        with self._session() as conn, conn.transaction():
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

    def generation_embedding(self, generation: int) -> dict | None:
        with self._session() as conn:
            row = conn.execute("SELECT embedding FROM memvault_generations WHERE vault = %s AND generation = %s",
                               (self.vault, generation)).fetchone()  # fmt: skip
        if row is None:
            raise IndexUnavailable(f"generation {generation} of vault {self.vault!r} is gone: run `memvault rebuild`")
        return row[0]

    def _dim(self, generation: int) -> int | None:
        if generation not in self._dims:
            embedding = self.generation_embedding(generation)
            self._dims[generation] = None if embedding is None else int(embedding["dim"])
        return self._dims[generation]

    # --- writes --------------------------------------------------------------------------------

    def apply(self, generation: int, delta: BackendDelta) -> None:
        keys = list(dict.fromkeys([*delta.deleted, *(write.key for write in delta.writes)]))
        with self._session() as conn, conn.transaction():
            gone_rows = gone_text = gone_ctx = 0
            if keys:
                gone = conn.execute(
                    "DELETE FROM memvault_rows WHERE vault = %s AND generation = %s AND key = ANY(%s) "
                    "RETURNING text_len, ctx_len", (self.vault, generation, keys)).fetchall()  # fmt: skip
                gone_rows, gone_text, gone_ctx = len(gone), sum(r[0] for r in gone), sum(r[1] for r in gone)
            params = [self._insert_params(generation, write) for write in delta.writes]
            if params:
                conn.execute(_STAGING)
                with conn.cursor() as cursor:
                    with cursor.copy("COPY memvault_staging FROM STDIN (FORMAT BINARY)") as copy:
                        copy.set_types(_STAGING_TYPES)
                        for row in params:
                            copy.write_row(row)
                conn.execute(_INSERT_STAGED)
            added_text = sum(p[15] for p in params)
            added_ctx = sum(p[16] for p in params)
            conn.execute(
                "UPDATE memvault_generations SET rows = rows + %s, text_tokens = text_tokens + %s, "
                "ctx_tokens = ctx_tokens + %s WHERE vault = %s AND generation = %s",
                (len(params) - gone_rows, added_text - gone_text, added_ctx - gone_ctx, self.vault, generation))
            self._record_files(conn, generation, delta.files or {})
            conn.execute("UPDATE memvault_vaults SET stamp = stamp + 1 WHERE name = %s", (self.vault,))

    def _insert_params(self, generation: int, write) -> tuple:
        record = write.record
        own, context = words(record.text), words(record.context)
        vector = None if write.vector is None else _as_vector(write.vector)
        return (self.vault, generation, write.key, record.id, record.path, record.kind, record.day,
                int(record.at.timestamp()), record.line, record.text, record.content_hash, write.context_hash,
                record.context, " ".join(own), " ".join(context), len(own), len(context), vector)  # fmt: skip

    def _record_files(self, conn, generation: int, files: dict) -> None:
        forget = [path for path, state in files.items() if state is None]
        keep = [(self.vault, generation, path, json.dumps(state)) for path, state in files.items() if state is not None]
        if forget:
            conn.execute("DELETE FROM memvault_files WHERE vault = %s AND generation = %s AND path = ANY(%s)",
                         (self.vault, generation, forget))
        if keep:
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO memvault_files (vault, generation, path, state) VALUES (%s, %s, %s, %s) "
                    "ON CONFLICT (vault, generation, path) DO UPDATE SET state = EXCLUDED.state", keep)

    # --- reads ---------------------------------------------------------------------------------

    def _rows(self, where: str, params: tuple) -> list[StoredRow]:
        with self._session() as conn:
            found = conn.execute(f"SELECT {_ROW_COLUMNS} FROM memvault_rows WHERE vault = %s AND generation = %s "
                                 f"AND {where}", (self.vault, *params)).fetchall()  # fmt: skip
        return [_stored_row(row) for row in found]

    def rows_of(self, generation: int, path: str) -> list[StoredRow]:
        return self._rows("path = %s", (generation, path))

    def rows_by_keys(self, generation: int, keys: Iterable[str]) -> dict[str, StoredRow]:
        keys = list(keys)
        if not keys:
            return {}
        return {row.key: row for row in self._rows("key = ANY(%s)", (generation, keys))}

    def rows_by_content_hash(self, generation: int, hashes: Iterable[str], kind: str = "curated") -> list[StoredRow]:
        hashes = list(set(hashes))
        if not hashes:
            return []
        return self._rows("content_hash = ANY(%s) AND kind = %s", (generation, hashes, kind))

    def content_hash_keys(self, generation: int) -> dict[str, str]:
        with self._session() as conn:
            found = conn.execute("SELECT content_hash, min(key) FROM memvault_rows WHERE vault = %s AND generation = %s "
                                 "AND kind = 'curated' GROUP BY content_hash", (self.vault, generation)).fetchall()
        return dict(found)

    def journal_rows(self, generation: int, paths: Iterable[str]) -> list[StoredRow]:
        paths = list(paths)
        if not paths:
            return []
        return sorted(self._rows("path = ANY(%s)", (generation, paths)), key=lambda r: (r.path, r.line, r.key))

    def all_rows(self, generation: int) -> list[StoredRow]:
        return sorted(self._rows("true", (generation,)), key=lambda row: row.key)

    def file_states(self, generation: int) -> dict:
        with self._session() as conn:
            found = conn.execute("SELECT path, state FROM memvault_files WHERE vault = %s AND generation = %s",
                                 (self.vault, generation)).fetchall()  # fmt: skip
        return {path: state for path, state in found}

    def lexical_candidates(self, generation: int, query: str, depth: int,
                           kinds: Sequence[str] = ("curated",)) -> list[tuple[str, float]]:
        found = query_words(query)
        if not found or depth <= 0:
            return []
        arguments = {"words": " ".join(found), "vault": self.vault, "generation": generation,
                     "kinds": list(kinds), "depth": depth}  # fmt: skip
        with self._session() as conn:
            rows = conn.execute(BM25_SQL, arguments).fetchall()
        return sorted(((key, float(score)) for key, score in rows), key=lambda hit: (-hit[1], hit[0]))

    def term_frequencies(self, generation: int, terms: Iterable[str]) -> tuple[int, dict[str, int]]:
        """(rows in the generation, rows whose own text holds each already-analysed term): one
        round trip, each term counted through the GIN index."""
        terms = sorted(set(terms))
        with self._session() as conn:
            total = conn.execute("SELECT rows FROM memvault_generations WHERE vault = %s AND generation = %s",
                                 (self.vault, generation)).fetchone()  # fmt: skip
            found = conn.execute(
                "SELECT t.term, (SELECT count(*) FROM memvault_rows r WHERE r.vault = %s AND r.generation = %s "
                "AND r.text_tsv @@ quote_literal(t.term)::tsquery) FROM unnest(%s::text[]) AS t(term)",
                (self.vault, generation, terms)).fetchall() if terms else []  # fmt: skip
        return (0 if total is None else total[0]), dict(found)

    def vector_candidates(self, generation: int, vector: Sequence[float], depth: int) -> list[tuple[str, float]]:
        dim = self._dim(generation)
        if dim is None or depth <= 0:
            return []
        query = _as_vector(vector)
        sql = (f"SELECT key, 1 - (embedding::vector({dim}) <=> %(q)s::vector({dim})) FROM memvault_rows "
               "WHERE vault = %(vault)s AND generation = %(generation)s AND embedding IS NOT NULL "
               f"ORDER BY embedding::vector({dim}) <=> %(q)s::vector({dim}) LIMIT %(depth)s")  # fmt: skip
        ef = min(_MAX_EF_SEARCH, max(_MIN_EF_SEARCH, 2 * depth))
        arguments = {"q": query, "vault": self.vault, "generation": generation, "depth": depth}
        with self._session() as conn:
            if ef <= _SESSION_EF_SEARCH:
                rows = conn.execute(sql, arguments).fetchall()
            else:
                with conn.transaction():
                    conn.execute(f"SET LOCAL hnsw.ef_search = {ef}")
                    rows = conn.execute(sql, arguments).fetchall()
        return sorted(((key, float(score)) for key, score in rows), key=lambda hit: (-hit[1], hit[0]))

    def counts(self, generation: int) -> BackendCounts:
        with self._session() as conn:
            kinds = conn.execute("SELECT kind, count(*) FROM memvault_rows WHERE vault = %s AND generation = %s "
                                 "GROUP BY kind", (self.vault, generation)).fetchall()  # fmt: skip
            paths = conn.execute("SELECT path, count(*) FROM memvault_rows WHERE vault = %s AND generation = %s "
                                 "GROUP BY path", (self.vault, generation)).fetchall()  # fmt: skip
            missing = conn.execute("SELECT count(*) FROM memvault_rows WHERE vault = %s AND generation = %s "
                                   "AND kind = 'curated' AND embedding IS NULL", (self.vault, generation)).fetchone()[0]
        by_kind = dict(kinds)
        without = missing if self._dim(generation) is not None else 0
        return BackendCounts(sum(by_kind.values()), by_kind, dict(paths), without)

    def stamp(self) -> object:
        with self._session() as conn:
            return conn.execute("SELECT serving, stamp FROM memvault_vaults WHERE name = %s", (self.vault,)).fetchone()


def _as_vector(values):
    import numpy as np
    from pgvector import Vector

    return Vector(np.asarray(values, dtype=np.float32))


def _stored_row(row: tuple) -> StoredRow:
    key, id_, path, kind, day, at, line, text, chash, ctxh, context = row
    return StoredRow(key, id_, path, kind, day if isinstance(day, date) else date.fromisoformat(day),
                     datetime.fromtimestamp(at, timezone.utc), line, text, chash, ctxh, context)  # fmt: skip


def _prepare_session(conn) -> None:
    """pgvector's types on a new connection, and the search depth recall needs."""
    psycopg = require_psycopg()
    try:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        # recall asks for 100 vector candidates: one round trip, no SET LOCAL per query
        conn.execute(f"SET hnsw.ef_search = {_SESSION_EF_SEARCH}")
    except psycopg.Error:
        pass  # no vector type yet: ensure_schema creates it; the next session registers it

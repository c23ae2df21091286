"""Reads for a search across vaults (`memvault search --across a,b,…`) in two statements on one
pooled connection, whatever the number of vaults.

1. `serving`: each named vault's serving generation, its embedding identity and its replay
   projection, in one statement over `memvault_vaults` and `memvault_generations`. Row-level
   security decides: a vault this role may not read is absent, as one the server does not hold.
2. `candidates`: for every vault, the statements its own recall runs (engine.py's
   `lexical_statement` and `vector_statement`: its BM25 list from its own leaves and statistics,
   its vector list from its own HNSW index), each with its rows, the document frequencies of the
   question's terms, and the other rows that hold the same texts as its candidates (recall lists
   every note a text is in), joined by UNION ALL into one statement, each vault's parameters under
   its own names. Its leaves are read by name, which needs the vault's reader role's grant: a
   role that passed the first statement without one (a policy gone) is refused, never served.

Before this, a search across ten vaults ran each vault's recall on a backend of its own: about
210 statements, one after the other (docs/team.md has the figures).
"""

import re
from dataclasses import dataclass, field

from memvault.indexer.backend.base import IndexServerUnavailable, StoredRow
from memvault.indexer.backend.postgres import schema
from memvault.indexer.backend.postgres.connection import ServerSession, require_psycopg
from memvault.indexer.backend.postgres.engine import (
    _ROW_COLUMNS,
    _prepare_session,
    _quoted,
    _stored_row,
    ef_search,
    lexical_statement,
    searched_at_depth,
    vector_statement,
)
from memvault.indexer.backend.postgres.replica import ReadRoute
from memvault.vault.errors import IndexUnavailable

_PARAMETER = re.compile(r"%\((\w+)\)s")
_COLUMNS = _ROW_COLUMNS.split(", ")
_ROW_TYPES = ("text", "text", "text", "text", "date", "bigint", "text", "text", "text", "text")
#: a part's columns: (vault number, part, score, the row's columns, rows, lexeme, df_text, df_cjk)
_NO_ROW = ", ".join(f"NULL::{kind}" for kind in _ROW_TYPES)
_NO_TERMS = "NULL::bigint, NULL::text, NULL::bigint, NULL::bigint"
_EMPTY_HITS = f"SELECT NULL::float8 AS score, {', '.join(f'NULL::{t} AS {c}' for t, c in zip(_ROW_TYPES, _COLUMNS, strict=True))} WHERE false"  # noqa: E501
_LEXICAL, _VECTOR, _TERMS, _COPY = 0, 1, 2, 3
_SERVING = """
SELECT n.name, v.name IS NOT NULL, v.serving, g.generation IS NOT NULL, g.embedding, g.replay_sha256, g.replay
FROM unnest(%(names)s::text[]) WITH ORDINALITY AS n(name, position)
LEFT JOIN memvault_vaults v ON v.name = n.name
LEFT JOIN memvault_generations g ON g.vault = v.name AND g.generation = v.serving
ORDER BY n.position
"""


@dataclass(frozen=True)
class ServingVault:
    """A vault's serving generation as the first statement read it (None: none serves yet)."""

    name: str
    generation: int | None
    embedding: dict | None = None
    replay_sha256: str | None = None
    replay: bytes | None = None


@dataclass(frozen=True)
class VaultPlan:
    """What the second statement asks of one vault: its generation, the query vector for its
    vector list (None: no list), and the terms whose document frequencies recall will look up."""

    vault: ServingVault
    vector: object | None
    dim: int | None
    terms: tuple[str, ...]


@dataclass
class VaultCandidates:
    lexical: list[tuple[str, float]] = field(default_factory=list)
    vectors: list[tuple[str, float]] = field(default_factory=list)
    rows: dict[str, StoredRow] = field(default_factory=dict)
    total: int = 0
    #: term → (rows whose own words hold it, rows whose CJK bigrams do)
    frequencies: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: content hash → "path#^id" of every curated row holding it (the candidates' texts)
    sources: dict[str, list[str]] = field(default_factory=dict)
    #: the terms whose frequencies were asked (a term no row holds has no row in the answer)
    asked: frozenset[str] = frozenset()
    #: how deep each list was read
    depth: int = 0


class AcrossReader:
    """One connection of the process's pool for the DSN, held from `__enter__` to `__exit__`."""

    def __init__(self, dsn: str, bounds=None, read_dsn: str = ""):
        """`read_dsn`: a standby to read from (replica.py), the primary when it lags or fails."""
        require_psycopg()
        self.dsn = dsn
        self._session = ServerSession(dsn, prepare=_prepare_session, refusal=self._refusal, size=1, bounds=bounds)
        self._reads = self._session
        if read_dsn:
            self._reads = ReadRoute(self._session, read_dsn, prepare=_prepare_session, refusal=self._refusal, size=1)
        self._active = self._session  # the session whose connection is held: the standby's or the primary's
        self._held = None
        self._names: list[str] = []

    def __enter__(self) -> "AcrossReader":
        self._held = self._reads()
        self._held.__enter__()
        if self._reads is not self._session and self._reads.last == "standby":
            self._active = self._reads.standby
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._held.__exit__(*exc)
        finally:
            self._held, self._active = None, self._session
            self._session.close()
            if self._reads is not self._session:
                self._reads.close()

    @property
    def read_degraded(self) -> str | None:
        """Why this search read the primary instead of the read replica (None: it did not)."""
        return getattr(self._reads, "degraded", None)

    def _refusal(self, exc) -> IndexUnavailable | None:
        psycopg = require_psycopg()
        names = ", ".join(self._names) or "the vaults named"
        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            return IndexUnavailable(f"this role may not read every vault of {names} on the index server: ask the "
                                    "server's admin to GRANT memvault_read_<name> TO your role")  # fmt: skip
        if isinstance(exc, psycopg.errors.UndefinedTable):
            return IndexUnavailable(f"a serving generation of {names} is missing tables on the index server (gone, "
                                    "or built by an older memvault): run `memvault rebuild` on its home "
                                    "machine")  # fmt: skip
        return None

    def serving(self, names: list[str]) -> list[ServingVault | None]:
        """Each vault's serving generation, in the order named; None for a vault the server does
        not hold or this role may not read. One statement."""
        for name in names:
            schema.check_vault_name(name)
        self._names = list(names)
        found = self._fetch(lambda conn: conn.execute(_SERVING, {"names": list(names)}).fetchall())
        return [_serving_vault(*row) for row in found]

    def _fetch(self, run):
        """`run(conn)` on the held connection; when that is the standby's and it fails, the
        standby is left alone and `run` runs again on the primary (reads: twice changes nothing)."""
        try:
            with self._active() as conn:
                return run(conn)
        except (IndexServerUnavailable, IndexUnavailable) as exc:
            if self._active is self._session:
                raise
            self._reads._fell_back(str(exc))
            held, self._held = self._held, None
            held.__exit__(None, None, None)  # the standby's connection back (closed when broken)
            self._held, self._active = self._reads(), self._session
            self._held.__enter__()
        with self._active() as conn:
            return run(conn)

    def candidates(self, plans: list[VaultPlan], query: str, depth: int, kinds=("curated",)) -> list[VaultCandidates]:
        """Every vault's lexical and vector lists with their rows, its term statistics and its
        candidates' copies, in one statement (see the module docstring)."""
        pieces, arguments = [], {}
        for number, plan in enumerate(plans):
            sql, values = _vault_piece(number, plan, query, depth, kinds)
            pieces.append(sql)
            arguments.update(values)
        found = [VaultCandidates(asked=frozenset(plan.terms), depth=depth) for plan in plans]
        if not pieces:
            return found
        statement = "\nUNION ALL\n".join(pieces)

        def run(conn):
            return searched_at_depth(conn, ef_search(depth), lambda: conn.execute(statement, arguments).fetchall())

        rows = self._fetch(run)
        for row in rows:
            _take(found[row[0]], row)
        for candidates in found:
            _finish(candidates)
        return found


def _serving_vault(name, readable, serving, generation_held, embedding, replay_sha256, replay) -> ServingVault | None:
    if not readable:
        return None
    if serving is not None and not generation_held:  # the pointer names a generation someone deleted
        raise IndexUnavailable(f"the serving generation {serving} of vault {name!r} is gone from the index server: "
                               "run `memvault rebuild` on its machine")  # fmt: skip
    return ServingVault(name, serving, embedding, replay_sha256, None if replay is None else bytes(replay))


def _vault_piece(number: int, plan: VaultPlan, query: str, depth: int, kinds) -> tuple[str, dict]:
    """One vault's part of the second statement, its parameters renamed to its own."""
    vault, generation = plan.vault.name, plan.vault.generation
    leaf = _quoted(schema.leaf_table(vault, generation))
    arguments = {"vault": vault, "generation": generation, "terms": list(plan.terms)}
    lexical = lexical_statement(vault, generation, query, depth, kinds, with_rows=True)
    parts = {"lex": _EMPTY_HITS, "vec": _EMPTY_HITS}
    if lexical is not None:
        parts["lex"] = _renamed(*lexical, "l")
        arguments.update({f"{k}_l": v for k, v in lexical[1].items()})
    if plan.vector is not None and plan.dim is not None:
        sql, values = vector_statement(vault, generation, plan.dim, plan.vector, depth)
        columns = ", ".join("r." + c for c in _COLUMNS)
        parts["vec"] = (f"SELECT v.score, {columns} FROM ({_renamed(sql, values, 'v')}) v JOIN {leaf} r "
                        "ON r.vault = %(vault)s AND r.generation = %(generation)s AND r.key = v.key")  # fmt: skip
        arguments.update({f"{k}_v": v for k, v in values.items()})
    own = ", ".join(_COLUMNS)
    copy = ", ".join(f"r.{c}" for c in _COLUMNS)
    sql = f"""SELECT * FROM (
WITH lex AS MATERIALIZED ({parts["lex"]}),
vec AS MATERIALIZED ({parts["vec"]}),
hit AS (SELECT key, content_hash FROM lex UNION SELECT key, content_hash FROM vec)
SELECT {number}::int AS i, {_LEXICAL}::int2 AS part, score::float8, {own}, {_NO_TERMS} FROM lex
UNION ALL SELECT {number}, {_VECTOR}, score::float8, {own}, {_NO_TERMS} FROM vec
UNION ALL SELECT {number}, {_TERMS}, NULL::float8, {_NO_ROW}, g.rows::bigint, t.lexeme, t.df_text::bigint,
    t.df_cjk::bigint
    FROM memvault_generations g LEFT JOIN memvault_terms t
    ON t.vault = g.vault AND t.generation = g.generation AND t.lexeme = ANY(%(terms)s)
    WHERE g.vault = %(vault)s AND g.generation = %(generation)s
UNION ALL SELECT {number}, {_COPY}, NULL::float8, {copy}, {_NO_TERMS} FROM {leaf} r
    WHERE r.vault = %(vault)s AND r.generation = %(generation)s AND r.kind = 'curated'
    AND r.content_hash IN (SELECT content_hash FROM hit) AND r.key NOT IN (SELECT key FROM hit)
) v{number}"""
    return _renamed(sql, arguments, str(number)), {f"{k}_{number}": v for k, v in arguments.items()}


def _renamed(sql: str, arguments: dict, suffix: str) -> str:
    """`sql` with each named parameter %(name)s as %(name_suffix)s (`arguments` names them all)."""

    def rename(match: re.Match) -> str:
        if match.group(1) not in arguments:
            raise ValueError(f"parameter {match.group(1)!r} has no argument")
        return f"%({match.group(1)}_{suffix})s"

    return _PARAMETER.sub(rename, sql)


def _take(candidates: VaultCandidates, row: tuple) -> None:
    part, score, values, terms = row[1], row[2], row[3:13], row[13:]
    if part == _TERMS:
        candidates.total = terms[0] or 0
        if terms[1] is not None:
            candidates.frequencies[terms[1]] = (terms[2], terms[3])
        return
    stored = _stored_row(values)
    candidates.rows.setdefault(stored.key, stored)
    if part == _LEXICAL:
        candidates.lexical.append((stored.key, float(score)))
    elif part == _VECTOR:
        candidates.vectors.append((stored.key, float(score)))


def _finish(candidates: VaultCandidates) -> None:
    """Each list best first as the engine orders it; each candidate text's curated sources."""
    candidates.lexical.sort(key=lambda hit: (-hit[1], hit[0]))
    candidates.vectors.sort(key=lambda hit: (-hit[1], hit[0]))
    for row in candidates.rows.values():
        if row.kind == "curated":
            candidates.sources.setdefault(row.content_hash, []).append(f"{row.path}#^{row.id}")
    for found in candidates.sources.values():
        found.sort()

"""The tables on the server, and how a vault gets its partition, its generations and its reader role.

    memvault_vaults       one row per vault: the serving generation (the atomic pointer), a
                          commit stamp, the reader role
    memvault_generations  one row per generation: embedding identity, row and token counts (BM25's
                          N and average lengths, kept in step by every apply), and a BuJo vault's
                          replay projection (the sidecar's exact bytes and their SHA-256), so it is
                          switched with the generation and dropped with it
    memvault_files        per generation: each note's state (the manifest, on the server)
    memvault_rows         PARTITION BY LIST (vault), each vault's partition PARTITION BY LIST
                          (generation): one leaf table per (vault, generation), with its own
                          HNSW index, so a vector query never filters other vaults' rows out of
                          its candidate list, and dropping a generation is one DROP TABLE
    memvault_postings     partitioned the same way: blocks of packed postings per (term, field,
                          kind), impact-ordered for BM25 with early termination, and the delta
                          rows of recent applies (lexical.py, postings.py)
    memvault_terms        partitioned the same way: each term's integer id and its document
                          frequency per field

Row-level security: a vault's rows are readable by members of its role `memvault_read_<name>`;
a role granted one vault that forgets its WHERE clause still sees only that vault. The owner
process connects as the tables' owner (it writes every vault it owns); no other role is granted
anything but SELECT here, and memvault_files and memvault_schema are granted to no role.

Owners starting at once serialise their DDL on a lock of memvault_schema (`lock_schema`), not on
an advisory key: any role that may connect can take an advisory key and keep it, which stalled
every owner's start (tests/test_postgres_privileges.py).
"""

import re

from memvault.indexer.backend.postgres.connection import require_psycopg
from memvault.vault.errors import InvalidConfig

SCHEMA_VERSION = 7  # 2: postings and terms tables (BM25 no longer reads GIN indexes nor per-row jsonb);
#                     3: CJK bigrams in the postings (field 2), their document frequency and token count;
#                     4: each generation's replay projection (BuJo's supersession filter);
#                     5: rows hold no line number (a memory's address is path#id);
#                     6: memvault_files under row-level security too (granted to no role: a grant
#                        made by hand would still show no vault's manifest);
#                     7: postings in blocks (packed int8: doc, tf, length) under integer term ids, each
#                        row's forward index (doc, lex, lex_tf) instead of its tsvectors (storage: issue 42)
TEXT_SEARCH_CONFIG = "memvault_en"
VAULT_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
READER_ROLE_PREFIX = "memvault_read_"
#: the tables a vault's reader role reads (row-level security on each)
READ_TABLES = ("memvault_rows", "memvault_vaults", "memvault_generations", "memvault_postings", "memvault_terms")
#: the per-vault partitioned tables: a partition per vault, a leaf per generation
PARTITIONED = ("memvault_rows", "memvault_postings", "memvault_terms")

#: the table whose lock serialises the owners' DDL (`lock_schema`)
_SCHEMA_TABLE_DDL = "CREATE TABLE IF NOT EXISTS memvault_schema (version integer NOT NULL)"
_DDL = [
    "CREATE EXTENSION IF NOT EXISTS vector",
    _SCHEMA_TABLE_DDL,
    """CREATE TABLE IF NOT EXISTS memvault_vaults (
        name text PRIMARY KEY,
        serving integer,
        next_generation integer NOT NULL DEFAULT 1,
        stamp bigint NOT NULL DEFAULT 0,
        reader_role name NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS memvault_generations (
        vault text NOT NULL REFERENCES memvault_vaults (name) ON DELETE CASCADE,
        generation integer NOT NULL,
        embedding jsonb,
        dim integer,
        rows bigint NOT NULL DEFAULT 0,
        text_tokens bigint NOT NULL DEFAULT 0,
        ctx_tokens bigint NOT NULL DEFAULT 0,
        cjk_tokens bigint NOT NULL DEFAULT 0,
        replay bytea,
        replay_sha256 text,
        PRIMARY KEY (vault, generation))""",
    """CREATE TABLE IF NOT EXISTS memvault_files (
        vault text NOT NULL,
        generation integer NOT NULL,
        path text NOT NULL,
        state jsonb NOT NULL,
        PRIMARY KEY (vault, generation, path))""",
    """CREATE TABLE IF NOT EXISTS memvault_rows (
        vault text NOT NULL,
        generation integer NOT NULL,
        key text NOT NULL,
        id text NOT NULL,
        path text NOT NULL,
        kind text NOT NULL,
        day date NOT NULL,
        at bigint NOT NULL,
        text text NOT NULL,
        content_hash text NOT NULL,
        context_hash text NOT NULL,
        context text NOT NULL,
        text_len integer NOT NULL,
        ctx_len integer NOT NULL,
        embedding vector,
        doc integer,
        lex integer[],
        lex_tf integer[],
        PRIMARY KEY (vault, generation, key)) PARTITION BY LIST (vault)""",
    "CREATE INDEX IF NOT EXISTS memvault_rows_path ON memvault_rows (vault, generation, path)",
    "CREATE INDEX IF NOT EXISTS memvault_rows_chash ON memvault_rows (vault, generation, content_hash)",
    # field 0: the row's own words, 1: its neighbours', 2: its CJK bigrams; tier 0 a delta row, 1 a
    # sealed block of the impact range [low, top]; entries packed (see lexical.py)
    """CREATE TABLE IF NOT EXISTS memvault_postings (
        vault text NOT NULL,
        generation integer NOT NULL,
        tier smallint NOT NULL,
        term integer NOT NULL,
        field smallint NOT NULL,
        kind smallint NOT NULL,
        top real NOT NULL,
        low real NOT NULL,
        n integer NOT NULL,
        entries bigint[] NOT NULL) PARTITION BY LIST (vault)""",
    """CREATE TABLE IF NOT EXISTS memvault_terms (
        vault text NOT NULL,
        generation integer NOT NULL,
        lexeme text NOT NULL,
        id integer NOT NULL,
        df_text integer NOT NULL,
        df_ctx integer NOT NULL,
        df_cjk integer NOT NULL DEFAULT 0) PARTITION BY LIST (vault)""",
    *(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY" for table in (*READ_TABLES, "memvault_files")),
]
#: from schema 1: BM25 read GIN indexes and per-row term frequencies, now postings and terms
_MIGRATE_FROM_1 = [
    "DROP INDEX IF EXISTS memvault_rows_text_tsv, memvault_rows_ctx_tsv",
    "ALTER TABLE memvault_rows DROP COLUMN IF EXISTS text_tf, DROP COLUMN IF EXISTS ctx_tf",
]
#: from schema 2: CJK bigrams' token counts (their postings and terms are schema 7's)
_MIGRATE_FROM_2 = ["ALTER TABLE memvault_generations ADD COLUMN IF NOT EXISTS cjk_tokens bigint NOT NULL DEFAULT 0"]
#: from schema 3: the replay projection. A generation built before holds none, which is right for
#: Lite and Journal; a BuJo vault was refused on the server before schema 4, so none is missing
_MIGRATE_FROM_3 = [
    "ALTER TABLE memvault_generations ADD COLUMN IF NOT EXISTS replay bytea, "
    "ADD COLUMN IF NOT EXISTS replay_sha256 text",
]
#: from schema 4: rows held their memory's line, which a line added above it changed; nothing
#: reads it now, and the rest of each row stands (no rebuild)
_MIGRATE_FROM_4 = ["ALTER TABLE memvault_rows DROP COLUMN IF EXISTS line"]
#: from schema 6 and before: postings one row per (term, field, row), under the term's text, and
#: each row's tsvectors. Their generations keep serving rows and vectors; their lexical list says
#: `memvault rebuild`, which makes a generation in blocks (the new tables are created after these)
_MIGRATE_TO_7 = [
    "DROP TABLE IF EXISTS memvault_postings, memvault_terms CASCADE",
    "ALTER TABLE memvault_rows DROP COLUMN IF EXISTS text_tsv, DROP COLUMN IF EXISTS ctx_tsv, "
    "ADD COLUMN IF NOT EXISTS doc integer, ADD COLUMN IF NOT EXISTS lex integer[], "
    "ADD COLUMN IF NOT EXISTS lex_tf integer[]",
]
#: created once; `CREATE POLICY` has no IF NOT EXISTS
_POLICIES = {
    ("memvault_rows", "memvault_rows_reader"):
        "CREATE POLICY memvault_rows_reader ON memvault_rows FOR SELECT "
        f"USING (pg_has_role(current_user, '{READER_ROLE_PREFIX}' || vault, 'MEMBER'))",
    ("memvault_vaults", "memvault_vaults_reader"):
        "CREATE POLICY memvault_vaults_reader ON memvault_vaults FOR SELECT "
        "USING (pg_has_role(current_user, reader_role, 'MEMBER'))",
    **{(table, f"{table}_reader"):
        f"CREATE POLICY {table}_reader ON {table} FOR SELECT "
        f"USING (pg_has_role(current_user, '{READER_ROLE_PREFIX}' || vault, 'MEMBER'))"
       for table in ("memvault_generations", "memvault_postings", "memvault_terms")},
}  # fmt: skip
#: the local engine's analysis: Snowball English stemming, no stop words (they are dropped from
#: queries, not from documents), so document lengths and frequencies count the same tokens
_TEXT_SEARCH = [
    f"CREATE TEXT SEARCH DICTIONARY {TEXT_SEARCH_CONFIG}_stem (TEMPLATE = snowball, Language = english)",
    f"CREATE TEXT SEARCH CONFIGURATION {TEXT_SEARCH_CONFIG} (COPY = english)",
    f"ALTER TEXT SEARCH CONFIGURATION {TEXT_SEARCH_CONFIG} ALTER MAPPING FOR asciiword, word, numword, asciihword, "
    f"hword, numhword, hword_asciipart, hword_part, hword_numpart WITH {TEXT_SEARCH_CONFIG}_stem",
]
#: HNSW graph degree and build-time candidate list, below pgvector's defaults (16, 64): measured
#: on 10k rows of 256-d vectors, building and inserting cost about 45% less and the 100-row
#: vector list at ef_search 100 holds 97.8% of the exact list's rows instead of 98.8%
HNSW_M, HNSW_EF_CONSTRUCTION = 12, 40


def check_vault_name(name: str) -> str:
    if not isinstance(name, str) or not VAULT_NAME_RE.fullmatch(name):
        raise InvalidConfig(f"index.name {name!r} is not a vault name for the server: use 1-40 lower-case letters, "
                            "digits, '-' or '_', starting with a letter or digit (e.g. \"team-notes\")")  # fmt: skip
    return name


def reader_role(vault: str) -> str:
    return READER_ROLE_PREFIX + vault


#: partitions are named by a prefix as long as memvault_rows' own (a vault name may take 40 of
#: PostgreSQL's 63 bytes of a name)
_PREFIX = {"memvault_rows": "memvault_rows", "memvault_postings": "memvault_post", "memvault_terms": "memvault_term"}


def leaf_table(vault: str, generation: int, table: str = "memvault_rows") -> str:
    return f"{_PREFIX[table]}_{vault}_g{generation}"


def vault_table(vault: str, table: str = "memvault_rows") -> str:
    return f"{_PREFIX[table]}_{vault}"


def ensure_schema(conn) -> None:
    """Create what is missing, idempotently, under the schema lock (concurrent owners). A
    server already at this schema version is left alone: the DDL takes table locks."""
    if _schema_version(conn) == SCHEMA_VERSION and tables_present(conn):
        return
    _create_schema_table(conn)
    with conn.transaction():
        lock_schema(conn)
        found = conn.execute("SELECT 1 FROM pg_ts_config WHERE cfgname = %s", (TEXT_SEARCH_CONFIG,)).fetchone()
        if found is None:
            for statement in _TEXT_SEARCH:
                conn.execute(statement)
        version = _schema_version(conn)
        if version is not None and version < 7:
            for statement in _MIGRATE_TO_7:
                conn.execute(statement)
        for statement in _DDL:
            conn.execute(statement)
        _add_missing_columns(conn, version)
        for (table, policy), statement in _POLICIES.items():
            exists = conn.execute("SELECT 1 FROM pg_policies WHERE tablename = %s AND policyname = %s",
                                  (table, policy)).fetchone()  # fmt: skip
            if exists is None:
                conn.execute(statement)
        if version is not None and version < 7:
            _migrate_to_7(conn)
        conn.execute("DELETE FROM memvault_schema")
        conn.execute("INSERT INTO memvault_schema VALUES (%s)", (SCHEMA_VERSION,))


def _add_missing_columns(conn, version: int | None) -> None:
    """What a server of an earlier schema lacks (or holds no more) beside schema 7's tables."""
    steps = ((version == 1, _MIGRATE_FROM_1), (version in (1, 2), _MIGRATE_FROM_2),
             (version in (1, 2, 3), _MIGRATE_FROM_3), (version in (1, 2, 3, 4), _MIGRATE_FROM_4))  # fmt: skip
    for due, statements in steps:
        for statement in statements if due else ():
            conn.execute(statement)


def lock_schema(conn) -> None:
    """Serialise the owners' DDL, inside the caller's transaction (released at its end). LOCK in
    this mode needs UPDATE on memvault_schema, which only its owner has, and no statement of a
    role without rights takes it on the way to its permission error (a SELECT or an INSERT
    locks its table before the privilege check, in weaker modes this one does not wait for)."""
    conn.execute("LOCK TABLE memvault_schema IN SHARE UPDATE EXCLUSIVE MODE")


def _create_schema_table(conn) -> None:
    """memvault_schema itself, before its lock can be taken (the first owner ever, or a lost one)."""
    if conn.execute("SELECT to_regclass('memvault_schema')").fetchone()[0] is not None:
        return
    psycopg = require_psycopg()
    try:
        with conn.transaction():
            conn.execute(_SCHEMA_TABLE_DDL)
    except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
        pass  # another owner created it at the same moment


def _schema_version(conn) -> int | None:
    if conn.execute("SELECT to_regclass('memvault_schema')").fetchone()[0] is None:
        return None
    row = conn.execute("SELECT max(version) FROM memvault_schema").fetchone()
    return None if row is None else row[0]


def tables_present(conn) -> bool:
    """Every table of this schema exists (a dropped one, a lost database, is created again)."""
    names = ["memvault_files", *READ_TABLES]
    found = conn.execute("SELECT count(to_regclass(name)) FROM unnest(%s::text[]) AS name", (names,)).fetchone()[0]
    return found == len(names)


def _migrate_to_7(conn) -> None:
    """Generations before schema 7 have no postings in blocks: they are kept (their rows still
    serve vectors, journal and health) but their lexical reads say `memvault rebuild` (engine.py).
    Each vault gets its postings and terms partitions again, and its grants on them."""
    for (vault,) in conn.execute("SELECT name FROM memvault_vaults").fetchall():
        _vault_partitions(conn, vault)
        _grant_reads(conn, vault)


def ensure_vault(conn, vault: str) -> None:
    """The vault's row, partitions and reader role (granted read on the shared tables)."""
    from psycopg import sql

    check_vault_name(vault)
    if conn.execute("SELECT 1 FROM memvault_vaults WHERE name = %s", (vault,)).fetchone() is not None:
        return  # the common case takes no lock
    with conn.transaction():
        lock_schema(conn)
        if conn.execute("SELECT 1 FROM memvault_vaults WHERE name = %s", (vault,)).fetchone() is not None:
            return
        role = reader_role(vault)
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
        _grant_reads(conn, vault)
        _vault_partitions(conn, vault)
        conn.execute("INSERT INTO memvault_vaults (name, reader_role) VALUES (%s, %s)", (vault, role))


def _grant_reads(conn, vault: str) -> None:
    from psycopg import sql

    for table in READ_TABLES:
        conn.execute(
            sql.SQL("GRANT SELECT ON {} TO {}").format(sql.Identifier(table), sql.Identifier(reader_role(vault)))
        )


def _vault_partitions(conn, vault: str) -> None:
    from psycopg import sql

    for table in PARTITIONED:  # IF NOT EXISTS: a lost vault row (a dropped table) left the others
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} PARTITION OF {} FOR VALUES IN ({}) PARTITION BY LIST "
                             "(generation)").format(sql.Identifier(vault_table(vault, table)), sql.Identifier(table),
                                                    sql.Literal(vault)))  # fmt: skip


def create_leaf(conn, vault: str, generation: int) -> None:
    """A generation's leaf tables. A leftover of the same number (the vault's row was lost, so
    numbering started again) is dropped first: its rows belong to no generation."""
    from psycopg import sql

    for table in PARTITIONED:
        leaf = sql.Identifier(leaf_table(vault, generation, table))
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(leaf))
        conn.execute(
            sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES IN ({})").format(
                leaf, sql.Identifier(vault_table(vault, table)), sql.Literal(generation)
            )
        )
    terms = leaf_table(vault, generation, "memvault_terms")
    for name, leaf, columns in ((f"mvt_{vault}_g{generation}", terms, "lexeme"),
                                (f"mvti_{vault}_g{generation}", terms, "id"),  # a delete's terms, by id
                                (f"mvrd_{vault}_g{generation}", leaf_table(vault, generation), "doc")):  # fmt: skip
        conn.execute(sql.SQL("CREATE UNIQUE INDEX {} ON {} ({})").format(
            sql.Identifier(name), sql.Identifier(leaf), sql.SQL(columns)))  # fmt: skip
    for table in PARTITIONED:  # BM25 and the vector list read these leaves by name (engine.py):
        # a grant on one vault's leaves is that vault's isolation, as the policy is the parents'
        conn.execute(
            sql.SQL("GRANT SELECT ON {} TO {}").format(
                sql.Identifier(leaf_table(vault, generation, table)), sql.Identifier(reader_role(vault))
            )
        )


def ensure_postings_indexes(conn, vault: str, generation: int) -> None:
    """The postings leaf's index, built once its bulk of rows is in (a rebuild loads a new
    generation without it): a (term, field, kind) list's delta rows, and its blocks best first.
    A row's postings are found through its forward index (`memvault_rows.lex`), not by key."""
    from psycopg import sql

    leaf = leaf_table(vault, generation, "memvault_postings")
    conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (tier, term, field, kind, top DESC) INCLUDE (n)")
                 .format(sql.Identifier(f"mvpl_{vault}_g{generation}"), sql.Identifier(leaf)))  # fmt: skip


def ensure_vector_index(conn, vault: str, generation: int, dim: int) -> None:
    """The leaf's HNSW index (cosine) on its vectors, built once: after a bulk load it is cheaper
    to build than to keep up row by row."""
    from psycopg import sql

    name = f"{leaf_table(vault, generation)}_hnsw"
    conn.execute(
        sql.SQL(
            "CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw ((embedding::vector({})) vector_cosine_ops) "
            f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})"
        ).format(sql.Identifier(name), sql.Identifier(leaf_table(vault, generation)), sql.Literal(dim))
    )


def analyze_leaf(conn, vault: str, generation: int) -> None:
    """Fresh planner statistics for a generation's leaves (after a bulk load): without them the
    planner takes a leaf of thousands of rows for one row and passes over its indexes."""
    from psycopg import sql

    for table in PARTITIONED:  # VACUUM marks the loaded pages all-visible: index-only scans of the postings
        statement = "VACUUM (ANALYZE) {}" if table == "memvault_postings" else "ANALYZE {}"
        conn.execute(sql.SQL(statement).format(sql.Identifier(leaf_table(vault, generation, table))))


def drop_leaf(conn, vault: str, generation: int) -> None:
    from psycopg import sql

    for table in PARTITIONED:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(leaf_table(vault, generation, table))))
    conn.execute("DELETE FROM memvault_files WHERE vault = %s AND generation = %s", (vault, generation))
    conn.execute("DELETE FROM memvault_generations WHERE vault = %s AND generation = %s", (vault, generation))

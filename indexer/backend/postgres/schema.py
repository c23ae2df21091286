"""The tables on the server, and how a vault gets its partition, its generations and its reader role.

    memvault_vaults       one row per vault: the serving generation (the atomic pointer), a
                          commit stamp, the reader role
    memvault_generations  one row per generation: embedding identity, row and token counts (BM25's
                          N and average lengths, kept in step by every apply)
    memvault_files        per generation: each note's state (the manifest, on the server)
    memvault_rows         PARTITION BY LIST (vault), each vault's partition PARTITION BY LIST
                          (generation): one leaf table per (vault, generation), with its own
                          HNSW index, so a vector query never filters other vaults' rows out of
                          its candidate list, and dropping a generation is one DROP TABLE

Row-level security: a vault's rows are readable by members of its role `memvault_read_<name>`;
a role granted one vault that forgets its WHERE clause still sees only that vault. The owner
process connects as the tables' owner (it writes every vault it owns).
"""

import re

from memvault.vault.errors import InvalidConfig

SCHEMA_VERSION = 1  # bump with a migration note when a table changes
TEXT_SEARCH_CONFIG = "memvault_en"
VAULT_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
READER_ROLE_PREFIX = "memvault_read_"

_DDL = [
    "CREATE EXTENSION IF NOT EXISTS vector",
    """CREATE TABLE IF NOT EXISTS memvault_schema (version integer NOT NULL)""",
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
        line integer NOT NULL,
        text text NOT NULL,
        content_hash text NOT NULL,
        context_hash text NOT NULL,
        context text NOT NULL,
        text_tsv tsvector NOT NULL,
        ctx_tsv tsvector NOT NULL,
        text_len integer NOT NULL,
        ctx_len integer NOT NULL,
        text_tf jsonb NOT NULL,
        ctx_tf jsonb NOT NULL,
        embedding vector,
        PRIMARY KEY (vault, generation, key)) PARTITION BY LIST (vault)""",
    # scoring reads each candidate's term frequencies: kept uncompressed (a compressed value is
    # decompressed at every lookup); the longer columns are compressed first and make room
    "ALTER TABLE memvault_rows ALTER COLUMN text_tf SET STORAGE EXTERNAL, ALTER COLUMN ctx_tf SET STORAGE EXTERNAL",
    "CREATE INDEX IF NOT EXISTS memvault_rows_path ON memvault_rows (vault, generation, path)",
    "CREATE INDEX IF NOT EXISTS memvault_rows_chash ON memvault_rows (vault, generation, content_hash)",
    "CREATE INDEX IF NOT EXISTS memvault_rows_text_tsv ON memvault_rows USING gin (text_tsv)",
    "CREATE INDEX IF NOT EXISTS memvault_rows_ctx_tsv ON memvault_rows USING gin (ctx_tsv)",
    "ALTER TABLE memvault_rows ENABLE ROW LEVEL SECURITY",
    "ALTER TABLE memvault_vaults ENABLE ROW LEVEL SECURITY",
    "ALTER TABLE memvault_generations ENABLE ROW LEVEL SECURITY",
]
#: created once; `CREATE POLICY` has no IF NOT EXISTS
_POLICIES = {
    ("memvault_rows", "memvault_rows_reader"):
        "CREATE POLICY memvault_rows_reader ON memvault_rows FOR SELECT "
        f"USING (pg_has_role(current_user, '{READER_ROLE_PREFIX}' || vault, 'MEMBER'))",
    ("memvault_vaults", "memvault_vaults_reader"):
        "CREATE POLICY memvault_vaults_reader ON memvault_vaults FOR SELECT "
        "USING (pg_has_role(current_user, reader_role, 'MEMBER'))",
    ("memvault_generations", "memvault_generations_reader"):
        "CREATE POLICY memvault_generations_reader ON memvault_generations FOR SELECT "
        f"USING (pg_has_role(current_user, '{READER_ROLE_PREFIX}' || vault, 'MEMBER'))",
}  # fmt: skip
#: the local engine's analysis: Snowball English stemming, no stop words (they are dropped from
#: queries, not from documents), so document lengths and frequencies count the same tokens
_TEXT_SEARCH = [
    f"CREATE TEXT SEARCH DICTIONARY {TEXT_SEARCH_CONFIG}_stem (TEMPLATE = snowball, Language = english)",
    f"CREATE TEXT SEARCH CONFIGURATION {TEXT_SEARCH_CONFIG} (COPY = english)",
    f"ALTER TEXT SEARCH CONFIGURATION {TEXT_SEARCH_CONFIG} ALTER MAPPING FOR asciiword, word, numword, asciihword, "
    f"hword, numhword, hword_asciipart, hword_part, hword_numpart WITH {TEXT_SEARCH_CONFIG}_stem",
]
#: one transaction-level advisory lock key for schema creation (two owners starting at once)
_SCHEMA_LOCK = 0x6D656D76


def check_vault_name(name: str) -> str:
    if not isinstance(name, str) or not VAULT_NAME_RE.fullmatch(name):
        raise InvalidConfig(f"index.name {name!r} is not a vault name for the server: use 1-40 lower-case letters, "
                            "digits, '-' or '_', starting with a letter or digit (e.g. \"team-notes\")")  # fmt: skip
    return name


def reader_role(vault: str) -> str:
    return READER_ROLE_PREFIX + vault


def leaf_table(vault: str, generation: int) -> str:
    return f"memvault_rows_{vault}_g{generation}"


def vault_table(vault: str) -> str:
    return f"memvault_rows_{vault}"


def ensure_schema(conn) -> None:
    """Create what is missing, idempotently, under an advisory lock (concurrent owners)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        found = conn.execute("SELECT 1 FROM pg_ts_config WHERE cfgname = %s", (TEXT_SEARCH_CONFIG,)).fetchone()
        if found is None:
            for statement in _TEXT_SEARCH:
                conn.execute(statement)
        for statement in _DDL:
            conn.execute(statement)
        for (table, policy), statement in _POLICIES.items():
            exists = conn.execute("SELECT 1 FROM pg_policies WHERE tablename = %s AND policyname = %s",
                                  (table, policy)).fetchone()  # fmt: skip
            if exists is None:
                conn.execute(statement)
        if conn.execute("SELECT 1 FROM memvault_schema").fetchone() is None:
            conn.execute("INSERT INTO memvault_schema VALUES (%s)", (SCHEMA_VERSION,))


def ensure_vault(conn, vault: str) -> None:
    """The vault's row, partition and reader role (granted read on the shared tables)."""
    from psycopg import sql

    check_vault_name(vault)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        if conn.execute("SELECT 1 FROM memvault_vaults WHERE name = %s", (vault,)).fetchone() is not None:
            return
        role = reader_role(vault)
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
        for table in ("memvault_rows", "memvault_vaults", "memvault_generations"):
            conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.Identifier(table), sql.Identifier(role)))
        conn.execute(sql.SQL("CREATE TABLE {} PARTITION OF memvault_rows FOR VALUES IN ({}) PARTITION BY LIST (generation)")
                     .format(sql.Identifier(vault_table(vault)), sql.Literal(vault)))  # fmt: skip
        conn.execute("INSERT INTO memvault_vaults (name, reader_role) VALUES (%s, %s)", (vault, role))


def create_leaf(conn, vault: str, generation: int) -> None:
    from psycopg import sql

    leaf = sql.Identifier(leaf_table(vault, generation))
    conn.execute(sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES IN ({})").format(
        leaf, sql.Identifier(vault_table(vault)), sql.Literal(generation)))
    conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN text_tf SET STORAGE EXTERNAL, "
                         "ALTER COLUMN ctx_tf SET STORAGE EXTERNAL").format(leaf))


def ensure_vector_index(conn, vault: str, generation: int, dim: int) -> None:
    """The leaf's HNSW index (cosine) on its vectors, built once: after a bulk load it is cheaper
    to build than to keep up row by row."""
    from psycopg import sql

    name = f"{leaf_table(vault, generation)}_hnsw"
    conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw ((embedding::vector({})) vector_cosine_ops)")
                 .format(sql.Identifier(name), sql.Identifier(leaf_table(vault, generation)), sql.Literal(dim)))


def analyze_leaf(conn, vault: str, generation: int) -> None:
    """Fresh planner statistics for a leaf (after a bulk load): without them the planner takes
    a leaf of thousands of rows for one row and passes over its GIN and HNSW indexes."""
    from psycopg import sql

    conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(leaf_table(vault, generation))))


def drop_leaf(conn, vault: str, generation: int) -> None:
    from psycopg import sql

    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(leaf_table(vault, generation))))
    conn.execute("DELETE FROM memvault_files WHERE vault = %s AND generation = %s", (vault, generation))
    conn.execute("DELETE FROM memvault_generations WHERE vault = %s AND generation = %s", (vault, generation))

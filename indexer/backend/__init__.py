"""The index backend seam (`base.py`) and the server engine behind it: `base.IndexGenerations` is
what the store drives on either engine; a server engine also stores rows through
`base.IndexBackend` and `base.ServerIndexBackend`. Tantivy + hnswlib serve by default
(`maintenance/local_generations.py`); PostgreSQL + pgvector (`backend/postgres/`) when a vault's
config names it."""

from memvault.indexer.backend.postgres.across import AcrossReader, VaultPlan
from memvault.indexer.backend.postgres.connection import (
    ServerBounds,
    connect,
    describe_target,
    server_versions,
    shared_pool,
    version_problems,
)
from memvault.indexer.backend.postgres.engine import PostgresBackend
from memvault.indexer.backend.postgres.replica import READ_DSN_SETTING
from memvault.indexer.backend.postgres.team import OwnerLock, TeamListener, TeamServer
from memvault.vault.errors import VaultError


def open_backend(index, *, create: bool = True):
    """The engine an `index` config block (vault.config.IndexConfig) names, connected.

    `create`: make the vault's partition and role when missing (the owner's open); without it a
    vault the server does not hold is an IndexUnavailable."""
    if index.backend == "postgres":
        # an owner's reads decide its writes: only a backend that never writes reads a standby
        read_dsn = "" if create else getattr(index, "read_dsn", "")
        # what writes the index needs sessions of its own: past a transaction-mode pooler
        dsn = index.owner_dsn if create else index.dsn
        bounds = ServerBounds.of(index, owner=create)
        return PostgresBackend(dsn, index.name, create=create, bounds=bounds, read_dsn=read_dsn)
    raise ValueError(f"index backend {index.backend!r} has no server engine")


def check_server(index) -> list[str]:
    """What is wrong with the configured server for this backend (unreachable, too old, no
    pgvector), each naming the fix; [] when it will do. Never raises for a server's state."""
    try:
        with connect(index.dsn, autocommit=True, bounds=ServerBounds.of(index)) as conn:
            return version_problems(*server_versions(conn))
    except VaultError as exc:
        return [str(exc)]


def check_read_replica(index) -> list[str]:
    """What is wrong with the read replica `index.read_dsn` names (unreachable, refused, too old),
    each naming the setting and the fix; [] when none is set or it will do. Its reads would go
    to the primary meanwhile: a warning, not an error."""
    read_dsn = getattr(index, "read_dsn", "")
    if not read_dsn:
        return []
    try:
        with connect(read_dsn, autocommit=True, bounds=ServerBounds.of(index), setting=READ_DSN_SETTING) as conn:
            found = version_problems(*server_versions(conn))
    except VaultError as exc:
        found = [str(exc)]
    return [f"the read replica of {READ_DSN_SETTING} (its reads go to the primary meanwhile): {problem}"
            for problem in found]  # fmt: skip


def server_versions_of(index) -> dict:
    """{"postgresql": "18.3", "pgvector": "0.8.2"} of the configured server (bench output, health)."""
    with connect(index.dsn, autocommit=True, bounds=ServerBounds.of(index)) as conn:
        _, server, vector = server_versions(conn)
    return {"postgresql": server, "pgvector": vector}


def open_team_server(dsn: str, vault: str, *, create: bool = False, index=None):
    """The team rows of one vault on the index server (backend/postgres/team.py): the run ledger
    clients admit to, remembered facts waiting for their owner, the owner's registration.
    `create`: make the team tables and the vault's writer role (the owner's start: its session DSN
    when the index block sets one). `index`: an index config block whose bounds (pool size,
    timeout, pooler) the process's pool for `dsn` takes."""
    if index is not None:
        if create and getattr(index, "session_dsn", ""):
            dsn = index.session_dsn
        shared_pool(dsn, ServerBounds.of(index, owner=create))
    read_dsn = "" if create or index is None else getattr(index, "read_dsn", "")
    return TeamServer(dsn, vault, create=create, read_dsn=read_dsn)


def open_across_reader(dsn: str, *, index=None) -> AcrossReader:
    """Reads for a search across vaults on the index server (backend/postgres/across.py): a fixed
    number of statements on one pooled connection, whatever the number of vaults. Use it as a
    context manager (it holds the connection). `index`: an index block whose bounds the pool takes."""
    if index is None:
        return AcrossReader(dsn)
    return AcrossReader(dsn, ServerBounds.of(index), read_dsn=getattr(index, "read_dsn", ""))


def across_plan(vault, vector, dim, terms) -> VaultPlan:
    """One vault's part of `AcrossReader.candidates`."""
    return VaultPlan(vault, vector, dim, tuple(terms))


def team_listener(dsn: str, vault: str):
    """The owner's wake-up channel for one vault (LISTEN; backend/postgres/team.py)."""
    return TeamListener(dsn, vault)


def server_label(dsn: str) -> str:
    """Where a DSN points (host, port, database, user), never its password."""
    return describe_target(dsn)


def owner_lock(dsn: str, vault: str):
    """The server-side owner fence of one vault (a lock on its fence view), not yet taken."""
    return OwnerLock(dsn, vault)

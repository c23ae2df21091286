"""Faults with real processes around the PostgreSQL index backend: the server stopped hard and
started again, a server that is unreachable when a command starts, a rebuild SIGKILLed halfway.
Each test that stops a server has a server of its own."""

import json
import signal
import subprocess
import time

import psycopg
import pytest

from memvault import MemoryStore
from memvault.vault.config import default_config_data, render_config
from memvault.vault.errors import IndexUnavailable
from memvault.vault.init import init_vault
from tests.engine_helpers import ENV, MEMVAULT, REPO, OwnerProcess, memvault, wait_for
from tests.postgres_helpers import PostgresServer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.one_engine(
        "faults of the PostgreSQL server itself (stopped hard, unreachable, a rebuild killed on it)"
    ),
]
SECRET = "hunter2-do-not-print"


@pytest.fixture
def own_server():
    server = PostgresServer.start_new()
    yield server
    server.destroy()


def make_vault(tmp_path, name="team-a"):
    root = tmp_path / name
    init_vault(root, render_config(default_config_data("journal", "UTC", {"backend": "postgres", "name": name})))
    return root


def add_bullets(root, day: str, texts: list[str]) -> None:
    note = root / "daily" / f"{day}.md"
    note.parent.mkdir(exist_ok=True)
    note.write_text("".join(f"- 09:{i:02d} {text}\n" for i, text in enumerate(texts)))


def server_texts(dsn: str, vault: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT text FROM memvault_rows WHERE vault = %s AND generation = "
            "(SELECT serving FROM memvault_vaults WHERE name = %s)",
            (vault, vault),
        ).fetchall()
    return sorted(row[0] for row in rows)


def strict_health(root, env) -> dict:
    done = memvault(root, "health", "--strict", "--json", env=env)
    return json.loads(done.stdout)


def test_server_stopped_hard_then_started_loses_nothing_and_the_owner_catches_up(tmp_path, own_server):
    dsn = own_server.new_database()
    env = {"MEMVAULT_INDEX_DSN": f"{dsn} password={SECRET}"}  # the server trusts the socket: unused, never shown
    root = make_vault(tmp_path)
    with MemoryStore.open(root, env=env) as store:
        store.remember("Morgan chose blue as the deployment color.")
    add_bullets(root, "2026-11-02", [f"Hand-written note number {i} about the harbour." for i in range(40)])
    own_server.stop_immediately()  # in the middle of the sync below: the server goes, no checkpoint
    with MemoryStore.open(root, env=env) as store:  # the open's sync cannot reach it: noted, not fatal
        assert "unreachable" in (store.unsynced or "") and SECRET not in store.unsynced
    own_server.restart()
    lagging = strict_health(root, env)  # the server is back, but has not seen the hand edit yet
    assert any(f["code"] == "unindexed_file" and f["subject"] == "daily/2026-11-02.md" for f in lagging["findings"]), (
        lagging["findings"]
    )
    owner = OwnerProcess(root, "watch", env).wait_serving()
    try:
        own_server.stop_immediately()  # and once more while the owner runs
        add_bullets(root, "2026-11-03", ["Written while the index server was down."])
        # the owner (debounce 0.05 s) meets the outage first: its writes fail and are caught up later,
        # its reads wait for the server (a connection dead while idle is replaced, tests/test_postgres_walls.py)
        time.sleep(1.5)
        own_server.restart()  # the owner retries by itself: no command, no event needed after this
        wait_for(
            lambda: "Written while the index server was down." in server_texts(dsn, "team-a"),
            what="the owner to catch the server up",
        )
    finally:
        log = owner.stop()
    # a read of the owner that meets the outage waits for the server within index.timeoutSeconds
    # (connection.retried_once), so an outage this short may cost it no failed call and no log line
    assert SECRET not in log
    assert strict_health(root, env)["healthy"]
    texts = server_texts(dsn, "team-a")
    assert len(texts) == 42 and "Morgan chose blue as the deployment color." in texts


def test_an_unreachable_server_is_named_without_its_password(tmp_path, postgres_dsn):
    root = make_vault(tmp_path)
    with MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": postgres_dsn}) as store:
        store.remember("Morgan chose blue as the deployment color.")
    bad = {"MEMVAULT_INDEX_DSN": f"host=127.0.0.1 port=9 user=memvault password={SECRET} dbname=team"}
    outputs = []
    for args in (
        ["search", "blue"],
        ["remember", "Standup moved to 10:00."],
        ["health"],
        ["validate"],
        ["search", "--across", "team-a", "blue"],
        ["journal", "2026-11-01", "2026-11-02"],
    ):
        done = memvault(root, *args, env=bad)
        outputs.append(done.stdout + done.stderr)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        if args[0] != "journal":  # MemoryJournal's error is the spec's fixed, content-free one
            assert "127.0.0.1" in done.stdout + done.stderr, (args, done.stdout, done.stderr)
    assert not [text for text in outputs if SECRET in text]
    # local-only commands need no server
    assert memvault(root, "inspect", "--json", env=bad).returncode == 0
    assert memvault(tmp_path / "local", "init", "--mode", "lite", env=bad).returncode == 0


def test_a_rebuild_killed_halfway_leaves_the_old_generation_serving(tmp_path, postgres_dsn):
    env = {"MEMVAULT_INDEX_DSN": postgres_dsn}
    root = make_vault(tmp_path)
    for day in range(1, 6):
        add_bullets(root, f"2026-10-0{day}", [f"Fact {day}.{i} about the lighthouse." for i in range(3)])
    with MemoryStore.open(root, env=env) as store:
        store.rebuild()
        serving = store.backend.serving_generation()
    for day in range(6, 10):
        add_bullets(root, f"2026-10-0{day}", [f"Fact {day}.{i} about the lighthouse." for i in range(3)])
    done = memvault(root, "rebuild", env={**env, "MEMVAULT_TEST_CRASH_AT": "apply.committed:1"})
    assert done.returncode == -signal.SIGKILL, done.stderr
    with psycopg.connect(postgres_dsn) as conn:
        generations = [
            r[0]
            for r in conn.execute(
                "SELECT generation FROM memvault_generations WHERE vault = 'team-a' ORDER BY generation"
            ).fetchall()
        ]
        pointer = conn.execute("SELECT serving FROM memvault_vaults WHERE name = 'team-a'").fetchone()[0]
    assert pointer == serving and max(generations) > serving  # the half-built one exists, unserved
    with MemoryStore.open(root, env=env, sync=False) as store:
        assert store.recall("lighthouse fact", limit=20).hits  # served from the old generation
        store.rebuild()  # removes the dead build, builds anew
        assert store.backend.stray_generations() == []
    assert len(server_texts(postgres_dsn, "team-a")) == 27


def test_an_owner_killed_during_its_rebuild_leaves_the_old_generation_serving(tmp_path, postgres_dsn):
    env = {"MEMVAULT_INDEX_DSN": postgres_dsn}
    root = make_vault(tmp_path)
    for day in range(1, 29):
        add_bullets(root, f"2026-09-{day:02d}", [f"Entry {day}.{i} about the tide tables." for i in range(40)])
    with MemoryStore.open(root, env=env) as store:
        serving = store.backend.serving_generation()
    owner = OwnerProcess(root, "watch", env).wait_serving()
    rebuild = subprocess.Popen(
        [*MEMVAULT, "--vault", str(root), "rebuild"],
        env={**ENV, **env},
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # the owner rebuilds
    try:

        def building() -> bool:
            with psycopg.connect(postgres_dsn) as conn:
                return (
                    conn.execute("SELECT max(generation) FROM memvault_generations WHERE vault = 'team-a'").fetchone()[
                        0
                    ]
                    > serving
                )

        wait_for(building, what="the owner to start building a generation")
        owner.proc.send_signal(signal.SIGKILL)
        owner.proc.wait(60)
    finally:
        rebuild.wait(120)
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute("SELECT serving FROM memvault_vaults WHERE name = 'team-a'").fetchone()[0] == serving
    with MemoryStore.open(root, env=env, sync=False) as store:  # the dead owner's status is no obstacle
        hits = store.recall("tide tables entry", limit=5).hits
        assert hits and hits[0].text.startswith("Entry")
        assert store.backend.serving_generation() == serving
    assert len(server_texts(postgres_dsn, "team-a")) == 28 * 40


def test_init_with_the_server_away_makes_the_vault_and_says_so(tmp_path):
    bad = {"MEMVAULT_INDEX_DSN": f"host=127.0.0.1 port=9 user=memvault password={SECRET} dbname=team"}
    done = memvault(tmp_path / "notes", "init", "--index", "postgres", env=bad)
    assert done.returncode == 0, done.stderr
    assert "127.0.0.1" in done.stderr and "memvault rebuild" in done.stderr and SECRET not in done.stderr
    assert json.loads((tmp_path / "notes" / "memvault.json").read_text())["index"] == {
        "backend": "postgres",
        "name": "notes",
    }


def _notes(root, count: int) -> None:
    for n in range(count):  # more notes than one rebuild batch (REBUILD_BATCH_FILES) holds
        day = f"2025-{1 + n // 28:02d}-{1 + n % 28:02d}"
        add_bullets(root, day, [f"Ledger entry {n}.{i} about the granary." for i in range(2)])


def _rows(dsn: str, vault: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT key, text, context, embedding::text FROM memvault_rows WHERE vault = %s AND "
                            "generation = (SELECT serving FROM memvault_vaults WHERE name = %s) ORDER BY key",
                            (vault, vault)).fetchall()  # fmt: skip


def test_a_rebuild_writes_batches_while_reading_the_next_and_ends_as_the_files_say(tmp_path, postgres_dsn):
    # the server writes one batch of notes while the next is read and embedded: the rows it ends
    # with are those the notes give when kept one edit at a time
    env = {"MEMVAULT_INDEX_DSN": postgres_dsn}
    root = make_vault(tmp_path)
    _notes(root, 150)
    with MemoryStore.open(root, env=env) as store:  # the open's sync: the rows kept incrementally
        kept = _rows(postgres_dsn, "team-a")
        seen = []
        report = store.rebuild(hook=seen.append)
    assert report.memories == 300 and seen.count("apply.committed") == 3
    assert _rows(postgres_dsn, "team-a") == kept


def test_a_write_the_server_refuses_mid_rebuild_stops_it_and_the_old_generation_serves(tmp_path, postgres_dsn):
    env = {"MEMVAULT_INDEX_DSN": postgres_dsn}
    root = make_vault(tmp_path)
    _notes(root, 150)
    with MemoryStore.open(root, env=env) as store:
        serving = store.backend.serving_generation()

        def refuse_the_rest(point: str) -> None:  # after the first batch: the building leaf takes no more rows
            if point == "apply.committed":
                building = max(store.backend.generations())
                with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                    conn.execute(
                        f'ALTER TABLE "memvault_rows_team-a_g{building}" ADD CONSTRAINT refuse CHECK (false) NOT VALID'
                    )

        with pytest.raises(IndexUnavailable, match='the index server refused a statement .*"refuse"'):
            store.rebuild(hook=refuse_the_rest)
        assert store.backend.serving_generation() == serving
        assert store.backend.generations() == [serving]  # the failed build was dropped
        assert store.recall("ledger entry 7 granary").hits
    assert len(_rows(postgres_dsn, "team-a")) == 300

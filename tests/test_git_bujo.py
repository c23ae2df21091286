"""A BuJo vault on two machines through git (issue 44): the replay sidecar and capture travel.

A bare hub and clones of it stand for a laptop and a server; the capture model is a loopback
server both clones' config names (tests/capture_helpers.py), counting every call. The intake
(`.capture-intake/`, plans included) is per machine and never in git; the replay sidecar is.
"""

import json
import os
import time
from pathlib import Path

import pytest

from memvault.indexer.maintenance.generations import current_generation
from memvault.indexer.search.supersession import read_projection
from memvault.indexer.services.intake_worker import IntakeWorker
from memvault.vault.errors import UnsafePath
from memvault.vault.replay import read_sidecar, sidecar_path
from tests import engine_helpers, postgres_helpers
from tests.capture_helpers import (
    EMBED_PATH,
    GOOD,
    OLLAMA_PATH,
    TURN,
    ChatScript,
    add_only,
    daily_text,
    entry,
    hash_embeddings,
    make_capture_vault,
)
from tests.engine_helpers import OwnerProcess, wait_for
from tests.git_helpers import git, isolate_git
from tests.intake_helpers import Clock
from tests.loopback import LoopbackServer

ANSWER = "Morgan leads Project Atlas; the launch is on March 15."


@pytest.fixture(autouse=True)
def git_env(tmp_path, monkeypatch):
    isolate_git(tmp_path, monkeypatch)


@pytest.fixture(autouse=True)
def checkout_umask():
    """git writes what it checks out as 0666 & ~umask: the usual 022 gives 0644."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture
def model():
    script = ChatScript(lambda _turn: GOOD, add_only)
    with LoopbackServer() as server:
        server.route(EMBED_PATH, hash_embeddings)
        server.route(OLLAMA_PATH, script)
        yield server, script


def commit_all(root: Path, message: str) -> None:
    git(root, "add", "-A")
    git(root, "commit", "-q", "--allow-empty", "-m", message)


#: the environment of each machine's processes and stores: on a both_backends test's postgres run a
#: clone indexes into a database of its own (MEMVAULT_INDEX_DSN), as a second machine's server would
#: (a vault on the index server is one folder's, with one owner)
MACHINES: dict[Path, dict[str, str]] = {}


def memvault_json(root: Path, *args: str) -> dict:
    done = engine_helpers.memvault(root, *args, "--json", env=MACHINES.get(root))
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


def store_for(root: Path, clock):
    """tests.intake_helpers.store_for, with the machine's environment."""
    from memvault.indexer.engine.store import MemoryStore
    from memvault.vault.config import load_config
    from memvault.vault.layout import VaultLayout

    return MemoryStore(VaultLayout(root), load_config(root, MACHINES.get(root, {})), clock=clock)


@pytest.fixture
def hub_and_laptop(tmp_path, model, request) -> tuple[Path, Path]:
    postgres_helpers.set_up_the_tests_backend(request)
    MACHINES.clear()
    if postgres_helpers.TEST_BACKEND == "postgres":
        for name in ("server", "other"):  # the clones' own databases
            MACHINES[tmp_path / name] = {
                "MEMVAULT_INDEX_DSN": request.getfixturevalue("postgres_server").new_database()
            }
    server, _ = model
    hub = tmp_path / "hub.git"
    git(tmp_path, "init", "-q", "--bare", str(hub))
    laptop = make_capture_vault(tmp_path, server.url, embed_endpoint=server.url, name="laptop")
    git(laptop, "init", "-q")
    assert memvault_json(laptop, "git", "setup")["configSet"]
    commit_all(laptop, "a new vault")
    git(laptop, "remote", "add", "origin", str(hub))
    git(laptop, "push", "-q", "-u", "origin", "main")
    return hub, laptop


def clone(hub: Path, where: Path) -> Path:
    git(where.parent, "clone", "-q", str(hub), str(where))
    memvault_json(where, "git", "setup")
    return where


def capture(root: Path, run_id: str = "run-1", *, answer: str = ANSWER, text: str = TURN) -> IntakeWorker:
    """One completed turn admitted on this machine and captured by its intake worker."""
    with store_for(root, Clock()) as store:
        store.persist_completed_turn(run_id, answer, capture_text=text)
        worker = IntakeWorker(store, clock=Clock())
        worker.process_due()
        return worker


def served_projection(root: Path) -> bytes | None:
    """The replay projection the serving index holds, read directly (a CLI command would ask the
    owner to rescan): the local engine's generation file, or the serving generation's row on the
    machine's server database; b"" while an index serves without one, None before any index."""
    if postgres_helpers.TEST_BACKEND == "local":
        generation = current_generation(root / ".index")
        if generation is None:
            return None
        found = read_projection(generation)
        return b"" if found is None else found[1]
    import psycopg

    name = json.loads((root / "memvault.json").read_text())["index"]["name"]
    with psycopg.connect(MACHINES[root]["MEMVAULT_INDEX_DSN"], autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('memvault_vaults') IS NULL").fetchone()[0]:
            return None
        row = conn.execute("SELECT g.replay FROM memvault_generations g JOIN memvault_vaults v ON v.name = g.vault "
                           "AND g.generation = v.serving WHERE v.name = %s", (name,)).fetchone()  # fmt: skip
    return None if row is None else b"" if row[0] is None else bytes(row[0])


def mode_of(path: Path) -> int:
    return os.lstat(path).st_mode & 0o7777


@pytest.mark.both_backends
def test_a_cloned_sidecar_is_narrowed_to_0600_on_its_first_read_and_a_writable_one_is_refused(tmp_path, hub_and_laptop):
    hub, laptop = hub_and_laptop
    capture(laptop)
    _, published = read_sidecar(laptop)
    assert published is not None and mode_of(sidecar_path(laptop)) == 0o600
    commit_all(laptop, "the laptop's capture")
    git(laptop, "push", "-q")

    server = clone(hub, tmp_path / "server")
    path = sidecar_path(server)
    assert mode_of(path) == 0o644  # as git checked it out
    assert read_sidecar(server)[1] == published
    assert mode_of(path) == 0o600
    assert git(server, "status", "--porcelain").stdout == ""  # git does not track 0644 vs 0600

    # a pull that changes the sidecar checks it out anew (0644 again); the next reader narrows it
    capture(laptop, "run-2")
    commit_all(laptop, "the laptop's second capture")
    git(laptop, "push", "-q")
    git(server, "pull", "-q", "--no-edit")
    assert mode_of(path) == 0o644
    assert read_sidecar(server)[1] == read_sidecar(laptop)[1]
    assert mode_of(path) == 0o600

    path.chmod(0o666)  # anyone could have written it: never narrowed, refused with the fix
    with pytest.raises(UnsafePath, match="chmod 600"):
        read_sidecar(server)
    assert mode_of(path) == 0o666
    report = memvault_json(server, "health")
    assert not report["healthy"]
    [finding] = [f for f in report["findings"] if f["code"] == "sidecar_invalid"]
    assert "0666" in finding["message"] and "chmod 600" in finding["message"], finding
    assert "Traceback" not in str(report)
    assert daily_text(server).count("Morgan leads Project Atlas.") == 1


@pytest.mark.both_backends
def test_a_run_captured_on_one_machine_makes_no_model_call_and_no_conflict_on_the_other(
    tmp_path, hub_and_laptop, model
):
    _, script = model
    hub, laptop = hub_and_laptop
    server = clone(hub, tmp_path / "server")
    capture(laptop)
    assert entry(laptop)["outcome"] == "captured"
    calls = dict(script.calls)
    assert calls["extraction"] == 1, calls
    commit_all(laptop, "the laptop's capture")
    git(laptop, "push", "-q")
    pulled = git(server, "pull", "-q", "--no-edit")
    assert "CONFLICT" not in pulled.stdout + pulled.stderr

    # the same turn reaches the server's intake (a host that retried there): no plan on this
    # machine, but the pulled sidecar holds the run's capture under the same authority digest
    worker = capture(server)
    assert script.calls == calls, "the server called the model for a run the laptop captured"
    assert worker.last_error is None, worker.last_error
    assert entry(server)["outcome"] == "captured"
    assert read_sidecar(server)[1] == read_sidecar(laptop)[1]
    for fact in ("Morgan leads Project Atlas.", "The Atlas launch is on March 15."):
        assert daily_text(server).count(fact) == 1
        hits = [hit for hit in memvault_json(server, "search", fact)["hits"] if hit["text"] == fact]
        assert len(hits) == 1, hits
    report = memvault_json(server, "health", "--strict")
    assert report["healthy"], report
    assert git(server, "status", "--porcelain", "--", "daily", "graph.jsonl", ".replay-projection-v1.json").stdout == ""

    # another turn under the same run id on a third machine: refused before any model call, named
    other = clone(hub, tmp_path / "other")
    worker = capture(other, answer="The standup moved to Friday.", text="user: standup?\nassistant: Friday now.")
    assert script.calls == calls
    assert "already captured in the replay sidecar from other bytes" in worker.last_error, worker.last_error
    assert entry(other)["state"] == "awaiting_capture" and entry(other)["failure"] == "note_conflict", entry(other)
    assert "Friday" not in daily_text(other) and read_sidecar(other)[1] == read_sidecar(laptop)[1]


@pytest.mark.both_backends
def test_the_owner_reprojects_a_sidecar_a_pull_changed_without_a_rebuild(tmp_path, hub_and_laptop):
    hub, laptop = hub_and_laptop
    server = clone(hub, tmp_path / "server")
    owner = OwnerProcess(server, "watch", MACHINES.get(server), "--consolidate-every", "0").wait_serving()
    try:
        wait_for(lambda: memvault_json(server, "health")["healthy"], what="a healthy server before the pull")
        capture(laptop)
        commit_all(laptop, "the laptop's capture")
        git(laptop, "push", "-q")
        pulled = git(server, "pull", "-q", "--no-edit")
        assert "CONFLICT" not in pulled.stdout + pulled.stderr

        def in_step() -> bool:
            report = memvault_json(server, "health", "--strict")
            return report["healthy"] and not any(f["code"] == "canonical_mismatch" for f in report["findings"])

        wait_for(in_step, what="the owner to project the pulled sidecar")
        fact = "Morgan leads Project Atlas."
        wait_for(lambda: [h for h in memvault_json(server, "search", fact)["hits"] if h["text"] == fact],
                 what="the pulled facts")  # fmt: skip
        assert mode_of(sidecar_path(server)) == 0o600
    finally:
        err = owner.stop()
    assert "Traceback" not in err, err


@pytest.mark.both_backends
def test_the_owner_follows_a_checkout_that_changes_only_the_sidecar(tmp_path, hub_and_laptop):
    hub, laptop = hub_and_laptop
    server = clone(hub, tmp_path / "server")
    capture(laptop)
    commit_all(laptop, "the laptop's capture")
    git(laptop, "push", "-q")
    owner = OwnerProcess(server, "watch", MACHINES.get(server), "--consolidate-every", "0").wait_serving()
    try:
        wait_for(lambda: served_projection(server) is not None, what="the server's first index")
        time.sleep(1.0)  # the owner's start-up rescan is over: only the sidecar's own event is left
        git(server, "fetch", "-q")
        git(server, "checkout", "origin/main", "--", ".replay-projection-v1.json")  # no note changes
        published = read_sidecar(laptop)[1]

        def projected() -> bool:  # the index itself: a CLI command would ask the owner to rescan
            return served_projection(server) == published

        wait_for(projected, what="the owner to project a sidecar no note event came with")
        report = memvault_json(server, "health", "--strict")
        assert not any(f["code"] in ("canonical_mismatch", "sidecar_invalid") for f in report["findings"]), report
    finally:
        err = owner.stop()
    assert "Traceback" not in err, err

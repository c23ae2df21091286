"""The resident engine with real processes: owners drain the intake, clients talk to them, two
owners never run at once, and a killed owner loses nothing (docs/engine.md)."""

import json
import os
import shutil
import socket
import stat
from datetime import UTC, datetime, timedelta

import pytest

from memvault.indexer.engine.address import socket_path
from memvault.indexer.engine.client import find_owner
from memvault.vault.locks import LivenessFence
from tests.engine_helpers import OwnerProcess, memvault, memvault_json, pending_count, turn_json, wait_for
from tests.intake_helpers import admit, make_vault
from tests.postgres_helpers import on_test_backend

pytestmark = pytest.mark.slow


def daily_text(root) -> str:
    return "".join(p.read_text() for p in sorted((root / "daily").glob("*.md")))


# --- (1) owners drain the intake ---------------------------------------------------------------


@pytest.mark.both_backends
def test_readme_tour_watch_then_admit_then_search_finds_the_turn(tmp_path):
    """The README's sequence, as a new user types it: init, `watch &`, admit, search."""
    root = tmp_path / "w"
    assert memvault(root, "init", str(root)).returncode == 0  # the default tier: journal
    on_test_backend(root)  # a both_backends test's postgres run: its index on the server
    owner = OwnerProcess(root, "watch").wait_serving()
    try:
        admitted = memvault(
            root, "admit", "--wait", input=json.dumps({"runId": "r", "answer": "pelicans nest on the pier"})
        )
        body = json.loads(admitted.stdout)
        assert (body["status"], body["state"], body["worker"]) == ("admitted", "resolved", "drained"), admitted.stderr
        found = memvault(root, "search", "pelicans")
        assert found.returncode == 0 and "pelicans nest on the pier" in found.stdout, found.stderr
        assert pending_count(root) == 0
    finally:
        err = owner.stop()
    assert owner.proc.returncode == 0, err


@pytest.mark.both_backends
@pytest.mark.parametrize("command", ["watch", "mcp"])
def test_owner_drains_turns_admitted_by_other_processes(tmp_path, command):
    """Through the socket (`memvault admit`) and behind its back (a process that writes the
    pending record itself): the owner projects both."""
    root = make_vault(tmp_path)
    owner = OwnerProcess(root, command).wait_serving()
    try:
        assert find_owner(root).hello["role"] == command
        via_cli = json.loads(
            memvault(root, "admit", input=turn_json("run-cli", "The heron chose the north pond.")).stdout
        )
        assert via_cli["status"] == "admitted"
        assert admit(root, "run-behind", "The otter moved to the east bank.").status == "admitted"
        wait_for(lambda: pending_count(root) == 0, what="the owner to drain both turns")
        text = daily_text(root)
        assert (
            text.count("The heron chose the north pond.") == 1 and text.count("The otter moved to the east bank.") == 1
        )
        status = memvault_json(root, "inspect")
        assert status["counts"]["resolved"] == 2 and status["counts"]["pending"] == 0
    finally:
        owner.stop()


@pytest.mark.both_backends
@pytest.mark.parametrize("boundary", ["project.note_written", "project.indexed"])
def test_sigkill_of_the_owner_mid_drain_loses_and_duplicates_nothing(tmp_path, boundary):
    root = make_vault(tmp_path, mode="journal")
    answers = [f"Turn {n}: the lighthouse keeper logged {n} ships." for n in range(4)]
    for n, answer in enumerate(answers):
        assert admit(root, f"run-{n}", answer, tier="journal").status == "admitted"
    doomed = OwnerProcess(root, "serve", {"MEMVAULT_TEST_CRASH_AT": f"{boundary}:2"})
    assert doomed.proc.wait(timeout=120) == -9  # SIGKILLed at the second turn's boundary
    assert pending_count(root) >= 3  # the killed drain resolved at most the first turn
    assert socket_path(root).exists()  # the crashed owner's socket is left behind…
    assert find_owner(root) is None  # …and nobody answers it
    successor = OwnerProcess(root, "serve").wait_serving()  # no manual step: the stale socket is replaced
    try:
        wait_for(lambda: pending_count(root) == 0, what="the new owner to drain the rest")
    finally:
        successor.stop()
    text = daily_text(root)
    assert [text.count(answer) for answer in answers] == [1, 1, 1, 1]
    report = memvault_json(root, "inspect")
    assert report["counts"]["resolved"] == 4 and report["ledger"]["ok"]
    assert memvault(root, "health", "--strict").returncode == 0


# --- (2) ownership ----------------------------------------------------------------------------------


@pytest.mark.both_backends
def test_two_owners_never_run_even_after_the_locks_folder_is_deleted(tmp_path):
    root = make_vault(tmp_path)
    archive = tmp_path / "backup.tar.gz"
    assert memvault(root, "export", str(archive)).returncode == 0
    first = OwnerProcess(root, "serve").wait_serving()
    try:
        second = memvault(root, "watch")
        assert second.returncode == 1 and "Another live memvault process owns this vault" in second.stderr
        shutil.rmtree(root / ".locks")  # git clean -fdx, rm -rf .locks
        right_after = memvault(root, "serve")  # before the owner noticed: the socket probe refuses
        assert right_after.returncode == 1 and f"pid {first.proc.pid}" in right_after.stderr, right_after.stderr
        retried = memvault(root, "retry")  # an operator step asks the socket too, not only the fence
        assert retried.returncode == 1 and f"pid {first.proc.pid}" in retried.stderr, retried.stderr
        for step in (("resolve", "a" * 64, "lost-turn"), ("adopt-replay",), ("import", "apply", str(archive))):
            refused = memvault(root, *step)
            assert refused.returncode == 1 and "Traceback" not in refused.stderr, (step, refused.stderr)
            assert f"pid {first.proc.pid}" in refused.stderr or "Another live memvault process" in refused.stderr, step
        wait_for(
            lambda: (root / ".locks" / "engine.json").exists() and LivenessFence(root).is_held_elsewhere(),
            what="the owner to re-create its fence and status",
        )
        assert json.loads((root / ".locks" / "engine.json").read_text())["pid"] == first.proc.pid
        os.unlink(socket_path(root))  # a /tmp cleaner: the owner binds its socket again
        wait_for(lambda: find_owner(root) is not None, what="the owner to bind its socket again")
        third = memvault(root, "serve")
        assert third.returncode == 1 and "Another live memvault process" in third.stderr
        client = OwnerProcess(root, "mcp")  # an MCP server beside a live owner is its client
        try:
            remembered = mcp_remember(client, "The swift nests under the eaves.")
            assert remembered["status"] == "added", remembered
            assert memvault_json(root, "engine", "status")["pid"] == first.proc.pid
            assert "The swift nests under the eaves." in daily_text(root)
        finally:
            client.stop()
    finally:
        err = first.stop()
    assert "was deleted under this owner; re-created it" in err and "bound it again" in err


def mcp_remember(server: OwnerProcess, text: str) -> dict:
    """Handshake with a `memvault mcp` child over its stdio, then one Remember call."""
    proc = server.proc
    messages = (
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "Remember", "arguments": {"text": text}}},
    )  # fmt: skip
    for message in messages:
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
    replies = [json.loads(server.reader.readline()) for _ in range(2)]
    return replies[1]["result"]["structuredContent"]


@pytest.mark.both_backends
def test_a_crashed_owner_is_recovered_by_the_next_process(tmp_path):
    root = make_vault(tmp_path)
    crashed = OwnerProcess(root, "serve").wait_serving()
    crashed.kill()
    status = memvault(root, "engine", "status", "--json")
    assert status.returncode == 1 and json.loads(status.stdout)["staleStatus"]["pid"] == crashed.proc.pid
    remembered = memvault(root, "remember", "The crane flew south.")  # in-process: no owner answers
    assert remembered.returncode == 0 and remembered.stdout.startswith("added:"), remembered.stderr
    successor = OwnerProcess(root, "serve").wait_serving()
    try:
        assert memvault_json(root, "engine", "status")["pid"] == successor.proc.pid
        stopped = memvault(root, "engine", "stop")
        assert stopped.returncode == 0 and f"engine pid {successor.proc.pid} stopped" in stopped.stdout
        assert successor.proc.wait(timeout=60) == 0
    finally:
        successor.stop()
    assert find_owner(root) is None and not LivenessFence(root).is_held_elsewhere()


def test_a_silent_owner_is_reported_as_stuck_and_no_client_writes_beside_it(tmp_path):
    root = make_vault(tmp_path)
    path = socket_path(root)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:  # listens, never answers
        silent.bind(os.fspath(path))
        silent.listen(8)
        try:
            done = memvault(root, "remember", "The stork is stuck.")
        finally:
            path.unlink()
    assert done.returncode == 1 and "stuck" in done.stderr and "memvault engine stop --force" in done.stderr
    assert "The stork is stuck." not in daily_text(root)


@pytest.mark.both_backends
def test_the_socket_is_private_and_hostile_requests_are_answered_not_fatal(tmp_path):
    root = make_vault(tmp_path)
    owner = OwnerProcess(root, "serve").wait_serving()
    try:
        path = socket_path(root)
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.lstat(path.parent).st_mode) == 0o700
        assert len(os.fsencode(path)) < 108
        for raw in (
            b"not json\n",
            b"[1,2]\n",
            b'{"v": 99, "op": "hello"}\n',
            b'{"v": 1, "op": "drop_tables", "args": {}}\n',
            b'{"v": 1, "op": "recall", "args": {"query": 5}}\n',
            b"x" * (17 * 1024 * 1024) + b"\n",
        ):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(60)
                sock.connect(os.fspath(path))
                try:
                    sock.sendall(raw)
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass  # the owner may stop reading an oversized line early
                try:
                    answer = sock.makefile("rb").readline()
                except OSError:
                    answer = b""  # an oversized line may be dropped instead of answered
            if answer:
                body = json.loads(answer)
                assert body["ok"] is False and body["error"]["message"], body
        assert memvault(root, "search", "anything").returncode == 0  # still serving
    finally:
        owner.stop()


# --- client results equal in-process results ------------------------------------------------------------


@pytest.mark.both_backends
def test_client_results_equal_in_process_results(tmp_path, request):
    """The same commands on two identical vaults, one with an owner and one without."""
    from tests import postgres_helpers

    local = make_vault(tmp_path, mode="journal", name="local")
    served = make_vault(tmp_path, mode="journal", name="served")
    if postgres_helpers.TEST_BACKEND == "postgres":  # identical on the server too: one name, each its own database
        on_test_backend(local, name="test-v")
        other = request.getfixturevalue("postgres_server").new_database()
        postgres_helpers.on_server_database(served, other, "test-v")
    owner = OwnerProcess(served, "serve").wait_serving()
    try:
        for run_id, answer in (("a", "Deployed 2.4 to staging."), ("a", "Deployed 2.4 to staging."), ("a", "Other.")):
            here = memvault(local, "admit", "--wait", input=turn_json(run_id, answer))
            there = memvault(served, "admit", "--wait", input=turn_json(run_id, answer))
            assert (here.returncode, json.loads(here.stdout)) == (there.returncode, json.loads(there.stdout))
        script = [
            ("remember", "Morgan chose blue as the deployment color.", "--at", "2026-11-30T14:03:00+01:00"),
            ("remember", "Morgan chose blue as the deployment color.", "--at", "2026-11-30T14:03:00+01:00"),
            ("remember", "The standup moved to 10:00.", "--at", "2026-11-29T09:30:00+01:00"),
            ("remember", "the deploy key is AKIAIOSFODNN7EXAMPLE"),
            # health commits what the owner put off: until its timed commit, a fresh memory is ranked
            # from the pending rows (same hits, provisional scores; docs/engine.md)
            ("health",),
            ("search", "which colour for deployment?", "--explain"),
            ("search", "standup", "--mode", "auto"),
            ("search", "x", "--limit", "0"),
            ("journal", "2026-11-29", "2026-11-30", "--tz", "Europe/Amsterdam", "--limit", "1"),
            ("journal", "2026-11-30", "2026-11-29", "--tz", "Europe/Amsterdam"),
            ("health",),
        ]
        for args in script:
            here, there = memvault(local, *args, "--json"), memvault(served, *args, "--json")
            assert here.returncode == there.returncode, (args, here.stderr, there.stderr)
            assert _comparable(here.stdout) == _comparable(there.stdout), args
            assert here.stderr.replace(str(local), "V") == there.stderr.replace(str(served), "V"), args
        from memvault import MemoryStore

        with MemoryStore.open(local) as a, MemoryStore.open(served) as b:
            assert type(b).__name__ == "RemoteStore" and type(a).__name__ == "MemoryStore"
            assert a.recall("deployment color").to_json(explain=True) == b.recall("deployment color").to_json(
                explain=True
            )
            page = dict(from_date="2026-11-29", through_date="2026-11-30", time_zone="Europe/Amsterdam")
            assert _no_cursor(a.journal(**page).to_json()) == _no_cursor(b.journal(**page).to_json())
    finally:
        owner.stop()


def _comparable(stdout: str):
    """JSON output with what differs by nature between two vaults (cursor tokens) set aside."""
    if not stdout.strip():
        return stdout
    return _no_cursor(json.loads(stdout))


def _no_cursor(body):
    if isinstance(body, dict):
        return {k: ("<cursor>" if k == "cursor" and v else _no_cursor(v)) for k, v in body.items()}
    if isinstance(body, list):
        return [_no_cursor(v) for v in body]
    return body


# --- health reports what waits ---------------------------------------------------------------------


@pytest.mark.both_backends
def test_health_reports_turns_that_wait_for_a_process_that_never_comes(tmp_path):
    root = make_vault(tmp_path)
    assert memvault(root, "rebuild").returncode == 0  # an index, so the intake is the only finding
    long_ago = datetime.now(UTC) - timedelta(minutes=5)
    assert admit(root, "forgotten", "Nobody projected this turn.", now=long_ago).status == "admitted"
    report = memvault(root, "health", "--json")  # not --strict: reported as a warning
    assert report.returncode == 0
    assert [(f["code"], f["severity"]) for f in json.loads(report.stdout)["findings"]] == [
        ("waiting_intake", "warning")
    ]
    assert memvault(root, "health", "--strict").returncode == 1
    fresh = make_vault(tmp_path, name="fresh")
    assert memvault(fresh, "rebuild").returncode == 0
    assert admit(fresh, "new", "Admitted just now.", now=datetime.now(UTC)).status == "admitted"
    assert "waiting_intake" not in memvault(fresh, "health", "--json").stdout  # a turn seconds old waits for no one


@pytest.mark.both_backends
def test_health_is_an_error_when_a_live_owner_leaves_old_turns_undrained(tmp_path):
    from memvault.indexer.engine.owner import Owner
    from memvault.indexer.engine.store import MemoryStore

    root = make_vault(tmp_path)
    assert admit(root, "old", "Still waiting.", now=datetime.now(UTC) - timedelta(minutes=5)).status == "admitted"
    store = MemoryStore.open(root, engine=False)
    owner = Owner(store, role="python", intake=False).start()  # holds the vault, never drains
    try:
        report = memvault(root, "health", "--json")
        assert report.returncode == 1
        codes = {f["code"] for f in json.loads(report.stdout)["findings"]}
        assert {"stuck_intake", "owner_not_draining"} <= codes
    finally:
        owner.stop()
        store.close()


@pytest.mark.both_backends
def test_health_through_an_owner_whose_worker_is_not_running_says_so(tmp_path):
    from memvault.indexer.engine.owner import Owner
    from memvault.indexer.engine.store import MemoryStore

    root = make_vault(tmp_path)
    store = MemoryStore.open(root, engine=False)
    owner = Owner(store, role="python", intake=False).start()  # an owner that does not drain
    try:
        report = memvault(root, "health", "--json")
        assert report.returncode == 1
        codes = [f["code"] for f in json.loads(report.stdout)["findings"]]
        assert "owner_not_draining" in codes
    finally:
        owner.stop()
        store.close()


@pytest.mark.both_backends
def test_a_python_host_that_starts_the_intake_is_the_owner(tmp_path):
    from memvault import MemoryStore

    root = make_vault(tmp_path)
    with MemoryStore.open(root) as store:
        store.start_intake()
        found = find_owner(root)
        assert found is not None and found.is_this_process and found.hello["role"] == "python"
        with MemoryStore.open(root) as same_process:  # the owner's own process stays in-process
            assert type(same_process).__name__ == "MemoryStore"
        other = memvault(root, "admit", "--wait", input=turn_json("host-run", "The host drained this turn."))
        assert json.loads(other.stdout)["worker"] == "drained"
        assert "The host drained this turn." in daily_text(root)
    assert find_owner(root) is None and not socket_path(root).exists()


@pytest.mark.both_backends
def test_version_mismatch_is_named(tmp_path):
    root = make_vault(tmp_path)
    owner = OwnerProcess(root, "serve").wait_serving()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(60)
            sock.connect(os.fspath(socket_path(root)))
            sock.sendall(b'{"v": 2, "op": "hello", "args": {}}\n')
            body = json.loads(sock.makefile("rb").readline())
        assert body["error"]["type"] == "ProtocolError" and "protocol 2" in body["error"]["message"]
    finally:
        owner.stop()


def test_engine_status_without_an_owner_says_commands_work_in_process(tmp_path):
    root = make_vault(tmp_path)
    done = memvault(root, "engine", "status")
    assert done.returncode == 1 and "no engine runs" in done.stdout
    assert memvault(root, "engine", "stop").stdout.strip() == "no engine runs for this vault"


HEAVY = ("tantivy", "hnswlib", "wordllama", "numpy", "mcp")
IMPORTS_AFTER = """
import sys
from memvault.cli.main import cli
try:
    cli(sys.argv[1:], prog_name="memvault")
except SystemExit:
    pass
print("HEAVY:" + ",".join(sorted({m.split(".")[0] for m in sys.modules} & set(%r))))
"""


@pytest.mark.both_backends
@pytest.mark.parametrize(
    "command",
    [
        ["search", "pier"],
        ["remember", "The pier was painted."],
        ["health"],
        ["journal", "2026-11-30", "2026-11-30", "--tz", "UTC"],
        ["admit"],
        ["inspect"],
    ],
)
def test_the_client_path_imports_nothing_heavy(tmp_path, command):
    import subprocess
    import sys

    from tests.engine_helpers import ENV, REPO

    root = make_vault(tmp_path, mode="journal")
    owner = OwnerProcess(root, "serve").wait_serving()
    try:
        done = subprocess.run(
            [sys.executable, "-c", IMPORTS_AFTER % (HEAVY,), "--vault", str(root), *command],
            input=turn_json("light", "A light turn.") if command == ["admit"] else None,
            capture_output=True,
            text=True,
            env=ENV,
            cwd=REPO,
            timeout=120,
        )
    finally:
        owner.stop()
    assert "HEAVY:\n" in done.stdout, (done.stdout, done.stderr)


@pytest.mark.both_backends
def test_a_fresh_owner_answers_its_first_request_from_an_index_of_every_note(fixture_vault):
    """A vault of notes that was never indexed (a git clone): `serve` builds the index before it
    answers anything, so the first search through it finds the notes instead of "no index yet"."""
    assert not (fixture_vault / ".index").exists()
    owner = OwnerProcess(fixture_vault, "serve").wait_serving()
    try:
        found = memvault_json(fixture_vault, "search", "deployment color")
        assert found["hits"] and not found["degraded"], found
    finally:
        owner.stop()

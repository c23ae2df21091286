"""A resident connection (`memvault --remote NAME serve`, issue 42 item 8): the other `--remote NAME`
commands on this machine are its thin clients, as local commands are of a vault's owner, and
work in their own process when it is not there, dead, stuck or speaking another protocol.

Real processes against the real server: the resident is a `memvault` child, each command a process
of its own. Whether a command went through the resident is read from what it imported (its
`sys.modules`: a thin client loads neither psycopg nor numpy), never from how long it took
(bench/bench_remote_cli.py prints the time)."""

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from memvault.indexer.engine.address import resident_paths, socket_dir
from memvault.indexer.engine.resident_client import find_resident
from tests.engine_helpers import ENV, REPO, wait_for
from tests.test_team_store import NAME, home  # noqa: F401 - the fixture

pytestmark = pytest.mark.one_engine("`--remote NAME` reaches a vault through its index server")

MEMVAULT = [sys.executable, "-m", "memvault"]
#: runs the CLI in this process, then writes the names of every module it imported
DRIVER = """
import json, sys
from memvault.cli.main import cli
out = sys.argv.pop(1)
try:
    cli.main(sys.argv[1:], prog_name="memvault")
finally:
    with open(out, "w") as handle:
        json.dump(sorted(sys.modules), handle)
"""
#: what a command that connects in its own process loads, and a thin client of the resident does not
HEAVY = {"psycopg", "numpy", "memvault.indexer.engine.connected"}


def remembered(owner, dsn, text: str):
    """The owner's receipt for `text`, once the server's rows answer it (its index commit follows the remember)."""
    from memvault import MemoryStore

    receipt = owner.remember(text)
    with MemoryStore.connect(NAME, env={"MEMVAULT_INDEX_DSN": dsn}) as agent:
        wait_for(lambda: receipt.id in [hit.id for hit in agent.recall(text).hits], what="the fact on the server")
    return receipt


def env_of(dsn, tmp_path, **extra):
    return {**ENV, "MEMVAULT_INDEX_DSN": dsn, "XDG_STATE_HOME": str(tmp_path / "state"), **extra}


def remote(env, *args, input=None, name=NAME):
    return subprocess.run([*MEMVAULT, "--remote", name, *args], input=input, env=env, cwd=REPO, text=True,
                          capture_output=True, timeout=180)  # fmt: skip


def traced(env, tmp_path, *args):
    """(the finished command, the modules it imported)."""
    listing = tmp_path / f"modules-{threading.get_ident()}.json"
    done = subprocess.run([sys.executable, "-c", DRIVER, str(listing), "--remote", NAME, *args], env=env,
                          cwd=REPO, text=True, capture_output=True, timeout=180)  # fmt: skip
    return done, set(json.loads(listing.read_text()))


class Resident:
    """`memvault --remote NAME serve` as a child process."""

    def __init__(self, env):
        self.env = env
        self.proc = subprocess.Popen([*MEMVAULT, "--remote", NAME, "serve"], env=env, cwd=REPO, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip

    def wait_serving(self) -> "Resident":
        def serving():
            assert self.proc.poll() is None, f"the resident exited {self.proc.returncode}: {self.proc.stderr.read()}"
            client = find_resident(NAME, self.env)
            return client is not None and client.pid == self.proc.pid

        wait_for(serving, what="the resident connection's socket")
        return self

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.communicate(timeout=60)[1]
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.communicate()[1]


@pytest.fixture
def resident(home, tmp_path):  # noqa: F811
    _root, owner, dsn = home
    env = env_of(dsn, tmp_path)
    started = Resident(env).wait_serving()
    yield owner, env, started, dsn
    started.stop()


def test_a_remote_search_through_the_resident_is_a_thin_client_with_the_same_answer(resident, tmp_path):
    owner, env, _resident, dsn = resident
    receipt = remembered(owner, dsn, "Jonas owns the staging certificates.")
    done, loaded = traced(env, tmp_path, "search", "--json", "who owns the staging certificates?")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hits"][0]["id"] == receipt.id
    assert not loaded & HEAVY, sorted(loaded & HEAVY)
    assert "memvault.indexer.engine.resident_client" in loaded
    alone = remote({**env, "PGAPPNAME": "another-settings"}, "search", "--json", "who owns the staging certificates?")
    assert alone.returncode == 0, alone.stderr
    assert json.loads(alone.stdout) == json.loads(done.stdout)  # the in-process answer


def test_other_connection_settings_never_reach_the_resident(resident, tmp_path):
    _owner, env, _resident, dsn = resident
    done, loaded = traced({**env, "MEMVAULT_INDEX_TIMEOUT_SECONDS": "29"}, tmp_path, "search", "anything")
    assert done.returncode == 0, done.stderr
    assert HEAVY <= loaded  # connected in its own process, with its own settings


def test_remember_journal_and_health_through_the_resident(resident, tmp_path):
    _owner, env, _resident, dsn = resident
    fact = "The release train leaves every second Thursday."
    added = remote(env, "remember", "--json", fact)
    assert added.returncode == 0, added.stderr
    receipt = json.loads(added.stdout)
    assert receipt["status"] == "added"
    again = remote(env, "remember", "--json", fact)
    assert json.loads(again.stdout)["status"] == "duplicate"
    found = remote(env, "search", "--json", "when does the release train leave?")
    assert json.loads(found.stdout)["hits"][0]["id"] == receipt["id"]
    day = receipt["source"].split("/")[-1][:10]
    page = remote(env, "journal", day, "--json")
    alone = remote({**env, "PGAPPNAME": "another-settings"}, "journal", day, "--json")
    assert page.returncode == alone.returncode == 0, page.stderr
    assert json.loads(page.stdout)["entries"] == json.loads(alone.stdout)["entries"]
    secret = "the deploy key is AKIAIOSFODNN7EXAMPLE"
    refused = remote(env, "remember", "--json", secret)
    alone_refused = remote({**env, "PGAPPNAME": "another-settings"}, "remember", "--json", secret)
    assert refused.returncode == alone_refused.returncode == 1
    assert json.loads(refused.stdout) == json.loads(alone_refused.stdout)  # the same error, code and message
    assert "AKIA" not in refused.stdout + refused.stderr
    health = remote(env, "health", "--json")
    assert "Traceback" not in health.stderr
    assert json.loads(health.stdout)["checks"] == ["server", "index", "owner"]


def test_a_journal_cursor_from_the_resident_works_in_a_process_of_its_own(resident, tmp_path):
    owner, env, started, dsn = resident
    for text in ("Ana reviews the schema change.", "Ben ships the migration.", "Cleo writes the runbook."):
        remembered(owner, dsn, text)
    today = owner.recall("who ships the migration?").hits[0].source.split("/")[-1][:10]
    first = json.loads(remote(env, "journal", today, "--json", "--limit", "1").stdout)
    assert first["cursor"]
    started.stop()
    rest = remote(env, "journal", "--cursor", first["cursor"], "--json")
    assert rest.returncode == 0, rest.stderr
    second = json.loads(rest.stdout)  # the next page of the same snapshot (its limit is the cursor's)
    assert second["page"]["snapshotEntries"] == first["page"]["snapshotEntries"] == 3
    assert second["entries"][0]["id"] != first["entries"][0]["id"] and second["cursor"]


def test_a_killed_resident_leaves_commands_working_and_the_next_serve_replaces_its_socket(resident, tmp_path):
    owner, env, started, dsn = resident
    receipt = remembered(owner, dsn, "Priya holds the keys to the build cache.")
    started.proc.send_signal(signal.SIGKILL)
    started.proc.wait(60)
    assert resident_paths(NAME, env).socket.exists()  # the killed resident's leftover
    done, loaded = traced(env, tmp_path, "search", "--json", "who holds the keys to the build cache?")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and HEAVY <= loaded
    assert json.loads(done.stdout)["hits"][0]["id"] == receipt.id
    status = remote(env, "engine", "status", "--json")
    assert json.loads(status.stdout)["resident"] is None
    again = Resident(env).wait_serving()  # the stale socket is no obstacle
    try:
        done, loaded = traced(env, tmp_path, "search", "--json", "who holds the keys to the build cache?")
        assert done.returncode == 0 and not loaded & HEAVY, done.stderr
        assert json.loads(remote(env, "engine", "status", "--json").stdout)["resident"]["pid"] == again.proc.pid
    finally:
        again.stop()


def test_a_resident_killed_between_two_calls_of_one_client_answers_in_this_process(resident):
    from memvault.indexer.engine.connected import ConnectedStore
    from memvault.indexer.engine.resident_client import ResidentStore

    owner, env, started, dsn = resident
    receipt = remembered(owner, dsn, "Tomas keeps the backup tapes.")
    said = []
    store = ResidentStore(NAME, find_resident(NAME, env), lambda: ConnectedStore.connect(NAME, env=env), said.append)
    with store:
        assert store.recall("who keeps the backup tapes?").hits[0].id == receipt.id  # through the resident
        started.proc.send_signal(signal.SIGKILL)
        started.proc.wait(60)
        assert store.recall("who keeps the backup tapes?").hits[0].id == receipt.id  # here
        assert store.time_zone == "UTC"
    assert len(said) == 1 and "went away" in said[0] and "answering in this process" in said[0]


def test_a_stopped_resident_is_not_waited_for(resident, tmp_path):
    owner, env, started, dsn = resident
    receipt = remembered(owner, dsn, "Mika renews the TLS certificates.")
    started.proc.send_signal(signal.SIGSTOP)  # connected, never answering
    try:
        done = remote(env, "search", "--json", "who renews the TLS certificates?")
    finally:
        started.proc.send_signal(signal.SIGCONT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hits"][0]["id"] == receipt.id
    assert "does not answer: it is stuck" in done.stderr and "engine stop --force" in done.stderr
    assert "Traceback" not in done.stderr


def test_concurrent_commands_share_the_resident(resident, tmp_path):
    owner, env, _resident, dsn = resident
    facts = [f"Rotation {n} is owned by team {n}." for n in range(4)]

    def run(n):
        if n % 2:
            return remote(env, "remember", "--json", facts[n // 2])
        return traced(env, tmp_path, "search", "--json", f"who owns rotation {n}?")

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, range(8)))
    for n, result in enumerate(results):
        done = result if n % 2 else result[0]
        assert done.returncode == 0, done.stderr
        if not n % 2:
            assert not result[1] & HEAVY
    hits = json.loads(remote(env, "search", "--json", "who owns rotation 3?").stdout)["hits"]
    assert any("Rotation 3 " in hit["text"] for hit in hits)


def test_a_second_serve_is_refused_naming_the_first(resident):
    _owner, env, started, dsn = resident
    second = remote(env, "serve")
    assert second.returncode == 1
    assert f"pid {started.proc.pid}" in second.stderr and "engine stop" in second.stderr
    assert "Traceback" not in second.stderr


def test_hostile_input_is_refused_as_in_process(resident, tmp_path):
    _owner, env, _resident, dsn = resident
    huge = "why " * 30_000  # 120 KB, about the most one argument may carry
    through = remote(env, "search", "--json", huge)
    alone = remote({**env, "PGAPPNAME": "another-settings"}, "search", "--json", huge)
    assert (through.returncode, through.stdout) == (alone.returncode, alone.stdout)
    assert "Traceback" not in through.stderr
    for bad in ("Bad Name!", "../../etc", "x" * 300):
        done = remote(env, "search", "anything", name=bad)
        assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr
        served = remote(env, "serve", name=bad)
        assert served.returncode in (1, 2) and "not a vault name" in served.stderr, served.stderr


def test_the_resident_answers_garbage_and_keeps_serving(resident):
    _owner, env, started, dsn = resident
    path = os.fspath(resident_paths(NAME, env).socket)
    lines = [b"not json\n", b'{"v": 99, "op": "hello", "args": {}}\n', b'{"v": 1, "op": "rm -rf", "args": {}}\n',
             b'{"v": 1, "op": "recall", "args": []}\n', b'{"v": 1, "op": "recall", "args": {"query": 7}}\n',
             b'{"v": 1, "op": "remember", "args": {"text": "x", "at": "yesterday"}}\n']  # fmt: skip
    for line in lines:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(30)
            sock.connect(path)
            sock.sendall(line)
            answer = json.loads(sock.makefile("rb").readline())
        assert answer["ok"] is False and answer["error"]["type"] != "InternalError", (line, answer)
    assert find_resident(NAME, env).pid == started.proc.pid
    assert started.proc.poll() is None


def test_the_socket_follows_the_owners_rules(resident):
    _owner, env, _resident, dsn = resident
    paths = resident_paths(NAME, env)
    assert stat.S_IMODE(os.stat(socket_dir()).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(paths.socket).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(paths.status).st_mode) == 0o600
    status = json.loads(paths.status.read_text())
    assert status["protocol"] == 1 and status["vault"] == NAME and "password" not in json.dumps(status)


def test_another_protocol_on_the_socket_is_said_and_the_command_works_alone(home, tmp_path):  # noqa: F811
    _root, owner, dsn = home
    env = env_of(dsn, tmp_path)
    receipt = remembered(owner, dsn, "Noor signs the release notes.")
    path = resident_paths(NAME, env).socket
    os.makedirs(socket_dir(), mode=0o700, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.fspath(path))
    os.chmod(path, 0o600)
    listener.listen(4)

    def answer_in_another_protocol():
        connection, _ = listener.accept()
        with connection:
            connection.makefile("rb").readline()
            connection.sendall(b'{"v": 2, "ok": true, "result": {}}\n')

    thread = threading.Thread(target=answer_in_another_protocol, daemon=True)
    thread.start()
    try:
        done = remote(env, "search", "--json", "who signs the release notes?")
    finally:
        listener.close()
        path.unlink(missing_ok=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hits"][0]["id"] == receipt.id
    assert "speaks protocol 2" in done.stderr and "Traceback" not in done.stderr


def test_engine_stop_stops_the_resident(resident):
    _owner, env, started, dsn = resident
    stopped = remote(env, "engine", "stop", "--json")
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout) == {"stopped": True, "pid": started.proc.pid}
    assert started.proc.wait(60) == 0
    assert not resident_paths(NAME, env).status.exists()
    assert json.loads(remote(env, "engine", "stop", "--json").stdout) == {"stopped": False, "running": False}


def test_serve_against_an_unreachable_server_says_so_without_the_password(tmp_path):
    env = env_of(f"host={tmp_path} port=1 user=memvault password=hunter2-not-for-output dbname=nowhere", tmp_path)
    done = remote(env, "serve")
    assert done.returncode == 1 and "unreachable" in done.stderr, done.stderr
    assert "hunter2" not in done.stdout + done.stderr and "Traceback" not in done.stderr
    assert not resident_paths(NAME, env).socket.exists()
    assert find_resident(NAME, env) is None


def test_a_socket_in_a_folder_others_can_reach_is_not_used(tmp_path, monkeypatch):
    from memvault.indexer.engine import address
    from memvault.indexer.engine.resident_client import ResidentUnusable

    shared = Path(tempfile.mkdtemp(prefix="mv-", dir="/tmp"))  # short: a socket path has 108 bytes
    shared.chmod(0o755)
    monkeypatch.setattr(address, "socket_dir", lambda: shared)
    env = {"MEMVAULT_INDEX_DSN": "host=/nowhere"}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(os.fspath(resident_paths(NAME, env).socket))
        listener.listen(1)
        try:
            with pytest.raises(ResidentUnusable, match="not in a folder only this user owns"):
                find_resident(NAME, env)
        finally:
            shutil.rmtree(shared)


def test_on_demand_a_command_starts_a_resident_that_the_next_ones_use(home, tmp_path):  # noqa: F811
    _root, owner, dsn = home
    env = env_of(dsn, tmp_path, MEMVAULT_REMOTE_RESIDENT="auto")
    receipt = remembered(owner, dsn, "Ines keeps the release calendar.")
    first, loaded = traced(env, tmp_path, "search", "--json", "who keeps the release calendar?")
    try:
        assert first.returncode == 0, first.stderr
        assert HEAVY <= loaded  # it answered itself, and started the resident for the next ones
        assert json.loads(first.stdout)["hits"][0]["id"] == receipt.id
        client = wait_for(lambda: find_resident(NAME, env), what="the resident started on demand")
        assert stat.S_IMODE(os.stat(resident_paths(NAME, env).log).st_mode) == 0o600
        second, loaded = traced(env, tmp_path, "search", "--json", "who keeps the release calendar?")
        assert second.returncode == 0 and not loaded & HEAVY, second.stderr
        assert json.loads(second.stdout) == json.loads(first.stdout)
    finally:
        remote(env, "engine", "stop", "--force")
    assert find_resident(NAME, env) is None and client.pid is not None
    wrong = remote({**env, "MEMVAULT_REMOTE_RESIDENT": "yes please"}, "search", "anything")
    assert wrong.returncode == 0 and "is not `auto` or `off`" in wrong.stderr


def test_a_resident_with_idle_exit_stops_on_its_own(home, tmp_path):  # noqa: F811
    _root, _owner, dsn = home
    env = env_of(dsn, tmp_path)
    started = subprocess.Popen([*MEMVAULT, "--remote", NAME, "serve", "--idle-exit", "1"], env=env, cwd=REPO,
                               text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    _, err = started.communicate(timeout=120)
    assert started.returncode == 0, err
    assert "stopped: no command for 1 s" in err
    assert not resident_paths(NAME, env).status.exists()

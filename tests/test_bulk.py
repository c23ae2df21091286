"""Bulk and grouped Remember: `remember_many`, `memvault remember --from`, and the owner's group
commit (remembers arriving together share one index commit; each caller hears only after its write)."""

import json
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from memvault.indexer.engine.bulk import RememberItem
from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.maintenance.derived import DerivedIndex
from memvault.indexer.maintenance.server_index import ServerIndex
from memvault.vault.errors import CredentialRefused, InvalidRecord
from memvault.vault.layout import VaultLayout
from tests import postgres_helpers
from tests.engine_helpers import ENV, REPO, OwnerProcess, memvault, wait_for
from tests.intake_helpers import make_vault
from tests.readonly_helpers import memvault_here, memvault_here_result

# both_backends tests name no vault fixture that asks for index_backend: without this, their postgres run
# never sets it up and runs locally again (TEST_BACKEND stays "local", no server is checked)
pytestmark = pytest.mark.usefixtures("index_backend")


@pytest.fixture
def commits(monkeypatch):
    """How many index commits (the serving generation's apply calls: DerivedIndex's locally,
    ServerIndex's on a server) this process makes; the real apply runs."""
    counter = {"n": 0}

    def counted(real):
        def counting(self, *args, **kwargs):
            counter["n"] += 1
            return real(self, *args, **kwargs)

        return counting

    for generation in (DerivedIndex, ServerIndex):
        monkeypatch.setattr(generation, "apply", counted(generation.apply))
    return counter


def daily_text(root) -> str:
    return "".join(p.read_text() for p in sorted((root / "daily").glob("*.md")))


@pytest.mark.both_backends
def test_remember_many_writes_each_note_once_and_commits_the_batch_once(tmp_path, commits):
    root = make_vault(tmp_path)
    with MemoryStore.open(root) as store:
        before = commits["n"]
        days = [datetime(2026, 11, d, 9, 0, tzinfo=UTC) for d in (2, 3, 4)]
        items = [RememberItem(f"Fact {n} about the orchard.", days[n % 3]) for n in range(30)]
        items += [
            "Fact 0 about the orchard.",
            {"text": "", "at": None},
            "the key is AKIAIOSFODNN7EXAMPLE",
            RememberItem("Naive time.", datetime(2026, 11, 2, 9, 0)),
            42,
        ]
        outcomes = store.remember_many(items)
        assert commits["n"] - before == 1  # 30 memories over three notes: one index commit
        statuses = [o.receipt.status if o.receipt else type(o.error).__name__ for o in outcomes]
        assert statuses == ["added"] * 30 + [
            "duplicate",
            "InvalidRecord",
            "CredentialRefused",
            "InvalidRecord",
            "InvalidRecord",
        ]
        assert outcomes[30].receipt.id == outcomes[0].receipt.id
        again = store.remember_many(items[:30])
        assert {o.receipt.status for o in again} == {"duplicate"}
        single = [store.recall(f"Fact {n} about the orchard", limit=30) for n in (0, 29)]
        assert all(result.hits for result in single)
        assert store.health_report(strict=True)["healthy"]
    text = daily_text(root)
    assert all(text.count(f"Fact {n} about the orchard.") == 1 for n in range(30))
    assert "AKIAIOSFODNN7EXAMPLE" not in text and "Naive time." not in text


@pytest.mark.both_backends
def test_a_batch_reads_each_note_once_before_its_append(tmp_path, monkeypatch):
    """A batch plans every memory from one read of its note (ids, zone, wall time); the append
    step used to read the note whole again a moment later, in the same hold of the vault lock.
    (The append itself decides from the note's bytes as they are then: vault/note_append.py.)"""
    from memvault.vault import curated

    root = make_vault(tmp_path)
    with MemoryStore.open(root) as store:
        store.remember("Fact before the batch.", datetime(2026, 11, 2, 9, 0, tzinfo=UTC))
        real, reads = curated.read_note_if_any, []
        monkeypatch.setattr(
            curated, "read_note_if_any", lambda root, relpath: reads.append(relpath) or real(root, relpath)
        )
        days = [datetime(2026, 11, d, 9, 0, tzinfo=UTC) for d in (2, 3)]
        outcomes = store.remember_many([RememberItem(f"Batch fact {n}.", days[n % 2]) for n in range(6)])
        assert [o.receipt.status for o in outcomes] == ["added"] * 6
    assert sorted(reads) == ["daily/2026-11-02.md", "daily/2026-11-03.md"]
    assert all(daily_text(root).count(f"Batch fact {n}.") == 1 for n in range(6))


@pytest.mark.both_backends
def test_remember_many_receipts_match_single_remembers(tmp_path):
    one, many = make_vault(tmp_path, name="one"), make_vault(tmp_path, name="many")
    at = datetime(2026, 11, 30, 13, 3, tzinfo=UTC)
    facts = ["Morgan chose blue.", "Standup moved to 10:00.", "Morgan chose blue."]
    with MemoryStore.open(one) as a, MemoryStore.open(many) as b:
        singles = [a.remember(text, at=at).to_json() for text in facts]
        bulk = [o.receipt.to_json() for o in b.remember_many([RememberItem(t, at) for t in facts])]
    assert singles == bulk
    assert (one / "daily/2026-11-30.md").read_bytes() == (many / "daily/2026-11-30.md").read_bytes()


@pytest.mark.both_backends
def test_cli_bulk_import_is_idempotent_and_reports_bad_lines(tmp_path):
    root = make_vault(tmp_path, mode="journal")
    lines = [
        json.dumps({"text": f"Imported memory {n} about tide pools.", "at": f"2026-11-0{1 + n % 9}T09:30:00+01:00"})
        for n in range(40)
    ]
    lines[5] = "not json"
    lines[9] = json.dumps({"text": "x", "prompt": "unexpected"})
    lines[12] = json.dumps({"text": "Dated without offset.", "at": "2026-11-02T09:30:00"})
    data = "\n".join(lines) + "\n"
    first = memvault(root, "remember", "--from", "-", "--json", input=data)
    body = json.loads(first.stdout)
    assert first.returncode == 1  # some lines were refused
    assert body["counts"] == {"added": 37, "duplicate": 0, "completed": 0, "refused": 3}
    assert [row["line"] for row in body["refused"]] == [6, 10, 13]
    again = json.loads(memvault(root, "remember", "--from", "-", "--json", input=data).stdout)
    assert again["counts"] == {"added": 0, "duplicate": 37, "completed": 0, "refused": 3}
    assert memvault_here(root, "health", "--strict") == 0  # checks in this process: the import is under test
    assert memvault_here(root, "remember", "text", "--from", "-") == 2  # either TEXT or --from


@pytest.mark.slow
@pytest.mark.both_backends
def test_bulk_import_through_a_running_owner_equals_in_process(tmp_path):
    local, served = (
        make_vault(tmp_path, mode="journal", name="local"),
        make_vault(tmp_path, mode="journal", name="served"),
    )
    data = (
        "".join(
            json.dumps({"text": f"Backfilled {n}: the ferry left pier {n}.", "at": f"2026-10-0{1 + n % 9}T08:00:00Z"})
            + "\n"
            for n in range(600)
        )
        + '{"text": "secret sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t"}\n'
    )
    owner = OwnerProcess(served, "serve").wait_serving()
    try:
        there = memvault(served, "remember", "--from", "-", "--json", input=data)
        assert json.loads(memvault_here_result(served, "engine", "status", "--json").stdout)["pid"] == owner.proc.pid
    finally:
        owner.stop()
    here = memvault(local, "remember", "--from", "-", "--json", input=data)
    assert (here.returncode, json.loads(here.stdout)) == (there.returncode, json.loads(there.stdout))
    assert json.loads(here.stdout)["counts"]["added"] == 600
    for day in sorted(p.name for p in (local / "daily").glob("*.md")):
        assert (local / "daily" / day).read_bytes() == (served / "daily" / day).read_bytes()
    assert memvault_here(served, "health", "--strict") == 0


@pytest.mark.slow
@pytest.mark.both_backends
def test_concurrent_remembers_through_the_owner_are_each_durable_once(tmp_path, commits):
    """Clients in eight processes at once; the owner (this process) groups what arrives together."""
    from memvault.indexer.engine.owner import Owner

    root = make_vault(tmp_path)
    store = MemoryStore.open(root, engine=False)
    owner = Owner(store, role="python").start()
    try:
        before = commits["n"]
        script = (
            "import sys\nfrom memvault import MemoryStore\nwith MemoryStore.open(sys.argv[1]) as s:\n"
            "    assert type(s).__name__ == 'RemoteStore'\n"
            "    for n in range(5): print(s.remember(f'Client {sys.argv[2]} fact {n}.').status)"
        )
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(root), str(c)],
                env=ENV,
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for c in range(8)
        ]
        outputs = [p.communicate(timeout=180) for p in procs]
        assert [p.returncode for p in procs] == [0] * 8, [err for _, err in outputs]
        assert all(out.split() == ["added"] * 5 for out, _ in outputs)
        wait_for(lambda: not store._deferred.pending, what="the owner's timed index commit")
        assert 1 <= commits["n"] - before <= 40  # grouped whenever calls overlap, never more than one each
        text = daily_text(root)
        assert all(text.count(f"Client {c} fact {n}.") == 1 for c in range(8) for n in range(5))
        with pytest.raises(CredentialRefused):  # a grouped call still raises its own error
            store_client = MemoryStore.open(root)
            assert type(store_client).__name__ == "MemoryStore"  # same process: in-process
            owner.group_commit().remember("the key is AKIAIOSFODNN7EXAMPLE", None)
        with pytest.raises(InvalidRecord):
            owner.group_commit().remember("", None)
    finally:
        owner.stop()
        store.close()


# --- the owner's deferred index commit (indexer/engine/deferred.py) ----------------------------------


def committed_texts(root) -> set[str]:
    """What the serving generation's BM25 holds as committed, read by a fresh reader (on a
    server: a connection of its own)."""
    if postgres_helpers.TEST_BACKEND == "local":
        index = DerivedIndex.open_current(VaultLayout(root))
        return {hit.text for hit in index.bm25.search("Deferred", 50)}
    from memvault.indexer.backend import open_backend
    from memvault.vault.config import load_config

    backend = open_backend(load_config(root, {}).index, create=False)
    try:
        number, _ = backend.serving_replay()
        index = ServerIndex(backend, number, VaultLayout(root), None)
        return {hit.text for hit in index.bm25.search("Deferred", 50)}
    finally:
        backend.close()


@pytest.fixture
def never_idle(monkeypatch):
    """The group commit never commits on its own: only health, a close or a full set does."""
    from memvault.indexer.engine import deferred, group_commit

    monkeypatch.setattr(group_commit, "IDLE_SECONDS", 3600.0)
    monkeypatch.setattr(deferred, "MAX_DELAY_SECONDS", 3600.0)


@pytest.mark.both_backends
def test_a_remember_through_the_owner_is_acknowledged_durable_and_every_read_sees_it(tmp_path, never_idle):
    from memvault.indexer.engine.owner import Owner

    root = make_vault(tmp_path)
    store = MemoryStore.open(root, engine=False)
    owner = Owner(store, role="python").start()
    try:
        first = owner.group_commit().remember("Deferred fact one about the harbour.", None)
        second = owner.group_commit().remember("Deferred fact two about the ferry.", None)
        assert (first.status, second.status) == ("added", "added")
        assert "Deferred fact one about the harbour." in daily_text(root)  # durable in its note already
        # put off on this machine's index; a server's is committed whenever the team drain idles
        # (agents on other machines read its rows, never this owner's pending ones)
        put_off = postgres_helpers.TEST_BACKEND == "local"
        assert committed_texts(root) == set() or not put_off
        again = owner.group_commit().remember("Deferred fact one about the harbour.", None)
        assert (again.status, again.id) == ("duplicate", first.id)  # as the index would answer
        hits = owner.handle({"op": "recall", "args": {"query": "Deferred harbour"}})
        assert hits["ok"] and hits["result"]["hits"][0]["id"] == first.id  # found beside the index…
        assert committed_texts(root) == set() or not put_off  # …without a commit: reads never wait for one
        ferry = owner.handle({"op": "recall", "args": {"query": "ferry"}})["result"]["hits"]
        # first: once committed (on a server, when the drain idles) vectors may bring the harbour in below it
        assert [hit["id"] for hit in ferry][:1] == [second.id]
        third = owner.group_commit().remember("Deferred fact three about the pier.", None)
        health = owner.handle({"op": "health", "args": {"strict": True}})["result"]
        assert health["healthy"] and not health["warnings"], health["findings"]
        assert "Deferred fact three about the pier." in committed_texts(root)
        fourth = owner.group_commit().remember("Deferred fact four about the lighthouse.", None)
    finally:
        owner.stop()
        store.close()  # closing commits what is still put off
    assert {third.status, fourth.status} == {"added"}
    assert "Deferred fact four about the lighthouse." in committed_texts(root)


@pytest.mark.both_backends
def test_sigkill_before_the_deferred_commit_loses_no_acknowledged_remember(tmp_path):
    """A Python host owns the vault and never commits on its own; a client's remembers are
    acknowledged; SIGKILL; the next process indexes the notes: every acknowledged memory is
    searchable and written exactly once."""
    root = make_vault(tmp_path)
    host = (
        "import sys, time\nfrom memvault.indexer.engine import deferred, group_commit\n"
        "group_commit.IDLE_SECONDS = deferred.MAX_DELAY_SECONDS = 3600.0\n"
        "from memvault import MemoryStore\nfrom memvault.indexer.engine.owner import Owner\n"
        "store = MemoryStore.open(sys.argv[1], engine=False)\nOwner(store, role='python').start()\n"
        "print('serving', flush=True)\ntime.sleep(3600)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", host, str(root)],
        env=ENV,
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout.readline().strip() == "serving", proc.stderr.read()
        client = MemoryStore.open(root)
        assert type(client).__name__ == "RemoteStore"
        receipts = [client.remember(f"Deferred memory {n} about the night ferry.") for n in range(5)]
        assert [r.status for r in receipts] == ["added"] * 5
        assert committed_texts(root) == set()  # acknowledged, not committed
    finally:
        proc.kill()
        proc.wait(60)
    with MemoryStore.open(root) as store:  # the next process: its open-time sync indexes the notes
        assert type(store).__name__ == "MemoryStore"
        found = {hit.id for hit in store.recall("Deferred memory night ferry", limit=10).hits}
    assert found == {r.id for r in receipts}
    text = daily_text(root)
    assert all(text.count(f"Deferred memory {n} about the night ferry.") == 1 for n in range(5))
    assert memvault_here(root, "health", "--strict") == 0

"""Many agents, one owner (issue 26), with real processes: reads never wait for an index commit
and still see every acknowledged write from any client; admission answers once the turn is
durable, also when the owner is stopped or dead (docs/engine.md)."""

import json
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from memvault.indexer.engine.client import find_owner
from memvault.indexer.maintenance.derived import DerivedIndex
from memvault.vault.ids import content_hash
from memvault.vault.layout import VaultLayout
from tests.engine_helpers import ENV, REPO, TIMEOUT, OwnerProcess, memvault, pending_count, turn_json, wait_for
from tests.intake_helpers import make_vault as make_local_vault
from tests.postgres_helpers import on_test_backend

pytestmark = pytest.mark.slow


def make_vault(*args, **kwargs):
    """A vault on the running test's index backend (tests/postgres_helpers.py)."""
    return on_test_backend(make_local_vault(*args, **kwargs))


def daily_text(root) -> str:
    return "".join(p.read_text() for p in sorted((root / "daily").rglob("*.md")))


def committed_texts(root, query: str) -> set[str]:
    """What the serving generation's BM25 holds as committed, read by a fresh reader."""
    index = DerivedIndex.open_current(VaultLayout(root))
    return {hit.text for hit in index.bm25.search(query, 50)}


class HeldOwner:
    """A Python host owning the vault whose first commit of acknowledged writes is held."""

    def __init__(self, root, flags):
        self.root, self.flags = root, flags
        flags.mkdir()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.owner_host_driver", str(root), str(flags)],
            env=ENV,
            cwd=REPO,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.proc.stdout.readline().strip() == "serving", self.proc.stderr.read()

    def release_and_stop(self) -> None:
        (self.flags / "release").touch()
        (self.flags / "stop").touch()
        try:
            self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(TIMEOUT)


@pytest.mark.one_engine("it reaches into the local engine's Tantivy index (serving_index().bm25)")
def test_another_client_finds_a_remember_while_its_index_commit_is_held(tmp_path):
    """Client A remembers; the owner's commit of it starts and is held; client B (another
    process) searches and finds it, and an admission answers at once: no read and no admission
    waited for that commit, and none had happened."""
    root = make_vault(tmp_path, mode="journal")
    owner = HeldOwner(root, tmp_path / "flags")
    try:
        fact = "The quartermaster moved the spare sails to locker nine."
        written = memvault(root, "remember", fact)
        assert written.returncode == 0, written.stderr
        wait_for(lambda: (owner.flags / "blocked").exists(), what="the owner's commit to start (and be held)")
        assert fact not in committed_texts(root, "quartermaster sails locker")  # acknowledged, not committed
        found = memvault(root, "search", "where are the spare sails?", "--json")
        assert found.returncode == 0, found.stderr
        hits = json.loads(found.stdout)["hits"]
        assert [hit["text"] for hit in hits][:1] == [fact], hits
        assert hits[0]["source"].startswith("daily/")
        admitted = memvault(root, "admit", input=turn_json("run-held", "The bosun logged the new anchor chain."))
        body = json.loads(admitted.stdout)
        assert (body["status"], body["state"]) == ("admitted", "pending"), admitted.stderr
        assert body["worker"].startswith("queued")
        assert not (owner.flags / "release").exists()  # everything above ran while the commit was held
    finally:
        owner.release_and_stop()
    assert owner.proc.returncode == 0, owner.proc.stderr.read()
    assert fact in committed_texts(root, "quartermaster sails locker")  # the commit went on
    assert daily_text(root).count("The bosun logged the new anchor chain.") == 1  # projected after all
    assert memvault(root, "health", "--strict").returncode == 0


@pytest.mark.both_backends
def test_admit_wait_answers_once_the_turn_is_projected_and_searchable(tmp_path):
    root = make_vault(tmp_path, mode="journal")
    owner = OwnerProcess(root, "serve").wait_serving()
    try:
        done = memvault(root, "admit", "--wait", input=turn_json("run-w", "The cook restocked the galley with limes."))
        body = json.loads(done.stdout)
        assert (body["status"], body["state"], body["worker"]) == ("admitted", "resolved", "drained"), done.stderr
        found = memvault(root, "search", "limes galley")
        assert "The cook restocked the galley with limes." in found.stdout, found.stderr
    finally:
        owner.stop()


@pytest.mark.one_engine(
    "10-15 s spent waiting on a frozen owner and the intake, the same on both backends; the server's side"
    " of admission is covered by the killed-owner and admit --wait tests"
)
def test_admit_beside_a_stopped_owner_saves_the_turn_and_prints_its_status(tmp_path):
    """SIGSTOP: the owner holds the vault and answers nothing. `admit` saves the turn itself and
    prints its documented status object; once the owner runs again it projects the turn."""
    root = make_vault(tmp_path, mode="journal")
    owner = OwnerProcess(root, "serve").wait_serving()
    try:
        # stopped while idle: a process frozen inside the intake lock (its start-up recovery, a
        # resolve) blocks every writer of the intake until it runs again (docs/engine.md)
        warm = memvault(root, "admit", "--wait", input=turn_json("run-warm", "The crew checked the rigging."))
        assert json.loads(warm.stdout)["status"] == "admitted", warm.stdout
        wait_for(lambda: pending_count(root) == 0, what="the owner to resolve its first turn")
        owner.proc.send_signal(signal.SIGSTOP)
        # the same turn admitted twice at once: each admit waits out the probe of the silent owner
        # (10 s, indexer/engine/client.py) side by side, not one after the other; one saves the
        # turn, the other finds it saved
        turn = turn_json("run-stopped", "The lookout saw three whales at dawn.")
        with ThreadPoolExecutor(max_workers=2) as pool:
            dones = list(pool.map(lambda _: memvault(root, "admit", input=turn), range(2)))
        for done in dones:
            assert done.returncode == 0, done.stderr
        body, again = sorted((json.loads(done.stdout) for done in dones), key=lambda b: b["status"] != "admitted")
        assert set(body) == {"status", "id", "reason", "message", "state", "worker"}
        assert (body["status"], body["state"]) == ("admitted", "pending")
        assert "did not answer" in body["worker"]
        assert pending_count(root) == 1  # durable, whatever the owner does next
        assert again["status"] == "duplicate"
        owner.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: pending_count(root) == 0, what="the resumed owner to project the turn")
        assert daily_text(root).count("The lookout saw three whales at dawn.") == 1
    finally:
        owner.proc.send_signal(signal.SIGCONT)
        owner.stop()


@pytest.mark.both_backends
def test_admit_after_the_owner_was_killed_saves_and_projects_the_turn(tmp_path):
    root = make_vault(tmp_path, mode="journal")
    owner = OwnerProcess(root, "serve").wait_serving()
    owner.kill()
    assert find_owner(root) is None
    done = memvault(root, "admit", input=turn_json("run-dead", "The navigator corrected the chart by two miles."))
    body = json.loads(done.stdout)
    assert (body["status"], body["state"], body["worker"]) == ("admitted", "resolved", "drained"), done.stderr
    assert daily_text(root).count("The navigator corrected the chart by two miles.") == 1


@pytest.mark.both_backends
def test_sigkill_with_acknowledged_uncommitted_writes_loses_and_doubles_nothing(tmp_path):
    """The owner dies at the start of its first commit of acknowledged remembers (from two client
    processes while it lived): the next owner finds every one, once."""
    root = make_vault(tmp_path, mode="journal")
    doomed = OwnerProcess(root, "serve", {"MEMVAULT_TEST_CRASH_AT": "deferred.committing"}).wait_serving()
    script = (
        "import sys\nfrom memvault import MemoryStore\nstore = MemoryStore.open(sys.argv[1])\n"
        "assert type(store).__name__ == 'RemoteStore'\n"
        "for n in range(3):\n"
        "    try:\n        r = store.remember(f'{sys.argv[2]} logbook entry {n} about the reef.')\n"
        "    except Exception as exc:\n        break\n"
        "    print(r.status, flush=True)\n"
    )
    acknowledged = []
    for client in ("Alpha", "Bravo"):
        done = subprocess.run(
            [sys.executable, "-c", script, str(root), client],
            env=ENV,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        acknowledged += [
            f"{client} logbook entry {n} about the reef."
            for n, status in enumerate(done.stdout.split())
            if status == "added"
        ]
    assert doomed.proc.wait(timeout=TIMEOUT) == -9  # killed at the commit: the acknowledged rows were not committed
    assert "Alpha logbook entry 0 about the reef." in acknowledged
    successor = OwnerProcess(root, "serve").wait_serving()
    try:
        found = memvault(root, "search", "logbook entry reef", "--json")
        texts = [hit["text"] for hit in json.loads(found.stdout)["hits"]]
    finally:
        successor.stop()
    assert sorted(texts) == sorted(set(texts)) and set(acknowledged) <= set(texts)
    text = daily_text(root)
    assert all(text.count(fact) == 1 for fact in acknowledged)
    assert memvault(root, "health", "--strict").returncode == 0


@pytest.mark.one_engine(
    "it holds rows put off in the owner, which on a server the team drain commits whenever it idles"
)
def test_a_rescan_that_takes_acknowledged_writes_passes_their_commit_boundary(tmp_path, monkeypatch):
    """`deferred.committing`, where the crash test above kills the owner, is passed by whichever
    commit takes the acknowledged rows first: the committer's timer, or (here) the watcher's
    rescan that came before it (on a busy machine it does, and the owner outlived the test)."""
    from memvault import MemoryStore
    from memvault.indexer.engine import deferred, group_commit
    from memvault.indexer.engine.owner import Owner

    monkeypatch.setattr(group_commit, "IDLE_SECONDS", 3600.0)  # no timed commit during the test
    monkeypatch.setattr(deferred, "MAX_DELAY_SECONDS", 3600.0)
    root = make_vault(tmp_path, mode="journal")
    boundaries = []
    with MemoryStore.open(root, engine=False) as store:
        owner = Owner(store, role="python", crash_hook=boundaries.append).start()
        try:
            owner.group_commit().remember("The pilot boat left at dawn.", None)
            assert store._deferred.pending and "deferred.committing" not in boundaries
            store.sync()  # what the watcher's rescan runs
            assert not store._deferred.pending and "deferred.committing" in boundaries
        finally:
            owner.stop()
    assert "The pilot boat left at dawn." in committed_texts(root, "pilot boat dawn")


@pytest.mark.one_engine("it reaches into the local engine's Tantivy index (serving_index().bm25)")
def test_pending_rows_are_found_beside_committed_ones(tmp_path, monkeypatch):
    """Near-real-time reads in one owner process: memories waiting for their commit are found by
    their own words beside committed ones, as the committed index then finds them (their order
    and context matches are provisional until the commit: no neighbour context yet)."""
    from memvault import MemoryStore
    from memvault.indexer.engine import deferred, group_commit
    from memvault.indexer.engine.owner import Owner

    monkeypatch.setattr(group_commit, "IDLE_SECONDS", 3600.0)  # no timed commit during the test
    monkeypatch.setattr(deferred, "MAX_DELAY_SECONDS", 3600.0)
    root = make_vault(tmp_path)  # Lite: BM25 alone, so the ranking is the overlay's own
    with MemoryStore.open(root, engine=False) as store:
        store.remember_many(
            [
                f"The harbour crane {n} lifted crates of {kind}."
                for n, kind in enumerate(["apples", "pears", "copper", "timber", "salt", "wool"])
            ]
        )
        owner = Owner(store, role="python").start()
        try:
            fresh = {
                "The harbour crane 7 lifted crates of copper and timber.",
                "A crane lifted copper.",
                "Copper prices rose at the harbour market.",
            }
            for text in sorted(fresh):
                owner.group_commit().remember(text, None)
            assert store._deferred.pending and not committed_texts(root, "copper crane harbour") & fresh
            queries = ("copper crane", "copper")
            pending = [[h.text for h in store.recall(q, limit=10).hits] for q in queries]
            store.flush_deferred()
            assert not store._deferred.pending and not store._deferred.rows
            committed = [[h.text for h in store.recall(q, limit=10).hits] for q in queries]
        finally:
            owner.stop()
    for before, after in zip(pending, committed, strict=True):
        assert fresh <= set(before) and fresh <= set(after)
        assert "The harbour crane 2 lifted crates of copper." in before  # committed rows beside them


@pytest.mark.both_backends
def test_projected_turns_are_written_by_the_owners_group_commit(tmp_path):
    """In an owner, Journal turns the intake worker projects are written by the group commit's
    writer, in the batches of the remembers that arrive with them (one append and one fsync of
    the day's note for both), not in a vault-lock section of the worker's own: held behind the
    owner's request lock, as the writer is, a projection waits and writes nothing until it is
    let go. (Written directly, it would be in the note before the join below gives up.)"""
    from memvault import MemoryStore
    from memvault.indexer.engine.owner import Owner

    root = make_vault(tmp_path, mode="journal")
    with MemoryStore.open(root, engine=False) as store:
        owner = Owner(store, role="python", intake=False).start()
        owner.group_commit()
        outcomes = {}
        try:
            with owner._calls:  # the writer waits for the request lock: nothing queued is written
                turn = threading.Thread(
                    target=lambda: outcomes.update(
                        turn=store.project_journal_turns([("The ferry left on the hour.", None)])
                    )
                )
                turn.start()
                turn.join(2.0)
                assert turn.is_alive() and "ferry" not in daily_text(root)
            turn.join(TIMEOUT)
            fact = owner.group_commit().remember("The harbour lights were repaired.", None)
        finally:
            owner.stop()
    [projection] = outcomes["turn"]
    assert projection.source.startswith("daily/") and fact.status == "added"
    assert daily_text(root).count("The ferry left on the hour.") == 1


@pytest.mark.one_engine("it reaches into the local engine's Tantivy index (serving_index().bm25)")
def test_journal_through_an_owner_reads_pending_and_hand_edited_notes_without_a_commit(tmp_path, monkeypatch):
    """A journal page in an owner shows what waits for its commit and what a person just typed
    (the watcher not yet run), and commits nothing for it; after the commit the page is the same."""
    from datetime import date

    from memvault import MemoryStore
    from memvault.indexer.engine import deferred, group_commit
    from memvault.indexer.engine.owner import Owner

    monkeypatch.setattr(group_commit, "IDLE_SECONDS", 3600.0)  # no timed commit during the test
    monkeypatch.setattr(deferred, "MAX_DELAY_SECONDS", 3600.0)
    root = make_vault(tmp_path)
    with MemoryStore.open(root, engine=False) as store:
        store.remember("The harbour crane lifted crates of salt.")
        owner = Owner(store, role="python", intake=False).start()
        try:
            owner.group_commit().remember("The pilot boat left at dawn.", None)
            note = next((root / "daily").rglob("*.md"))
            with note.open("a") as handle:  # a person's line, typed after memvault's
                handle.write("- 10:00 The tug captain retired today.\n")
            day = date.fromisoformat(note.stem)  # the vault's day: a page of that date in UTC missed
            # memvault's lines for the hour after the vault's midnight (found at 23:20 UTC)
            page = store.journal(from_date=day.isoformat(), through_date=day.isoformat(), time_zone=store.time_zone)
            before = sorted(entry["text"] for entry in page.entries)
            assert store._deferred.pending  # the read committed nothing
            assert not committed_texts(root, "pilot boat dawn") & {"The pilot boat left at dawn."}
            store.flush_deferred()
            store.sync()
            page = store.journal(from_date=day.isoformat(), through_date=day.isoformat(), time_zone=store.time_zone)
            after = sorted(entry["text"] for entry in page.entries)
        finally:
            owner.stop()
    assert (
        before
        == after
        == sorted(
            [
                "The harbour crane lifted crates of salt.",
                "The pilot boat left at dawn.",
                "The tug captain retired today.",
            ]
        )
    )


@pytest.mark.one_engine("it reaches into the local engine's Tantivy index (serving_index().bm25)")
def test_the_watchers_event_for_memvaults_own_append_costs_no_reread(tmp_path, monkeypatch):
    """The watcher names today's note after each of memvault's own appends: a note exactly as
    that append left it is skipped (its rows joined the pending set with the append); a person's
    line after it is read at once and searchable before any commit."""
    from memvault import MemoryStore
    from memvault.indexer.engine import deferred, group_commit
    from memvault.indexer.engine.owner import Owner

    monkeypatch.setattr(group_commit, "IDLE_SECONDS", 3600.0)  # no timed commit during the test
    monkeypatch.setattr(deferred, "MAX_DELAY_SECONDS", 3600.0)
    root = make_vault(tmp_path)
    with MemoryStore.open(root, engine=False) as store:
        owner = Owner(store, role="python", intake=False).start()
        try:
            owner.group_commit().remember("The harbour opened its new quay.", None)  # creates the note
            receipt = owner.group_commit().remember("The pilot boat left at dawn.", None)
            relpath = receipt.source.partition("#")[0]
            assert tuple(store.sync([relpath], defer=True).files) == ()  # our own append: nothing to read
            assert [h.text for h in store.recall("pilot boat dawn").hits][:1] == ["The pilot boat left at dawn."]
            with (root / relpath).open("a") as handle:
                handle.write("- 10:00 The tug captain retired today.\n")
            assert tuple(store.sync([relpath], defer=True).files) == (relpath,)  # a person's line: read at once
            assert store._deferred.pending and not committed_texts(root, "tug captain")
            assert "The tug captain retired today." in [h.text for h in store.recall("tug captain").hits]
        finally:
            owner.stop()


@pytest.mark.parametrize("hello", [{"pid": 4242}, {"pid": 4242, "unanswered": True}], ids=["earlier", "news"])
def test_an_admission_tells_the_owner_and_never_waits_for_its_answer(tmp_path, hello):
    """A client's admission is durable once its record is fsynced; the owner is told (the
    request lands in its socket) but not waited for, so a busy owner never holds an agent's
    completed turn up. A socket that takes requests and never answers stands for that owner:
    an earlier one (told on a connection of its own) or one that takes news on a kept connection."""
    import os
    import socket
    import threading

    from memvault.indexer.engine.client import EngineClient
    from memvault.indexer.engine.remote import RemoteStore

    root = make_local_vault(tmp_path, mode="journal")
    path = tmp_path / "silent.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.fspath(path))
    listener.listen(8)
    received = []

    def take_and_never_answer():
        connection, _ = listener.accept()
        with connection, connection.makefile("rb") as lines:
            for line in lines:
                received.append(line)  # busy: an answer would come far too late for anyone waiting on it

    threading.Thread(target=take_and_never_answer, daemon=True).start()
    store = RemoteStore(root, EngineClient(path, hello))
    result, worker = store.admit_turn("run-told", "The navigator charted the northern passage.")
    assert result.status == "admitted" and pending_count(root) == 1
    # the owner never answers, so a client that waited for it would report that it did not
    assert worker == "queued: the engine (pid 4242) projects it"
    wait_for(lambda: received, what="the owner's socket to have the news")
    told = json.loads(received[0])
    assert (told["op"], told["args"]["id"]) == ("admitted", result.id)
    assert told.get("answer") is (False if "unanswered" in hello else None)
    if "unanswered" in hello:  # the same connection carries the next news: the one listener thread hears it
        second, _ = store.admit_turn("run-told-2", "The navigator charted the southern passage.")
        wait_for(lambda: len(received) == 2, what="the second news on the kept connection")
        assert json.loads(received[1])["args"]["id"] == second.id
    listener.close()
    path.unlink()
    store.client.close()  # nothing listens now: a kept connection would still take the news
    _, worker = store.admit_turn("run-nobody", "The cook counted the barrels.")
    assert "did not answer" in worker or "did not take" in worker  # nothing listens: the turn is saved all the same
    assert pending_count(root) == 2 + ("unanswered" in hello)


@pytest.mark.both_backends
def test_a_real_owner_is_woken_by_news_from_another_process(tmp_path):
    """`memvault admit` in another process tells the owner on a kept connection and exits at
    once; the owner (polling its intake only once an hour here) projects the turn all the same."""
    from memvault.indexer.engine.store import MemoryStore

    root = make_vault(tmp_path, mode="journal")
    store = MemoryStore.open(root, engine=False)
    try:
        store.start_intake(poll_seconds=3600)
        assert find_owner(root).hello.get("unanswered") is True
        done = memvault(root, "admit", input=turn_json("run-news", "The heron chose the north pond."))
        assert done.returncode == 0 and json.loads(done.stdout)["status"] == "admitted", done.stderr
        wait_for(lambda: pending_count(root) == 0, what="the owner to project the turn it was told of")
        assert any("heron" in hit.text for hit in store.recall("heron north pond").hits)
    finally:
        store.close()


@pytest.mark.one_engine(
    "it times a commit against Tantivy's searcher refresh (bm25.refresh), the local engine's own reader"
)
def test_a_commit_landing_as_a_read_refreshes_its_searcher_hides_no_acknowledged_write(tmp_path):
    """The owner's committer drops a memory's pending row once Tantivy holds it. A read that
    refreshed its searcher just before that commit must still find the memory: the commit
    reloads the shared reader before it drops the rows, and a read takes its searcher when it
    searches, so the memory is in the rows it took or in the searcher, never in neither."""
    from memvault import MemoryStore

    root = make_local_vault(tmp_path, mode="journal")
    with MemoryStore.open(root, engine=False) as store:
        store.defers_index_commits = True  # as an owner: remembers wait for the committer
        store.remember("The purser locked the ledger in the chart room.")
        index = store.serving_index()
        refresh = index.bm25.refresh

        def refresh_then_commit():
            refresh()
            index.bm25.refresh = refresh  # once
            store.flush_deferred()  # the committer, landing right after this read's refresh

        index.bm25.refresh = refresh_then_commit
        hits = store.recall("where is the ledger locked?").hits
        assert not store._deferred.pending  # the commit did land during the read
        assert any("purser locked the ledger" in hit.text for hit in hits), [hit.text for hit in hits]


@pytest.mark.both_backends
def test_a_save_landing_between_a_commits_repair_and_its_read_hides_no_acknowledged_write(tmp_path, monkeypatch):
    """A person's editor saving many times a second can write its older copy of the day's note
    (without memvault's new line) right after the committer repaired the note and before it
    read it. The commit must not take that read: the memory would leave the pending rows before
    the index had it. It repairs and reads again, and every read finds the memory."""
    import memvault.indexer.engine.index_commits as store_module  # the commit's repair and read
    from memvault import MemoryStore

    root = make_vault(tmp_path, mode="journal")
    with MemoryStore.open(root, engine=False) as store:
        store.defers_index_commits = True  # as an owner: remembers wait for the committer
        receipt = store.remember("The purser locked the ledger in the chart room.")
        note = root / receipt.source.partition("#")[0]
        older_copy = "".join(line for line in note.read_text().splitlines(keepends=True) if receipt.id not in line)
        repair, saves = store_module.repair_lost_lines, []

        def repair_then_a_save_lands(layout, paths=None, now=None):
            repaired = repair(layout, paths, now)
            if not saves:
                saves.append(note.write_text(older_copy))  # the editor's save, just after the repair
            return repaired

        monkeypatch.setattr(store_module, "repair_lost_lines", repair_then_a_save_lands)
        store.flush_deferred()
        assert saves and not store._deferred.pending  # the save landed, and the commit went through
        assert note.read_text().count(f"^{receipt.id}") == 1  # put back once
        hits = store.recall("where is the ledger locked?").hits
        assert any("purser locked the ledger" in hit.text for hit in hits), [hit.text for hit in hits]


@pytest.mark.both_backends
def test_a_duplicate_remember_beside_a_persons_save_hides_no_acknowledged_write(tmp_path):
    """A repeated remember checks its memory's note before answering `duplicate`, which commits
    that note at once. Beside a person's save that dropped a line memvault had just written
    there, the commit must not take the note as saved: the dropped memory's pending row would go
    and the index would not have it. It repairs the note first, so every read finds both."""
    from memvault import MemoryStore

    root = make_vault(tmp_path, mode="journal")
    with MemoryStore.open(root, engine=False) as store:
        store.defers_index_commits = True  # as an owner: remembers wait for the committer
        first = store.remember("The bosun painted the dinghy green.")
        store.flush_deferred()
        note = root / first.source.partition("#")[0]
        older_copy = note.read_text()  # a person's editor read the note...
        second = store.remember("The cook stored the flour in the dry hold.")
        note.write_text(older_copy)  # ...and saved it after memvault appended: the line is dropped
        assert store.remember("The bosun painted the dinghy green.").status == "duplicate"
        hits = store.recall("where is the flour stored?").hits
        assert any("stored the flour" in hit.text for hit in hits), [hit.text for hit in hits]
        store.flush_deferred()  # the commit repairs the note before it reads it
        assert note.read_text().count(f"^{second.id}") == 1  # put back
        hits = store.recall("where is the flour stored?").hits
        assert any("stored the flour" in hit.text for hit in hits), [hit.text for hit in hits]


@pytest.mark.both_backends
def test_a_duplicate_remember_in_an_owner_commits_nothing(tmp_path):
    """A text said again is answered `duplicate` from its note, which still holds it: the note's
    other acknowledged writes stay pending for the committer (a commit per repeated text stalled
    every writer behind the vault lock)."""
    from memvault import MemoryStore

    root = make_vault(tmp_path, mode="journal")
    with MemoryStore.open(root, engine=False) as store:
        store.defers_index_commits = True
        first = store.remember("The bosun painted the dinghy green.")
        store.flush_deferred()
        second = store.remember("The cook stored the flour in the dry hold.")
        again = store.remember("The bosun painted the dinghy green.")
        assert (again.status, again.id) == ("duplicate", first.id)
        assert store._deferred.receipt(content_hash(second.text)) is not None  # still pending: no commit
        assert [hit.text for hit in store.recall("where is the flour stored?").hits][:1] == [second.text]


@pytest.mark.both_backends
def test_a_duplicate_remember_in_an_owner_rewrites_a_memory_a_person_changed(tmp_path):
    """The committed row is the duplicate only while its note holds the same text under its id."""
    from memvault import MemoryStore

    root = make_vault(tmp_path, mode="journal")
    with MemoryStore.open(root, engine=False) as store:
        store.defers_index_commits = True
        first = store.remember("The bosun painted the dinghy green.")
        store.flush_deferred()
        note = root / first.source.partition("#")[0]
        note.write_text(note.read_text().replace("dinghy green", "dinghy red"))  # same ^id, new text
        again = store.remember("The bosun painted the dinghy green.")
        assert again.status == "added" and again.id != first.id
        texts = [hit.text for hit in store.recall("what colour is the dinghy?").hits]
        assert set(texts[:2]) == {"The bosun painted the dinghy green.", "The bosun painted the dinghy red."}


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_commit_under_a_steady_stream_of_writes_is_next_due_a_full_delay_after_its_read():
    """The committer commits at least every MAX_DELAY_SECONDS under a steady stream. Writes that
    arrive while a commit runs are newer than its read: the next commit is due a full delay after
    that read, not at once (the committer ran back to back, a commit every ~0.1 s, under load)."""
    from memvault.indexer.engine.deferred import MAX_DELAY_SECONDS, DeferredIndexing

    clock = _Clock()
    deferred = DeferredIndexing(clock)
    deferred.add(["daily/a.md"], {})
    clock.now += MAX_DELAY_SECONDS  # the oldest write has waited the whole delay: due
    assert deferred.due()
    paths, through, read_at = deferred.read_point()
    clock.now += 0.1  # the commit runs; a write lands meanwhile
    deferred.add(["daily/a.md"], {})
    deferred.committed(paths, through, read_at)
    assert deferred.pending and not deferred.due()
    assert deferred.seconds_until_due() == pytest.approx(MAX_DELAY_SECONDS - 0.1)
    clock.now = read_at + MAX_DELAY_SECONDS
    assert deferred.due()  # and never later than a full delay after the read


def test_a_partial_commit_of_other_notes_keeps_the_oldest_write_due():
    """A commit of some notes (a sync of one path) never delays what waited longer elsewhere."""
    from memvault.indexer.engine.deferred import MAX_DELAY_SECONDS, DeferredIndexing

    clock = _Clock()
    deferred = DeferredIndexing(clock)
    deferred.add(["daily/a.md"], {})
    clock.now += 0.5
    deferred.add(["daily/b.md"], {})
    deferred.committed(["daily/b.md"])  # as they are now: b is done, a still waits since 100.0
    clock.now = 100.0 + MAX_DELAY_SECONDS
    assert deferred.due()

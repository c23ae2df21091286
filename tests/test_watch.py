"""The watcher: synthetic events into the handler, real editor save sequences through inotify."""

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirModifiedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileOpenedEvent,
)

from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.maintenance.watch import ChangeQueue, VaultEventHandler, Watcher
from memvault.vault.locks import LivenessFence
from tests import postgres_helpers
from tests.engine_helpers import wait_for

REPO = Path(__file__).resolve().parent.parent
AMS = ZoneInfo("Europe/Amsterdam")
MEMVAULT = [sys.executable, "-m", "memvault"]


# --- synthetic events ------------------------------------------------------------------------
# These (and the rewatch-warning test at the end) exercise the event handler and the change queue
# alone, with no store and no index: they stay local. The real-file tests below run on both backends.


@pytest.fixture
def handler(tmp_path):
    return VaultEventHandler(tmp_path, ChangeQueue(debounce=0.0, max_delay=0.0))


def pending(handler) -> tuple:
    batch = handler.queue.take()
    return (batch.paths, batch.rescan) if batch else None


def test_note_events_name_the_note(handler, tmp_path):
    for event in (FileCreatedEvent, FileModifiedEvent, FileClosedEvent, FileDeletedEvent):
        handler.dispatch(event(str(tmp_path / "daily/2026-11-30.md")))
        assert pending(handler) == (("daily/2026-11-30.md",), False)
    handler.dispatch(FileCreatedEvent(str(tmp_path / "audit/2026-11-30.md")))
    assert pending(handler) == (("audit/2026-11-30.md",), False)


@pytest.mark.parametrize(
    "name",
    [
        ".index/gen-000001/bm25/meta.json",
        ".locks/vault.lock",
        ".capture-intake/pending/ab.json",
        ".git/index",
        ".obsidian/workspace.json",
        "daily/.2026-11-30.md.swp",
        "daily/2026-11-30.md~",
        "daily/4913",
        "daily/.2026-11-30.md.abc123.tmp",
        "daily/#2026-11-30.md#",
        "daily/2026-11-30.md.orig",
        "daily/notes.txt",
        "documents/plan.md",
        "daily/sub/2026-11-30.md",
        "daily/2026-13-45.md",
        "memvault.json",
    ],
)
def test_ignored_and_non_note_names_never_reach_the_queue(handler, tmp_path, name):
    for event in (FileCreatedEvent, FileModifiedEvent, FileDeletedEvent):
        handler.dispatch(event(str(tmp_path / name)))
    assert pending(handler) is None


def test_temp_file_renamed_over_a_note_acts_on_the_destination(handler, tmp_path):
    handler.dispatch(FileMovedEvent(str(tmp_path / "daily/.2026-11-30.md.tmp"), str(tmp_path / "daily/2026-11-30.md")))
    assert pending(handler) == (("daily/2026-11-30.md",), False)
    # vim's backup dance: the note moves away to `~` (the note is gone) and a new one appears
    handler.dispatch(FileMovedEvent(str(tmp_path / "daily/2026-11-30.md"), str(tmp_path / "daily/2026-11-30.md~")))
    assert pending(handler) == (("daily/2026-11-30.md",), False)
    handler.dispatch(FileMovedEvent(str(tmp_path / "daily/2026-11-29.md"), str(tmp_path / "daily/2026-11-30.md")))
    assert pending(handler) == (("daily/2026-11-29.md", "daily/2026-11-30.md"), False)


def test_folder_events_under_notes_become_a_rescan_others_do_not(handler, tmp_path):
    for event in (
        DirCreatedEvent(str(tmp_path / "daily")),
        DirDeletedEvent(str(tmp_path / "audit")),
        DirMovedEvent(str(tmp_path / "daily"), str(tmp_path / "old-daily")),
    ):
        handler.dispatch(event)
        assert pending(handler) == ((), True)
    for event in (
        DirModifiedEvent(str(tmp_path / "daily")),
        DirCreatedEvent(str(tmp_path / ".index/gen-000002")),
        DirCreatedEvent(str(tmp_path / "documents/x")),
        FileOpenedEvent(str(tmp_path / "daily/2026-11-30.md")),
    ):
        handler.dispatch(event)
        assert pending(handler) is None


def test_hostile_event_paths_are_ignored(handler, tmp_path):
    for path in (
        "/etc/passwd",
        str(tmp_path / "../outside/daily/2026-11-30.md"),
        "",
        b"\xff\xfe/daily/x.md",
        str(tmp_path / "daily") + "/" + "a" * 5000 + ".md",
    ):
        handler.dispatch(FileCreatedEvent(path))
    assert pending(handler) is None


def test_queue_is_bounded_and_overflows_into_a_rescan(tmp_path):
    queue = ChangeQueue(debounce=0.0, max_delay=0.0, max_paths=10)
    for day in range(1, 21):
        queue.add(f"daily/2026-11-{day:02d}.md")
    batch = queue.take()
    assert batch.rescan and batch.paths == ()


def test_debounce_waits_for_quiet_but_not_forever():
    now = [100.0]
    queue = ChangeQueue(debounce=0.2, max_delay=1.0, clock=lambda: now[0])
    assert queue.ready_in() is None
    queue.add("daily/2026-11-30.md")
    assert queue.ready_in() == pytest.approx(0.2)
    for _ in range(8):  # a steady stream of events every 0.1 s
        now[0] += 0.1
        queue.add("daily/2026-11-30.md")
    assert queue.ready_in() == pytest.approx(0.2)
    now[0] += 0.15
    assert queue.ready_in() == pytest.approx(0.05), "max_delay caps a steady stream at 1 s after the first event"
    now[0] += 0.05
    assert queue.ready_in() == 0.0
    assert queue.take().paths == ("daily/2026-11-30.md",)


# --- real files, real inotify ------------------------------------------------------------------


class Running:
    """A Watcher on a background thread, collecting its batch reports."""

    def __init__(self, root: Path):
        self.store = MemoryStore.open(root)
        self.reports = []
        self.watcher = Watcher(
            self.store, debounce=0.05, max_delay=0.5, compact_after=None, on_batch=self.reports.append
        )
        self.thread = threading.Thread(target=self.watcher.run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.reports, what="the first rescan")

    def stop(self) -> None:
        self.watcher.stop()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()
        self.store.close()


def searchable(store: MemoryStore, query: str, text: str) -> bool:
    return matching(store, query, text) > 0


def matching(store: MemoryStore, query: str, text: str) -> int:
    """Hits whose own text holds `text` (neighbours' context can match a query too)."""
    return sum(text in hit.text for hit in store.recall(query, limit=50).hits)


def health(store: MemoryStore, strict: bool = False) -> dict:
    """The store's health report, on whichever backend holds its index."""
    return store.health_report(strict=strict)


def only_the_fixtures_conflict(report: dict) -> bool:
    """Healthy but for fixtures/vault's own merge conflict (daily/2026-11-05.md), an error since issue 44."""
    errors = [(f["code"], f["subject"]) for f in report["findings"] if f["severity"] == "error"]
    return errors == [("conflict_markers", "daily/2026-11-05.md")]


def rows_equal_rebuild(root: Path) -> None:
    with MemoryStore.open(root, sync=False) as store:
        watched = store.serving_index().all_rows()
        store.rebuild()
        assert store.serving_index().all_rows() == watched
        assert only_the_fixtures_conflict(health(store))


@pytest.fixture
def watching(fixture_vault):
    running = Running(fixture_vault)
    yield running
    running.stop()


@pytest.mark.both_backends
def test_editor_save_patterns_are_followed(watching, fixture_vault):
    store, daily = watching.store, fixture_vault / "daily"
    # vim: backup rename, 4913 probe, new inode, backup removed
    note = daily / "2026-11-10.md"
    (daily / "4913").write_text("")
    (daily / "4913").unlink()
    os.rename(note, daily / "2026-11-10.md~")
    note.write_text((daily / "2026-11-10.md~").read_text() + "- 10:00 Vim says the mascot is a zeppelin.\n")
    (daily / "2026-11-10.md~").unlink()
    wait_for(lambda: searchable(store, "zeppelin", "Vim says"), what="vim save")
    # VS Code / Obsidian: temp file renamed over the note
    note = daily / "2026-11-11.md"
    temp = daily / ".2026-11-11.md.vscode.tmp"
    temp.write_text(note.read_text() + "- 11:00 Code says the office pet is a quokka.\n")
    os.replace(temp, note)
    wait_for(lambda: searchable(store, "quokka", "Code says"), what="atomic save")
    # a plain append, a few writes in a row
    with open(daily / "2026-11-12.md", "a") as handle:
        for word in ("first", "second", "third"):
            handle.write(f"- 12:00 Appended {word} line about the aardvark.\n")
            handle.flush()
    wait_for(lambda: matching(store, "aardvark", "aardvark") == 3, what="appends")
    # the note deleted, then a folder removed and recreated
    (daily / "2026-11-12.md").unlink()
    wait_for(lambda: matching(store, "aardvark", "aardvark") == 0, what="delete")
    shutil.rmtree(fixture_vault / "audit")
    (fixture_vault / "audit").mkdir()
    (fixture_vault / "audit/2026-11-30.md").write_text("- 09:00 host observation: the audit came back.\n")
    wait_for(lambda: "audit/2026-11-30.md" in store.serving_index().row_counts(), what="folder recreate")
    assert "audit/2026-11-05.md" not in store.serving_index().row_counts()
    watching.stop()
    rows_equal_rebuild(fixture_vault)


@pytest.mark.both_backends
def test_only_note_folders_are_watched_and_one_made_or_replaced_later_is_followed(new_vault):
    """The kernel watches the vault's top and its note folders only: files the intake, git or
    documents write cost the owner no event. A note folder that appears after the start (the
    nested layout's, with its year and month folders) or is replaced by another is followed."""
    shutil.rmtree(new_vault / "daily")  # as a vault whose first memory is still to come
    store = MemoryStore.open(new_vault)
    reports, seen = [], []
    watcher = Watcher(store, debounce=0.05, max_delay=0.5, compact_after=None, on_batch=reports.append)
    handle = watcher.handler.dispatch
    watcher.handler.dispatch = lambda event: (seen.append(os.fsdecode(event.src_path)), handle(event))
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: reports, what="the first rescan")
        for folder in (".capture-intake/pending", ".git/objects", "documents/drafts"):
            (new_vault / folder).mkdir(parents=True, exist_ok=True)
            for n in range(20):
                (new_vault / folder / f"file-{n}.md").write_text("written by a tool, not a note\n")
        note = new_vault / "daily/2026/11/2026-11-30.md"
        note.parent.mkdir(parents=True)
        note.write_text("- 09:00 The lighthouse keeper chose teal.\n")
        wait_for(lambda: searchable(store, "lighthouse teal", "lighthouse keeper"), what="a note in a new folder")
        other = new_vault / "elsewhere/2026/11"
        other.mkdir(parents=True)
        (other / "2026-11-29.md").write_text("- 10:00 The ferry captain prefers amber.\n")
        shutil.rmtree(new_vault / "daily")
        os.rename(new_vault / "elsewhere", new_vault / "daily")
        wait_for(lambda: searchable(store, "ferry amber", "ferry captain"), what="a replaced note folder")
        (new_vault / "daily/2026/11/2026-11-28.md").write_text("- 11:00 The harbour pilot likes coral.\n")
        wait_for(lambda: searchable(store, "harbour coral", "harbour pilot"), what="a note in the replaced folder")
        assert not searchable(store, "lighthouse teal", "lighthouse keeper")  # its folder went
        assert watcher._watches.watched() == ["daily"]
        assert not [p for p in seen if any(f"/{top}/" in p for top in (".capture-intake", ".git", "documents"))]
    finally:
        watcher.stop()
        thread.join(timeout=10)
        store.close()
    assert not thread.is_alive()


@pytest.mark.both_backends
def test_a_checkout_of_many_files_and_a_burst_of_1000(watching, fixture_vault):
    daily = fixture_vault / "daily"
    for day in range(1000):
        (daily / f"2030-{day // 28 % 12 + 1:02d}-{day % 28 + 1:02d}.md").write_text(f"- 09:00 burst note {day}\n")
    wait_for(lambda: watching.store.serving_index().bm25.count() >= 168 + 336, what="burst")
    # `git checkout` style: files replaced wholesale, some removed
    for path in sorted(daily.glob("2030-*.md"))[:200]:
        path.unlink()
    for path in sorted(daily.glob("2030-*.md"))[:100]:
        path.write_text("- 10:00 checked out again\n")
    time.sleep(1.0)
    watching.stop()
    assert not [r for r in watching.reports if r.error]
    rows_equal_rebuild(fixture_vault)


@pytest.mark.both_backends
def test_memvaults_own_writes_do_not_make_the_watcher_reindex(watching, fixture_vault):
    watching.reports.clear()
    receipt = watching.store.remember(
        "The quarterly review moved to Thursday.", at=datetime(2026, 11, 10, 9, tzinfo=AMS)
    )
    time.sleep(1.0)  # let the note's events arrive and be handled
    batches = [r for r in watching.reports if r.outcome and r.named]
    assert batches, "the watcher saw the note change"
    assert all(r.outcome.files == () and r.outcome.memories == 0 for r in batches), [r.line() for r in batches]
    assert watching.store.recall("quarterly review").hits[0].source == receipt.source


@pytest.mark.both_backends
def test_hand_edit_outcomes_never_crash_the_watcher(watching, fixture_vault):
    daily = fixture_vault / "daily"
    (daily / "2026-11-13.md").write_bytes(b"- 09:00 broken \xff utf8 about walruses\n")
    note = daily / "2026-11-14.md"
    note.write_text(
        note.read_text() + "<<<<<<< HEAD\n- 10:00 walrus side A\n=======\n- 10:00 walrus side B\n>>>>>>> x\n"
    )
    (daily / "2026-11-15.md").write_text("- 09:00 walrus pasted ^m-dup0000001\n- 09:05 walrus copy ^m-dup0000001\n")
    # both sides of the conflict stay searchable (issue 44), and the conflict is health's one error
    wait_for(lambda: matching(watching.store, "walrus", "walrus") == 4, what="hand edits")

    def settled():
        report = health(watching.store)
        codes = {f["code"] for f in report["findings"]}
        errors = {f["code"] for f in report["findings"] if f["severity"] == "error"}
        return errors == {"conflict_markers"} and {"invalid_utf8", "conflict_markers", "duplicate_id"} <= codes

    wait_for(settled, what="health to report each hand edit")
    assert watching.thread.is_alive()


@pytest.mark.both_backends
def test_deleted_or_corrupt_index_is_rebuilt_by_the_watcher(watching, fixture_vault):
    postgres_helpers.lose_the_index(fixture_vault)  # gone: the next batch builds a first generation inline
    note = fixture_vault / "daily/2026-11-16.md"
    note.write_text(note.read_text() + "- 10:00 The index came back for the narwhal.\n")
    wait_for(lambda: searchable(watching.store, "narwhal", "narwhal"), what="index after deletion")
    postgres_helpers.break_the_serving_index(watching.store)  # corrupt: the watcher rebuilds
    note.write_text(note.read_text() + "- 10:05 And again for the dugong.\n")
    wait_for(lambda: searchable(watching.store, "dugong", "dugong"), what="index after corruption")
    # the swap makes the note searchable before the batch's report is appended: wait for both
    wait_for(lambda: any(r.action == "rebuilt" for r in watching.reports), what="the rebuild's report")
    assert watching.thread.is_alive()


def scores(store: MemoryStore) -> list:
    return [[(h.source, round(h.score, 6)) for h in store.recall(q, limit=50).hits]
            for q in ("edited", "standup", "deploy window", "team lunch", "export test")]  # fmt: skip


@pytest.mark.both_backends
def test_compaction_after_quiet_makes_scores_match_a_rebuild(fixture_vault):
    """Edits leave deleted rows in the local engine's BM25 statistics until a compaction after
    a quiet spell merges them away; the server's statistics drop a row with it (nothing to
    compact). Either way, once the watcher is quiet, scores are a rebuild's."""
    local = postgres_helpers.TEST_BACKEND == "local"
    with MemoryStore.open(fixture_vault) as store:
        for day in ("2026-10-20", "2026-10-21"):
            note = fixture_vault / f"daily/{day}.md"
            note.write_text(note.read_text().replace("- ", "- edited ", 2))
        store.sync()
        assert (store.serving_index().deleted_rows() > 0) == local
        reports = []
        watcher = Watcher(store, debounce=0.05, compact_after=0.3, on_batch=reports.append)
        thread = threading.Thread(target=watcher.run)
        thread.start()
        if local:
            wait_for(lambda: any(r.action == "compacted" for r in reports), what="compaction")
        else:
            wait_for(lambda: reports, what="the watcher's first rescan")
        watcher.stop()
        thread.join(10)
        assert store.serving_index().deleted_rows() == 0
        quiet = scores(store)
        store.rebuild()
        assert scores(store) == quiet


# --- the command, as a process -------------------------------------------------------------


def start_watch(root: Path, env=None) -> subprocess.Popen:
    proc = subprocess.Popen(
        [*MEMVAULT, "--vault", str(root), "watch", "--debounce", "0.05"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stderr.readline()
    assert line.startswith("watching"), line + (proc.stderr.read() if proc.poll() is not None else "")
    return proc


@pytest.mark.both_backends
def test_a_stop_signal_that_lands_on_another_thread_stops_an_idle_watcher(new_vault):
    """`memvault watch` and `serve` stop on SIGTERM through a Python handler, which CPython runs on
    the main thread only, once it runs again: a signal the kernel hands to another thread did not
    cut the idle watcher's wait short, and the owner stopped up to a minute later (a test's stop
    timed out). The idle watcher now looks at its stop event every second."""
    store = MemoryStore.open(new_vault)
    stop, ready, late = threading.Event(), threading.Event(), []
    watcher = Watcher(store, debounce=0.05, compact_after=None, consolidate_every=None, on_ready=ready.set)

    def request_stop(*_args) -> None:  # as `memvault watch` asks to stop (cli/foreground_owner.py)
        stop.set()
        watcher.queue.wake()

    def signal_from_another_thread() -> None:
        ready.wait(60)
        time.sleep(0.5)  # the watcher's first rescan is done and it waits, idle
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # this thread takes it, not the main one

    def give_up_later() -> None:
        if not watcher_returned.wait(30):
            late.append("the watcher did not stop within 30 s")
            request_stop()

    watcher_returned = threading.Event()
    previous = signal.signal(signal.SIGTERM, request_stop)
    threading.Thread(target=signal_from_another_thread, daemon=True).start()
    threading.Thread(target=give_up_later, daemon=True).start()
    try:
        watcher.run(stop)  # on the main thread, as the command runs it
    finally:
        watcher_returned.set()
        signal.signal(signal.SIGTERM, previous)
        store.close()
    assert stop.is_set() and late == []


@pytest.mark.both_backends
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_watch_command_stops_cleanly_and_releases_the_fence(fixture_vault, sig):
    proc = start_watch(fixture_vault)
    try:
        assert LivenessFence(fixture_vault).is_held_elsewhere()
        second = subprocess.run(
            [*MEMVAULT, "--vault", str(fixture_vault), "watch"],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1 and "Another live memvault process" in second.stderr
        note = fixture_vault / "daily/2026-11-16.md"
        note.write_text(note.read_text() + "- 10:00 The platypus joined the team.\n")
        # other log lines (consolidation, compaction) may come first: read on until the index one
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if "indexed 1 file(s)" in line:
                break
        assert "+1" in seen[-1], seen
    finally:
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stopped; the index is consistent" in err
    assert not LivenessFence(fixture_vault).is_held_elsewhere()
    with MemoryStore.open(fixture_vault, sync=False) as store:
        assert store.recall("platypus").hits
        assert only_the_fixtures_conflict(health(store))


@pytest.mark.both_backends
def test_watcher_keeps_vectors_in_step_on_a_journal_vault(fixture_vault):
    """Journal tier: an edit saved while `watch` runs gets its vector (through the queue), and the
    vectors match the rows exactly once the queue drains (strict health's vector check)."""
    from memvault.vault.config import default_config_data, render_config

    (fixture_vault / "memvault.json").write_bytes(render_config(default_config_data("journal", "Europe/Amsterdam")))
    postgres_helpers.on_test_backend(fixture_vault)  # the new config on the test's backend again
    running = Running(fixture_vault)
    try:
        note = fixture_vault / "daily/2026-11-12.md"
        with open(note, "a") as handle:
            handle.write("- 12:30 Sam adopted a rescue dog named Biscuit.\n")
        wait_for(lambda: searchable(running.store, "Biscuit", "rescue dog"), what="BM25 row")
        assert running.store._semantic.drain(30)
        hit = running.store.recall("puppy", limit=5).hits
        assert any("rescue dog" in h.text and "vector" in h.explain for h in hit)
    finally:
        running.stop()
    with MemoryStore.open(fixture_vault, sync=False) as store:
        report = health(store, strict=True)
    assert "vector_rows" in report["checks"] and [f for f in report["findings"] if f["check"] == "vector_rows"] == []


def test_watchdogs_harmless_rewatch_warning_is_silenced_and_no_other():
    from memvault.indexer.maintenance.watch import _quiet_watchdog_rewatch_warning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _quiet_watchdog_rewatch_warning()
        rewatch = "Callback with id '1404' already exists for watch <Watch wd=6>. It will be Overwritten."
        warnings.warn_explicit(rewatch, RuntimeWarning, "inotify.py", 365, module="watchdog.observers.inotify")
        warnings.warn_explicit(rewatch, RuntimeWarning, "elsewhere.py", 1, module="somebody.else")
        warnings.warn_explicit(
            "inotify queue overflow", RuntimeWarning, "inotify.py", 1, module="watchdog.observers.inotify"
        )
    assert [(str(w.message), w.filename) for w in caught] == [
        (rewatch, "elsewhere.py"),
        ("inotify queue overflow", "inotify.py"),
    ]

"""The recent-writes ledger: a person's save that drops memvault's line gets it back, once, and
only within the repair window (vault/recent_writes.py). Time is passed in, never waited for."""

import os
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memvault import MemoryStore
from memvault.vault.locks import VaultLock
from memvault.vault.recent_writes import repair_lost_lines

AT = datetime(2026, 11, 30, 9, 0, tzinfo=ZoneInfo("Europe/Amsterdam"))
NOTE = "daily/2026-11-30.md"

# Every test that opens a store runs on both engines: the ledger lives in the vault's .index/ folder on
# either one, and the repairs and append retries go through the engine's writes and syncs. The three
# that write the ledger file alone open no index and stay local.


@pytest.mark.both_backends
def test_a_save_of_an_older_copy_is_kept_and_the_dropped_line_comes_back(new_vault):
    note = new_vault / NOTE
    note.parent.mkdir(exist_ok=True)
    note.write_text("# 2026-11-30\n\n")
    editor_buffer = note.read_text()  # an editor read the note...
    with MemoryStore.open(new_vault) as store:
        receipt = store.remember("The coffee order is oat flat whites.", at=AT)
        note.write_text(editor_buffer + "- typed by a person\n")  # ...and saved after memvault wrote
        assert f"^{receipt.id}" not in note.read_text()
        store.sync([NOTE])  # what the watcher runs for that save
        text = note.read_text()
        assert text.startswith(editor_buffer + "- typed by a person\n")  # the person's save stands
        assert text.count(f"^{receipt.id}") == 1
        assert store.recall("coffee order").hits[0].id == receipt.id
        store.sync([NOTE])
        assert note.read_text() == text  # a second sync changes nothing


@pytest.mark.both_backends
def test_after_the_window_a_missing_line_is_the_persons_decision(new_vault):
    with MemoryStore.open(new_vault) as store:
        store.remember("A line the person will delete.", at=AT)
    note = new_vault / NOTE
    note.write_text("# 2026-11-30\n\n")
    with VaultLock(new_vault):
        assert repair_lost_lines(store.layout, [NOTE], now=time.time() + 61.0) == []  # 60 s window is over
    assert note.read_text() == "# 2026-11-30\n\n"


@pytest.mark.both_backends
def test_an_id_removed_by_the_person_while_keeping_the_line_is_not_doubled(new_vault):
    with MemoryStore.open(new_vault) as store:
        receipt = store.remember("Keep the text, drop the id.", at=AT)
        note = new_vault / NOTE
        note.write_text(note.read_text().replace(f" ^{receipt.id}", ""))
        store.sync([NOTE])
        assert note.read_text().count("Keep the text, drop the id.") == 1


@pytest.mark.both_backends
def test_a_line_commented_out_by_the_person_is_not_repaired(new_vault):
    with MemoryStore.open(new_vault) as store:
        receipt = store.remember("Comment this out.", at=AT)
        note = new_vault / NOTE
        line = note.read_text().splitlines()[-1]
        note.write_text(note.read_text().replace(line, f"%% {line} %%"))
        store.sync([NOTE])
        assert note.read_text().count(f"^{receipt.id}") == 1 and store.recall("Comment this out").hits == ()


# local only: it opens no index (it writes the recent-writes ledger file alone, in .index/ on either engine)
@pytest.mark.one_engine("opens no index: the recent-writes ledger file alone")
def test_the_ledger_is_appended_to_and_compacted_once_its_oldest_entry_is_two_windows_old(new_vault):
    """Each write appends only its own lines; once the oldest entry is two repair windows old
    (and the ledger is past MIN_COMPACT_BYTES) the next write keeps only the live entries."""
    from memvault.vault.layout import VaultLayout
    from memvault.vault.note_append import NewBullet
    from memvault.vault.recent_writes import LEDGER_NAME, MIN_COMPACT_BYTES, REPAIR_WINDOW_SECONDS, note_written

    layout = VaultLayout(new_vault)
    ledger = layout.index_dir / LEDGER_NAME
    start = 1_000_000.0
    text = "x" * 400
    count = 0
    while not ledger.exists() or ledger.stat().st_size <= MIN_COMPACT_BYTES:
        size_before = ledger.stat().st_size if ledger.exists() else 0
        note_written(
            layout, "daily/2026-11-30.md", "2026-11-30", [NewBullet(text, f"m-{count:010d}", "09:00")], now=start
        )
        assert ledger.stat().st_size > size_before  # appended, never rewritten while all are live
        count += 1
    expired = start + REPAIR_WINDOW_SECONDS + 1  # every entry expired, none two windows old
    note_written(layout, "daily/2026-11-30.md", "2026-11-30", [NewBullet("one", "m-live000001", "09:01")], now=expired)
    assert len(ledger.read_text().splitlines()) == count + 1
    later = start + 2 * REPAIR_WINDOW_SECONDS
    note_written(layout, "daily/2026-11-30.md", "2026-11-30", [NewBullet("two", "m-live000002", "09:02")], now=later)
    ids = [line.split('"id":"')[1].split('"')[0] for line in ledger.read_text().splitlines()]
    assert ids == ["m-live000001", "m-live000002"]  # the expired entries are gone, the live ones kept


# local only: it opens no index (it writes the recent-writes ledger file alone, in .index/ on either engine)
@pytest.mark.one_engine("opens no index: the recent-writes ledger file alone")
def test_a_steady_stream_of_writes_compacts_the_ledger_once_a_window_and_keeps_every_live_line(new_vault, monkeypatch):
    """Many agents writing for minutes: the ledger is rewritten about once a repair window, not
    on every write once its oldest entry expired, and after every write it holds exactly the
    lines of the last window."""
    from memvault.vault import recent_writes
    from memvault.vault.layout import VaultLayout
    from memvault.vault.note_append import NewBullet

    layout = VaultLayout(new_vault)
    window, start, step = recent_writes.REPAIR_WINDOW_SECONDS, 1_000_000.0, 0.25
    rewrites, written = [], []
    write_file = recent_writes.atomic_write
    monkeypatch.setattr(
        recent_writes,
        "atomic_write",
        lambda path, data, **kw: (rewrites.append(len(data)), write_file(path, data, **kw)),
    )
    for n in range(int(5 * window / step)):  # five windows, four writes a second
        now = start + n * step
        block_id = f"m-{n:010d}"
        recent_writes.note_written(layout, NOTE, "2026-11-30", [NewBullet(f"fact {n} " + "y" * 200, block_id, "09:00")],
                                   now=now)  # fmt: skip
        written.append((now, block_id))
        if n % 40 == 0:
            live = [entry["id"] for entry in recent_writes._load(layout, now)]
            assert live == [i for at, i in written if now - at < window]
    assert 1 <= len(rewrites) <= 4  # about once a window after the first two


# local only: it opens no index (it writes the recent-writes ledger file alone, in .index/ on either engine)
@pytest.mark.one_engine("opens no index: the recent-writes ledger file alone")
def test_the_ledger_read_after_appends_a_take_back_and_a_rewrite_holds_exactly_the_live_lines(new_vault):
    """A sync parses only what was appended since it last read the ledger; a take-back (the file
    cut, then other lines appended where the taken-back ones were), a rewrite (a new file), a
    line still being written and a hand-damaged line are each read as they are on disk."""
    from memvault.vault import recent_writes
    from memvault.vault.layout import VaultLayout
    from memvault.vault.note_append import NewBullet

    layout = VaultLayout(new_vault)
    ledger = layout.index_dir / recent_writes.LEDGER_NAME
    now = time.time()

    def write(*ids):
        return recent_writes.note_written(
            layout, NOTE, "2026-11-30", [NewBullet(f"text {i}", i, "09:00") for i in ids], now=now
        )

    def live():
        return [entry["id"] for entry in recent_writes._load(layout, now)]

    write("m-a000000001", "m-a000000002")
    assert live() == ["m-a000000001", "m-a000000002"]
    write("m-a000000003")
    assert live() == ["m-a000000001", "m-a000000002", "m-a000000003"]
    before = write("m-b000000001", "m-b000000002")
    assert live()[-2:] == ["m-b000000001", "m-b000000002"]
    recent_writes.take_back_noted(layout, before)  # the append failed: its lines leave the ledger
    write("m-c000000001")  # and a later write lands where they were
    assert live() == ["m-a000000001", "m-a000000002", "m-a000000003", "m-c000000001"]
    with open(ledger, "ab") as handle:
        handle.write(b'{"at": 1, "id": "half-written')  # a line another process is still appending
    assert live() == ["m-a000000001", "m-a000000002", "m-a000000003", "m-c000000001"]
    with open(ledger, "ab") as handle:
        handle.write(b'000", "path": "x"}\nnot json\n')  # now whole (and expired), then damage
    write("m-d000000001")
    assert live() == ["m-a000000001", "m-a000000002", "m-a000000003", "m-c000000001", "m-d000000001"]
    recent_writes.forget_written(layout, NOTE, ["m-a000000002"])  # a rewrite: a new file
    assert live() == ["m-a000000001", "m-a000000003", "m-c000000001", "m-d000000001"]
    assert live() == [entry["id"] for entry in recent_writes._load(layout, now)]


@pytest.mark.both_backends
def test_a_line_whose_id_is_the_start_of_another_id_is_still_repaired(new_vault):
    """Presence is the whole `^id`, not a prefix of a longer one that happens to be there."""
    with MemoryStore.open(new_vault) as store:
        receipt = store.remember("A line that a save will drop.", at=AT)
        note = new_vault / NOTE
        note.write_text(
            note.read_text()
            .replace(f" ^{receipt.id}", f" ^{receipt.id}x")
            .replace("A line that a save will drop.", "Another line, the person's own.")
        )
        store.sync([NOTE])
        text = note.read_text()
        assert text.count(f"^{receipt.id}\n") == 1 and "A line that a save will drop." in text, text


def _saving_over_each_append(monkeypatch, root, saves: int, by_rename: bool) -> list[float]:
    """The first `saves` appends are each followed at once by a person's save of the note as it
    was before the append (the line dropped), by rename or in place; returns the pauses taken."""
    from memvault.vault import note_append

    real = note_append._append_through
    left = [saves]

    def append_then_saved_over(fd, relpath, bullets, wait_if_empty, match_text):
        before = os.pread(fd, 1 << 20, 0)
        result = real(fd, relpath, bullets, wait_if_empty, match_text)
        if left[0] > 0:
            left[0] -= 1
            path = root / relpath
            if by_rename:  # as most editors save: a new file renamed over the note
                temp = path.with_name(f".{path.name}.swp")
                temp.write_bytes(before)
                os.replace(temp, path)
            else:  # truncated and written again: the file this append holds open
                path.write_bytes(before)
        return result

    pauses: list[float] = []
    monkeypatch.setattr(note_append, "_append_through", append_then_saved_over)
    monkeypatch.setattr(note_append.time, "sleep", lambda seconds: pauses.append(seconds))
    return pauses


@pytest.mark.both_backends
def test_saves_by_rename_during_appends_are_retried_at_once_then_with_backoff(new_vault, monkeypatch):
    """A save by rename that lands during an append leaves a whole new file: the append goes
    again at once (a few times), and only a save that keeps landing meets the backoff; a save in
    place (the file may be half written) meets it at once."""
    from memvault.vault.layout import VaultLayout
    from memvault.vault.note_append import APPEND_ATTEMPTS, NewBullet, append_bullets_once

    layout = VaultLayout(new_vault)
    with MemoryStore.open(new_vault) as store:
        store.remember("A line that is there first.", at=AT)
    for saves, by_rename, backed_off in ((3, True, False), (12, True, True), (2, False, True)):
        pauses = _saving_over_each_append(monkeypatch, new_vault, saves, by_rename)
        block_id = f"m-saves{saves:04d}{int(by_rename)}"
        with VaultLock(new_vault):
            assert append_bullets_once(
                layout, NOTE, "2026-11-30", [NewBullet(f"line after {saves} saves", block_id, "09:05")]
            ) == [block_id]
        text = (new_vault / NOTE).read_text()
        assert text.count(f"^{block_id}") == 1 and "A line that is there first." in text
        assert any(pauses) == backed_off, pauses
        assert len(pauses) < APPEND_ATTEMPTS


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["daily/2026-11-30.md", "daily/2026-12-01.md"]),
            st.sampled_from([f"m-e00000000{n}" for n in range(6)]),
            st.floats(min_value=0.0, max_value=45.0),
        ),
        max_size=30,
    )
)
def test_the_ledgers_lines_by_note_kept_up_as_entries_come_and_expire_equal_them_made_afresh(writes):
    """A sync asks the ledger for its live lines by note and block id, kept up from the last read
    as entries are appended and leave the window (the same id written again keeps its newest
    entry): after every write, what it holds equals what a fresh read of the ledger makes."""
    import tempfile
    from pathlib import Path

    from memvault.vault import recent_writes
    from memvault.vault.layout import VaultLayout
    from memvault.vault.note_append import NewBullet

    layout = VaultLayout(Path(tempfile.mkdtemp()))
    now = 1_000_000.0
    for path, block_id, gap in writes:
        now += gap
        recent_writes.note_written(layout, path, "title", [NewBullet(f"text {block_id}", block_id, "09:00")], now=now)
        kept_up = recent_writes._live_state(layout, now).by_path
        read_so_far = dict(recent_writes._read_so_far)
        recent_writes._read_so_far.clear()
        fresh = recent_writes._live_state(layout, now).by_path
        recent_writes._read_so_far.clear()
        recent_writes._read_so_far.update(read_so_far)  # the next write is read on from here
        newest = {}
        for entry in recent_writes._load(layout, now):  # oldest first: a later one replaces
            newest.setdefault(entry["path"], {})[entry["id"]] = entry
        assert kept_up == fresh == newest


@pytest.mark.both_backends
def test_an_append_nobody_touched_is_not_read_back_and_one_a_save_touched_is(new_vault, monkeypatch):
    """Verifying an append by reading the whole day's note back cost a busy owner a read and a
    parse of thousands of lines per batch: when the note's path still names the file written and
    it grew by exactly the bytes appended, which it ends with, the lines are there. A save in
    place of the same size as the note with the line (so only the bytes tell) is read back, and
    the line written again."""
    from memvault.vault import note_append
    from memvault.vault.layout import VaultLayout
    from memvault.vault.note_append import NewBullet, append_bullets_once

    layout = VaultLayout(new_vault)
    with MemoryStore.open(new_vault) as store:
        store.remember("A line that is there first.", at=AT)
    real_read_back, read_back = note_append._read_back, []
    monkeypatch.setattr(note_append, "_read_back", lambda path: read_back.append(path) or real_read_back(path))
    with VaultLock(new_vault):
        assert append_bullets_once(layout, NOTE, "2026-11-30", [NewBullet("untouched line", "m-alone0001", "09:05")])
    assert read_back == []
    real_append = note_append._append_through

    def append_then_same_size_save(fd, relpath, bullets, wait_if_empty, match_text):
        appended, payload, text = real_append(fd, relpath, bullets, wait_if_empty, match_text)
        if not read_back:  # the first attempt: a save in place, as long as the note with the line
            path = new_vault / relpath
            data = path.read_bytes()
            path.write_bytes(
                data[: len(data) - len(payload)] + b"- 09:06 a person's line".ljust(len(payload) - 1) + b"\n"
            )
        return appended, payload, text

    monkeypatch.setattr(note_append, "_append_through", append_then_same_size_save)
    with VaultLock(new_vault):
        assert append_bullets_once(
            layout, NOTE, "2026-11-30", [NewBullet("line a save overwrote", "m-touch0001", "09:07")]
        )
    text = (new_vault / NOTE).read_text()
    assert read_back and text.count("^m-touch0001") == 1 and "a person's line" in text


@pytest.mark.both_backends
def test_the_recent_writes_ledger_is_owner_only_whoever_made_it(new_vault):
    """Opened as it is on every write; one found readable by others is made owner-only."""
    with MemoryStore.open(new_vault) as store:
        ledger = new_vault / ".index" / "recent-writes.jsonl"
        ledger.unlink(missing_ok=True)
        store.remember("A line that makes the ledger.", at=AT)
        assert ledger.stat().st_mode & 0o777 == 0o600
        os.chmod(ledger, 0o644)
        store.remember("A second line, appended to it.", at=AT)
    assert ledger.stat().st_mode & 0o777 == 0o600
    assert ledger.read_text().count('"path"') == 2


@pytest.mark.both_backends
def test_a_save_in_place_read_halfway_is_not_repaired_into_duplicates(new_vault, monkeypatch):
    """A person's in-place save (truncate, then write) read halfway: the kernel copies a write
    page by page, so a read can end mid-line, before memvault's lines the person's buffer holds.
    The repair took them as dropped; when the save finished before its append (a busy machine
    keeps that window open), they were in the note twice (seen once in the editor-torture test:
    57 lines). A note that ends mid-line is read again after a pause; here the save finishes in
    that pause (or, without it, as memvault writes)."""
    from memvault.vault import note_append

    with MemoryStore.open(new_vault) as store:
        ids = [store.remember(f"Fact {n} the agent keeps about the harbour.", at=AT).id for n in range(6)]
    note = new_vault / NOTE
    whole = (note.read_text() + "- typed by a person\n").encode()
    cut = whole.index(f"^{ids[2]}".encode())  # mid-line: the last four lines are not written yet
    person = os.open(note, os.O_WRONLY | os.O_TRUNC)
    os.write(person, whole[:cut])
    finished = []

    def finish_the_save():
        if not finished:
            finished.append(os.write(person, whole[cut:]))

    real_sleep, real_write = note_append.time.sleep, note_append._write_all
    monkeypatch.setattr(note_append.time, "sleep", lambda seconds: finish_the_save() or real_sleep(seconds))
    monkeypatch.setattr(note_append, "_write_all", lambda fd, data: finish_the_save() or real_write(fd, data))
    try:
        with VaultLock(new_vault):
            repair_lost_lines(store.layout, [NOTE])
    finally:
        os.close(person)
    text = note.read_text()
    assert finished and text.startswith(whole.decode())
    assert [text.count(f"^{block_id}") for block_id in ids] == [1] * 6

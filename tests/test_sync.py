"""Incremental sync: per-file and per-bullet hashes, and parity with a full rebuild."""

import dataclasses
import os
import random
import shutil
import subprocess
import threading
import time
from datetime import date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.maintenance.derived import MAX_NOTE_BYTES, MovesWait, read_note_records
from memvault.indexer.maintenance.health import check_health
from hypothesis import given, settings
from hypothesis import strategies as st

import memvault.indexer.maintenance.sync as sync_module
import memvault.vault.note_blocks as note_blocks
from memvault.indexer.maintenance.sync import KnownRows, Row, diff_known, diff_rows, edits_to_show
from memvault.vault.ids import memory_id
from memvault.vault.layout import VaultLayout
from memvault.vault.records import MemoryRecord
from tests.postgres_helpers import index_commits

AMS = ZoneInfo("Europe/Amsterdam")
QUERIES = [
    "deployment color",
    "Morgan",
    "peanuts allergy lunch",
    "staging database",
    "release",
    "backup",
    "team lunch",
    "export test",
    "office plants",
    "pager",
    "zeppelin quokka",
    "東京",
]


def answers(store: MemoryStore) -> list:
    return [[(h.source, round(h.score, 5)) for h in store.recall(q, limit=50).hits] for q in QUERIES]


def hit_sets(store: MemoryStore) -> list:
    return [sorted(h.source for h in store.recall(q, limit=100).hits) for q in QUERIES]


def rows(store: MemoryStore) -> list[Row]:
    return store._readable_index().all_rows()


def rows_of_a_rebuild(root: Path) -> list[Row]:
    """The rows an index rebuilt from the vault's files holds (what commits must come to)."""
    with MemoryStore.open(root, engine=False) as store:
        store.rebuild()
        return rows(store)


def record(text: str, line: int, path: str = "daily/2026-11-30.md", id_: str | None = None) -> MemoryRecord:
    from memvault.vault.ids import content_hash

    return MemoryRecord(
        id_ or memory_id(text),
        path,
        "curated",
        date(2026, 11, 30),
        datetime(2026, 11, 30, 9),
        text,
        content_hash(text),
        line,
        None,
        True,
    )


# --- the per-bullet diff ---------------------------------------------------------------------


def test_diff_rewrites_only_changed_rows_and_embeds_only_new_text():
    old_records = [record("alpha", 1), record("beta", 2), record("gamma", 3)]
    old = {Row.of_record(r).key: Row.of_record(r) for r in old_records}
    assert diff_rows("p", old, old_records).is_empty

    edited = [record("alpha", 1), record("beta", 2, id_=memory_id("beta")), record("gamma", 3)]
    edited[1] = record("beta two", 2, id_=memory_id("beta"))  # same explicit id, new text
    delta = diff_rows("p", old, edited)
    assert (delta.added, delta.updated, len(delta.removed), delta.unchanged) == (0, 1, 0, 2)
    assert [r.text for r in delta.new_content()] == ["beta two"]

    moved = [record("gamma", 1), record("alpha", 2), record("beta", 3)]  # lines changed, texts did not
    delta = diff_rows("p", old, moved)
    assert delta.updated == 3 and delta.new_content() == []

    delta = diff_rows("p", old, [record("alpha", 1)])
    assert delta.removed == {Row.of_record(r).key for r in old_records[1:]} and delta.upserts == []


@pytest.mark.both_backends
def _delta_fields(delta) -> tuple:
    return delta.deleted, sorted(map(repr, delta.upserts)), delta.removed, delta.unchanged, delta.files, delta.moved


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "eps"]), max_size=8),
    st.integers(0, 8),
    st.lists(st.tuples(st.sampled_from(["alpha", "beta", "zeta", "eta"]), st.integers(1, 12)), max_size=6),
    st.booleans(),
)
def test_a_diff_past_the_records_two_reads_share_equals_the_whole_diff(texts, kept, ending, known_records):
    """`diff_known` diffs only past the records a new read shares with the rows' own records (the
    same objects: vault/records.py keeps them): its delta, and the rows it says the index holds
    after it, equal the whole diff's, wherever the edit is (a moved line, a changed text, ids
    swapped between the parts)."""
    before = [record(text, line) for line, text in enumerate(dict.fromkeys(texts), start=1)]
    after = before[:kept] + [record(text, line + 20) for text, line in dict.fromkeys(ending)]
    after = list({r.id: r for r in after}.values())  # ids are unique within a note
    rows = {row.key: row for row in map(Row.of_record, before)}
    known = KnownRows(rows, tuple(before) if known_records else None)
    delta, held = diff_known("daily/2026-11-30.md", known, after)
    assert _delta_fields(delta) == _delta_fields(diff_rows("daily/2026-11-30.md", dict(rows), after))
    assert held.rows == {row.key: row for row in map(Row.of_record, after)} and held.records == tuple(after)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "eps"]), max_size=8),
    st.integers(0, 8),
    st.lists(st.sampled_from(["alpha", "beta", "zeta", "eta", "gamma"]), max_size=6),
    st.integers(0, 3),
)
def test_what_a_search_must_see_is_the_diff_less_the_memories_that_only_moved(texts, kept, ending, shift):
    """The owner's watcher puts beside the index what a save changed (`edits_to_show`), not the
    memories that only moved to another line: they are found where the index has them, and the
    commit's diff (`diff_known`) moves them."""
    before = [record(text, line) for line, text in enumerate(dict.fromkeys(texts), start=1)]
    after = before[:kept] + [
        record(text, line + shift) for line, text in enumerate(dict.fromkeys(ending), start=kept + 1)
    ]
    after = list({r.id: r for r in after}.values())
    known = KnownRows({row.key: row for row in map(Row.of_record, before)}, tuple(before))
    whole, _ = diff_known("daily/2026-11-30.md", known, after)
    shown = edits_to_show("daily/2026-11-30.md", known, after)
    old = {r.id: r for r in before}
    moved = [r for r in whole.upserts if r.id in old and old[r.id].line != r.line and old[r.id].text == r.text]
    assert sorted(map(repr, shown.upserts)) == sorted(map(repr, (r for r in whole.upserts if r not in moved)))
    assert shown.removed == whole.removed and shown.unchanged == whole.unchanged + len(moved)
    assert set(shown.deleted) == set(whole.deleted) - {Row.of_record(r).key for r in moved}
    assert edits_to_show("daily/2026-11-30.md", KnownRows(known.rows), after) is None  # rows read back: no records


def test_a_save_of_a_big_notes_last_line_makes_rows_of_the_last_records_only(monkeypatch):
    """A person saving the day's note of 20,000 memories at 15 Hz: each diff after a save made
    every record's row again (a cache of 20,000 rows that a bigger note overflowed), 0.3 s a save
    under the vault lock. Past the shared records, only the changed tail costs anything."""
    before = [record(f"fact {n}", n, id_=f"m-{n:010x}") for n in range(20_000)]
    known = KnownRows({row.key: row for row in map(Row.of_record, before)}, tuple(before))
    made = []
    real = Row._made_of.__func__
    monkeypatch.setattr(Row, "_made_of", classmethod(lambda cls, r: made.append(r) or real(cls, r)))
    monkeypatch.setattr(sync_module, "_ROWS_MADE", {})
    after = before[:-2] + [record("fact 19999", 19_999, id_=f"m-{19_999:010x}"), record("person scratch", 20_000)]
    delta, held = diff_known("daily/2026-11-30.md", known, after)
    assert (delta.added, delta.updated, len(delta.removed), delta.unchanged) == (1, 0, 1, 19_999)
    assert len(made) <= 6 and len(held.rows) == 20_000


def test_a_line_added_above_a_big_notes_memories_makes_no_row_in_the_diff(monkeypatch):
    """A line added above a day's 20,000 memories moves every one of them: the commit's diff
    compares each record with its earlier self (their line alone changed) and makes no row of
    them (a context hash each: 0.16 s a commit, and the rows filled the cache of rows made,
    which then emptied and had every row of the note made again, 0.5 s). It says which rows
    only moved (`IndexDelta.moved`); the rows it says the index holds are made when asked for."""
    monkeypatch.setattr(sync_module, "_ROWS_MADE", {})  # not one filled (and cleared) by other tests
    before = [record(f"fact {n}", n + 2, id_=f"m-{n:010x}") for n in range(20_000)]
    known = KnownRows({row.key: row for row in map(Row.of_record, before)}, tuple(before))
    made = []
    real = Row._made_of.__func__
    monkeypatch.setattr(Row, "_made_of", classmethod(lambda cls, r: made.append(r) or real(cls, r)))
    after = [record("the person's line", 2)] + [dataclasses.replace(r, line=r.line + 1) for r in before]
    delta, held = diff_known("daily/2026-11-30.md", known, after)
    assert (delta.added, delta.updated, len(delta.moved)) == (1, 20_000, 20_000) and made == []
    assert held.rows == {row.key: row for row in (real(Row, r) for r in after)}
    assert len(made) == len(after) == len(held)  # made now, when asked for


def test_a_memory_whose_heading_alone_changed_keeps_its_row():
    """Rows do not store a memory's heading: a record that differs in it alone is unchanged."""
    before = [record("alpha", 3), record("beta", 4)]
    after = [before[0], dataclasses.replace(before[1], heading="Errands")]
    known = KnownRows(None, tuple(before))
    delta, _ = diff_known("daily/2026-11-30.md", known, after)
    assert delta.is_empty and delta.unchanged == 2


def test_known_rows_need_rows_or_records():
    with pytest.raises(ValueError, match="rows, its records, or both"):
        KnownRows(None)


def test_rename_of_a_file_moves_rows_without_new_content(fixture_vault):
    with MemoryStore.open(fixture_vault) as store:
        before = {(r.id, r.text) for r in rows(store) if r.path == "daily/2026-10-14.md"}
        os.rename(fixture_vault / "daily/2026-10-14.md", fixture_vault / "daily/2026-12-14.md")
        index = store._writable_index()
        indexed = [
            read_note_records(store.layout, p, store.time_zone) for p in ("daily/2026-10-14.md", "daily/2026-12-14.md")
        ]
        delta = index.apply(indexed)
        after = {(r.id, r.text) for r in rows(store) if r.path == "daily/2026-12-14.md"}
    assert before and after == before
    assert delta.new_content() == [], "a renamed note re-embeds nothing"
    assert len(delta.removed) == len(before) and delta.added == len(before)


# --- what sync decides to do ---------------------------------------------------------------


@pytest.mark.both_backends
def test_memvaults_own_write_leaves_the_watcher_nothing_to_do(new_vault):
    with MemoryStore.open(new_vault) as store:
        receipt = store.remember("The pager rota changes on Monday.", at=datetime(2026, 11, 30, 9, tzinfo=AMS))
        path = receipt.source.split("#")[0]
        committed = index_commits(store)
        outcome = store.sync([path])
        again = store.sync()
        assert index_commits(store) == committed, "no index commit"
    assert outcome.files == () and outcome.memories == 0 and outcome.checked == 1  # racy: hashed, not trusted
    assert again.files == ()


@pytest.mark.both_backends
def test_same_size_edit_within_the_mtime_tick_is_still_seen(new_vault):
    path = new_vault / "daily/2026-11-30.md"
    path.write_text("- 09:00 The launch colour is red.\n")
    with MemoryStore.open(new_vault) as store:
        stat = path.stat()
        path.write_text("- 09:00 The launch colour is tan.\n")  # same size
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same mtime
        assert store.sync().files == ("daily/2026-11-30.md",)
        assert store.recall("tan").hits and not store.recall("red").hits


@pytest.mark.both_backends
def test_crash_between_bm25_commit_and_manifest_is_repaired_by_the_next_sync(fixture_vault):
    class Crash(Exception):
        pass

    def crash(boundary: str) -> None:
        if boundary == "apply.committed":
            raise Crash

    with MemoryStore.open(fixture_vault) as store:
        path = fixture_vault / "daily/2026-11-10.md"
        path.write_text(path.read_text() + "- 10:00 The mascot is a zeppelin.\n")
        with pytest.raises(Crash):
            store.sync(hook=crash)
        assert (
            store._readable_index().manifest.files["daily/2026-11-10.md"].sha256
            != read_note_records(store.layout, "daily/2026-11-10.md", store.time_zone).state.sha256
        ), "manifest is behind the index"
        repaired = store.sync()
        incremental = rows(store)
        store.rebuild()
        assert incremental == rows(store)
    assert repaired.files == () and repaired.checked == 1, "rows were already right: only the manifest catches up"


@pytest.mark.both_backends
@pytest.mark.parametrize("kind", ["huge", "fifo", "symlink", "folder", "utf8"])
def test_hostile_note_files_are_reported_not_indexed_and_never_crash(new_vault, tmp_path, kind):
    path = new_vault / "daily/2026-11-30.md"
    if kind == "huge":
        with open(path, "wb") as handle:
            handle.write(b"- 09:00 big file\n")
            handle.truncate(MAX_NOTE_BYTES + 1)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        (tmp_path / "outside.md").write_text("- 09:00 secret outside the vault\n")
        path.symlink_to(tmp_path / "outside.md")
    elif kind == "folder":
        path.mkdir()
    else:
        path.write_bytes(b"- 09:00 caf\xc3\xa9 ok\n- 09:01 broken \xff byte\n")
    with MemoryStore.open(new_vault) as store:
        assert store.sync().files == ()
        assert rows(store) == []
        report = check_health(store.layout, store.config)
    problems = [f for f in report.findings if f.check == "hand_edits"]
    if kind in ("folder", "fifo"):
        assert problems == []  # not a file, so not a note: skipped (and a FIFO never blocks a read)
    else:
        assert problems and problems[0].severity == "warning"
    if kind == "utf8":
        assert "invalid UTF-8 at byte 32" in problems[0].message


# --- parity with a full rebuild -----------------------------------------------------------


def _bullet(rng: random.Random, step: int) -> str:
    words = ["release", "team", "zeppelin", "quokka", "Morgan", "backup", "pager", "plants", "lunch"]
    return f"{rng.choice(words)} {rng.choice(words)} note {step}"


def random_edit(rng: random.Random, root: Path, step: int, snapshots: list[dict]) -> None:
    """One hand edit of the kinds people make, applied to the files directly."""
    daily = root / "daily"
    files = sorted(daily.glob("*.md")) if daily.is_dir() else []
    op = rng.choice(
        [
            "edit",
            "edit",
            "delete_bullet",
            "add",
            "add_id",
            "move",
            "time",
            "paste_dup",
            "conflict",
            "utf8",
            "rename",
            "delete_file",
            "new_file",
            "zone",
            "checkout",
            "folder",
        ]
    )
    if not files or op == "new_file":
        daily.mkdir(exist_ok=True)
        (daily / f"2027-01-{step % 28 + 1:02d}.md").write_text(f"# new\n\n- 09:00 {_bullet(rng, step)}\n")
        return
    path = rng.choice(files)
    lines = path.read_bytes().decode("utf-8", "replace").splitlines(keepends=True)
    bullets = [i for i, line in enumerate(lines) if line.startswith("- ")]
    if op == "edit" and bullets:
        i = rng.choice(bullets)
        lines[i] = lines[i].replace(" ", f" {_bullet(rng, step)} ", 1)
    elif op == "delete_bullet" and bullets:
        del lines[rng.choice(bullets)]
    elif op == "add":
        lines.append(f"- {_bullet(rng, step)}\n")
    elif op == "add_id":
        text = _bullet(rng, step)
        lines.insert(rng.randint(0, len(lines)), f"- 11:{step % 60:02d} {text} ^{memory_id(text)}\n")
    elif op == "move" and bullets:
        lines.insert(0, lines.pop(rng.choice(bullets)))
    elif op == "time" and bullets:
        i = rng.choice(bullets)
        lines[i] = "- 23:59 " + lines[i][2:]
    elif op == "paste_dup" and bullets:
        lines.append(lines[rng.choice(bullets)])
    elif op == "conflict" and bullets:
        i = rng.choice(bullets)
        lines[i : i + 1] = ["<<<<<<< HEAD\n", lines[i], "=======\n", f"- {_bullet(rng, step)}\n", ">>>>>>> theirs\n"]
    elif op == "utf8":
        path.write_bytes("".join(lines).encode() + b"- bad \xff\n")
        return
    elif op == "rename":
        os.rename(path, daily / f"2028-02-{step % 28 + 1:02d}.md")
        return
    elif op == "delete_file":
        path.unlink()
        return
    elif op == "zone":
        lines[:0] = ["---\n", f"timeZone: {rng.choice(['Asia/Tokyo', 'Mars/Olympus'])}\n", "---\n"]
    elif op == "checkout" and snapshots:
        restore(root, rng.choice(snapshots))  # a `git checkout` of an older vault
        return
    elif op == "folder":
        snapshot = {p.name: p.read_bytes() for p in files}
        shutil.rmtree(daily)  # the folder goes, then comes back (a sync tool, a branch switch)
        daily.mkdir()
        for name, data in list(snapshot.items())[: len(snapshot) // 2]:
            (daily / name).write_bytes(data)
        return
    path.write_bytes("".join(lines).encode("utf-8"))


def take_snapshot(root: Path) -> dict:
    return {p.name: p.read_bytes() for p in (root / "daily").glob("*.md")} if (root / "daily").is_dir() else {}


def restore(root: Path, snapshot: dict) -> None:
    daily = root / "daily"
    daily.mkdir(exist_ok=True)
    for path in daily.glob("*.md"):
        if path.name not in snapshot:
            path.unlink()
    for name, data in snapshot.items():
        (daily / name).write_bytes(data)


def assert_parity(store: MemoryStore) -> None:
    """Incremental rows == rebuild rows; same hits; compacted answers == rebuild answers exactly."""
    incremental_rows, incremental_hits = rows(store), hit_sets(store)
    store.compact()
    compacted = answers(store)
    assert rows(store) == incremental_rows
    store.rebuild()
    assert rows(store) == incremental_rows
    assert hit_sets(store) == incremental_hits
    assert answers(store) == compacted


@pytest.mark.both_backends
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_edit_sequences_converge_on_the_rebuild(fixture_vault, seed):
    rng = random.Random(seed)
    snapshots = [take_snapshot(fixture_vault)]
    with MemoryStore.open(fixture_vault) as store:
        for step in range(30):
            random_edit(rng, fixture_vault, step, snapshots)
            if rng.random() < 0.2:
                snapshots.append(take_snapshot(fixture_vault))
            if rng.random() < 0.5:  # sometimes several edits land in one sync
                store.sync()
        store.sync()
        assert_parity(store)


@pytest.mark.both_backends
def test_fixture_vault_incremental_build_equals_rebuild(fixture_vault):
    """Indexing the fixture note by note (as edits arrive) ends where one rebuild does."""
    staged = fixture_vault.parent / "staged"
    shutil.copytree(fixture_vault, staged)
    shutil.rmtree(fixture_vault / "daily")
    (fixture_vault / "daily").mkdir()
    with MemoryStore.open(fixture_vault) as store:
        for note in sorted((staged / "daily").glob("*.md")):
            shutil.copy2(note, fixture_vault / "daily" / note.name)
            store.sync(["daily/" + note.name])
        assert_parity(store)


@pytest.mark.both_backends
def test_git_checkout_of_an_older_vault_converges(fixture_vault):
    def git(*args):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@e", *args],
            cwd=fixture_vault,
            check=True,
            capture_output=True,
        )

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "old")
    with MemoryStore.open(fixture_vault) as store:
        rng = random.Random(7)
        for step in range(15):
            random_edit(rng, fixture_vault, step, [])
        git("add", "-A")
        git("commit", "-qm", "new")
        store.sync()
        git("checkout", "-q", "HEAD~1", "--", ".")
        git("clean", "-qfd", "daily")
        assert store.sync().files
        assert_parity(store)


@pytest.mark.both_backends
def test_sync_beside_a_concurrent_writer_stays_exact(new_vault):
    """Remember in one thread while another keeps syncing hand edits: nothing is lost or doubled."""
    errors = []

    def writer():
        try:
            with MemoryStore.open(new_vault) as store:
                for i in range(25):
                    store.remember(f"writer fact {i}", at=datetime(2026, 11, 30, 9, tzinfo=AMS) + timedelta(minutes=i))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    with MemoryStore.open(new_vault) as store:
        hand = new_vault / "daily/2026-11-29.md"
        for i in range(25):
            hand.write_text(hand.read_text() + f"- hand fact {i}\n" if hand.exists() else f"- hand fact {i}\n")
            store.sync()
        thread.join()
        store.sync()
        assert not errors
        assert len(rows(store)) == 50
        assert store.health_report(strict=True)["healthy"]
        assert_parity(store)


@pytest.mark.both_backends
def test_stat_fast_path_reads_nothing_when_nothing_changed(fixture_vault):
    with MemoryStore.open(fixture_vault) as store:
        store.sync()
        for path in VaultLayout(fixture_vault).note_relpaths():  # age every file past the racy window
            os.utime(fixture_vault / path, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
        store.sync()
        assert store.sync().checked == 0


def _add_a_line_above_the_days_memories(store: MemoryStore, root: Path, memories: int,
                                       heading: str = "") -> tuple[str, int]:  # fmt: skip
    """In an owner (commits put off): `memories` remembered and committed, then a person's line
    added above them (after a `heading` line, if given). The note's path, and the line (0-based)
    the first memory was on."""
    store.defers_index_commits = True
    for n in range(memories):
        store.remember(f"harbour log entry {n} kept by the quartermaster")
    store.flush_deferred()
    [note] = (root / "daily").glob("*.md")
    lines = note.read_text().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line.startswith("- "))
    added = [f"{heading}\n"] if heading else []
    note.write_text("".join(lines[:first] + added + ["- 06:00 the zeppelin quokka arrived early\n"] + lines[first:]))
    return f"daily/{note.name}", first


def test_a_line_added_above_the_days_memories_shows_at_once_and_the_commit_moves_the_rest(new_vault):
    """A person adds a line at the top of the day's note in an owner: the watcher puts beside the
    index the new line and the memories whose neighbours changed, not every memory that moved one
    line down (they are found where the index has them); the commit then holds exactly what a
    rebuild would, line numbers included."""
    with MemoryStore.open(new_vault, engine=False) as store:
        relpath, first = _add_a_line_above_the_days_memories(store, new_vault, 40)
        store.sync([relpath], defer=True)
        pending = [row.record.text for row in store._deferred.rows.values()]
        assert "the zeppelin quokka arrived early" in pending and len(pending) <= 1 + 2  # and its new neighbours
        assert store.recall("zeppelin quokka").hits[0].text == "the zeppelin quokka arrived early"
        found = store.recall("harbour log entry 31").hits[0]
        assert found.text == "harbour log entry 31 kept by the quartermaster"
        store.flush_deferred()
        committed = rows(store)
    assert rows_of_a_rebuild(new_vault) == committed
    assert {row.line for row in committed if row.text.startswith("harbour log entry 0 ")} == {first + 2}


def test_a_commit_keeps_the_rows_of_its_biggest_notes_known(new_vault):
    """A commit keeps the rows it wrote for the next diff of their notes, for a few notes at most:
    a day's note of hundreds of memories committed beside a batch of small notes (the intake's
    one-turn notes) is one of them (reading its rows back from the index cost every commit)."""
    for day in range(1, 12):
        (new_vault / "daily" / f"2026-11-{day:02d}.md").write_text(
            f"# 2026-11-{day:02d}\n\n- a small note's fact {day}\n"
        )
    lines = "".join(f"- 10:00 fact {n} of a busy day\n" for n in range(500))
    (new_vault / "daily" / "2026-11-30.md").write_text("# 2026-11-30\n\n" + lines)
    with MemoryStore.open(new_vault, engine=False) as store:
        store.sync()
        _, known = store._index._known
        assert "daily/2026-11-30.md" in known and len(known) == 8


def test_a_persons_save_after_an_append_is_parsed_from_the_note_the_append_left(new_vault, monkeypatch):
    """An append parses the note as it left it (from the parse it was planned with), so a
    person's save of that note next, a line added above its memories, parses that line only:
    the version before the append lacks its line at the end, and nothing below the new line
    could be taken up from it."""
    import memvault.vault.note as note_module

    monkeypatch.setattr(note_module, "_cache", note_module._ParseCache(8))
    with MemoryStore.open(new_vault, engine=False) as store:
        store.defers_index_commits = True  # no commit reads the note after the appends
        for n in range(300):
            store.remember(f"harbour log entry {n} kept by the quartermaster")
        [note] = (new_vault / "daily").glob("*.md")
        lines = note.read_text().splitlines(keepends=True)
        first = next(i for i, line in enumerate(lines) if line.startswith("- "))
        made, real_make = [], note_blocks._make_bullet
        monkeypatch.setattr(note_blocks, "_make_bullet", lambda *a, **k: made.append(a[1]) or real_make(*a, **k))
        saved = note_module.parse("".join(lines[:first] + ["- 06:00 the person's line\n"] + lines[first:]))
        assert len(made) == 1 and len(saved.bullets) == 301


#: rows that only moved wait (longer than any test), or their wait is over
WAITING, OVER = MovesWait(quiet=600.0, most=600.0), MovesWait(quiet=0.0, most=0.0)


def test_rows_that_only_moved_wait_for_a_pause_in_the_saves_and_a_minute_at_most():
    """The committer writes a note's moved rows once no save moved more of them for `quiet`
    seconds, or `most` seconds after the first were left: a person who keeps saving has them
    rewritten once a minute, one who paused, five seconds after."""
    wait = MovesWait(quiet=5.0, most=60.0)
    assert not wait.over(since=0.0, last=50.0, now=54.9) and wait.over(since=0.0, last=50.0, now=55.0)
    assert not wait.over(since=0.0, last=58.0, now=59.9) and wait.over(since=0.0, last=58.0, now=60.0)
    assert wait.due_in(since=0.0, last=50.0, now=52.0) == 3.0 and wait.due_in(since=0.0, last=58.0, now=59.0) == 1.0
    assert wait.due_in(since=0.0, last=50.0, now=70.0) == 0.0


def _physical_lines(store: MemoryStore, relpath: str) -> dict[str, tuple[str, int]]:
    """Each row's (text, line) as the index's own documents hold them (not the rows it knows)."""
    return {hit.key: (hit.text, hit.line) for hit in store._readable_index().bm25.hits_for_path(relpath)}


def test_memories_that_only_moved_wait_for_a_later_commit_and_reads_take_their_lines_from_the_note(new_vault):
    """A person adds a line above 300 memories in an owner: the commit on the owner's timer writes
    the new line and leaves the 300 rows that only moved as they are (rewritten once they have
    waited (`MOVES_WAIT`), not by every commit while the person keeps saving). Meanwhile the
    note counts as changed since its commit, so a journal reads its lines from the file; once the
    wait is over the next commit writes them, and the index equals a rebuild."""

    with MemoryStore.open(new_vault, engine=False) as store:
        relpath, first = _add_a_line_above_the_days_memories(store, new_vault, 300)
        before = _physical_lines(store, relpath)
        store.sync([relpath], defer=True)
        store.flush_deferred(moves_wait=WAITING)
        held = _physical_lines(store, relpath)
        assert ("the zeppelin quokka arrived early", first + 1) in held.values()  # written, at its line
        rewritten = [key for key, row in before.items() if held[key] != row]
        assert len(rewritten) == 2  # the new line's neighbours (their context changed); the 298 others as they were
        assert relpath in store._index.moves_owed() and not store._deferred.pending
        assert store._index.manifest.files[relpath] != read_note_records(store.layout, relpath, store.time_zone).state
        note = read_note_records(store.layout, relpath, store.time_zone).records
        assert {row.id: row.line for row in store.journal_scan([relpath]).rows} == {r.id: r.line for r in note}
        store.flush_deferred(moves_wait=WAITING)  # another commit before the wait is over
        assert _physical_lines(store, relpath) == held
        store.flush_deferred(moves_wait=OVER)  # the wait is over
        assert not store._index.moves_owed()
        assert store._index.manifest.files[relpath] == read_note_records(store.layout, relpath, store.time_zone).state
        committed = rows(store)
    assert rows_of_a_rebuild(new_vault) == committed
    assert {row.line for row in committed if row.text.startswith("harbour log entry 0 ")} == {first + 2}


def test_rows_moved_by_several_saves_are_all_written_once_the_wait_is_over(new_vault):
    """A person's first save adds a line in the middle (the 300 memories below it move), the next
    a line at the top (all of them move): once the wait is over, every row is where the note has
    it, also those the first save left in place."""

    with MemoryStore.open(new_vault, engine=False) as store:
        store.defers_index_commits = True
        for n in range(600):
            store.remember(f"harbour log entry {n} kept by the quartermaster")
        store.flush_deferred()
        [note] = (new_vault / "daily").glob("*.md")
        relpath = f"daily/{note.name}"
        lines = note.read_text().splitlines(keepends=True)
        middle = next(i for i, line in enumerate(lines) if "harbour log entry 300 " in line)
        note.write_text("".join(lines[:middle] + ["- 06:00 a line in the middle\n"] + lines[middle:]))
        store.sync([relpath], defer=True)
        store.flush_deferred(moves_wait=WAITING)
        lines = note.read_text().splitlines(keepends=True)
        first = next(i for i, line in enumerate(lines) if line.startswith("- "))
        since, last, _ = store._index._moves_owed[relpath]
        note.write_text("".join(lines[:first] + ["- 06:00 a line at the top\n"] + lines[first:]))
        store.sync([relpath], defer=True)
        store.flush_deferred(moves_wait=WAITING)
        assert store._index._moves_owed[relpath][:2] > (since, last) and store._index._moves_owed[relpath][0] == since
        store.flush_deferred(moves_wait=OVER)
        committed = rows(store)
    assert rows_of_a_rebuild(new_vault) == committed


def test_the_committer_keeps_its_pause_after_a_failed_commit_for_rows_that_waited_to_move(new_vault, monkeypatch):
    """Rows whose wait is over make a commit due, but not before the pause that follows a failed
    commit (a full disk): the committer would otherwise try again and again at once."""
    from memvault.indexer.engine import group_commit

    with MemoryStore.open(new_vault, engine=False) as store:
        relpath, _ = _add_a_line_above_the_days_memories(store, new_vault, 300)
        store.sync([relpath], defer=True)
        store.flush_deferred(moves_wait=WAITING)
        monkeypatch.setattr(group_commit, "MOVES_WAIT", OVER)
        committer = group_commit.GroupCommit.__new__(group_commit.GroupCommit)  # its timing alone, no threads
        committer._store, committer._retry_at = store, time.monotonic() + 60.0
        assert not store._deferred.pending and committer._until_due() > 30.0
        committer._retry_at = 0.0
        assert committer._until_due() == 0.0


@pytest.mark.parametrize("finish", ["health", "close"])
def test_rows_that_wait_to_move_are_written_by_health_and_by_close(new_vault, finish):
    """Health compares the files with the index, and a closing owner leaves an index that needs
    no sync: both write the rows that wait to move first."""
    from memvault.indexer.maintenance.derived import DerivedIndex

    with MemoryStore.open(new_vault, engine=False) as store:
        relpath, _ = _add_a_line_above_the_days_memories(store, new_vault, 300)
        store.sync([relpath], defer=True)
        store.flush_deferred(moves_wait=WAITING)
        assert relpath in store._index.moves_owed()
        if finish == "health":
            report = store.health_report(strict=True)
            assert report["healthy"] and not store._index.moves_owed(), report
    closed = DerivedIndex.open_current(VaultLayout(new_vault))  # as the close left it: no sync
    assert (
        closed.manifest.files[relpath] == read_note_records(VaultLayout(new_vault), relpath, "Europe/Amsterdam").state
    )
    committed = closed.all_rows()
    assert rows_of_a_rebuild(new_vault) == committed


def test_the_owners_committer_writes_rows_that_waited_to_move_with_nothing_else_to_commit(new_vault, monkeypatch):
    """The owner's committer commits when the wait of a note's moved rows is over, though nothing
    else waits for a commit: a person's last save above the day's memories is written whole."""
    from memvault.indexer.engine import group_commit
    from memvault.indexer.engine.owner import Owner
    from memvault.indexer.maintenance.derived import DerivedIndex

    monkeypatch.setattr(group_commit, "MOVES_WAIT", MovesWait(quiet=0.5, most=60.0))
    owed_after_each: list[dict] = []
    real_apply = DerivedIndex.apply

    def watched(index, *args, **kwargs):
        delta = real_apply(index, *args, **kwargs)
        owed_after_each.append(index.moves_owed())
        return delta

    monkeypatch.setattr(DerivedIndex, "apply", watched)
    store = MemoryStore.open(new_vault, engine=False)
    owner = Owner(store, role="python", intake=False).start()
    try:
        relpath, _ = _add_a_line_above_the_days_memories(store, new_vault, 300)
        store.sync([relpath], defer=True)
        deadline = time.monotonic() + 60
        while (not owed_after_each or owed_after_each[-1] or store._deferred.pending) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(relpath in owed for owed in owed_after_each)  # put off by the timer's first commit
        assert not store._index.moves_owed()  # and written by a later one
        assert _physical_lines(store, relpath) == {row.key: (row.text, row.line) for row in rows(store)
                                                   if row.path == relpath}  # fmt: skip
    finally:
        owner.stop()
        store.close()
    committed = DerivedIndex.open_current(VaultLayout(new_vault)).all_rows()
    assert rows_of_a_rebuild(new_vault) == committed


def test_a_save_that_moves_every_memory_is_parsed_before_the_vault_lock(new_vault, monkeypatch):
    """A heading added at the top of a day's note makes every memory below it parse again (0.9 s
    at 20,000 lines: each memory's heading changed): the owner's watcher reads and parses the note
    before it takes the vault lock, and under the lock finds that parse and its records kept, so
    writers wait for none of it."""
    import memvault.indexer.engine.store as store_module
    import memvault.vault.note as note_module

    monkeypatch.setattr(note_module, "_cache", note_module._ParseCache(8, smallest=0))  # keep small notes' parses too
    with MemoryStore.open(new_vault, engine=False) as store:
        relpath, _ = _add_a_line_above_the_days_memories(store, new_vault, 30, heading="## Morning")
        held, made, real_make, real_lock = [], [], note_blocks._make_bullet, store_module.VaultLock

        class Watched(real_lock):
            def __enter__(self):
                held.append(True)
                return super().__enter__()

            def __exit__(self, *exc):
                held.pop()
                return super().__exit__(*exc)

        monkeypatch.setattr(store_module, "VaultLock", Watched)
        monkeypatch.setattr(note_blocks, "_make_bullet", lambda *a, **k: made.append(bool(held)) or real_make(*a, **k))
        store.sync([relpath], defer=True)
        assert made.count(False) >= 31 and made.count(True) == 0  # every memory parsed again, before the lock
        assert store.recall("zeppelin quokka").hits[0].text == "the zeppelin quokka arrived early"

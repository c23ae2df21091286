"""Incremental sync: per-file and per-bullet hashes, and parity with a full rebuild."""

import dataclasses
import os
import random
import shutil
import subprocess
import threading
from datetime import date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memvault.indexer.maintenance.sync as sync_module
import memvault.vault.note_blocks as note_blocks
from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.maintenance.derived import MAX_NOTE_BYTES, read_note_records
from memvault.indexer.maintenance.health import check_health
from memvault.indexer.maintenance.sync import KnownRows, Row, diff_known, diff_rows
from memvault.vault.ids import memory_id
from memvault.vault.layout import VaultLayout
from memvault.vault.note_lines import line_in
from memvault.vault.records import CONTEXT_NEIGHBOURS, MemoryRecord, with_context
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
    return store.serving_index().all_rows()


def rows_of_a_rebuild(root: Path) -> list[Row]:
    """The rows an index rebuilt from the vault's files holds (what commits must come to)."""
    with MemoryStore.open(root, engine=False) as store:
        store.rebuild()
        return rows(store)


def record(text: str, path: str = "daily/2026-11-30.md", id_: str | None = None) -> MemoryRecord:
    from memvault.vault.ids import content_hash

    return MemoryRecord(
        id_ or memory_id(text),
        path,
        "curated",
        date(2026, 11, 30),
        datetime(2026, 11, 30, 9),
        text,
        content_hash(text),
        None,
        True,
    )


# --- the per-bullet diff ---------------------------------------------------------------------


def test_diff_rewrites_only_changed_rows_and_embeds_only_new_text():
    old_records = [record("alpha"), record("beta"), record("gamma")]
    old = {Row.of_record(r).key: Row.of_record(r) for r in old_records}
    assert diff_rows("p", old, old_records).is_empty

    edited = [record("alpha"), record("beta", id_=memory_id("beta")), record("gamma")]
    edited[1] = record("beta two", id_=memory_id("beta"))  # same explicit id, new text
    delta = diff_rows("p", old, edited)
    assert (delta.added, delta.updated, len(delta.removed), delta.unchanged) == (0, 1, 0, 2)
    assert [r.text for r in delta.new_content()] == ["beta two"]

    moved = [record("gamma"), record("alpha"), record("beta")]  # in another order: rows hold no line
    assert diff_rows("p", old, moved).is_empty

    delta = diff_rows("p", old, [record("alpha")])
    assert delta.removed == {Row.of_record(r).key for r in old_records[1:]} and delta.upserts == []


def _delta_fields(delta) -> tuple:
    return delta.deleted, sorted(map(repr, delta.upserts)), delta.removed, delta.unchanged, delta.files


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
    before = [record(text) for line, text in enumerate(dict.fromkeys(texts), start=1)]
    after = before[:kept] + [record(text) for text, line in dict.fromkeys(ending)]
    after = list({r.id: r for r in after}.values())  # ids are unique within a note
    rows = {row.key: row for row in map(Row.of_record, before)}
    known = KnownRows(rows, tuple(before) if known_records else None)
    delta, held = diff_known("daily/2026-11-30.md", known, after)
    assert _delta_fields(delta) == _delta_fields(diff_rows("daily/2026-11-30.md", dict(rows), after))
    assert held.rows == {row.key: row for row in map(Row.of_record, after)} and held.records == tuple(after)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "eps"]), max_size=8), st.integers(1, 3))
def test_lines_added_above_a_notes_memories_change_only_the_rows_whose_neighbours_changed(texts, added):
    """Rows hold no line: lines added above a note's memories (each record read again, as a
    person's save makes them) rewrite the new ones and the memories whose neighbours changed."""
    before = with_context([record(text) for text in dict.fromkeys(texts)])
    after = with_context([record(f"the person's line {n}") for n in range(added)] + before)
    known = KnownRows({row.key: row for row in map(Row.of_record, before)}, tuple(before))
    delta, _ = diff_known("daily/2026-11-30.md", known, after)
    near_the_top = {r.id for r in before[:CONTEXT_NEIGHBOURS]}
    assert delta.added == added and not delta.removed
    assert {r.id for r in delta.upserts if r.id in {r.id for r in before}} <= near_the_top
    assert delta.unchanged == len(before) - delta.updated


def test_a_save_of_a_big_notes_last_line_makes_rows_of_the_last_records_only(monkeypatch):
    """A person saving the day's note of 20,000 memories at 15 Hz: each diff after a save made
    every record's row again (a cache of 20,000 rows that a bigger note overflowed), 0.3 s a save
    under the vault lock. Past the shared records, only the changed tail costs anything."""
    before = [record(f"fact {n}", id_=f"m-{n:010x}") for n in range(20_000)]
    known = KnownRows({row.key: row for row in map(Row.of_record, before)}, tuple(before))
    made = []
    real = Row._made_of.__func__
    monkeypatch.setattr(Row, "_made_of", classmethod(lambda cls, r: made.append(r) or real(cls, r)))
    monkeypatch.setattr(sync_module, "_ROWS_MADE", {})
    after = before[:-2] + [record("fact 19999", id_=f"m-{19_999:010x}"), record("person scratch")]
    delta, held = diff_known("daily/2026-11-30.md", known, after)
    assert (delta.added, delta.updated, len(delta.removed), delta.unchanged) == (1, 0, 1, 19_999)
    assert len(made) <= 6 and len(held.rows) == 20_000


def test_a_line_added_above_a_big_notes_memories_makes_no_row_in_the_diff(monkeypatch):
    """A line added above a day's 20,000 memories: their records hold no line, so the commit's
    diff finds them unchanged and writes the new line alone (no row is made to see it); the rows
    it says the index holds are made when asked for."""
    monkeypatch.setattr(sync_module, "_ROWS_MADE", {})  # not one filled (and cleared) by other tests
    before = [record(f"fact {n}", id_=f"m-{n:010x}") for n in range(20_000)]
    known = KnownRows({row.key: row for row in map(Row.of_record, before)}, tuple(before))
    made = []
    real = Row._made_of.__func__
    monkeypatch.setattr(Row, "_made_of", classmethod(lambda cls, r: made.append(r) or real(cls, r)))
    after = [record("the person's line")] + [dataclasses.replace(r) for r in before]  # read again: equal copies
    delta, held = diff_known("daily/2026-11-30.md", known, after)
    assert (delta.added, delta.updated, delta.unchanged) == (1, 0, 20_000) and made == []
    assert held.rows == {row.key: row for row in (real(Row, r) for r in after)}
    assert len(made) == len(after) == len(held)  # made now, when asked for


def test_a_memory_whose_heading_alone_changed_keeps_its_row():
    """Rows do not store a memory's heading: a record that differs in it alone is unchanged."""
    before = [record("alpha"), record("beta")]
    after = [before[0], dataclasses.replace(before[1], heading="Errands")]
    known = KnownRows(None, tuple(before))
    delta, _ = diff_known("daily/2026-11-30.md", known, after)
    assert delta.is_empty and delta.unchanged == 2


def test_known_rows_need_rows_or_records():
    with pytest.raises(ValueError, match="rows, its records, or both"):
        KnownRows(None)


@pytest.mark.both_backends
def test_rename_of_a_file_moves_rows_without_new_content(fixture_vault):
    with MemoryStore.open(fixture_vault) as store:
        before = {(r.id, r.text) for r in rows(store) if r.path == "daily/2026-10-14.md"}
        os.rename(fixture_vault / "daily/2026-10-14.md", fixture_vault / "daily/2026-12-14.md")
        index = store.writable_index()
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
            store.serving_index().manifest.files["daily/2026-11-10.md"].sha256
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
    if not _replace_file(rng, root, path, files, lines, op, step, snapshots):
        _edit_lines(rng, lines, bullets, op, step)
        path.write_bytes("".join(lines).encode("utf-8"))


def _edit_lines(rng: random.Random, lines: list[str], bullets: list[int], op: str, step: int) -> None:
    """The edits inside a note's lines (`lines` changed in place; an edit that needs a bullet
    where there is none leaves them as they are)."""
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
    elif op == "zone":
        lines[:0] = ["---\n", f"timeZone: {rng.choice(['Asia/Tokyo', 'Mars/Olympus'])}\n", "---\n"]


def _replace_file(
    rng: random.Random,
    root: Path,
    path: Path,
    files: list[Path],
    lines: list[str],
    op: str,
    step: int,
    snapshots: list[dict],
) -> bool:
    """The edits of whole files (bad bytes, a rename, a deletion, a checkout, the folder gone and
    back); False for an edit of lines, or a checkout with no snapshot to go back to."""
    daily = root / "daily"
    if op == "utf8":
        path.write_bytes("".join(lines).encode() + b"- bad \xff\n")
    elif op == "rename":
        os.rename(path, daily / f"2028-02-{step % 28 + 1:02d}.md")
    elif op == "delete_file":
        path.unlink()
    elif op == "checkout" and snapshots:
        restore(root, rng.choice(snapshots))  # a `git checkout` of an older vault
    elif op == "folder":
        snapshot = {p.name: p.read_bytes() for p in files}
        shutil.rmtree(daily)  # the folder goes, then comes back (a sync tool, a branch switch)
        daily.mkdir()
        for name, data in list(snapshot.items())[: len(snapshot) // 2]:
            (daily / name).write_bytes(data)
    else:
        return False
    return True


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


@pytest.mark.both_backends
def test_a_line_added_above_the_days_memories_shows_at_once_and_the_commit_writes_only_what_changed(new_vault):
    """A person adds a line at the top of the day's note in an owner: the watcher puts beside the
    index the new line and the memories whose neighbours changed, and the commit writes those
    alone (rows hold no line: the memories below are unchanged). The index then holds exactly
    what a rebuild would, and a memory's line is found in the note as it is now."""
    with MemoryStore.open(new_vault, engine=False) as store:
        relpath, first = _add_a_line_above_the_days_memories(store, new_vault, 300)
        store.sync([relpath], defer=True)
        pending = [row.record.text for row in store._deferred.rows.values()]
        assert "the zeppelin quokka arrived early" in pending and len(pending) <= 1 + 2  # and its new neighbours
        assert store.recall("zeppelin quokka").hits[0].text == "the zeppelin quokka arrived early"
        found = store.recall("harbour log entry 31").hits[0]
        assert found.text == "harbour log entry 31 kept by the quartermaster"
        before = {hit.key: hit for hit in store.serving_index().bm25.hits_for_path(relpath)}
        store.flush_deferred()
        after = {hit.key: hit for hit in store.serving_index().bm25.hits_for_path(relpath)}
        assert len([key for key in before if after[key] != before[key]]) <= 2  # the new line's neighbours
        committed = rows(store)
        entry = next(row for row in committed if row.text.startswith("harbour log entry 0 "))
    assert rows_of_a_rebuild(new_vault) == committed
    assert line_in((new_vault / relpath).read_text(), entry.id) == first + 2


# local only: the local index's cache of the rows it committed (the server's reads them back per note)
@pytest.mark.one_engine("the local index's cache of the rows it committed")
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
        _, known = store._engine.current._known
        assert "daily/2026-11-30.md" in known and len(known) == 8


@pytest.mark.both_backends
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


@pytest.mark.both_backends
def test_saves_that_add_lines_in_the_middle_and_at_the_top_leave_the_index_a_rebuild(new_vault):
    """A person's first save adds a line in the middle (the 300 memories below it move), the next
    a line at the top (all of them move): each commit leaves the index equal to a rebuild, and
    `health --strict` finds the files and the index in step."""

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
        store.flush_deferred()
        assert rows_of_a_rebuild(new_vault) == rows(store)
        lines = note.read_text().splitlines(keepends=True)
        first = next(i for i, line in enumerate(lines) if line.startswith("- "))
        note.write_text("".join(lines[:first] + ["- 06:00 a line at the top\n"] + lines[first:]))
        store.sync([relpath], defer=True)
        store.flush_deferred()
        report = store.health_report(strict=True)
        assert report["healthy"], report
        committed = rows(store)
    assert rows_of_a_rebuild(new_vault) == committed


@pytest.mark.both_backends
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

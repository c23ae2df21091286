"""Issue 14: one test per numbered finding, each reproducing the reported case first.

Finding 1's full proof is the real-process torture test (tests/test_editor_torture.py); here
it is the reported `sed -i` loop itself, against Remember.
"""

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner

from memvault import MemoryStore
from memvault.cli.main import cli
from memvault.indexer.maintenance.health import check_health
from memvault.vault.note_append import NoteNotWritable

AMS = ZoneInfo("Europe/Amsterdam")
AT = datetime(2026, 11, 30, 9, 0, tzinfo=AMS)
NOTE = "daily/2026-11-30.md"


def write(root: Path, relpath: str, text: str, newline: str = "\n") -> Path:
    path = root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.replace("\n", newline).encode("utf-8"))
    return path


def texts(store: MemoryStore, query: str) -> list[str]:
    return [hit.text for hit in store.recall(query, limit=50).hits]


# Every test runs on both engines: each remembers, recalls, syncs, checks health or consolidates on a
# store of the test's engine (refusals of a note, the written bytes and health's check of the files
# under daily/ included, though they are decided before the index).

# --- 1. concurrent edits ------------------------------------------------------------------------


@pytest.mark.both_backends
@pytest.mark.slow
def test_1_sed_in_place_loop_during_remembers_loses_nothing_and_never_conflicts(new_vault):
    note = write(new_vault, NOTE, "# 2026-11-30\n\n")
    # the reported case: `sed -i` (write a temp file, rename it over) every 50 ms
    script = 'i=0; while [ -f "$1.run" ]; do i=$((i+1)); sed -i "\\$a - person edit $i" "$1"; echo $i; sleep 0.05; done'
    (new_vault / (NOTE + ".run")).touch()
    person = subprocess.Popen(["bash", "-c", script, "person", str(note)], stdout=subprocess.PIPE, text=True)
    receipts = []
    try:
        with MemoryStore.open(new_vault) as store:
            for number in range(40):
                receipts.append(store.remember(f"fact number {number} from the agent", at=AT))
    finally:
        (new_vault / (NOTE + ".run")).unlink()
        saves = person.communicate(timeout=60)[0].split()
    with MemoryStore.open(new_vault) as store:  # the sync on open repairs a line a last save dropped
        text = note.read_text()
        assert all(r.status == "added" for r in receipts)  # no Conflict reached the caller
        assert [r.id for r in receipts if text.count(f"^{r.id}") != 1] == []
        assert [n for n in saves if f"- person edit {n}\n" not in text] == []
        assert len(saves) > 0 and texts(store, "fact number 39 from the agent")[0] == "fact number 39 from the agent"


# --- 2. a receipt is a promise ------------------------------------------------------------------


@pytest.mark.both_backends
@pytest.mark.parametrize(
    "body, problem",
    [
        ("- 08:00 before ^m-aaaaaaaaaa\n\n```python\nprint('open fence')\n", "unclosed code fence"),
        ("- 08:00 before\n<<<<<<< HEAD\n- mine\n=======\n- theirs\n", "unterminated merge-conflict hunk"),
        ("- 08:00 before\n%% a comment a person left open\n", "unclosed Obsidian comment"),
    ],
)
def test_2_note_ending_in_an_open_region_is_refused_naming_note_problem_and_fix(new_vault, body, problem):
    note = write(new_vault, NOTE, "# 2026-11-30\n\n" + body)
    before = note.read_bytes()
    with MemoryStore.open(new_vault) as store:
        for _attempt in range(2):  # the reported case: each further remember appended another copy
            with pytest.raises(NoteNotWritable) as caught:
                store.remember("Morgan chose blue.", at=AT)
            assert NOTE in str(caught.value) and problem in str(caught.value) and "Fix:" in str(caught.value)
        assert note.read_bytes() == before and texts(store, "Morgan chose blue") == []
        note.write_bytes(before + b"```\n" if "fence" in problem else before + b">>>>>>> x\n" if "hunk" in problem
                         else before + b"%%\n")  # fmt: skip
        store.sync()
        assert store.remember("Morgan chose blue.", at=AT).status == "added"
        assert texts(store, "Morgan chose blue").count("Morgan chose blue.") == 1


@pytest.mark.both_backends
def test_2_oversized_note_is_refused_without_writing(new_vault):
    note = write(new_vault, NOTE, "# 2026-11-30\n\n")
    with open(note, "ab") as handle:
        handle.truncate(16 * 1024 * 1024 + 1)
    with MemoryStore.open(new_vault) as store:
        with pytest.raises(NoteNotWritable, match=r"daily/2026-11-30\.md is 16777217 bytes.*Fix: split the note"):
            store.remember("Too big to find.", at=AT)
    assert note.stat().st_size == 16 * 1024 * 1024 + 1


@pytest.mark.both_backends
def test_2_remembering_text_inside_a_resolved_looking_hunk_never_writes_a_second_id(new_vault):
    with MemoryStore.open(new_vault) as store:
        first = store.remember("The release is on Friday.", at=AT)
    note = new_vault / NOTE
    line = note.read_text().splitlines()[-1]
    # a merge left the hunk in the file (terminated, unresolved) with the bullet on both sides
    note.write_text(f"# 2026-11-30\n\n<<<<<<< HEAD\n{line}\n=======\n{line}\n>>>>>>> other\n")
    with MemoryStore.open(new_vault) as store:
        # issue 44: both sides of a hunk are memories: the fact is found there, nothing is written
        again = store.remember("The release is on Friday.", at=AT)
    assert again.id == first.id and again.status == "duplicate"
    assert note.read_text().count(f"^{first.id}") == 2  # the person's two copies, and no third


@pytest.mark.both_backends
def test_2_remembering_text_whose_id_sits_in_a_code_fence_never_writes_a_second_id(new_vault):
    with MemoryStore.open(new_vault) as store:
        first = store.remember("The release is on Friday.", at=AT)
    note = new_vault / NOTE
    line = note.read_text().splitlines()[-1]
    note.write_text(f"# 2026-11-30\n\n```\n{line}\n```\n")
    with MemoryStore.open(new_vault) as store:
        with pytest.raises(NoteNotWritable, match="duplicate the id"):
            store.remember("The release is on Friday.", at=AT)
    assert note.read_text().count(f"^{first.id}") == 1


@pytest.mark.both_backends
def test_2_after_a_person_edits_a_remembered_line_the_original_is_written_again_and_found(new_vault):
    with MemoryStore.open(new_vault) as store:
        first = store.remember("The office closes at six.", at=AT)
        note = new_vault / NOTE
        note.write_text(note.read_text().replace("closes at six", "closes at seven"))
        store.sync()
        again = store.remember("The office closes at six.", at=AT)
        assert again.status == "added" and again.id != first.id  # the reported case answered "completed"
        assert texts(store, "office closes at six")[:2] == ["The office closes at six.", "The office closes at seven."]
        assert note.read_text().count(f"^{first.id}") == 1


@pytest.mark.both_backends
def test_2_duplicate_means_findable_now(new_vault):
    with MemoryStore.open(new_vault) as store:
        store.remember("Parking is on level two.", at=AT)
        note = new_vault / NOTE
        note.write_text("# 2026-11-30\n\n")  # a person deletes it; no watcher runs
        receipt = store.remember("Parking is on level two.", at=AT)
        assert receipt.status == "added"
        assert texts(store, "Parking level two") == ["Parking is on level two."]


# --- 3. instants from the files ------------------------------------------------------------------


@pytest.mark.both_backends
def test_3_frontmatter_zone_decides_the_written_wall_time(new_vault):
    write(new_vault, NOTE, "---\ntimeZone: America/New_York\n---\n# 2026-11-30\n\n")
    at = datetime(2026, 11, 30, 17, 0, tzinfo=UTC)  # 18:00 in Amsterdam, 12:00 in New York
    with MemoryStore.open(new_vault) as store:
        store.remember("Lunch with the New York team.", at=at)
        [hit] = store.recall("Lunch with the New York team").hits[:1]
        assert hit.at == at  # the reported case stored an instant 6 h off
    assert "- 12:00 Lunch with the New York team." in (new_vault / NOTE).read_text()


@pytest.mark.both_backends
def test_3_frontmatter_zone_on_another_date_writes_an_exact_offset(new_vault):
    write(new_vault, NOTE, "---\ntimeZone: America/New_York\n---\n")
    at = datetime(2026, 11, 30, 2, 30, tzinfo=UTC)  # 03:30 on the 30th in Amsterdam, the 29th in New York
    with MemoryStore.open(new_vault) as store:
        store.remember("Late call with New York.", at=at)
        assert store.recall("Late call with New York").hits[0].at == at
    assert "- 03:30+01:00 Late call with New York." in (new_vault / NOTE).read_text()


@pytest.mark.both_backends
def test_3_bom_before_frontmatter_still_reads_the_zone(new_vault):
    write(new_vault, NOTE, "\ufeff---\ntimeZone: America/New_York\n---\n- 12:00 Standup with New York.\n")
    with MemoryStore.open(new_vault) as store:
        [hit] = store.recall("Standup with New York").hits[:1]
        assert hit.at == datetime(2026, 11, 30, 17, 0, tzinfo=UTC)
        assert (new_vault / NOTE).read_bytes().startswith(b"\xef\xbb\xbf---")


@pytest.mark.both_backends
def test_3_crlf_note_gets_a_crlf_line(new_vault):
    note = write(new_vault, NOTE, "# 2026-11-30\n\n- 08:00 A person's line.\n", newline="\r\n")
    with MemoryStore.open(new_vault) as store:
        store.remember("Windows line endings are kept.", at=AT)
    data = note.read_bytes()
    assert data.count(b"\n") == data.count(b"\r\n") == 4
    assert data.endswith(b"Windows line endings are kept. ^m-" + data.split(b"^m-")[-1])


# --- 4. index what a person sees -----------------------------------------------------------------


@pytest.mark.both_backends
def test_4_comments_are_hidden_and_prose_callouts_and_continuations_are_memories(new_vault):
    body = (
        "# 2026-11-30\n\nWe walked the pier after the offsite and talked about hiring.\n\n"
        "%%\n- The secret santa list is private.\n%%\n<!-- - The draft budget is hidden. -->\n\n"
        "> [!tip] Espresso machine\n> It lives on the third floor.\n\n"
        "- The retro moved to Thursday\nbecause the room was booked.\n"
    )
    note = write(new_vault, NOTE, body)
    with MemoryStore.open(new_vault) as store:
        assert texts(store, "secret santa list") == [] and texts(store, "draft budget hidden") == []
        assert (
            texts(store, "walked the pier offsite")[0]
            == "We walked the pier after the offsite and talked about hiring."
        )
        assert texts(store, "espresso machine floor")[0] == "Espresso machine It lives on the third floor."
        assert texts(store, "room was booked")[0] == "The retro moved to Thursday because the room was booked."
        assert all("#^d-" in hit.source for hit in store.recall("pier espresso retro", limit=10).hits)
    assert note.read_text() == body  # derived ids are never written back


# --- 5. daily notes where people keep them -------------------------------------------------------


@pytest.mark.both_backends
def test_5_daily_notes_plugin_layout_is_indexed_and_written_to(new_vault):
    write(new_vault, "daily/2026/11/2026-11-21.md", "- 10:00 Nested layout note.\n")
    with MemoryStore.open(new_vault) as store:
        assert store.recall("Nested layout note").hits[0].source.startswith("daily/2026/11/2026-11-21.md#^")
        receipt = store.remember("Written beside the person's notes.", at=AT)
        assert receipt.source.startswith("daily/2026/11/2026-11-30.md#^")
        page = store.journal(from_date="2026-11-21", through_date="2026-11-30", time_zone="Europe/Amsterdam")
        assert len(page.to_json()["entries"]) == 2


@pytest.mark.both_backends
def test_5_health_lists_every_markdown_file_under_daily_it_does_not_index(new_vault):
    for relpath in ("daily/notes.md", "daily/2026-02-30.md", "daily/2026-1-5.md", "daily/2026-11-22.MD",
                    "daily/2026-11-23.markdown", "daily/2026-11-24.md"):  # fmt: skip
        write(new_vault, relpath, "- a memory\n")
    with MemoryStore.open(new_vault) as store:
        findings = {f.subject: f for f in check_health(store.layout, store.config).findings if f.check == "unindexed"}
    assert sorted(findings) == ["daily/2026-02-30.md", "daily/2026-1-5.md", "daily/2026-11-22.MD",
                                "daily/2026-11-23.markdown", "daily/notes.md"]  # fmt: skip
    assert findings["daily/2026-1-5.md"].fix == "rename it to daily/2026-01-05.md"
    assert "not a calendar date" in findings["daily/2026-02-30.md"].message


@pytest.mark.both_backends
def test_5_health_names_a_symlinked_daily_folder(new_vault, tmp_path):
    elsewhere = tmp_path / "notes-elsewhere"
    write(elsewhere, "2026-11-30.md", "- a memory kept elsewhere\n")
    os.rmdir(new_vault / "daily")
    os.symlink(elsewhere, new_vault / "daily")
    with MemoryStore.open(new_vault) as store:
        findings = [f for f in check_health(store.layout, store.config).findings if f.check == "unindexed"]
    assert [(f.subject, "symlink" in f.message) for f in findings] == [("daily", True)]


# --- 6. change detection mtime cannot fool -------------------------------------------------------


@pytest.mark.both_backends
def test_6_same_size_edit_with_restored_mtime_is_seen(new_vault):
    note = write(new_vault, NOTE, "- 10:00 The cat is grey.\n")
    old = note.stat()
    os.utime(note, ns=(old.st_atime_ns, old.st_mtime_ns - 10_000_000_000))  # out of the racy window
    with MemoryStore.open(new_vault) as store:
        assert texts(store, "cat grey") == ["The cat is grey."]
        stamp = note.stat()
        note.write_text("- 10:00 The cat is blue.\n")  # same size
        os.utime(note, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # what `cp -p`, `rsync -t`, `touch -d` do
        assert note.stat().st_size == stamp.st_size and note.stat().st_mtime_ns == stamp.st_mtime_ns
        store.sync([NOTE])  # the watcher's call; the reported case kept the old row
        assert texts(store, "cat blue") == ["The cat is blue."]


# --- 7. clear errors, no tracebacks --------------------------------------------------------------


def _remember_cli(root: Path):
    return CliRunner().invoke(cli, ["--vault", str(root), "remember", "--at", "2026-11-30T09:00:00+01:00", "A fact."])


@pytest.mark.both_backends
def test_7_note_path_that_is_a_directory_is_a_clear_error(new_vault):
    (new_vault / NOTE).mkdir(parents=True)
    result = _remember_cli(new_vault)
    assert result.exit_code == 1
    assert "daily/2026-11-30.md is a folder" in result.output and "Fix:" in result.output
    assert "Traceback" not in result.output


@pytest.mark.both_backends
def test_7_daily_that_is_a_file_is_a_clear_error_and_old_rows_go(new_vault):
    with MemoryStore.open(new_vault) as store:
        store.remember("Rows from before.", at=AT)
    os.rename(new_vault / "daily", new_vault / "daily-moved")
    (new_vault / "daily").write_text("not a folder\n")
    result = _remember_cli(new_vault)
    assert result.exit_code == 1 and "daily is a file" in result.output and "Traceback" not in result.output
    with MemoryStore.open(new_vault) as store:
        assert texts(store, "Rows from before") == []  # the reported watcher kept every old row
        findings = [f for f in store.health_report()["findings"] if f["check"] == "unindexed"]
        assert [f["subject"] for f in findings] == ["daily"]


# --- 8. git-clean by default ---------------------------------------------------------------------


@pytest.mark.both_backends
def test_8_watch_schedule_never_creates_index_md_in_a_vault_without_one(fixture_vault):
    from memvault.indexer.maintenance.watch import Watcher

    assert not (fixture_vault / "index.md").exists()
    with MemoryStore.open(fixture_vault) as store:
        Watcher(store, consolidate_every=3600.0)._consolidate(0.0)  # the reported case created it
    assert not (fixture_vault / "index.md").exists()


@pytest.mark.both_backends
def test_8_an_opted_in_index_md_is_rewritten_only_when_what_it_shows_changes(new_vault):
    from memvault.indexer.maintenance.watch import Watcher

    index_md = new_vault / "index.md"
    assert index_md.exists()  # init opts the vault in
    with MemoryStore.open(new_vault) as store:
        store.remember("A first memory.", at=AT)
        Watcher(store, consolidate_every=3600.0)._consolidate(0.0)
        first = index_md.stat()
        for start in range(3):  # every watcher start consolidates once
            Watcher(store, consolidate_every=3600.0)._consolidate(float(start))
        assert (index_md.stat().st_ino, index_md.stat().st_mtime_ns) == (first.st_ino, first.st_mtime_ns)


# --- the engine's batch writer (remember_many, and Remember through a running owner) ----------


@pytest.mark.both_backends
def test_3_and_5_batch_writer_uses_the_notes_zone_and_the_nested_layout(new_vault):
    write(new_vault, "daily/2026/11/2026-11-29.md", "---\ntimeZone: America/New_York\n---\n- 09:00 older\n")
    write(new_vault, "daily/2026/11/2026-11-30.md", "---\ntimeZone: America/New_York\n---\n")
    at = datetime(2026, 11, 30, 17, 0, tzinfo=UTC)
    with MemoryStore.open(new_vault) as store:
        [outcome] = store.remember_many([{"text": "Batch lunch with New York.", "at": at}])
        assert outcome.receipt.source.startswith("daily/2026/11/2026-11-30.md#^m-")
        assert store.recall("Batch lunch with New York").hits[0].at == at
        store.remember_many([{"text": "A new nested day.", "at": datetime(2026, 12, 1, 9, 0, tzinfo=AMS)}])
    assert "- 12:00 Batch lunch with New York." in (new_vault / "daily/2026/11/2026-11-30.md").read_text()
    assert (new_vault / "daily/2026/12/2026-12-01.md").read_text().startswith("# 2026-12-01\n")


@pytest.mark.both_backends
def test_2_batch_writer_never_reuses_an_id_a_person_edited(new_vault):
    with MemoryStore.open(new_vault) as store:
        [first] = store.remember_many([{"text": "The gate code is 4411.", "at": AT}])
        note = new_vault / NOTE
        note.write_text(note.read_text().replace("4411", "5522"))
        store.sync()
        [again] = store.remember_many([{"text": "The gate code is 4411.", "at": AT}])
        assert again.receipt.status == "added" and again.receipt.id != first.receipt.id
        assert texts(store, "gate code 4411")[0] == "The gate code is 4411."

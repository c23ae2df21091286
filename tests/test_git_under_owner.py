"""git under a running owner works as it does without one, and loses nothing (issue 24, item 4).

A real `git` and a real owner process (`memvault watch`): `git stash` drops the line memvault
wrote seconds ago from the note, and the recent-writes repair must not put it back (the stash
keeps it, and `git stash pop` would abort on the dirty note); a revert and a branch checkout the
same. A line that git keeps nowhere (`git checkout -- note` of a line never committed) is put
back: it would exist nowhere else. See docs/durability.md, "git and the recent-writes repair".
"""

import subprocess
from datetime import UTC
from pathlib import Path

import pytest

from memvault import MemoryStore
from memvault.vault.locks import VaultLock
from memvault.vault.recent_writes import repair_lost_lines
from tests.engine_helpers import OwnerProcess, memvault, memvault_json, wait_for
from tests.readonly_helpers import memvault_here

GIT = ["git", "-c", "user.email=person@example.org", "-c", "user.name=Person", "-c", "init.defaultBranch=main"]


def git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([*GIT, *args], cwd=root, capture_output=True, text=True, timeout=60)
    if check:
        assert done.returncode == 0, f"git {' '.join(args)}: {done.stdout}{done.stderr}"
    return done


@pytest.fixture
def repo(tmp_path, request) -> Path:
    """A committed vault, on the test's index backend (a both_backends test's postgres run: init --index postgres)."""
    from tests import postgres_helpers

    postgres_helpers.set_up_the_tests_backend(request)
    root = tmp_path / "vault"
    assert (
        memvault_here(root, "init", str(root), "--time-zone", "UTC", *postgres_helpers.init_flags()) == 0
    )  # set-up: in this process
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "a new vault")
    return root


def remember(root: Path, text: str) -> tuple[str, str]:
    """(note relpath, block id) of a fact remembered through the CLI (the owner, when one runs)."""
    receipt = memvault_json(root, "remember", text)
    assert receipt["status"] == "added", receipt
    relpath, _, block = receipt["source"].partition("#^")
    return relpath, block


def found(root: Path, text: str) -> bool:
    return any(hit["text"] == text for hit in memvault_json(root, "search", text)["hits"])


def settled_without(root: Path, relpath: str, text: str, expected: str) -> None:
    """Wait until the owner either indexed the note without `text` or changed the note; then the
    note must still be what git left."""
    note = root / relpath
    wait_for(lambda: note.read_text() != expected or not found(root, text), what="the owner to see git's write")
    assert note.read_text() == expected, "the owner put its line back into a note git had just written"


@pytest.mark.both_backends
def test_stash_and_pop_under_a_running_owner_lose_nothing(repo):
    relpath, first = remember(repo, "The release train leaves on Thursday.")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a day's first memory")
    owner = OwnerProcess(repo, "watch").wait_serving()
    try:
        _, second = remember(repo, "Morgan picked blue for the deploy dashboard.")
        note = repo / relpath
        note.write_text(note.read_text() + "- a person's own edit\n")
        git(repo, "stash")
        committed = git(repo, "show", f"HEAD:{relpath}").stdout
        assert note.read_text() == committed
        settled_without(repo, relpath, "Morgan picked blue for the deploy dashboard.", committed)
        assert git(repo, "status", "--porcelain", "--", "daily").stdout == ""
        popped = git(repo, "stash", "pop", check=False)
        assert popped.returncode == 0, popped.stdout + popped.stderr  # aborted: "local changes would be overwritten"
        text = note.read_text()
        assert text.count(f"^{first}") == 1 and text.count(f"^{second}") == 1 and "- a person's own edit\n" in text
        wait_for(lambda: found(repo, "Morgan picked blue for the deploy dashboard."), what="the popped line indexed")
    finally:
        owner.stop()


@pytest.mark.both_backends
def test_revert_and_branch_checkout_under_a_running_owner(repo):
    relpath, _ = remember(repo, "The day's first memory.")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the first memory")
    git(repo, "tag", "before")
    owner = OwnerProcess(repo, "watch").wait_serving()
    try:
        _, block = remember(repo, "The office plants are watered on Mondays.")
        note = repo / relpath
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "remembered")
        with_line = note.read_text()
        git(repo, "revert", "--no-edit", "HEAD")
        reverted = git(repo, "show", f"HEAD:{relpath}").stdout
        assert f"^{block}" not in reverted
        settled_without(repo, relpath, "The office plants are watered on Mondays.", reverted)
        assert git(repo, "status", "--porcelain", "--", "daily").stdout == ""
        git(repo, "revert", "--no-edit", "HEAD")  # the revert of the revert brings it back, once
        assert note.read_text() == with_line
        wait_for(lambda: found(repo, "The office plants are watered on Mondays."), what="the line indexed again")

        git(repo, "checkout", "-q", "-b", "older", "before")  # a branch from before the line
        settled_without(
            repo, relpath, "The office plants are watered on Mondays.", git(repo, "show", f"before:{relpath}").stdout
        )
        assert git(repo, "status", "--porcelain", "--", "daily").stdout == ""
        back = git(repo, "checkout", "-q", "main", check=False)
        assert back.returncode == 0, back.stderr
        assert note.read_text().count(f"^{block}") == 1
    finally:
        owner.stop()


def _commit_note(root: Path, relpath: str, text: str) -> Path:
    note = root / relpath
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "the day so far")
    return note


@pytest.mark.both_backends
def test_a_line_git_keeps_nowhere_is_put_back_and_an_editor_save_still_repaired(repo):
    relpath = "daily/2026-11-30.md"
    note = _commit_note(repo, relpath, "# 2026-11-30\n\n- typed this morning\n")
    from datetime import datetime

    with MemoryStore.open(repo) as store:
        receipt = store.remember("Discarded by checkout, kept by memvault.", at=datetime(2026, 11, 30, 9, tzinfo=UTC))
        git(repo, "checkout", "--", relpath)  # discards an uncommitted, never-stashed line
        assert f"^{receipt.id}" not in note.read_text()
        store.sync([relpath])
        assert note.read_text().count(f"^{receipt.id}") == 1  # it existed nowhere else: back

        editor_buffer = note.read_text().replace(
            f"- 09:00 Discarded by checkout, kept by memvault. ^{receipt.id}\n", ""
        )
        note.write_text(editor_buffer + "- typed by a person\n")  # an editor's older copy, not a version git has
        store.sync([relpath])
        assert note.read_text().count(f"^{receipt.id}") == 1


@pytest.mark.both_backends
def test_while_git_holds_its_index_lock_the_repair_waits(repo):
    relpath = "daily/2026-11-30.md"
    note = _commit_note(repo, relpath, "# 2026-11-30\n\n")
    from datetime import datetime

    with MemoryStore.open(repo) as store:
        receipt = store.remember("Written while git was busy.", at=datetime(2026, 11, 30, 9, tzinfo=UTC))
        note.write_text("# 2026-11-30\n\n- an edit\n")
        lock = repo / ".git" / "index.lock"
        lock.write_text("")
        try:
            with VaultLock(repo):
                assert repair_lost_lines(store.layout, [relpath]) == []  # git is writing: nothing decided
        finally:
            lock.unlink()
        assert f"^{receipt.id}" not in note.read_text()
        with VaultLock(repo):
            assert repair_lost_lines(store.layout, [relpath]) == [relpath]  # kept, then put back
        assert note.read_text().count(f"^{receipt.id}") == 1


@pytest.mark.both_backends
def test_remember_of_a_fact_inside_an_unresolved_merge_conflict_finds_it_there(repo):
    relpath = "daily/2026-11-30.md"
    note = _commit_note(repo, relpath, "# 2026-11-30\n\n- typed this morning\n")
    git(repo, "checkout", "-q", "-b", "theirs")
    note.write_text(note.read_text() + "- 10:01 The deploy color is green.\n")
    git(repo, "commit", "-qam", "green")
    git(repo, "checkout", "-q", "main")
    note.write_text(note.read_text() + "- 10:00 The deploy color is blue. ^m-aaaaaaaaaa\n")
    git(repo, "commit", "-qam", "blue")
    assert git(repo, "merge", "theirs", check=False).returncode != 0  # a real conflict
    conflicted = note.read_text()
    assert "<<<<<<<" in conflicted and ">>>>>>>" in conflicted

    for fact in ("The deploy color is green.", "The  deploy color is blue."):  # either side, spacing aside
        done = memvault(repo, "remember", "--at", "2026-11-30T12:00:00+00:00", fact)
        # issue 44: both sides of the hunk are memories, so the fact is found there, once
        assert done.returncode == 0 and done.stdout.startswith("duplicate: daily/2026-11-30.md#^"), done
        assert "Traceback" not in done.stderr
        assert note.read_text() == conflicted  # no second copy below the hunk
    added = memvault_json(repo, "remember", "--at", "2026-11-30T12:00:00+00:00", "A fact from elsewhere.")
    assert added["status"] == "added"

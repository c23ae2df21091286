"""One vault on two machines through git, owners running on both (issue 44).

A bare hub and clones of it in tmp_path stand for a laptop and a server; each runs a real owner
(`memvault watch`) and its own agents (Remember and completed turns through `memvault admit`)
writing the same day. Pulls with the merge drivers merge cleanly, a rebase too, and both owners
follow what git writes without a manual step; a clone without the drivers gets git's conflict,
whose bullets stay searchable and marked while health names the fix, until a person resolves it
by hand. Every step counts the memories: none lost, none twice, every id unique.
"""

import json
import re
from pathlib import Path

import pytest

from tests import engine_helpers, postgres_helpers
from tests.engine_helpers import OwnerProcess, turn_json, wait_for
from tests.git_helpers import git, isolate_git
from tests.postgres_helpers import init_flags

DAY = "2026-11-30"
NOTE = f"daily/{DAY}.md"
BULLET_RE = re.compile(r"^- (\d\d:\d\d) (.*) \^([A-Za-z0-9-]+)$", re.M)


@pytest.fixture(autouse=True)
def git_env(tmp_path, monkeypatch):
    isolate_git(tmp_path, monkeypatch)


def commit_all(root: Path, message: str) -> None:
    git(root, "add", "-A")
    git(root, "commit", "-q", "--allow-empty", "-m", message)


#: the environment of each machine's processes: on a both_backends test's postgres run a clone
#: indexes into a database of its own (MEMVAULT_INDEX_DSN), as a second machine's server would: a
#: vault on the index server has one owner, and each machine here runs its own
MACHINES: dict[Path, dict[str, str]] = {}


def memvault(root: Path, *args: str, input: str | None = None):
    return engine_helpers.memvault(root, *args, input=input, env=MACHINES.get(root))


def memvault_json(root: Path, *args: str) -> dict:
    done = memvault(root, *args, "--json")
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def hub_and_laptop(tmp_path, request) -> tuple[Path, Path]:
    postgres_helpers.set_up_the_tests_backend(request)
    MACHINES.clear()
    if postgres_helpers.TEST_BACKEND == "postgres":
        server = request.getfixturevalue("postgres_server")
        for name in ("server", "other"):  # the clones' own databases
            MACHINES[tmp_path / name] = {"MEMVAULT_INDEX_DSN": server.new_database()}
    hub, laptop = tmp_path / "hub.git", tmp_path / "laptop"
    git(tmp_path, "init", "-q", "--bare", str(hub))
    laptop.mkdir()
    git(laptop, "init", "-q")
    assert memvault(laptop, "init", str(laptop), "--mode", "lite", "--time-zone", "UTC", *init_flags()).returncode == 0
    commit_all(laptop, "a new vault")
    git(laptop, "remote", "add", "origin", str(hub))
    git(laptop, "push", "-q", "-u", "origin", "main")
    return hub, laptop


def clone(hub: Path, where: Path, *, setup: bool = True) -> Path:
    git(where.parent, "clone", "-q", str(hub), str(where))
    if setup:
        report = memvault_json(where, "git", "setup")
        assert report["attributesAdded"] == [] and report["configSet"], report  # attributes came with the clone
    return where


def owner_on(root: Path) -> OwnerProcess:
    # no scheduled consolidation: index.md changing under a pull would stop git ("local changes")
    return OwnerProcess(root, "watch", MACHINES.get(root), "--consolidate-every", "0").wait_serving()


def remember(root: Path, text: str, clock: str) -> str:
    receipt = memvault_json(root, "remember", "--at", f"{DAY}T{clock}:00+00:00", text)
    assert receipt["status"] in ("added", "duplicate"), receipt
    return receipt["source"].partition("#^")[2]


def admit(root: Path, run_id: str, answer: str, clock: str) -> dict:
    done = memvault(root, "admit", "--wait", input=turn_json(run_id, answer, f"{DAY}T{clock}:00Z"))
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def found(root: Path, text: str) -> list[dict]:
    return [hit for hit in memvault_json(root, "search", text, "--limit", "50")["hits"] if hit["text"] == text]


def memories(root: Path, *, ordered: bool = True) -> list[tuple[str, str, str]]:
    """(time, text, id) of every memvault bullet of the day, checked: ids unique, in time order
    (unless a person ordered them: memvault never reorders their resolution)."""
    text = (root / NOTE).read_text()
    assert "<<<<<<<" not in text and ">>>>>>>" not in text, text
    rows = BULLET_RE.findall(text)
    ids = [row[2] for row in rows]
    assert len(ids) == len(set(ids)), f"an id twice in {root.name}: {text}"
    assert not ordered or [row[0] for row in rows] == sorted(row[0] for row in rows), f"not in time order: {text}"
    return rows


@pytest.mark.both_backends
def test_two_machines_pull_rebase_and_replay_lose_and_duplicate_nothing(tmp_path, hub_and_laptop):
    hub, laptop = hub_and_laptop
    server = clone(hub, tmp_path / "server")
    owners = [owner_on(laptop), owner_on(server)]
    try:
        # both machines' agents write the same day; one fact is remembered on both
        remember(laptop, "Laptop: the release train leaves on Thursday.", "09:10")
        both = remember(laptop, "Both machines know the standup is at ten.", "09:00")
        turn = admit(laptop, "run-laptop-1", "The laptop agent deployed the docs site.", "09:20")
        remember(server, "Server: Morgan picked blue for the dashboard.", "09:05")
        assert remember(server, "Both machines know the standup is at ten.", "09:30") == both
        admit(server, "run-server-1", "The server agent rotated the logs.", "09:15")
        (laptop / "graph.jsonl").write_text('{"id":"e-1","kind":"entity","name":"Morgan","type":"person"}\n')
        (server / "graph.jsonl").write_text(
            '{"id":"e-2","kind":"entity","name":"Sam","type":"person"}\n'
            '{"id":"e-1","kind":"entity","name":"Morgan","type":"person"}\n'
        )
        commit_all(laptop, "laptop's morning")
        git(laptop, "push", "-q")
        commit_all(server, "server's morning")

        pulled = git(server, "pull", "-q", "--no-edit")
        assert "CONFLICT" not in pulled.stdout + pulled.stderr
        rows = memories(server)
        assert len(rows) == 5, rows  # two facts each, one of them shared, and one turn each
        graph = (server / "graph.jsonl").read_text().splitlines()
        assert [json.loads(line)["id"] for line in graph] == ["e-1", "e-2"]
        wait_for(lambda: found(server, "Laptop: the release train leaves on Thursday."), what="the server's owner")
        wait_for(lambda: found(server, "The laptop agent deployed the docs site."), what="the laptop's turn")
        assert len(found(server, "Both machines know the standup is at ten.")) == 1
        git(server, "push", "-q")

        git(laptop, "pull", "-q", "--no-edit")  # a fast-forward
        assert memories(laptop) == rows
        wait_for(lambda: found(laptop, "Server: Morgan picked blue for the dashboard."), what="the laptop's owner")

        # the laptop's run reaches the server's intake too (a host that retried there): run ids
        # are per vault, so its bullet is already in the note and is not written again
        again = admit(server, "run-laptop-1", "The laptop agent deployed the docs site.", "09:20")
        assert again["status"] in ("admitted", "duplicate"), again
        assert turn["status"] == "admitted" and turn["state"] == "resolved", turn
        assert (server / NOTE).read_text().count(f"^t-{turn['id'][:10]}") == 1
        assert len(memories(server)) == 5

        # a rebase: both write again; the laptop replays its commit on top of the server's
        remember(server, "Server: the backup window moved to 02:00.", "10:30")
        commit_all(server, "server's late morning")
        git(server, "push", "-q")
        remember(laptop, "Laptop: lunch with the design team.", "11:00")
        commit_all(laptop, "laptop's late morning")
        rebased = git(laptop, "pull", "-q", "--rebase")
        assert "CONFLICT" not in rebased.stdout + rebased.stderr
        rows = memories(laptop)
        assert len(rows) == 7, rows
        wait_for(lambda: found(laptop, "Server: the backup window moved to 02:00."), what="the rebase followed")
        assert found(laptop, "Laptop: lunch with the design team."), "the rebase lost the laptop's own memory"
        wait_for(lambda: git(laptop, "status", "--porcelain", "--", "daily").stdout == "", what="a clean note")
        git(laptop, "push", "-q")
        git(server, "pull", "-q", "--no-edit")
        assert memories(server) == rows
        wait_for(lambda: found(server, "Laptop: lunch with the design team."), what="the server's owner again")
        for root in (laptop, server):
            health = memvault_json(root, "health")
            assert health["healthy"], health
    finally:
        for owner in owners:
            owner.stop()


@pytest.mark.both_backends
def test_a_clone_without_the_drivers_keeps_the_conflict_searchable_until_resolved_by_hand(tmp_path, hub_and_laptop):
    hub, laptop = hub_and_laptop
    other = clone(hub, tmp_path / "other", setup=False)
    owners = [owner_on(laptop), owner_on(other)]
    try:
        remember(laptop, "Laptop saw a heron on the pond.", "09:00")
        commit_all(laptop, "laptop")
        git(laptop, "push", "-q")
        remember(other, "Other saw a kingfisher on the pier.", "09:30")
        commit_all(other, "other")
        pulled = git(other, "pull", "--no-edit", check=False)
        assert pulled.returncode != 0 and "CONFLICT" in pulled.stdout, pulled.stdout + pulled.stderr
        assert "<<<<<<<" in (other / NOTE).read_text()

        def both_sides_marked() -> bool:
            hits = found(other, "Laptop saw a heron on the pond.") + found(other, "Other saw a kingfisher on the pier.")
            return len(hits) == 2 and all(hit["conflict"] for hit in hits)

        wait_for(both_sides_marked, what="both sides searchable and marked in conflict")

        def unhealthy_naming_the_fix() -> bool:
            report = memvault_json(other, "health")
            return not report["healthy"] and any(
                f["code"] == "conflict_markers" and f["subject"] == NOTE and f"memvault git resolve {NOTE}" in f["fix"]
                for f in report["findings"]
            )

        wait_for(unhealthy_naming_the_fix, what="health to name the conflicted note")

        # a person resolves by hand: both lines kept, markers deleted
        text = (other / NOTE).read_text()
        kept = [
            line for line in text.splitlines(keepends=True) if not line.startswith(("<<<<<<<", "=======", ">>>>>>>"))
        ]
        (other / NOTE).write_text("".join(kept))
        git(other, "add", NOTE)
        git(other, "commit", "-q", "--no-edit")
        assert len(memories(other, ordered=False)) == 2
        wait_for(lambda: memvault_json(other, "health")["healthy"], what="health after the resolution")
        assert all(not hit["conflict"] for hit in found(other, "Laptop saw a heron on the pond."))
        assert len(found(other, "Other saw a kingfisher on the pier.")) == 1
    finally:
        for owner in owners:
            owner.stop()

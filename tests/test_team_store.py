"""Agents on machines without the files: MemoryStore.connect(name) admits, remembers and recalls
through the index server; the vault's owner drains what they send into its files; one owner
per vault across machines."""

from datetime import UTC, datetime

import pytest

from memvault import MemoryStore
from memvault.vault.config import default_config_data, render_config
from memvault.vault.errors import VaultLocked
from memvault.vault.ids import memory_id
from memvault.vault.init import init_vault
from tests.engine_helpers import wait_for

pytestmark = pytest.mark.one_engine(
    "the team path (agents on machines without the files) exists only where the index is on a server"
)

NAME = "team-a"


def make_home(tmp_path, folder="home", tier="journal"):
    root = tmp_path / folder
    init_vault(root, render_config(default_config_data(tier, "UTC", {"backend": "postgres", "name": NAME})))
    return root


def files_text(root) -> str:
    return "".join(p.read_text() for p in sorted((root / "daily").rglob("*.md"))) + "".join(
        p.read_text() for p in sorted((root / "audit").rglob("*.md")) if (root / "audit").is_dir()
    )


@pytest.fixture
def home(tmp_path, postgres_dsn):
    root = make_home(tmp_path)
    store = MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": postgres_dsn})
    store.start_intake(poll_seconds=0.05)
    yield root, store, postgres_dsn
    store.close()


def test_a_connected_agent_admits_and_the_owner_projects_each_turn_once(home):
    root, _owner, dsn = home
    with MemoryStore.connect(NAME, env={"MEMVAULT_INDEX_DSN": dsn}) as agent:
        first = agent.persist_completed_turn("ci-run-1", "The nightly build now runs on the arm64 runners.")
        again = agent.persist_completed_turn("ci-run-1", "The nightly build now runs on the arm64 runners.")
        other = agent.persist_completed_turn("ci-run-1", "The nightly build moved back to x86.")
        skipped = agent.persist_completed_turn("ci-run-2", "NOTHING_TO_REPORT")
        secret = agent.persist_completed_turn("ci-run-3", "use key AKIAIOSFODNN7EXAMPLE for the bucket")
    assert (first.status, again.status, other.reason) == ("admitted", "duplicate", "conflict")
    assert (skipped.status, skipped.reason) == ("skipped", "nothing_to_report")
    assert (secret.status, secret.reason) == ("failed", "credential_refused")
    wait_for(lambda: "arm64 runners" in files_text(root), what="the remote turn in the files")
    assert files_text(root).count("arm64 runners") == 1 and "x86" not in files_text(root)


def test_remote_remember_is_recallable_at_once_with_the_local_id_and_lands_in_the_daily_note(home):
    root, owner, dsn = home
    fact = "Priya rotates the on-call pager every Tuesday."
    with MemoryStore.connect(NAME, env={"MEMVAULT_INDEX_DSN": dsn}) as agent:
        receipt = agent.remember(fact)
        assert (receipt.status, receipt.id) == ("added", memory_id(fact))  # the id a local remember gives
        assert agent.remember(fact).status == "duplicate"
        hits = agent.recall("who rotates the on-call pager?").hits
        assert hits and hits[0].id == receipt.id
        wait_for(lambda: f"^{receipt.id}" in files_text(root), what="the fact in the daily note")
        assert files_text(root).count(fact) == 1
        wait_for(lambda: agent.intake_snapshot()["remote"]["factsHeld"] == 0, what="the server to forget it")
        hits = agent.recall("who rotates the on-call pager?").hits  # now from the rows
        assert [h.id for h in hits].count(receipt.id) == 1
        again = agent.remember(fact)  # the rows hold it now: a duplicate naming its note, as locally
        assert (again.status, again.id) == ("duplicate", receipt.id) and again.source.startswith("daily/")
        assert files_text(root).count(fact) == 1


def test_a_remote_fact_reports_the_nested_daily_path_the_owner_writes(tmp_path, postgres_dsn):
    root = make_home(tmp_path)
    today = datetime.now(UTC).date()
    (root / "daily" / f"{today.year:04d}").mkdir(parents=True)  # the person keeps the Daily Notes plugin's layout
    env = {"MEMVAULT_INDEX_DSN": postgres_dsn}
    with MemoryStore.open(root, env=env) as store:
        store.start_intake(poll_seconds=0.05)
        with MemoryStore.connect(NAME, env=env) as agent:
            receipt = agent.remember("The nested layout keeps each month in its own folder.")
            relpath = receipt.source.partition("#^")[0]
            assert relpath == f"daily/{today:%Y}/{today:%m}/{today.isoformat()}.md"
            wait_for(
                lambda: (root / relpath).is_file() and receipt.id in (root / relpath).read_text(),
                what="the fact at the path the receipt named",
            )


def test_an_acknowledged_fact_survives_a_rebuild_before_its_owner_projects_it(tmp_path, postgres_dsn):
    root = make_home(tmp_path)
    env = {"MEMVAULT_INDEX_DSN": postgres_dsn}
    with MemoryStore.open(root, env=env) as store:  # the owner once: registers the vault, then stops
        store.start_intake(poll_seconds=0.05)
    with MemoryStore.connect(NAME, env=env) as agent:
        receipt = agent.remember("The VPN certificate expires on 2027-03-01.")
        with MemoryStore.open(root, env=env) as offline:
            offline.rebuild()  # from the files, which do not hold it yet
        assert agent.recall("when does the VPN certificate expire?").hits[0].id == receipt.id
        counts = agent.intake_snapshot()
        assert counts["remote"]["factsWaiting"] == 1 and counts["ownerRunning"] is False


def test_turns_wait_on_the_server_while_the_owner_is_down_and_inspect_counts_them(tmp_path, postgres_dsn):
    root = make_home(tmp_path)
    env = {"MEMVAULT_INDEX_DSN": postgres_dsn}
    with MemoryStore.open(root, env=env) as store:
        store.start_intake(poll_seconds=0.05)
    with MemoryStore.connect(NAME, env=env) as agent:
        for i in range(3):
            assert agent.persist_completed_turn(f"wait-{i}", f"Waiting turn {i} about the staging cluster.").ok
        assert agent.intake_snapshot()["remote"]["turnsWaiting"] == 3
        health = agent.health_report()
        assert any(f["check"] == "owner" for f in health["findings"])
        with MemoryStore.open(root, env=env) as store:
            store.start_intake(poll_seconds=0.05)
            wait_for(lambda: agent.intake_snapshot()["remote"]["turnsWaiting"] == 0, what="the drain")
            wait_for(lambda: all(f"Waiting turn {i}" in files_text(root) for i in range(3)), what="the files")


def test_a_second_owner_on_another_machine_is_refused_naming_the_first(home, tmp_path):
    root, owner, dsn = home
    copy = make_home(tmp_path, "copy-on-laptop")  # another folder naming the same index
    other = MemoryStore.open(copy, env={"MEMVAULT_INDEX_DSN": dsn}, sync=False)
    with pytest.raises(VaultLocked) as refused:
        other.start_intake(poll_seconds=0.05)
    import os
    import socket

    assert f"pid {os.getpid()}" in str(refused.value) and socket.gethostname() in str(refused.value)
    other.close()

"""A vault whose index was built on the server by someone other than its owner (issue 42, item
7): `memvault rebuild` from another folder (a checkout on another machine), by another login role,
before its owner ever started. Remote recall answered 0 hits and "degraded" (it read the vault's
zone and tier from the owner's registration alone, which only an owner's start writes); every
build now records those settings too, so remote recall answers as after the owner ran."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from memvault import MemoryStore
from memvault.vault.config import default_config_data, render_config
from memvault.vault.init import init_vault
from tests.engine_helpers import ENV

pytestmark = pytest.mark.one_engine("the team path (agents without the files) exists only with an index on a server")

NAME = "team-r"
MEMVAULT = str(Path(sys.executable).parent / "memvault")
NOTE = (
    "- 09:00 Priya rotates the on-call pager every Tuesday. ^m-aaaa0001\n"
    "- 09:05 The deploy keys live in the ops password vault. ^m-aaaa0002\n"
    "- 17:40 Jonas moved the release train to Thursdays. ^m-aaaa0003\n"
)
QUESTIONS = ("who rotates the on-call pager?", "when does the release train leave?", "where are the deploy keys?")


def memvault(dsn: str, *args: str, cwd="/"):
    done = subprocess.run([MEMVAULT, *args], env={**ENV, "MEMVAULT_INDEX_DSN": dsn}, cwd=cwd, text=True,
                          capture_output=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def make_home(tmp_path, tier: str) -> Path:
    root = tmp_path / "home"
    index = {"backend": "postgres", "name": NAME}
    init_vault(root, render_config(default_config_data(tier, "Europe/Amsterdam", index)))
    (root / "daily").mkdir(exist_ok=True)
    (root / "daily" / "2026-12-01.md").write_text(NOTE)
    return root


def checkout_of(root: Path, tmp_path) -> Path:
    """The vault's files as another machine's checkout holds them (no .index/, no intake)."""
    other = tmp_path / "elsewhere" / "checkout"
    shutil.copytree(root, other, ignore=shutil.ignore_patterns(".index", ".capture-intake", "*.lock"))
    return other


def agent_dsn(postgres_server, dsn: str, role: str) -> str:
    agent = postgres_server.create_role(dsn, role)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'GRANT "memvault_write_{NAME}" TO "{role}"')
    return agent


def remote_answers(dsn: str) -> list[dict]:
    """Each question's answer from a connected agent, hits with their ids, scores and zoned times."""
    with MemoryStore.connect(NAME, env={"MEMVAULT_INDEX_DSN": dsn}) as agent:
        answers = [agent.recall(question).to_json() for question in QUESTIONS]
    return [{key: answer[key] for key in ("hits", "degraded")} for answer in answers]


def owner_rebuild(root: Path, dsn: str) -> None:
    with MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": dsn}) as owner:
        owner.start_intake(poll_seconds=0.05)  # the owner's start registers it
        owner.rebuild()


@pytest.mark.parametrize("tier", ["journal", "lite"])
def test_remote_recall_after_a_rebuild_from_another_checkout_equals_it_after_the_owners(
    tmp_path, postgres_server, postgres_dsn, tier
):
    root = make_home(tmp_path, tier)
    memvault(postgres_dsn, "--vault", str(checkout_of(root, tmp_path)), "rebuild")  # the owner never started
    agent = agent_dsn(postgres_server, postgres_dsn, f"agent_rebuilt_{tier}")
    by_another = remote_answers(agent)
    assert all(answer["hits"] and answer["degraded"] is None for answer in by_another), by_another
    assert by_another[0]["hits"][0]["text"] == "Priya rotates the on-call pager every Tuesday."
    assert by_another[0]["hits"][0]["at"].endswith("+01:00")  # the vault's zone, as its owner shows it
    searched = json.loads(memvault(agent, "--remote", NAME, "search", "--json", QUESTIONS[0]))
    assert searched["hits"] == by_another[0]["hits"] and searched["degraded"] is None

    owner_rebuild(root, postgres_dsn)
    assert remote_answers(agent) == by_another


def test_a_rebuild_by_another_role_beside_other_vaults_answers_remote_recall(tmp_path, postgres_server, postgres_dsn):
    """Team tables already there (another vault's owner made them), this vault's owner never ran,
    and the rebuild connects as a role of its own that owns the tables (an admin's, not the owner's)."""
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute("CREATE ROLE rebuild_admin LOGIN CREATEROLE NOSUPERUSER NOBYPASSRLS")
        admin.execute(f"GRANT ALL ON DATABASE {postgres_dsn.rsplit('dbname=', 1)[1]} TO rebuild_admin")
        admin.execute("GRANT ALL ON SCHEMA public TO rebuild_admin")
    rebuilder = postgres_dsn.replace("user=postgres", "user=rebuild_admin")
    neighbour = tmp_path / "neighbour"
    init_vault(neighbour, render_config(default_config_data("journal", "UTC", {"backend": "postgres", "name": "nb"})))
    with MemoryStore.open(neighbour, env={"MEMVAULT_INDEX_DSN": rebuilder}) as store:
        store.start_intake(poll_seconds=0.05)
    root = make_home(tmp_path, "journal")
    memvault(rebuilder, "--vault", str(checkout_of(root, tmp_path)), "rebuild")
    agent = agent_dsn(postgres_server, postgres_dsn, "agent_rebuilt_role")
    by_another = remote_answers(agent)
    assert all(answer["hits"] and answer["degraded"] is None for answer in by_another), by_another
    owner_rebuild(root, rebuilder)
    assert remote_answers(agent) == by_another


def test_a_vault_never_built_says_how_to_build_it(postgres_dsn):
    from memvault.indexer.backend.postgres.team import TeamServer

    TeamServer(postgres_dsn, NAME, create=True).close()  # its tables and roles, no build, no owner
    with MemoryStore.connect(NAME, env={"MEMVAULT_INDEX_DSN": postgres_dsn}) as agent:
        answer = agent.recall("who rotates the pager?")
    assert not answer.hits and "run `memvault rebuild`" in answer.degraded
    assert "Traceback" not in answer.degraded and "SELECT" not in answer.degraded

"""SIGKILL of the vault's owner between any two steps of draining remote turns (claim → the
batch's notes written → marked on the server), in the journal tier (content ids) and in lite
(run-derived ids): afterwards every turn is in the files exactly once."""

import subprocess
import sys

import pytest

from memvault import MemoryStore
from tests.engine_helpers import ENV, REPO
from tests.test_team_store import NAME, files_text, make_home

pytestmark = [
    pytest.mark.slow,
    pytest.mark.one_engine("the team path (the owner draining agents' turns from the server) exists only on a server"),
]
DRIVER = [sys.executable, str(REPO / "tests" / "team_crash_driver.py")]
TURNS = 4


def run_owner(root, dsn, *crash):
    return subprocess.run(
        [*DRIVER, str(root), dsn, *crash], env=ENV, cwd=REPO, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("boundary,nth,tier", [
    ("team.turn.claimed", 2, "journal"),
    ("team.turns.written", 1, "journal"),
    ("team.turns.marked", 1, "journal"),
    ("team.turns.written", 1, "lite"),
])  # fmt: skip
def test_a_killed_owner_leaves_every_remote_turn_in_the_files_exactly_once(tmp_path, postgres_dsn, boundary, nth, tier):
    root = make_home(tmp_path, tier=tier)
    env = {"MEMVAULT_INDEX_DSN": postgres_dsn}
    assert run_owner(root, postgres_dsn).returncode == 0  # registers the vault on the server
    with MemoryStore.connect(NAME, env=env) as agent:
        for i in range(TURNS):
            assert (
                agent.persist_completed_turn(f"crash-{i}", f"Crash turn {i} chose region{i} for the cache.").status
                == "admitted"
            )
    killed = run_owner(root, postgres_dsn, "--crash", boundary, "--nth", str(nth))
    assert killed.returncode == -9, (boundary, killed.stderr[-2000:])
    finished = run_owner(root, postgres_dsn)
    assert finished.returncode == 0, finished.stderr[-2000:]
    text = files_text(root)
    assert [text.count(f"region{i} for the cache") for i in range(TURNS)] == [1] * TURNS
    with MemoryStore.connect(NAME, env=env) as agent:
        assert agent.intake_snapshot()["remote"]["turnsWaiting"] == 0

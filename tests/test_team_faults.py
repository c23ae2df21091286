"""Faults and load with real processes and a real server: the server restarted hard while agents
admit, and 8 agent processes × 500 admits + 200 remembers against one owner."""

import json
import re
import subprocess
import sys

import pytest

from memvault import MemoryStore
from tests.engine_helpers import ENV, REPO, wait_for
from tests.postgres_helpers import PostgresServer
from tests.test_team_store import files_text, make_home

pytestmark = [
    pytest.mark.slow,
    pytest.mark.one_engine("the team path (the owner draining agents' turns from the server) exists only on a server"),
]
DRIVER = [sys.executable, str(REPO / "tests" / "team_client_driver.py")]


@pytest.fixture
def own_server():
    server = PostgresServer.start_new()
    yield server
    server.destroy()


def owner_for(tmp_path, dsn):
    root = make_home(tmp_path)
    store = MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": dsn})
    store.start_intake(poll_seconds=0.05)
    return root, store


def test_a_server_restarted_hard_while_agents_admit_gives_no_false_success(tmp_path, own_server):
    dsn = own_server.new_database()
    root, owner = owner_for(tmp_path, dsn)
    owner.close()  # registered; it drains after the restart (a turn projected while the server is
    # down waits out the intake's one-minute backoff before its index write: too slow for the suite)
    stop = tmp_path / "stop"
    outputs = [tmp_path / f"client-{w}.jsonl" for w in range(2)]
    clients = [
        subprocess.Popen(
            [*DRIVER, dsn, str(w), "until", str(stop)],
            env=ENV,
            cwd=REPO,
            text=True,
            stdout=out.open("w"),
            stderr=subprocess.PIPE,
        )
        for w, out in enumerate(outputs)
    ]

    def answers_so_far() -> list[list]:
        lines = [line for out in outputs for line in out.read_text().splitlines(keepends=True)]
        return [json.loads(line) for line in lines if line.endswith("\n")]  # whole lines only

    def saved_count() -> int:
        return sum(a[1] in ("admitted", "duplicate") for a in answers_so_far())

    try:  # each step waits for what the clients answered, never for a time
        wait_for(lambda: saved_count() >= 4, timeout=60, what="admits before the server stops")
        own_server.stop_immediately()
        wait_for(
            lambda: any(a[1] not in ("admitted", "duplicate") for a in answers_so_far()),
            timeout=60,
            what="an admit refused while the server is down",
        )
        own_server.restart()
        after_restart = saved_count()
        wait_for(lambda: saved_count() >= after_restart + 4, timeout=60, what="admits after the restart")
    finally:
        stop.touch()
    for client in clients:
        _, err = client.communicate(timeout=60)
        assert client.returncode == 0, err
    answers = answers_so_far()
    saved = [a for a in answers if a[1] in ("admitted", "duplicate")]
    failed = [a for a in answers if a[1] not in ("admitted", "duplicate")]
    assert saved and failed
    assert {a[2] for a in failed} <= {"index_server_unavailable"} and all("NOT saved" in a[3] for a in failed)
    owner = MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": dsn})
    owner.start_intake(poll_seconds=0.05)
    try:

        def in_files():
            text = files_text(root)
            return all(f"picked lane{run[1:].replace('-', 'x')}." in text for run, *_ in saved)

        wait_for(in_files, timeout=60, what="every acknowledged turn in the owner's files")
        text = files_text(root)
        for run, *_ in answers:  # acknowledged: once; failed: at most once (the server may have committed it)
            assert text.count(f"picked lane{run[1:].replace('-', 'x')}.") <= 1
    finally:
        owner.close()


#: the issue's load is 8 × 500 admits + 200 remembers: it passes here too (0 lost, 0 duplicated,
#: every count exact) but took 21 s on a loaded 2-core machine, over the suite's ~15 s budget for
#: one test, so the suite runs 8 × 100 (every classification kind, 200 remembers) and
#: bench/bench_team.py runs the full load against the owner, printing lost/duplicated counts
WORKERS, ADMITS, REMEMBERS = 8, 100, 25


def test_eight_agents_admitting_and_remembering_against_one_owner_lose_and_duplicate_nothing(tmp_path, postgres_dsn):
    root, owner = owner_for(tmp_path, postgres_dsn)
    try:
        procs = [subprocess.Popen([*DRIVER, postgres_dsn, str(w), "load", str(ADMITS), str(REMEMBERS)], env=ENV,
                                  cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for w in range(WORKERS)]  # fmt: skip
        calls = []
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
            calls.extend(json.loads(out))
        by_kind = {}
        for kind, _run, status, reason in calls:
            by_kind.setdefault(kind, []).append((status, reason))
        per_worker_new = ADMITS - ADMITS // 4 - ADMITS // 10
        assert by_kind["new"] == [("admitted", None)] * (WORKERS * per_worker_new)
        assert by_kind["retry"] == [("duplicate", None)] * (WORKERS * (ADMITS // 4))
        assert by_kind["conflict"] == [("failed", "conflict")] * (WORKERS * (ADMITS // 10))
        assert by_kind["fact"] == [("added", None)] * (WORKERS * REMEMBERS)

        def drained():
            text = files_text(root)
            return (
                len(re.findall(r"for the queue\.", text)) >= WORKERS * per_worker_new
                and len(re.findall(r"warm\.", text)) >= WORKERS * REMEMBERS
            )

        wait_for(drained, timeout=240, what="every turn and fact in the owner's files")
        text = files_text(root)
        for w in range(WORKERS):
            for j in range(ADMITS):
                assert text.count(f"shard{w}x{j} for the queue.") == (1 if j % 4 != 3 and j % 10 != 4 else 0)
            for k in range(REMEMBERS):
                assert text.count(f"bucket{w}x{k} warm.") == 1
        assert "Or not." not in text
    finally:
        owner.close()


def test_an_owner_started_while_the_server_is_away_drains_once_it_returns(tmp_path, own_server):
    dsn = own_server.new_database()
    root, owner = owner_for(tmp_path, dsn)
    owner.close()  # registered once
    own_server.stop_immediately()
    owner = MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": dsn})
    owner.start_intake(poll_seconds=0.05)  # the files are the truth: the owner starts without the server
    try:
        own_server.restart()
        with MemoryStore.connect("team-a", dsn) as agent:
            assert (
                agent.persist_completed_turn("late-1", "The late turn picked lane9 for the batch.").status == "admitted"
            )
        wait_for(
            lambda: "lane9 for the batch" in files_text(root), timeout=60, what="the turn drained after the restart"
        )
    finally:
        owner.close()

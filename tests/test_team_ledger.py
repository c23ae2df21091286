"""Admission over the network: the one-statement ledger (admitted / duplicate / conflict, also
under racing processes) and the specification's client-side fingerprint LRU."""

import hashlib
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memvault.indexer.backend import open_team_server
from memvault.indexer.team.ledger import NetworkAdmission
from memvault.indexer.team.lru import FingerprintLRU
from memvault.vault.intake.admission import prepare_turn
from tests.engine_helpers import wait_for

REPO = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def record_for(run_id: str, answer: str):
    record, answered = prepare_turn(
        run_id=run_id, answer=answer, write_mode="append-host-summary", tier="journal", now=NOW
    )
    assert answered is None
    return record


@pytest.fixture
def team_dsn(postgres_dsn):
    open_team_server(postgres_dsn, "team-a", create=True).close()
    return postgres_dsn


def test_one_statement_answers_admitted_duplicate_conflict_permanently(team_dsn):
    server = open_team_server(team_dsn, "team-a")
    first = NetworkAdmission(server).admit(record_for("run-1", "Morgan chose blue for the deploy."))
    assert (first.status, first.id) == ("admitted", hashlib.sha256(b"run-1").hexdigest())
    fresh = NetworkAdmission(open_team_server(team_dsn, "team-a"))  # a new process: an empty LRU
    again = fresh.admit(record_for("run-1", "Morgan chose blue for the deploy."))
    assert again.status == "duplicate" and fresh.requests == 1
    third = NetworkAdmission(open_team_server(team_dsn, "team-a"))  # the server itself knows the conflict
    other = third.admit(record_for("run-1", "Morgan chose red for the deploy."))
    assert third.requests == 1 and len(third.lru) == 0
    assert (other.status, other.reason) == ("failed", "conflict")
    assert "NOT saved" in other.message


def test_the_lru_answers_exact_retries_without_a_request_and_refuses_other_bytes_before_one(team_dsn):
    admission = NetworkAdmission(open_team_server(team_dsn, "team-a"))
    assert admission.admit(record_for("run-2", "Alice owns the release notes.")).status == "admitted"
    assert admission.requests == 1
    assert admission.admit(record_for("run-2", "Alice owns the release notes.")).status == "duplicate"
    conflicting = admission.admit(record_for("run-2", "Bob owns the release notes."))
    assert (conflicting.status, conflicting.reason, admission.requests) == ("failed", "conflict", 1)
    # each entry is two SHA-256 digests, nothing else
    ((run, payload),) = admission.lru.entries()
    assert run == hashlib.sha256(b"run-2").digest() and len(payload) == 32


def test_the_lru_keeps_the_spec_count_and_a_retry_refreshes_its_place():
    lru = FingerprintLRU()
    assert lru.capacity == 10_000  # the spec: "the 10,000 most recently completed or exactly retried"
    small = FingerprintLRU(capacity=3)
    digests = [hashlib.sha256(str(i).encode()).digest() for i in range(5)]
    for d in digests[:3]:
        small.finish(d, small.decide(d, d).flight, "ok", completed=True)
    assert small.decide(digests[0], digests[0]).kind == "retained"  # refreshed: 1 is now the oldest
    small.finish(digests[3], small.decide(digests[3], digests[3]).flight, "ok", completed=True)
    assert [run for run, _ in small.entries()] == [digests[2], digests[0], digests[3]]
    failed = small.decide(digests[4], digests[4])
    small.finish(digests[4], failed.flight, "failed", completed=False)
    assert len(small) == 3 and small.decide(digests[4], digests[4]).kind == "lead"  # a failure took no place


class SlowServer:
    """A real server behind a gate, so several callers are in flight at once."""

    def __init__(self, server):
        self.server, self.gate, self.calls = server, threading.Event(), 0

    def admit(self, *args):
        self.calls += 1
        self.gate.wait(10)
        return self.server.admit(*args)


def test_concurrent_exact_retries_coalesce_and_alternatives_conflict(team_dsn):
    slow = SlowServer(open_team_server(team_dsn, "team-a"))
    admission = NetworkAdmission(slow)
    results = []
    threads = [
        threading.Thread(
            target=lambda: results.append(admission.admit(record_for("run-3", "Deploys freeze on Fridays.")))
        )
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    run = hashlib.sha256(b"run-3").digest()
    wait_for(
        lambda: run in admission.lru._flights and admission.lru._flights[run].waiters == 3,
        what="three exact retries joined the first admission's flight",
    )
    alternative = admission.admit(record_for("run-3", "Deploys freeze on Mondays."))
    slow.gate.set()
    for thread in threads:
        thread.join(10)
    assert slow.calls == 1
    assert sorted(r.status for r in results) == ["admitted"] * 4  # one request, its answer for all
    assert (alternative.status, alternative.reason) == ("failed", "conflict")


def test_an_unreachable_server_is_a_typed_failure_and_leaves_the_lru_unpolluted(tmp_path):
    dsn = f"host={tmp_path} port=1 user=memvault password=hunter2-secret dbname=nowhere"
    admission = NetworkAdmission(open_team_server(dsn, "team-a"))
    result = admission.admit(record_for("run-4", "The staging database moved to eu-west."))
    assert (result.status, result.reason) == ("failed", "index_server_unavailable")
    assert "NOT saved" in result.message and "hunter2-secret" not in result.message
    assert len(admission.lru) == 0
    again = admission.admit(record_for("run-4", "The staging database moved to eu-west."))
    assert again.reason == "index_server_unavailable" and admission.requests == 2  # not answered from memory


RACER = """
import json, sys
sys.path.insert(0, {repo!r})
from datetime import datetime, timezone
from memvault.indexer.backend import open_team_server
from memvault.indexer.team.ledger import NetworkAdmission
from memvault.vault.intake.admission import prepare_turn
dsn, worker, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
admission = NetworkAdmission(open_team_server(dsn, "team-a"))
now = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
out = []
for i in range(runs):
    if worker % 4:
        answer = "Race turn %d settled topic %d." % (i, i)
    else:
        answer = "Race turn %d was answered otherwise by %d." % (i, worker)
    record, _ = prepare_turn(run_id="race-%d" % i, answer=answer, write_mode="append-host-summary",
                             tier="journal", now=now)
    first, second = admission.admit(record).status, admission.admit(record).status
    out.append([i, "same" if worker % 4 else str(worker), first, second])
print(json.dumps(out))
"""


def test_racing_processes_on_the_same_run_ids_are_each_classified_once_admitted(team_dsn):
    import json

    runs, workers = 40, 8
    script = RACER.format(repo=str(REPO))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, team_dsn, str(w), str(runs)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(workers)
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outputs.extend(json.loads(out))
    for i in range(runs):
        calls = [o for o in outputs if o[0] == i]
        first = [status for _, _, status, _ in calls]
        assert first.count("admitted") == 1 and all(s in ("admitted", "duplicate", "failed") for s in first)
        winner = [key for _, key, status, _ in calls if status == "admitted"][0]
        for _, key, status, retry in calls:
            expected = "duplicate" if key == winner else "failed"
            assert status in ("admitted", expected)
            assert retry == ("duplicate" if status in ("admitted", "duplicate") else "failed")

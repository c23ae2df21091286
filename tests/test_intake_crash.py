"""Crash matrix: a real subprocess SIGKILLed at each named intake boundary, then restarted.

The killed processes are real subprocesses (tests/crash_driver.py); the clean runs (the restart
that converges, set-up and operator steps that are not killed) make the same library calls in
this process (`drive_here`).

After the restart every admitted run is projected exactly once, indexed once, resolved with a
committed ledger entry, the ledger and catalog agree, no temp file is left, and `inspect`
accounts for every run.
"""

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from memvault.indexer.engine.store import MemoryStore
from memvault.vault.clock import utc_now
from memvault.vault.intake import BOUNDARIES
from memvault.vault.intake.admission import intake_id_for
from memvault.vault.intake.files import IntakeDirs
from memvault.vault.intake.ledger import Ledger
from memvault.vault.intake.snapshot import inspect_run, runtime_snapshot

DRIVER = Path(__file__).resolve().parent / "crash_driver.py"
RUNS = 4

pytestmark = pytest.mark.slow


def drive(vault: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(DRIVER), str(vault), "--runs", str(RUNS), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def drive_here(vault: Path, *args: str) -> dict:
    """What `drive` runs, in this process: for the clean runs (restarts, set-up, operator steps that
    are not killed), which need no process of their own. Its summary (what the driver prints)."""
    from tests import crash_driver

    assert "--crash" not in args, "a run that is killed needs its own process (drive)"
    return crash_driver.run([str(vault), "--runs", str(RUNS), *args])


def run_ids(total: int = RUNS) -> list[str]:
    return [intake_id_for(f"crash-run-{i}") for i in range(total)]


def bullet_counts(vault: Path, total: int) -> dict[str, int]:
    text = "".join(p.read_text() for p in sorted((vault / "daily").glob("*.md")))
    return {i: text.count(f"^t-{i[:10]}\n") for i in run_ids(total)}


def assert_consistent(vault: Path, total: int = RUNS, projected: bool = True) -> None:
    """`projected`: each run's bullet carries its run's id (Lite); a Journal turn's is its content's."""
    dirs = IntakeDirs(vault)
    report = Ledger(dirs, create=False).report()
    assert (report.uncommitted, report.torn_bytes) == (0, 0)
    assert report.entries == total
    if projected:
        assert bullet_counts(vault, total) == dict.fromkeys(run_ids(total), 1)
    for intake_id in run_ids(total):
        entry = inspect_run(dirs, intake_id, utc_now())
        assert [e["state"] for e in entry["entries"]] == ["resolved"] and entry["ledgerCommitted"] is True
    snapshot = runtime_snapshot(dirs, utc_now())
    assert snapshot["counts"]["resolved"] == total and snapshot["counts"]["pending"] == 0
    assert snapshot["unexpectedFiles"] == 0 and snapshot["ledger"]["ok"]
    assert not [p for p in (vault / ".capture-intake").rglob(".*.tmp")]
    with MemoryStore.open(vault) as store:
        for i in range(total):
            hits = [h for h in store.recall(f"topic{i}", limit=10).hits if f"topic{i} " in h.text]
            assert len(hits) == 1, f"run {i} indexed {len(hits)} times"


#: each chain kills one vault at several boundaries in turn (every restart recovers the earlier
#: crash while new runs arrive), then restarts it cleanly and checks every run
CHAINS = {
    "admission": [
        ("catalog.created", 1),
        ("admit.record_written", 1),
        ("admit.record_fsynced", 2),
        ("admit.record_renamed", 3),
        ("admit.committed", 1),
    ],
    "projection": [
        ("project.note_written", 3),
        ("project.indexed", 2),
        ("resolve.receipt_written", 1),
        ("resolve.shard_torn", 2),
    ],
    "resolution": [
        ("resolve.shard_appended", 1),
        ("resolve.catalog_committed", 2),
        ("resolve.active_removed", 1),
    ],
}


@pytest.mark.both_backends
@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_killed_at_each_boundary_then_restarted(new_vault, chain):
    for step, (boundary, nth) in enumerate(CHAINS[chain]):
        killed = drive(new_vault, "--offset", str(step * RUNS), "--crash", boundary, "--nth", str(nth))
        assert killed.returncode == -signal.SIGKILL, f"boundary {boundary} never reached: {killed.stderr[-2000:]}"
    total = len(CHAINS[chain]) * RUNS
    restarted = drive_here(new_vault, "--runs", str(total))
    statuses = {r["status"] for r in restarted["results"]}
    assert statuses <= {"admitted", "duplicate"}
    assert_consistent(new_vault, total)


#: the resolution boundaries met by Journal turns resolved as one batch (vault/intake/resolve_together.py):
#: every run of the batch is in the same step when the kill comes (nth 1: its first run; 2, 3: inside it)
TOGETHER = [
    ("resolve.receipts_prepared", 1),
    ("resolve.receipt_written", 3),
    ("resolve.shard_torn", 1),
    ("resolve.shard_appended", 2),
    ("resolve.catalog_committed", 1),
    ("resolve.active_removed", 3),
]


@pytest.mark.both_backends
def test_a_batch_resolved_together_killed_at_each_boundary_then_restarted(tmp_path):
    """A Journal vault: the worker projects the turns due together in one write and resolves them
    together. Each step kills it at one boundary, the next start recovers it while new turns
    arrive, and in the end every turn is in the notes once, resolved, and committed once."""
    from memvault.vault.config import default_config_data, render_config
    from memvault.vault.init import init_vault
    from tests.postgres_helpers import on_test_backend

    vault = tmp_path / "journal"
    init_vault(vault, render_config(default_config_data(mode="journal", time_zone="Europe/Amsterdam")))
    on_test_backend(vault)  # a both_backends test's postgres run: the index on the server
    for step, (boundary, nth) in enumerate(TOGETHER):
        killed = drive(vault, "--offset", str(step * RUNS), "--crash", boundary, "--nth", str(nth), "--together")
        assert killed.returncode == -signal.SIGKILL, f"boundary {boundary} never reached: {killed.stderr[-2000:]}"
    total = len(TOGETHER) * RUNS
    restarted = drive_here(vault, "--runs", str(total), "--together")
    assert {r["status"] for r in restarted["results"]} == {"duplicate"}
    text = "".join(p.read_text() for p in sorted((vault / "daily").rglob("*.md")))
    assert {i: text.count(f"topic{i} ") for i in range(total)} == dict.fromkeys(range(total), 1)
    assert_consistent(vault, total, projected=False)


@pytest.mark.both_backends
def test_killed_while_dead_lettering_then_retried(new_vault):
    killed = drive(new_vault, "--runs", "1", "--poison", "--fast-clock", "--crash", "dead.rewritten")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    # restart (still poisoned): recovery finishes the interrupted move into dead/
    drive_here(new_vault, "--runs", "1", "--poison", "--fast-clock")
    dirs = IntakeDirs(new_vault)
    dead_id = intake_id_for("crash-run-0")
    [entry] = inspect_run(dirs, dead_id, utc_now())["entries"]
    assert (entry["state"], entry["folder"], entry["attempts"], entry["failure"]) == (
        "dead",
        "dead",
        16,
        "invalid_note",
    )
    # the operator fixes the note and retries; the retry itself is killed once, then finished
    (new_vault / "daily/2026-11-30.md").write_text("# 2026-11-30\n\n- fixed by hand\n")
    killed = drive(new_vault, "--op", "retry", "--crash", "retry.rewritten")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    drive_here(new_vault, "--op", "retry")
    drive_here(new_vault)  # all four runs: run 0 revived, the others new
    assert_consistent(new_vault)


@pytest.mark.both_backends
def test_operator_resolve_killed_then_finished(new_vault):
    drive_here(new_vault, "--runs", "2", "--poison", "--fast-clock")  # two dead letters
    killed = drive(new_vault, "--op", "resolve", "--crash", "resolve.shard_appended", "--nth", "2")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    drive_here(new_vault, "--op", "resolve")
    dirs = IntakeDirs(new_vault)
    for intake_id in run_ids()[:2]:
        [entry] = inspect_run(dirs, intake_id, utc_now())["entries"]
        assert (entry["state"], entry["outcome"], entry["reason"]) == ("resolved", "operator_resolved", "crash-matrix")
    assert Ledger(dirs, create=False).report().entries == 2
    # resolved runs stay duplicates for ever; nothing was projected for them
    again = drive_here(new_vault, "--runs", "2", "--fast-clock")
    assert {r["status"] for r in again["results"]} == {"duplicate"}
    assert "^t-" not in (new_vault / "daily/2026-11-30.md").read_bytes().decode("utf-8", "replace")


def test_every_boundary_is_in_the_matrix():
    covered = {b for chain in [*CHAINS.values(), TOGETHER] for b, _ in chain} | {"dead.rewritten", "retry.rewritten"}
    assert covered == set(BOUNDARIES)

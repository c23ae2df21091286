"""The intake worker and operator commands: projection per tier, backoff and dead letters,
retry/resolve semantics, the liveness fence and the bounded shutdown drain."""

import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta

import pytest

from memvault.indexer.services.intake_worker import IntakeWorker
from memvault.vault.errors import InvalidRecord, VaultLocked
from memvault.vault.intake.admission import intake_id_for
from memvault.vault.intake.backoff import schedule
from memvault.vault.intake.files import IntakeDirs
from memvault.vault.intake.ledger import Ledger
from memvault.vault.intake.operator import resolve_run_as_operator, retry_runs
from memvault.vault.intake.snapshot import inspect_run, runtime_snapshot
from memvault.vault.intake.state import read_record
from memvault.vault.locks import VaultLock
from tests.engine_helpers import ENV, REPO
from tests.intake_helpers import START, Clock, admit, make_vault, store_for

ANSWER = "Deployed the fix and closed the incident."
POISON = b"# 2026-11-30\n\n- \xff broken bytes\n"


def state_of(root, run_id):
    entries = inspect_run(IntakeDirs(root), intake_id_for(run_id), START)["entries"]
    assert len(entries) == 1, entries
    return entries[0]


def drain(store):
    store.start_intake(poll_seconds=0.05)
    report = store.stop(timeout=10)
    assert report.drained


@pytest.mark.both_backends
def test_lite_projects_to_daily_on_the_local_date_and_is_searchable_at_once(tmp_path):
    root = make_vault(tmp_path)
    late = datetime(2026, 11, 30, 23, 30, tzinfo=UTC)  # 00:30 on Dec 1 in Amsterdam
    with store_for(root) as store:
        store.start_intake(poll_seconds=0.05)
        assert store.persist_completed_turn("run-1", ANSWER).status == "admitted"
        assert store.persist_completed_turn("run-2", "Moved standup to ten.", completed_at=late).status == "admitted"
        assert store.stop().drained
        hits = [h for h in store.recall("incident").hits if "incident" in h.text]
    block = "t-" + intake_id_for("run-1")[:10]
    assert (root / "daily/2026-11-30.md").read_text() == f"# 2026-11-30\n\n- 14:03 {ANSWER} ^{block}\n"
    assert "- 00:30 Moved standup to ten. ^t-" in (root / "daily/2026-12-01.md").read_text()
    assert [h.source for h in hits] == [f"daily/2026-11-30.md#^{block}"]
    entry = state_of(root, "run-1")
    assert (entry["state"], entry["outcome"], entry["attempts"]) == ("resolved", "projected", 1)
    assert entry["projection"] == f"daily/2026-11-30.md#^{block}"


@pytest.mark.both_backends
def test_bujo_projects_raw_audit_outside_curated_recall(tmp_path):
    root = make_vault(tmp_path, mode="bujo")
    with store_for(root) as store:
        store.persist_completed_turn("run-1", ANSWER)
        drain(store)
        assert store.recall("incident").hits == ()
        assert store.serving_index().bm25.count_kind("audit") == 1
    assert "^t-" in (root / "audit/2026-11-30.md").read_text()
    assert not (root / "daily/2026-11-30.md").exists()
    assert state_of(root, "run-1")["state"] == "resolved"


@pytest.mark.both_backends
def test_journal_projects_by_content_identity_and_repeats_converge(tmp_path):
    from memvault.vault.ids import memory_id

    root = make_vault(tmp_path, mode="journal")
    with store_for(root) as store:
        store.persist_completed_turn("run-1", ANSWER)
        store.persist_completed_turn("run-2", ANSWER)  # another run, the same content
        drain(store)
        hits = store.recall(ANSWER, limit=10).hits
    note = (root / "daily/2026-11-30.md").read_text()
    assert note.count(f"{ANSWER} ^{memory_id(ANSWER)}") == 1, "one bullet for repeated content"
    assert [h.source for h in hits if h.text == ANSWER] == [f"daily/2026-11-30.md#^{memory_id(ANSWER)}"]
    for run in ("run-1", "run-2"):
        assert state_of(root, run)["projection"] == f"daily/2026-11-30.md#^{memory_id(ANSWER)}"


@pytest.mark.both_backends
def test_journal_turns_projected_together_fail_only_where_their_own_note_fails(tmp_path):
    """Due Journal turns are projected in one write per daily note; a note that cannot take a
    line fails its own turns (backed off, counted), never the other day's."""
    root = make_vault(tmp_path, mode="journal")
    (root / "daily/2026-11-30.md").write_bytes(POISON)
    next_day = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    clock = Clock()
    store = store_for(root, clock)
    for n in range(3):
        store.persist_completed_turn(f"poisoned-{n}", f"Turn {n} on the poisoned day.")
    for n in range(4):
        store.persist_completed_turn(f"fine-{n}", f"Turn {n} on the next day.", completed_at=next_day)
    worker = IntakeWorker(store, clock=clock)
    assert worker.process_due() == 7
    note = (root / "daily/2026-12-01.md").read_text()
    assert [note.count(f"Turn {n} on the next day.") for n in range(4)] == [1, 1, 1, 1]
    for n in range(4):
        entry = state_of(root, f"fine-{n}")
        assert (entry["state"], entry["outcome"]) == ("resolved", "projected")
        assert entry["projection"].startswith("daily/2026-12-01.md#^m-")
    for n in range(3):
        record = read_record(IntakeDirs(root), "pending", intake_id_for(f"poisoned-{n}"))
        assert (record.attempts, record.failure) == (1, "invalid_note")
    assert (root / "daily/2026-11-30.md").read_bytes() == POISON
    assert worker.transitions["resolved"] == 4 and worker.transitions["retry_scheduled"] == 3


@pytest.mark.both_backends
@pytest.mark.parametrize("boundary", ["resolve.receipt_written", "resolve.catalog_committed"])
def test_admissions_go_on_while_a_batch_is_resolved_outside_its_ledger_step(tmp_path, boundary):
    """The worker holds the intake lock for a batch's ledger step alone (every admission waits on
    that lock). Paused after the batch's receipts are written, or after its ledger commit, it
    lets another thread admit a new turn at once, and the same turn again answers duplicate;
    then every turn is resolved and in the notes once."""
    root = make_vault(tmp_path, mode="journal")
    clock = Clock()
    store = store_for(root, clock)
    for n in range(3):
        store.persist_completed_turn(f"batch-{n}", f"Turn {n} of the batch.")
    answers = []

    def admit_beside() -> None:  # another thread: within one the intake lock is re-entrant
        for run_id, answer in (("late-0", "A late turn arrived."), ("batch-1", "Turn 1 of the batch.")):
            result = admit(root, run_id, answer, tier="journal", lock_timeout=5.0)
            answers.append((run_id, result.status, result.reason))

    def pause(name: str) -> None:
        if name == boundary and not answers:
            beside = threading.Thread(target=admit_beside)
            beside.start()
            beside.join(60)

    worker = IntakeWorker(store, clock=clock, crash_hook=pause)
    assert worker.process_due() == 4  # the batch, then (its next round) the turn admitted meanwhile
    assert answers == [("late-0", "admitted", None), ("batch-1", "duplicate", None)]
    note = (root / "daily/2026-11-30.md").read_text()
    for run_id, answer in [
        *((f"batch-{n}", f"Turn {n} of the batch.") for n in range(3)),
        ("late-0", "A late turn arrived."),
    ]:
        assert note.count(answer) == 1
        assert (state_of(root, run_id)["state"], state_of(root, run_id)["outcome"]) == ("resolved", "projected")
    assert Ledger(IntakeDirs(root), create=False).report().entries == 4


@pytest.mark.both_backends
@pytest.mark.parametrize("boundary", ["resolve.shard_torn", "resolve.shard_appended"])
def test_an_admission_to_the_shard_a_live_resolver_is_appending_to_leaves_it_alone(tmp_path, boundary):
    """The worker (holding the liveness fence) appends a batch's ledger entries without the intake
    lock. Paused with an entry half written (`shard_torn`) or whole but uncommitted, an admission
    from another process to that very shard is admitted at once, and the same run again answers
    duplicate; it never cuts or adopts the resolver's bytes (recovery is the resolver's while it
    lives), so the batch commits and the ledger verifies."""
    from memvault.vault.intake.ledger import shard_of
    from memvault.vault.locks import LivenessFence

    root = make_vault(tmp_path, mode="journal")
    clock = Clock()
    store = store_for(root, clock)
    for n in range(3):
        store.persist_completed_turn(f"batch-{n}", f"Turn {n} of the batch.")
    first_shard = min(shard_of(intake_id_for(f"batch-{n}")) for n in range(3))
    same_shard = next(f"late-{k}" for k in range(10_000) if shard_of(intake_id_for(f"late-{k}")) == first_shard)
    script = (
        "import sys\nfrom pathlib import Path\nfrom tests.intake_helpers import admit\n"
        "for run_id, answer in ((sys.argv[2], 'A late turn arrived.'), ('batch-0', 'Turn 0 of the batch.')):\n"
        "    result = admit(Path(sys.argv[1]), run_id, answer, tier='journal', lock_timeout=5.0)\n"
        "    print(result.status, flush=True)\n"
    )
    answers = []

    def pause(name: str) -> None:
        if name == boundary and not answers:
            done = subprocess.run(
                [sys.executable, "-c", script, str(root), same_shard],
                capture_output=True,
                text=True,
                timeout=120,
                cwd=REPO,
                env=ENV,
            )
            answers.append((done.stdout.split(), done.stderr[-2000:]))

    fence = LivenessFence(root).hold()
    try:
        worker = IntakeWorker(store, clock=clock, crash_hook=pause)
        assert worker.process_due() == 4  # the batch, then the turn admitted meanwhile
    finally:
        fence.release()
    assert answers[0][0] == ["admitted", "duplicate"], answers
    report = Ledger(IntakeDirs(root), create=False).report()
    assert (report.entries, report.uncommitted, report.torn_bytes) == (4, 0, 0)
    assert (state_of(root, same_shard)["state"], state_of(root, "batch-0")["state"]) == ("resolved", "resolved")


@pytest.mark.both_backends
def test_capture_mode_projects_audit_and_waits_for_capture_never_marked_captured(tmp_path):
    root = make_vault(tmp_path, mode="bujo", write_mode="capture")
    with store_for(root) as store:
        store.persist_completed_turn("run-1", ANSWER, capture_text="user: status?\nassistant: " + ANSWER)
        drain(store)
        drain(store)  # a restart does not project it again
        snapshot = store.intake_snapshot()
    assert (root / "audit/2026-11-30.md").read_text().count("^t-") == 1
    entry = state_of(root, "run-1")
    assert (entry["state"], entry["folder"], entry["due"]) == ("awaiting_capture", "pending", False)
    assert entry["projection"].startswith("audit/2026-11-30.md#^t-")
    assert snapshot["counts"]["awaitingCapture"] == 1 and snapshot["counts"]["resolved"] == 0
    assert retry_runs(root, intake_id_for("run-1"), START) == [
        {"id": intake_id_for("run-1"), "outcome": "awaiting_capture"}
    ]


@pytest.mark.both_backends
def test_a_replay_finds_its_bullet_and_does_not_write_it_twice(tmp_path):
    root = make_vault(tmp_path)
    with store_for(root) as store:
        store.persist_completed_turn("run-1", ANSWER)
        block = "t-" + intake_id_for("run-1")[:10]
        # as if a crash hit after the projection but before the receipt
        (root / "daily/2026-11-30.md").write_text(f"# 2026-11-30\n\n- 14:03 {ANSWER} ^{block}\n- a person's line\n")
        drain(store)
        assert [h.id for h in store.recall("incident").hits].count(block) == 1
    assert (root / "daily/2026-11-30.md").read_text().count(block) == 1
    assert state_of(root, "run-1")["state"] == "resolved"


def test_failed_attempts_back_off_then_dead_letter_after_16(tmp_path):
    root = make_vault(tmp_path)
    (root / "daily/2026-11-30.md").write_bytes(POISON)
    clock = Clock()
    store = store_for(root, clock)
    store.persist_completed_turn("run-1", ANSWER)
    worker = IntakeWorker(store, clock=clock)
    dirs, intake_id = IntakeDirs(root), intake_id_for("run-1")
    for attempt, wait in enumerate([*schedule(), None], start=1):
        assert worker.process_due() == 1
        if wait is None:
            break
        record = read_record(dirs, "pending", intake_id)
        assert (record.attempts, record.failure) == (attempt, "invalid_note")
        assert record.next_attempt_at == clock.now + wait
        clock.advance(wait - timedelta(seconds=1))
        assert worker.process_due() == 0  # not due yet
        clock.advance(timedelta(seconds=1))
    dead = read_record(dirs, "dead", intake_id)
    assert (dead.state, dead.attempts, dead.failure) == ("dead", 16, "invalid_note")
    assert not dirs.record_path("pending", intake_id).exists()
    counts = runtime_snapshot(dirs, clock.now)["counts"]
    assert (counts["dead"], counts["pending"], counts["due"]) == (1, 0, 0)
    assert worker.transitions["dead"] == 1 and worker.transitions["retry_scheduled"] == 15
    assert clock.now - START > timedelta(hours=24)


@pytest.mark.both_backends
def test_retry_revives_dead_letters_and_makes_delayed_work_due(tmp_path):
    root = make_vault(tmp_path)
    (root / "daily/2026-11-30.md").write_bytes(POISON)
    clock = Clock()
    store = store_for(root, clock)
    worker = IntakeWorker(store, clock=clock)
    for run in ("dead-run", "delayed-run"):
        store.persist_completed_turn(run, f"{ANSWER} ({run})")
    worker.process_due()  # both fail once and are delayed
    dead_id, delayed_id = intake_id_for("dead-run"), intake_id_for("delayed-run")
    dirs = IntakeDirs(root)
    record = read_record(dirs, "pending", dead_id)
    from memvault.vault.intake.state import write_record

    write_record(dirs, "dead", record.evolve(state="dead", attempts=16))
    dirs.record_path("pending", dead_id).unlink()
    outcomes = {row["id"]: row["outcome"] for row in retry_runs(root, None, clock.now)}
    assert outcomes == {dead_id: "revived", delayed_id: "made_due"}
    revived = read_record(dirs, "pending", dead_id)
    assert (revived.state, revived.attempts, revived.is_due(clock.now)) == ("pending", 0, True)
    assert retry_runs(root, delayed_id, clock.now) == [{"id": delayed_id, "outcome": "already_due"}]
    assert retry_runs(root, None, clock.now) == []
    (root / "daily/2026-11-30.md").write_text("# 2026-11-30\n")
    assert worker.process_due() == 2
    assert retry_runs(root, dead_id, clock.now) == [{"id": dead_id, "outcome": "already_resolved"}]
    with pytest.raises(InvalidRecord, match="no intake record"):
        retry_runs(root, "0" * 64, clock.now)
    with pytest.raises(InvalidRecord, match="not an intake id"):
        retry_runs(root, "run-1", clock.now)


def test_resolve_accepts_the_loss_and_keeps_duplicate_protection(tmp_path):
    root = make_vault(tmp_path)
    (root / "daily/2026-11-30.md").write_bytes(POISON)
    store = store_for(root)
    store.persist_completed_turn("run-1", ANSWER)
    intake_id = intake_id_for("run-1")
    with pytest.raises(InvalidRecord, match="slug"):
        resolve_run_as_operator(root, intake_id, "Not A Slug", START)
    result = resolve_run_as_operator(root, intake_id, "disk-was-full", START)
    assert result == {
        "id": intake_id,
        "outcome": "operator_resolved",
        "previousState": "pending",
        "reason": "disk-was-full",
    }
    entry = state_of(root, "run-1")
    assert (entry["state"], entry["outcome"], entry["reason"], entry["projection"]) == (
        "resolved",
        "operator_resolved",
        "disk-was-full",
        None,
    )
    assert Ledger(IntakeDirs(root), create=False).lookup(intake_id) is not None
    again = store.persist_completed_turn("run-1", ANSWER)
    assert (again.status, again.state) == ("duplicate", "resolved")
    assert resolve_run_as_operator(root, intake_id, "twice", START)["outcome"] == "already_resolved"
    assert (root / "daily/2026-11-30.md").read_bytes() == POISON  # nothing was projected
    with pytest.raises(InvalidRecord, match="no intake record"):
        resolve_run_as_operator(root, "1" * 64, "gone", START)


_HOLD_FENCE = """
import sys, time
from pathlib import Path
from memvault.vault.locks import LivenessFence
fence = LivenessFence(Path(sys.argv[1])).hold()
print("held", flush=True)
sys.stdin.readline()
"""


@pytest.mark.both_backends
def test_retry_resolve_and_a_second_worker_are_refused_while_a_live_process_holds_the_vault(tmp_path):
    root = make_vault(tmp_path)
    store = store_for(root)
    store.persist_completed_turn("run-1", ANSWER)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_FENCE, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(VaultLocked, match="Another live memvault process"):
            retry_runs(root, None, START)
        with pytest.raises(VaultLocked, match="stop that process"):
            resolve_run_as_operator(root, intake_id_for("run-1"), "x", START)
        with pytest.raises(VaultLocked):
            store.start_intake()
        assert state_of(root, "run-1")["state"] == "pending"  # admission still works beside it
    finally:
        holder.communicate("\n", timeout=10)
    drain(store)
    assert state_of(root, "run-1")["state"] == "resolved"


@pytest.mark.both_backends
def test_stop_drains_for_the_deadline_then_aborts_and_the_record_stays_pending(tmp_path):
    root = make_vault(tmp_path)
    store = store_for(root)
    blocker = threading.Event()
    release = threading.Event()

    def hold_vault_lock():
        with VaultLock(root, timeout=30):
            blocker.set()
            release.wait(30)

    holder = threading.Thread(target=hold_vault_lock)
    holder.start()
    blocker.wait(10)
    worker = store.start_intake(poll_seconds=0.05)
    store.persist_completed_turn("run-1", ANSWER)
    report = store.stop(timeout=0.3)
    assert (report.drained, report.aborted) == (False, True)
    release.set()
    holder.join(10)
    assert worker.join(30)
    assert worker.transitions["aborted"] == 1 and worker.transitions["resolved"] == 0
    assert state_of(root, "run-1")["state"] == "pending"
    assert not (root / "daily/2026-11-30.md").exists()
    drain(store)  # the next start finishes it, once
    assert (root / "daily/2026-11-30.md").read_text().count("^t-") == 1
    assert state_of(root, "run-1")["state"] == "resolved"


@pytest.mark.both_backends
def test_transition_notifications_never_roll_back_the_durable_state(tmp_path):
    root = make_vault(tmp_path)
    seen = []

    def listener(name, intake_id):
        seen.append((name, intake_id))
        raise RuntimeError("health endpoint down")

    with store_for(root) as store:
        worker = store.start_intake(poll_seconds=0.05, on_transition=listener)
        store.persist_completed_turn("run-1", ANSWER)
        store.stop()
        snapshot = store.intake_snapshot()
    assert seen == [("admitted", intake_id_for("run-1")), ("resolved", intake_id_for("run-1"))]
    assert worker.transitions["notify_failed"] == 2
    assert worker.snapshot()["transitions"] == {"admitted": 1, "notify_failed": 2, "resolved": 1}
    assert snapshot["counts"]["resolved"] == 1 and snapshot["worker"] is None  # stopped
    assert state_of(root, "run-1")["state"] == "resolved"


def test_unsafe_note_path_is_a_bounded_failure_category(tmp_path):
    root = make_vault(tmp_path)
    (tmp_path / "elsewhere.md").write_text("# elsewhere\n")
    (root / "daily/2026-11-30.md").symlink_to(tmp_path / "elsewhere.md")
    clock = Clock()
    store = store_for(root, clock)
    store.persist_completed_turn("run-1", ANSWER)
    worker = IntakeWorker(store, clock=clock)
    worker.process_due()
    entry = state_of(root, "run-1")
    assert (entry["state"], entry["failure"], entry["attempts"]) == ("pending", "unsafe_path", 1)
    assert (tmp_path / "elsewhere.md").read_text() == "# elsewhere\n"

"""Admission: write modes, skip rules, the host summary, duplicates, bounds and hostile input."""

import hashlib
import os
import stat
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest

from memvault.vault.intake.admission import MAX_SUMMARY_BYTES, host_summary, intake_id_for, skip_reason
from memvault.vault.intake.files import MAX_RECORD_BYTES, IntakeDirs
from memvault.vault.intake.record import IntakeRecord, Payload, parse_record, render_record
from memvault.vault.intake.state import MAX_ACTIVE, read_record
from tests.intake_helpers import START, admit, intake_files, make_vault

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def root(tmp_path):
    return make_vault(tmp_path)


def pending_record(root, run_id):
    return read_record(IntakeDirs(root), "pending", intake_id_for(run_id))


def test_admission_writes_one_owner_only_record_named_by_the_run_id_hash(root):
    result = admit(root, "run-1")
    expected = hashlib.sha256(b"run-1").hexdigest()
    assert (result.status, result.id, result.state) == ("admitted", expected, "pending")
    path = root / ".capture-intake" / "pending" / f"{expected}.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for folder in ("", "pending", "dead", "resolved", "ledger"):
        assert stat.S_IMODE((root / ".capture-intake" / folder).stat().st_mode) == 0o700
    assert stat.S_IMODE((root / ".capture-intake-schema").stat().st_mode) == 0o600
    record = parse_record(path.read_bytes(), expected, str(path))
    assert record.payload.summary == "Deployed the fix and closed the incident."
    assert b"run-1" not in path.read_bytes()  # the raw run id is not stored
    assert intake_files(root) == ["catalog", f"pending/{expected}.json"]


def test_same_run_same_payload_is_a_duplicate_other_payload_fails_closed(root):
    first = admit(root, "run-1")
    before = (root / ".capture-intake/pending" / f"{first.id}.json").read_bytes()
    again = admit(root, "run-1", now=START + timedelta(minutes=5))
    assert (again.status, again.state) == ("duplicate", "pending")
    other = admit(root, "run-1", "A different answer.")
    assert (other.status, other.reason) == ("failed", "conflict")
    assert "NOT saved" in other.message
    assert (root / ".capture-intake/pending" / f"{first.id}.json").read_bytes() == before


def test_disabled_write_mode_skips_and_writes_nothing(root):
    result = admit(root, "run-1", write_mode="disabled")
    assert (result.status, result.reason) == ("skipped", "write_mode_disabled")
    assert not (root / ".capture-intake").exists()


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("NOTHING_TO_REPORT", "nothing_to_report"),
        ("Checked the feeds.\nNothing new today. NOTHING_TO_REPORT", "nothing_to_report"),
        ("All quiet.\nNOTHING_TO_REPORT\n\n", "nothing_to_report"),
        ("test", "test_probe"),
        ("  Test OK. ", "test_probe"),
        ("ping!", "test_probe"),
        ("   \n\t", "empty_answer"),
    ],
)
def test_low_signal_turns_are_skipped(root, answer, reason):
    result = admit(root, "run-1", answer)
    assert (result.status, result.reason) == ("skipped", reason)
    assert skip_reason(answer) == reason
    assert intake_files(root) == []


@pytest.mark.parametrize(
    "answer",
    [
        "ok",
        "Thanks, done.",
        "Sure, I'll do that.",
        "NOTHING_TO_REPORT was the old sentinel; here is news.",
        "test the deploy script tomorrow",
    ],
)
def test_short_contextual_acknowledgements_are_written(root, answer):
    assert admit(root, "run-1", answer).status == "admitted"


def test_host_summary_is_one_bounded_deterministic_line():
    assert host_summary("Line one\n\n  line\ttwo\r\n") == "Line one line two"
    assert host_summary("bell\x07 and \u202eevil\u202c bidi") == "bell and evil bidi"
    assert host_summary("ﬁne") == "fine"  # NFKC
    long = "word " * 2000
    summary = host_summary(long)
    assert len(summary.encode()) <= MAX_SUMMARY_BYTES and summary.endswith("…") and "\n" not in summary
    assert host_summary(long) == summary
    wide = "東" * 1000  # 3 bytes each: the cut falls on a character boundary
    assert len(host_summary(wide).encode()) <= MAX_SUMMARY_BYTES
    assert host_summary(wide).rstrip("…") == "東" * ((MAX_SUMMARY_BYTES - 3) // 3)


def test_append_host_summary_keeps_no_capture_text(root):
    admit(root, "run-1", capture_text="user: remember my locker is 42\nassistant: noted")
    assert pending_record(root, "run-1").payload.capture_text is None


def test_capture_mode_keeps_capture_text_but_cron_and_webhook_only_the_answer(tmp_path):
    root = make_vault(tmp_path, mode="bujo", write_mode="capture")
    kw = {"write_mode": "capture", "tier": "bujo"}
    transcript = "user: my locker is 42\nassistant: Noted, locker 42."
    assert admit(root, "user-turn", "Noted, locker 42.", capture_text=transcript, **kw).status == "admitted"
    assert pending_record(root, "user-turn").payload.capture_text == transcript
    for trigger in ("cron", "webhook"):
        prompt = "SYSTEM PRE-INSTRUCTIONS: summarise the inbox"
        result = admit(root, f"{trigger}-turn", "Inbox has 3 new invoices.", capture_text=prompt, trigger=trigger, **kw)
        assert result.status == "admitted"
        record = pending_record(root, f"{trigger}-turn")
        assert record.payload.capture_text == "Inbox has 3 new invoices." and record.payload.trigger == trigger
        assert b"PRE-INSTRUCTIONS" not in (root / ".capture-intake/pending" / f"{result.id}.json").read_bytes()
    assert admit(root, "no-text", "Plain answer.", **kw).status == "admitted"
    assert pending_record(root, "no-text").payload.capture_text == "Plain answer."


def test_capture_write_mode_needs_the_bujo_tier(root):
    result = admit(root, "run-1", write_mode="capture", tier="lite")
    assert (result.status, result.reason) == ("failed", "invalid_config")


@pytest.mark.parametrize(
    "turn",
    [
        {"answer": "Our key is sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t"},
        {"answer": "Connect with postgres://app:S3cretPass@db/prod"},
        {"answer": "Fine.", "capture_text": "password = Hunter2Hunter2!", "write_mode": "capture", "tier": "bujo"},
    ],
)
def test_credentials_are_refused_and_nothing_is_written(root, turn):
    result = admit(root, "run-1", **turn)
    assert (result.status, result.reason) == ("failed", "credential_refused")
    assert "NOT saved" in result.message and "S3cret" not in result.message and "Hunter2" not in result.message
    assert not (root / ".capture-intake/pending").exists() or not os.listdir(root / ".capture-intake/pending")


@pytest.mark.parametrize(
    ("turn", "reason"),
    [
        ({"run_id": None}, "invalid_turn"),
        ({"run_id": ""}, "invalid_turn"),
        ({"run_id": "   "}, "invalid_turn"),
        ({"run_id": "é" * 300}, "invalid_turn"),
        ({"run_id": 42}, "invalid_turn"),
        ({"answer": b"bytes"}, "invalid_turn"),
        ({"answer": "lone \ud800 surrogate"}, "invalid_turn"),
        ({"trigger": "email"}, "invalid_turn"),
        ({"completed_at": datetime(2026, 11, 30, 13, 3)}, "invalid_turn"),
        ({"completed_at": "2026-11-30"}, "invalid_turn"),
        ({"capture_text": 7, "write_mode": "capture", "tier": "bujo"}, "invalid_turn"),
        ({"capture_text": "x" * (512 * 1024 + 1), "write_mode": "capture", "tier": "bujo"}, "turn_too_large"),
        ({"capture_text": "\x01" * 120_000, "write_mode": "capture", "tier": "bujo"}, "record_too_large"),
    ],
)
def test_malformed_and_oversized_turns_fail_without_raising(root, turn, reason):
    turn = {"run_id": "run-1", "answer": "A fine answer.", **turn}
    result = admit(root, turn.pop("run_id"), turn.pop("answer"), **turn)
    assert (result.status, result.reason) == ("failed", reason)
    assert not (root / ".capture-intake/pending").exists() or not os.listdir(root / ".capture-intake/pending")


def test_completed_at_keeps_the_hosts_instant(root):
    when = datetime(2026, 3, 29, 1, 30, tzinfo=timezone(timedelta(hours=5)))
    admit(root, "run-1", completed_at=when)
    assert pending_record(root, "run-1").completed_at == when


def _plant(dirs: IntakeDirs, index: int) -> None:
    intake_id = hashlib.sha256(f"planted-{index}".encode()).hexdigest()
    rec = IntakeRecord(
        intake_id, Payload("append-host-summary", "user", f"planted {index}", None), "lite", START, START
    )
    path = dirs.record_path("pending" if index % 2 else "dead", intake_id)
    if index % 2 == 0:
        rec = rec.evolve(state="dead", attempts=16, failure="io_error")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, render_record(rec))
    os.close(fd)


def test_the_4097th_active_record_is_refused(root):
    assert admit(root, "first").status == "admitted"
    dirs = IntakeDirs(root)
    for index in range(MAX_ACTIVE - 1):
        _plant(dirs, index)
    full = admit(root, "one-too-many")
    assert (full.status, full.reason) == ("failed", "intake_full")
    assert "4096" in full.message and "NOT saved" in full.message
    assert admit(root, "first").status == "duplicate"  # a retry of admitted work still answers


def test_hostile_intake_files_fail_closed(root):
    dirs = IntakeDirs(root)
    admit(root, "seed")
    victim = dirs.record_path("pending", intake_id_for("victim"))
    outside = root.parent / "outside.json"
    outside.write_bytes(b"{}")
    victim.symlink_to(outside)
    linked = admit(root, "victim")
    assert (linked.status, linked.reason) == ("failed", "unsafe_path") and "symlink" in linked.message
    victim.unlink()
    victim.write_bytes(b"x" * (MAX_RECORD_BYTES + 1))
    victim.chmod(0o600)
    big = admit(root, "victim")
    assert (big.status, big.reason) == ("failed", "invalid_record") and "at most" in big.message
    victim.write_bytes(b'{"not": "a record"}\n')
    assert admit(root, "victim").reason == "invalid_record"
    if os.geteuid() == 0:
        seed = dirs.record_path("pending", intake_id_for("seed"))
        os.chown(seed, 4242, 4242)
        foreign = admit(root, "seed")
        assert (foreign.status, foreign.reason) == ("failed", "unsafe_path") and "uid 4242" in foreign.message


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a folder's owner needs root")
def test_intake_folder_owned_by_another_uid_is_refused(root):
    admit(root, "seed")
    os.chown(root / ".capture-intake" / "pending", 4242, 4242)
    result = admit(root, "run-2")
    assert (result.status, result.reason) == ("failed", "unsafe_path") and "owned by uid 4242" in result.message


def test_hostile_records_show_as_invalid_in_the_snapshot(root):
    from memvault.vault.intake.snapshot import runtime_snapshot

    admit(root, "good")
    bad = IntakeDirs(root).record_path("pending", intake_id_for("bad"))
    bad.write_bytes(b'{"v":1}\n')
    bad.chmod(0o600)
    snapshot = runtime_snapshot(IntakeDirs(root), START)
    assert (snapshot["counts"]["pending"], snapshot["counts"]["invalid"]) == (1, 1)


def test_turn_json_is_strict_and_bounded():
    from memvault.vault.intake.turn_json import MAX_TURN_JSON_BYTES, TurnJsonError, parse_turn_json

    with pytest.raises(TurnJsonError) as too_big:
        parse_turn_json(b" " * (MAX_TURN_JSON_BYTES + 1))
    assert too_big.value.category == "turn_too_large"
    parsed = parse_turn_json(b'{"runId": "r", "answer": "a", "completedAt": "2026-11-30T14:03:00+01:00"}')
    assert parsed["completed_at"] == datetime(2026, 11, 30, 13, 3, tzinfo=UTC)
    assert (parsed["trigger"], parsed["capture_text"]) == ("user", None)


def test_symlinked_intake_folders_are_refused(root, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (root / ".capture-intake").symlink_to(elsewhere)
    result = admit(root, "run-1")
    assert (result.status, result.reason) == ("failed", "unsafe_path")
    assert os.listdir(elsewhere) == []


def test_concurrent_threads_admit_one_run_exactly_once(root):
    results = []
    barrier = threading.Barrier(8)

    def worker():
        barrier.wait()
        results.append(admit(root, "shared-run").status)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == ["admitted"] + ["duplicate"] * 7


_PROCESS_SCRIPT = """
import sys
sys.path.insert(0, {repo!r})
from tests.intake_helpers import admit
from pathlib import Path
root = Path(sys.argv[1])
print(" ".join(admit(root, f"run-{{i}}", f"Answer {{i}}.").status for i in range(12)))
"""


def test_concurrent_processes_admit_each_run_exactly_once(root):
    script = _PROCESS_SCRIPT.format(repo=REPO)
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(root)], stdout=subprocess.PIPE, text=True) for _ in range(4)
    ]
    outputs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    for index in range(12):
        statuses = sorted(out[index] for out in outputs)
        assert statuses == ["admitted", "duplicate", "duplicate", "duplicate"]
    assert len(os.listdir(root / ".capture-intake/pending")) == 12

"""Host helpers: the Wake snapshot, the activity score, dirty admission, and the switches."""

import pytest

from memvault.indexer.runtime.service import RuntimeService
from memvault.vault.errors import VaultError
from memvault.vault.runtime.activity import (
    ActivityTracker,
    Switches,
    TurnSignals,
    WritesDisabled,
    activity_score,
    diversity_score,
    review_due,
)
from memvault.vault.runtime.wake import DOCUMENT_COVER_LIMIT, RUNTIME_MEMORY_PROTOCOL, SPACE_COVER_LIMIT

# --- activity score --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "user_chars, turns, tool_results, tools, expected",
    [
        (0, 0, 0, 0, 0),
        (49, 0, 0, 0, 0),
        (50, 0, 0, 0, 1),
        (149, 0, 0, 0, 2),
        (10_000, 0, 0, 0, 3),  # capped at 3
        (0, 4, 0, 0, 4),
        (0, 0, 4, 0, 0),
        (0, 0, 5, 0, 1),
        (0, 0, 500, 0, 2),  # capped at 2
        (0, 0, 0, 2, 0),
        (0, 0, 0, 3, 1),
        (0, 0, 0, 9, 2),
        (150, 1, 10, 4, 8),
    ],
)
def test_activity_score_formula(user_chars, turns, tool_results, tools, expected):
    assert activity_score(user_chars, turns, tool_results, tools) == expected


def test_diversity_thresholds():
    assert [diversity_score(n) for n in range(6)] == [0, 0, 0, 1, 2, 2]


def test_eligibility_accumulates_across_turns_and_clears():
    tracker = ActivityTracker()
    for _ in range(4):
        tracker.record(TurnSignals(user_text="short"))
    assert tracker.score == 4 and not tracker.eligible
    tracker.record(TurnSignals(user_text="x" * 10, tools=("a", "b", "a")))
    assert tracker.score == 5 and tracker.eligible
    tracker.clear()
    assert tracker.score == 0


def eligible_tracker():
    tracker = ActivityTracker()
    for _ in range(5):
        tracker.record(TurnSignals())
    return tracker


@pytest.mark.parametrize(
    "turn, admitted",
    [
        (TurnSignals(user_text="Please remember that I prefer metric units."), True),
        (TurnSignals(user_text="From now on, answer in Dutch."), True),
        (TurnSignals(user_text="x" * 320), True),
        (TurnSignals(user_text="x" * 319), False),
        (TurnSignals(user_text="ok", assistant_chars=600), True),
        (TurnSignals(user_text="ok", assistant_chars=599), False),
        (TurnSignals(user_text="ok", non_memory_work=True), True),
        (TurnSignals(user_text="Don't remember this, it is off the record. " + "x" * 400, non_memory_work=True), False),
        (TurnSignals(user_text="forget this please", assistant_chars=5000), False),
    ],
)
def test_dirty_admission(turn, admitted):
    assert eligible_tracker().admit(turn)[0] is admitted


def test_admission_needs_the_score_first():
    ok, why = ActivityTracker().admit(TurnSignals(user_text="remember this"))
    assert not ok and "score 0" in why


def test_review_timing():
    assert not review_due(now_ms=29_999, last_turn_end_ms=0, last_attempt_ms=None)
    assert review_due(now_ms=30_000, last_turn_end_ms=0, last_attempt_ms=None)
    assert not review_due(now_ms=400_000, last_turn_end_ms=0, last_attempt_ms=200_000)
    assert review_due(now_ms=500_000, last_turn_end_ms=0, last_attempt_ms=200_000)


# --- switches --------------------------------------------------------------------------------


def test_each_switch_turns_off_only_its_own_thing():
    default = Switches()
    assert (default.recall_cues, default.writeback_cues, default.background_review, default.routing_section) == (
        True,
    ) * 4
    assert not Switches(recall_mode="off").recall_cues and Switches(recall_mode="off").writeback_cues
    off = Switches(writeback_mode="off")
    assert not off.writeback_cues and not off.background_review and off.recall_cues
    life = Switches(lifecycle_enabled=False)
    assert not (life.recall_cues or life.writeback_cues or life.background_review) and life.write_enabled
    routing = Switches(routing_guidance=False)
    assert not routing.routing_section and routing.runtime_context
    general = Switches(strategy="general")
    assert not general.capacity_maintenance and not general.background_review
    with pytest.raises(VaultError):
        Switches(strategy="fancy")


def test_write_enabled_false_rejects_every_write_command(new_vault):
    service = RuntimeService.open(new_vault, switches=Switches(write_enabled=False))
    for call in (
        lambda: service.add("USER", "x"),
        lambda: service.replace("USER", "x", "y"),
        lambda: service.remove("USER", "x"),
        lambda: service.create_document("T", "b"),
        lambda: service.update_document("t", "b"),
        lambda: service.archive_document("t"),
        lambda: service.create_space("S"),
        lambda: service.remember_in_space("default", "x"),
    ):
        with pytest.raises(WritesDisabled):
            call()
    assert not (new_vault / "runtime").exists() and not (new_vault / "documents").exists()
    assert service.show().revision == 0  # reads still work


# --- the Wake snapshot -----------------------------------------------------------------------


def test_wake_is_a_complete_revisioned_state_with_bounded_covers(new_vault):
    service = RuntimeService.open(new_vault)
    service.add("USER", "Prefers metric units.")
    service.add("MEMORY", "Deploys happen on Tuesdays.")
    for n in range(12):
        service.create_document(f"Project {n}", f"body {n}", f"summary {n}")
    for n in range(12):
        service.create_space(f"Space {n}", "d" * 300)
    wake = service.wake_snapshot()
    text = wake.text
    assert wake.revision == 2 and 'revision="2"' in text
    assert "- Prefers metric units." in text and "- Deploys happen on Tuesdays." in text
    assert f"## Documents (12 active, showing {DOCUMENT_COVER_LIMIT})" in text
    assert f"## Memory spaces (12 listed, showing {SPACE_COVER_LIMIT})" in text
    assert max(len(line) for line in text.splitlines()) <= 200
    assert RUNTIME_MEMORY_PROTOCOL not in text  # the static protocol is not repeated


def test_wake_changes_only_when_the_state_changes_and_adopts_hand_edits(new_vault):
    service = RuntimeService.open(new_vault)
    service.add("USER", "Prefers metric units.")
    first = service.wake_snapshot()
    assert not service.wake_snapshot().changed_since(first.digest)
    (new_vault / "runtime/USER.md").write_text("- Prefers imperial units.\n")
    second = service.wake_snapshot()
    assert second.changed_since(first.digest) and "- Prefers imperial units." in second.text
    (new_vault / "runtime/USER.md").write_text("An unadoptable paragraph.\n")
    flagged = service.wake_snapshot()
    assert "hand edit not adopted" in flagged.text and "- Prefers imperial units." in flagged.text

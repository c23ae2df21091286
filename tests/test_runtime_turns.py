"""TurnRegistry: which budget a call shares (explicit ids, the implicit turn and its ends)."""

import pytest

from memvault.indexer.runtime.turns import InvalidTurnId, TurnRegistry, check_turn_id


class Begin:
    def __init__(self):
        self.count = 0

    def __call__(self):
        self.count += 1
        return object()  # stands in for a TurnRecall: only identity matters here


def test_explicit_ids_share_one_budget_and_new_ids_get_fresh_ones():
    begin = Begin()
    turns = TurnRegistry(begin)
    assert turns.turn("a")[1] is turns.turn("a")[1]
    assert turns.turn("b")[1] is not turns.turn("a")[1]
    assert begin.count == 2


def test_the_implicit_turn_ends_on_a_wake_read_or_after_idleness():
    now = [0.0]
    turns = TurnRegistry(Begin(), clock=lambda: now[0], implicit_idle_s=120)
    first = turns.turn(None)[1]
    now[0] = 119.0
    assert turns.turn(None)[1] is first  # still the same turn: 119 s since its last call
    now[0] = 238.9
    assert turns.turn(None)[1] is first  # idleness counts from the last call, not the first
    now[0] = 359.0
    second = turns.turn(None)[1]
    assert second is not first  # 120 s without a call
    turns.end_implicit_turn()
    assert turns.turn(None)[1] is not second
    assert turns.turn("x")[1] is not turns.turn(None)[1]  # explicit and implicit turns never mix


def test_at_most_64_explicit_turns_are_remembered_least_recent_first():
    turns = TurnRegistry(Begin())
    first = turns.turn("t0")[1]
    for i in range(1, 64):
        turns.turn(f"t{i}")
    assert turns.turn("t0")[1] is first  # 64 turns: still remembered (and now the most recent)
    turns.turn("t64")  # the 65th forgets the least recently used, t1
    assert turns.turn("t0")[1] is first
    assert turns.turn("t1")[1] is not None and len(turns._explicit) == 64


@pytest.mark.parametrize("bad", [5, "", "x" * 129, "a\nb", ["t"]])
def test_bad_turn_ids_are_refused_with_the_fix(bad):
    with pytest.raises(InvalidTurnId, match="memvault/turnId"):
        check_turn_id(bad)


def test_good_turn_ids_and_none_pass():
    assert check_turn_id(None) is None and check_turn_id("run-42/turn-7") == "run-42/turn-7"
    assert check_turn_id("x" * 128) == "x" * 128

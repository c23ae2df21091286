"""The Python API's times: anything but a timezone-aware datetime is refused with an error that
names the fix, in process and through a running owner, and nothing is written for it."""

from datetime import UTC, datetime

import pytest

from memvault import MemoryStore
from memvault.vault.errors import InvalidRecord
from tests.engine_helpers import OwnerProcess

NOT_TIMES = ["2026-11-30T14:03:00+01:00", 1764507780, 17.5, b"2026-11-30", [2026, 11, 30], {"at": 1}]
GOOD = datetime(2026, 11, 30, 13, 3, tzinfo=UTC)


def daily_text(root) -> str:
    return "".join(note.read_text() for note in sorted((root / "daily").rglob("*.md")))


def check_every_bad_time_is_refused(store, root):
    for value in NOT_TIMES:
        with pytest.raises(InvalidRecord, match="timezone-aware datetime.*fromisoformat"):
            store.remember(f"A fact stamped with {value!r}.", at=value)
    with pytest.raises(InvalidRecord, match="timezone-aware"):
        store.remember("A fact with a naive time.", at=datetime(2026, 11, 30, 14, 3))
    outcomes = store.remember_many([{"text": "Kept: a good item before the bad ones.", "at": GOOD}]
                                   + [{"text": f"Refused item {n}.", "at": value} for n, value in enumerate(NOT_TIMES)]
                                   + ["Kept: plain text after them."])  # fmt: skip
    assert [outcome.index for outcome in outcomes] == list(range(len(NOT_TIMES) + 2))
    assert [outcome.receipt is not None for outcome in outcomes] == [True] + [False] * len(NOT_TIMES) + [True]
    for outcome in outcomes[1:-1]:
        assert isinstance(outcome.error, InvalidRecord) and "fromisoformat" in str(outcome.error)
    text = daily_text(root)
    assert "Kept: a good item before the bad ones." in text and "Kept: plain text after them." in text
    assert "stamped with" not in text and "Refused item" not in text and "naive" not in text


@pytest.mark.both_backends
def test_a_time_that_is_not_a_datetime_is_refused_in_process(new_vault):
    with MemoryStore.open(new_vault) as store:
        check_every_bad_time_is_refused(store, new_vault)


@pytest.mark.both_backends
def test_a_time_that_is_not_a_datetime_is_refused_through_the_owner(new_vault):
    owner = OwnerProcess(new_vault, "serve").wait_serving()
    try:
        with MemoryStore.open(new_vault) as store:
            assert type(store).__name__ == "RemoteStore"
            check_every_bad_time_is_refused(store, new_vault)
    finally:
        owner.stop()

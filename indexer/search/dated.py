"""Date-aware recall: a question that names a period favours memories dated in it, or just after.

"What was Dave doing in the first weekend of October 2023?" is answered by "Last Friday I went
to the car show", written on 2023-10-09: the words never state the date, the memory's note does.
So when the question names periods (`periods.question_periods`, the grammar routing reads), every
fused candidate whose note date falls in a period, or up to `AFTER_DAYS` after it (people tell of
a weekend on the Monday), gains a bonus: a ranked list of its own, the in-window candidates in
their fused order, added like any retriever's RRF term with weight `DATE_WEIGHT`. The bonus
re-orders candidates the retrievers found; it never adds one they did not, and it leaves each
candidate's `strength` (the auto-mode band's evidence) as it was: a date is not evidence of content.

The date is read from the candidate's key (`daily/2023-10-09.md#…`, `vault/layout.py`): no row is loaded, and a
question without a period costs one regular-expression pass over its text.
"""

from __future__ import annotations

from datetime import date, timedelta

from memvault.indexer.search.hybrid import RRF_K, Fused
from memvault.indexer.search.periods import Period
from memvault.vault.layout import note_day

#: days after a period that still count as in it (a weekend told of on the next Monday)
AFTER_DAYS = 7
#: weight of the in-window list against BM25's 1.0
DATE_WEIGHT = 1.0


def note_date(key: str) -> date | None:
    """The local date of a curated memory's note, from its row key (either daily layout)."""
    return note_day(key.partition("#")[0], "daily")


def in_windows(day: date | None, periods: tuple[Period, ...]) -> bool:
    return day is not None and any(p.start <= day <= p.end + timedelta(days=AFTER_DAYS) for p in periods)


def favour_periods(fused: list[Fused], periods: tuple[Period, ...]) -> list[Fused]:
    """`fused` re-ordered with the in-window bonus (the same list when there are no periods)."""
    if not periods:
        return fused
    rank = 0
    for entry in fused:
        if in_windows(note_date(entry.key), periods):
            rank += 1
            entry.score += DATE_WEIGHT / (RRF_K + rank) * 2.0
            entry.evidence["date"] = (rank, 1.0)
    return sorted(fused, key=lambda entry: (-entry.score, entry.key))

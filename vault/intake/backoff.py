"""The retry schedule of pending intake work: 16 attempts, exponential, 1 minute to 6 hours.

After failed attempt n (1-based) the next one is due `min(1 min * 2**(n-1), 6 h)` later:
1, 2, 4, 8, 16, 32, 64, 128, 256 minutes, then 6 hours six times. The 15 waits add up to
2,671 minutes (about 44.5 hours), more than the 24 hours the spec asks the schedule to span,
so a provider or disk outage of a day does not dead-letter a turn. The 16th failure moves the
record to `dead/`.

An unusable model answer is not an outage: the same model, asked the same way, tends to fail the
same way, and each such attempt already includes one repair call. Failures of the categories in
`INVALID_OUTPUT_CATEGORIES` therefore also count against their own, smaller budget of
`MAX_INVALID_OUTPUT_ATTEMPTS` (4): the 4th moves the record to `dead/` even if outage attempts
remain (a dead letter is revived by `memvault retry`, e.g. after switching to a larger model).
They wait on the same schedule as every other failure. An empty extraction of a substantive turn
(`empty_extraction`) is a valid answer, and at temperature 0 the same question gets the same
answer, so it is not retried automatically at all: the record becomes a dead letter at once,
for `memvault retry` (after a model change) or `memvault resolve`.
"""

from datetime import timedelta

MAX_ATTEMPTS = 16
MAX_INVALID_OUTPUT_ATTEMPTS = 4
INVALID_OUTPUT_CATEGORIES = ("invalid_model_output", "empty_extraction")
#: failures that are never retried automatically (dead letter at once)
FINAL_CATEGORIES = ("empty_extraction",)
FIRST_DELAY = timedelta(minutes=1)
MAX_DELAY = timedelta(hours=6)


def delay_after(failed_attempts: int) -> timedelta:
    """How long to wait after the `failed_attempts`-th failure (1-based) before trying again."""
    if failed_attempts < 1:
        raise ValueError("delay_after counts failed attempts from 1")
    exponent = min(failed_attempts - 1, 32)  # 2**32 minutes is far past the cap already
    return min(FIRST_DELAY * (2**exponent), MAX_DELAY)


def is_exhausted(failed_attempts: int, invalid_output_attempts: int = 0, category: str | None = None) -> bool:
    """True once a record has used all of its attempts, or all of its invalid-output attempts,
    or failed in a way that is never retried automatically."""
    if category in FINAL_CATEGORIES:
        return True
    return failed_attempts >= MAX_ATTEMPTS or invalid_output_attempts >= MAX_INVALID_OUTPUT_ATTEMPTS


def is_invalid_output(category: str) -> bool:
    """Whether a failure category spends the invalid-output budget too."""
    return category in INVALID_OUTPUT_CATEGORIES


def schedule() -> list[timedelta]:
    """Every wait between the 16 attempts (15 of them), for docs and tests."""
    return [delay_after(n) for n in range(1, MAX_ATTEMPTS)]

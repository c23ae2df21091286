"""The retry schedule of pending intake work: 16 attempts, exponential, 1 minute to 6 hours.

After failed attempt n (1-based) the next one is due `min(1 min * 2**(n-1), 6 h)` later:
1, 2, 4, 8, 16, 32, 64, 128, 256 minutes, then 6 hours six times. The 15 waits add up to
2,671 minutes (about 44.5 hours), more than the 24 hours the spec asks the schedule to span,
so a provider or disk outage of a day does not dead-letter a turn. The 16th failure moves the
record to `dead/`.
"""

from datetime import timedelta

MAX_ATTEMPTS = 16
FIRST_DELAY = timedelta(minutes=1)
MAX_DELAY = timedelta(hours=6)


def delay_after(failed_attempts: int) -> timedelta:
    """How long to wait after the `failed_attempts`-th failure (1-based) before trying again."""
    if failed_attempts < 1:
        raise ValueError("delay_after counts failed attempts from 1")
    exponent = min(failed_attempts - 1, 32)  # 2**32 minutes is far past the cap already
    return min(FIRST_DELAY * (2**exponent), MAX_DELAY)


def is_exhausted(failed_attempts: int) -> bool:
    """True once a record has used all of its attempts and becomes a dead letter."""
    return failed_attempts >= MAX_ATTEMPTS


def schedule() -> list[timedelta]:
    """Every wait between the 16 attempts (15 of them), for docs and tests."""
    return [delay_after(n) for n in range(1, MAX_ATTEMPTS)]

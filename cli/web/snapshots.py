"""The slow half of the Status page, served stale-while-revalidate.

On a big vault `memvault health` reads every note's stat, the vector meta and the intake ledger
(a few hundred milliseconds at 100k memories), and so does the intake snapshot. The Status page
shows the latest such snapshot with its age; when it is older than `max_age`, the page is served
from it at once and one background thread takes a new one for the next load. Nothing runs while
nobody looks. The first load, and a load with `fresh=1` ("check now"), wait for a new snapshot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

DEFAULT_MAX_AGE = 5.0


class StaleWhileRevalidate:
    def __init__(self, compute: Callable[[], dict], *, max_age: float = DEFAULT_MAX_AGE,
                 clock: Callable[[], float] = time.monotonic):  # fmt: skip
        self._compute = compute
        self._max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()  # one computation at a time; callers needing a fresh one share it
        self._state = threading.Lock()
        self._value: dict | None = None
        self._taken = 0.0
        self._refreshing = False

    def get(self, *, fresh: bool = False) -> tuple[dict, float]:
        """(snapshot, its age in seconds)."""
        with self._state:
            value, taken = self._value, self._taken
            stale = value is not None and self._clock() - taken > self._max_age
            start_refresh = stale and not fresh and not self._refreshing
            if start_refresh:
                self._refreshing = True
        if value is None or fresh:
            return self._refresh(), 0.0
        if start_refresh:
            threading.Thread(target=self._background, name="memvault-web-status", daemon=True).start()
        return value, max(0.0, self._clock() - taken)

    def _background(self) -> None:
        try:
            self._refresh()
        except Exception:  # the next page load computes (and reports) it in the foreground
            with self._state:
                self._value = None
        finally:
            with self._state:
                self._refreshing = False

    def _refresh(self) -> dict:
        with self._lock:
            started = self._clock()
            value = self._compute()
            with self._state:
                self._value, self._taken = value, started
            return value

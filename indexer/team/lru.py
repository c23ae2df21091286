"""The specification's client-side fingerprint LRU for network admission (first document,
"External MemoryStore implementations").

Within one store process the 10,000 most recently completed or exactly retried run fingerprints
are kept, each only two SHA-256 digests (of the run id and of the payload), never a raw id or
content. An exact retained retry is answered as a duplicate without a request and refreshes its
position; a retained run id with other payload bytes fails before any request. Failed and
still-in-flight admissions do not take a place in the budget, and concurrent exact retries are
coalesced: one request, every caller gets its answer. A concurrent alternative (same run id,
other bytes, while the first is in flight) fails as a conflict.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

#: the spec's default: "the 10,000 most recently completed or exactly retried run fingerprints"
RETAINED_FINGERPRINTS = 10_000


@dataclass
class Flight:
    """One admission in flight: its payload digest, and its outcome once the request ends."""

    payload: bytes
    done: threading.Event = field(default_factory=threading.Event)
    outcome: object = None
    waiters: int = 0  # exact retries that joined this flight instead of sending a request


@dataclass(frozen=True)
class Decision:
    """What to do with one admission: `retained` (exact retry of a completed run: a duplicate),
    `conflict` (this run id is held with other bytes), `wait` (join `flight`) or `lead` (send
    the request, then `finish(flight, …)`)."""

    kind: str
    flight: Flight | None = None


class FingerprintLRU:
    def __init__(self, capacity: int = RETAINED_FINGERPRINTS):
        self.capacity = capacity
        self._lock = threading.Lock()
        self._completed: OrderedDict[bytes, bytes] = OrderedDict()  # run digest → payload digest
        self._flights: dict[bytes, Flight] = {}

    def __len__(self) -> int:
        return len(self._completed)

    def entries(self) -> list[tuple[bytes, bytes]]:
        """The retained fingerprints, oldest first (tests check that only digests are kept)."""
        with self._lock:
            return list(self._completed.items())

    def decide(self, run: bytes, payload: bytes) -> Decision:
        with self._lock:
            retained = self._completed.get(run)
            if retained is not None:
                if retained != payload:
                    return Decision("conflict")
                self._completed.move_to_end(run)  # an exact retry refreshes its position
                return Decision("retained")
            flight = self._flights.get(run)
            if flight is not None:
                if flight.payload != payload:
                    return Decision("conflict")
                flight.waiters += 1
                return Decision("wait", flight)
            flight = self._flights[run] = Flight(payload)
            return Decision("lead", flight)

    def finish(self, run: bytes, flight: Flight, outcome: object, *, completed: bool) -> None:
        """End a led flight: `completed` (admitted, or a duplicate with the same bytes) keeps the
        fingerprint; a failure or a conflict leaves the budget as it was."""
        with self._lock:
            if self._flights.get(run) is flight:
                del self._flights[run]
            if completed:
                self._completed[run] = flight.payload
                self._completed.move_to_end(run)
                while len(self._completed) > self.capacity:
                    self._completed.popitem(last=False)
        flight.outcome = outcome
        flight.done.set()

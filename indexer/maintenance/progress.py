"""How a long job reports where it is: named phases, each with a count done out of a total.

The library never prints: a rebuild (or a bulk import) records its phases in a `PhaseLog`, which
the CLI may watch and draw, and which ends up in the job's report. Events carry only numbers,
so a reporter can show counts and rates and can never claim a phase is complete before the job
says so.

    phase("notes", total=20000)      reading notes and filling BM25 (files)
    advance("notes", 500)            500 more files done
    phase("embedding", total=None)   memories embedded so far; the total is known once every
                                     note is read (it may run beside "notes": both cores work)
    phase("vectors") / phase("swap") saving the vector index; catching up and switching over
    done()                           the job finished; nothing follows
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass
class PhaseState:
    name: str
    total: int | None = None
    done: int = 0
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None

    def seconds(self, now: float | None = None) -> float:
        end = self.finished if self.finished is not None else (time.monotonic() if now is None else now)
        return max(end - self.started, 0.0)

    def rate(self, now: float | None = None) -> float | None:
        seconds = self.seconds(now)
        return self.done / seconds if seconds > 0 and self.done else None


class PhaseLog:
    """A thread-safe record of a job's phases (the vector builder thread reports too).

    A phase ends when the next one of the same job starts after it, or at `done()`; one that runs
    beside another (embedding beside notes) ends only when it is started again as the current
    phase or the job ends. `on_change` is called after every event, with the lock released.
    """

    def __init__(self, on_change=None):
        self.phases: dict[str, PhaseState] = {}
        self.current: str | None = None
        self.finished = False
        self._lock = threading.Lock()
        self._on_change = on_change

    def phase(self, name: str, total: int | None = None) -> None:
        with self._lock:
            previous = self.phases.get(self.current) if self.current else None
            if previous is not None and previous.name != name and previous.finished is None:
                previous.finished = time.monotonic()
            state = self.phases.setdefault(name, PhaseState(name))
            if total is not None:
                state.total = total
            self.current = name
        self._changed()

    def start_beside(self, name: str) -> None:
        """Start a phase that runs beside the current one (its clock starts now)."""
        with self._lock:
            self.phases.setdefault(name, PhaseState(name))
        self._changed()

    def advance(self, name: str, count: int) -> None:
        with self._lock:
            self.phases.setdefault(name, PhaseState(name)).done += count
        self._changed()

    def done(self) -> None:
        with self._lock:
            now = time.monotonic()
            for state in self.phases.values():
                if state.finished is None:
                    state.finished = now
            self.finished = True
        self._changed()

    def snapshot(self) -> list[PhaseState]:
        with self._lock:
            return [PhaseState(s.name, s.total, s.done, s.started, s.finished) for s in self.phases.values()]

    def to_json(self) -> list[dict]:
        return [{"phase": s.name, "done": s.done, "total": s.total, "seconds": round(s.seconds(), 3)}
                for s in self.snapshot()]  # fmt: skip

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self)

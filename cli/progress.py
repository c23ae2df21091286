"""Drawing a long job's phases on a terminal: one live line, and a summary line per phase.

Silent when stderr is not a terminal (the library still reports; nobody draws). A phase shows
a percentage only while it has a total, and never 100 % before the job says the phase is over:
the last line of each phase is printed when the next phase starts or the job ends.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time

import click

from memvault.indexer.maintenance.progress import PhaseLog, PhaseState

LABELS = {"notes": ("reading notes", "files"), "embedding": ("embedding", "memories"),
          "vectors": ("saving the vector index", ""), "swap": ("switching to the new index", ""),
          "import": ("importing", "lines")}  # fmt: skip
_REDRAW_SECONDS = 0.1


def describe(state: PhaseState, finished: bool) -> str:
    label, unit = LABELS.get(state.name, (state.name, "items"))
    if not unit:
        return f"{label}: done in {state.seconds():.1f}s" if finished else f"{label}…"
    count = f"{state.done:,}" if state.total is None else f"{state.done:,}/{state.total:,}"
    if state.total and not finished:
        count += f" ({min(99, state.done * 100 // state.total)}%)"
    rate = state.rate()
    pace = f", {rate:,.0f}/s" if rate else ""
    if finished:
        return f"{label}: {count} {unit} in {state.seconds():.1f}s{pace}"
    return f"{label}: {count} {unit}{pace}"


class TerminalProgress:
    """Renders a PhaseLog's events; thread-safe (a builder thread reports beside the main one)."""

    def __init__(self, stream=None):
        self.stream = stream or click.get_text_stream("stderr")
        self.log = PhaseLog(on_change=self._changed)
        self._lock = threading.Lock()
        self._printed: set[str] = set()
        self._last_draw = 0.0
        self._live = False

    def _changed(self, log: PhaseLog) -> None:
        with self._lock:
            states = log.snapshot()
            for state in states:
                if state.finished is not None and state.name not in self._printed:
                    self._printed.add(state.name)
                    self._line(describe(state, finished=True), final=True)
            now = time.monotonic()
            running = [s for s in states if s.finished is None]
            if running and (now - self._last_draw >= _REDRAW_SECONDS):
                self._last_draw = now
                self._line("  ·  ".join(describe(s, finished=False) for s in running), final=False)

    def _line(self, text: str, final: bool) -> None:
        width = 100
        clear = "\r" + " " * width + "\r" if self._live else ""
        self.stream.write(clear + (f"  {text}\n" if final else f"  {text}"[:width]))
        self.stream.flush()
        self._live = not final


@contextlib.contextmanager
def phase_progress(enabled: bool, opening: str | None = None):
    """A TerminalProgress's log when `enabled` (a terminal, not --json), else None.

    `opening` is printed at once, before anything slow (imports, loading the embedding model)."""
    if not enabled:
        yield None
        return
    reporter = TerminalProgress()
    if opening:
        reporter.stream.write(f"{opening}\n")
        reporter.stream.flush()
    yield reporter.log


def progress_enabled(json_: bool) -> bool:
    return not json_ and sys.stderr.isatty()

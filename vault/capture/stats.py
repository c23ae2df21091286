"""What capture has been producing, content-free: one row per recent run, and the aggregate.

    .capture-intake/capture-stats.json     0600, canonical JSON, the last 64 runs

A row holds only counts and flags: the run's intake id (a SHA-256, not the run id), when it was
captured, facts added / updated / superseded, memories that were no-ops, model calls and repairs,
whether the extraction was empty and whether the turn was substantive. Never text.

Observability, not canonical state: the file is written after a capture's commit (under the
capture lock), so a crash in between loses one row, never a fact; a damaged file is reported
by `health` and `inspect` and replaced by the next capture. `health` reads it to warn when the
model stops extracting: the last `EMPTY_STREAK` captures of substantive turns produced nothing.

A turn is *substantive* when its capture text has at least `SUBSTANTIVE_MIN_WORDS` words. The
spec names only the low-signal turns the host skips (the NOTHING_TO_REPORT sentinel and tiny
test/ping probes) and says short contextual acknowledgements are still written; 25 words is our
line above a thank-you or an acknowledgement, and below any turn that states a decision with its
context. An empty extraction of a substantive turn is not a success: the run becomes a dead
letter (`empty_extraction`) that `memvault retry` can send through a better model later.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from memvault.vault.errors import VaultError
from memvault.vault.fsio import atomic_write, ensure_private_dir
from memvault.vault.intake.files import INTAKE_DIR, is_intake_id, read_private
from memvault.vault.intake.record import format_ts
from memvault.vault.strict_json import loads_strict

STATS_FILE = "capture-stats.json"
MAX_ROWS = 64
EMPTY_STREAK = 5
SUBSTANTIVE_MIN_WORDS = 25
_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)
_COUNT_KEYS = ("added", "updated", "superseded", "noops", "calls", "repairs")


def is_substantive(turn_text: str) -> bool:
    """Whether a turn is long enough that capturing nothing from it is news (module docstring)."""
    return len(_WORD_RE.findall(turn_text)) >= SUBSTANTIVE_MIN_WORDS


@dataclass(frozen=True)
class CaptureRun:
    id: str  # intake id
    at: str  # when it was captured (UTC, format_ts)
    added: int
    updated: int
    superseded: int
    noops: int
    calls: int
    repairs: int
    empty: bool  # the extraction held no memory
    substantive: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def stats_path(root: Path) -> Path:
    return Path(root) / INTAKE_DIR / STATS_FILE


def read_runs(root: Path) -> tuple[list[CaptureRun], str | None]:
    """The recorded runs (oldest first) and a problem, if the file is damaged (then no runs)."""
    path = stats_path(root)
    try:
        body = loads_strict(read_private(path))
        runs = [_run(item) for item in body["runs"]]
        if set(body) != {"runs", "v"} or body["v"] != 1 or len(runs) > MAX_ROWS:
            raise ValueError("fields, version or length")
    except FileNotFoundError:
        return [], None
    except (VaultError, OSError, ValueError, KeyError, TypeError) as exc:
        return [], f"{path}: not a valid capture-stats file ({str(exc)[:120]}); the next capture replaces it"
    return runs, None


def _run(item: Any) -> CaptureRun:
    if not isinstance(item, dict) or set(item) != set(CaptureRun.__dataclass_fields__):
        raise ValueError("row fields")
    if not is_intake_id(item["id"]) or not isinstance(item["at"], str):
        raise ValueError("row id")
    if any(type(item[key]) is not int or item[key] < 0 for key in _COUNT_KEYS):
        raise ValueError("row counts")
    if type(item["empty"]) is not bool or type(item["substantive"]) is not bool:
        raise ValueError("row flags")
    return CaptureRun(**item)


def record_run(root: Path, run: CaptureRun) -> None:
    """Add (or, for a replayed run, replace) one row; keep the last MAX_ROWS. Capture lock held."""
    runs, _problem = read_runs(root)
    runs = [r for r in runs if r.id != run.id] + [run]
    body = {"runs": [r.to_json() for r in runs[-MAX_ROWS:]], "v": 1}
    ensure_private_dir(Path(root) / INTAKE_DIR)
    data = json.dumps(body, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    atomic_write(stats_path(root), data, mode=0o600)


def summarize(root: Path) -> dict[str, Any]:
    """The content-free summary `inspect` and `health` show."""
    runs, problem = read_runs(root)
    totals = {key: sum(getattr(r, key) for r in runs) for key in _COUNT_KEYS}
    substantive = [r for r in runs if r.substantive]
    streak = 0
    for run in reversed(substantive):
        if not run.empty:
            break
        streak += 1
    return {
        "runs": len(runs),
        **totals,
        "emptyExtractions": sum(r.empty for r in runs),
        "emptySubstantive": sum(r.empty for r in substantive),
        "emptyStreak": streak,  # the latest substantive captures in a row that produced nothing
        "lastAt": runs[-1].at if runs else None,
        "problem": problem,
        "recent": [r.to_json() for r in runs[-8:]],
    }


def not_extracting(summary: dict[str, Any]) -> str | None:
    """The health warning when the model has stopped extracting facts, else None."""
    if summary["emptyStreak"] >= EMPTY_STREAK:
        return (
            f"the last {summary['emptyStreak']} captures of substantive turns produced no memories: the model is "
            "not extracting facts: try a larger model (see docs/capture.md), then `memvault retry` the dead letters"
        )
    return None


def now_ts(now: datetime) -> str:
    return format_ts(now)

"""Status: one glance that says whether the vault is healthy, and what to run when it is not.

`memvault health` (each finding with its fix), the intake's content-free counts (as `inspect`:
ids and counts only, never what was said), vector lag, the serving index generation and its
size, the owner process, the embedding identity, and memories per day. Reads only: health
repairs nothing. Health, intake and index facts come from a snapshot at most a few seconds old
(`snapshots.py`), shown with its age; `?fresh=1` waits for a new one.
"""

from __future__ import annotations

import os
from datetime import date, timedelta

from memvault.cli.web.svg import day_bars
from memvault.cli.web.views.base import Args, View
from memvault.vault.layout import DAILY, note_day

CHART_DAYS = 60


class StatusView(View):
    path = "/status"
    template = "status.html"
    section = "Status"

    def data(self, args: Args, reader) -> dict:
        checked, age = reader.status_snapshot(fresh=args.flag("fresh"))
        index = checked["index"]
        return {
            "vault": str(reader.root),
            "mode": reader.mode,
            "timeZone": reader.time_zone,
            "checkedSecondsAgo": round(age, 1),
            "health": checked["health"],
            "intake": checked["intake"],
            "index": index,
            "vectors": _vectors(index, reader),
            "owner": {**reader.owner(), "serverPid": os.getpid()},
            "chart": _chart(reader.indexed_rows()),
        }


def slow_status(reader) -> dict:
    """What the page shows from a snapshot (cli/web/snapshots.py): health, intake, index facts."""
    return {"health": reader.health().to_json(), "intake": reader.intake(), "index": reader.index_facts()}


def _vectors(index: dict, reader) -> dict:
    configured, built = index["configuredEmbedding"], index["embedding"]
    lag = None
    if configured is not None and index["vectors"] is not None and index["curatedRows"] is not None:
        lag = max(0, index["curatedRows"] - index["vectors"])
    return {"configured": configured, "built": built, "matches": configured == built,
            "count": index["vectors"], "curated": index["curatedRows"], "lag": lag,
            "lagReason": reader.vector_lag_reason()}  # fmt: skip


def _chart(rows: dict[str, int]) -> dict:
    """Memories per day for (at most) the CHART_DAYS days ending at the newest daily note."""
    per_day: dict[date, int] = {}
    for path, count in rows.items():
        day = note_day(path, DAILY)  # flat or daily/YYYY/MM/: the layout knows (vault/layout.py)
        if day is not None:
            per_day[day] = per_day.get(day, 0) + count
    if not per_day:
        return {**day_bars([]), "from": None, "through": None, "total": 0}
    first, last = min(per_day), max(per_day)
    span = min(CHART_DAYS, (last - first).days + 1)  # a young vault is not drawn as mostly empty
    window = [last - timedelta(days=offset) for offset in range(span - 1, -1, -1)]
    counts = [(day.isoformat(), per_day.get(day, 0)) for day in window]
    return {**day_bars(counts), "from": counts[0][0], "through": counts[-1][0], "total": sum(n for _, n in counts)}

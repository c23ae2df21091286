"""MemoryJournal's range: inclusive local civil dates in an explicit IANA zone → a half-open UTC interval.

The caller names the zone; nothing here ever falls back to the host's zone or to UTC. A local
day starts at its first instant: midnight, or, when midnight falls in a DST gap (Chile, old
Brazil), the transition instant, which is where Python's `fold=0` puts a gap time. A day that
never happened in that zone (Pacific/Apia skipped 2011-12-30, Pacific/Kiritimati 1994-12-31)
is rejected rather than silently widened or emptied. The interval is
`[start(fromDate), start(throughDate + 1 day))`, so a fall-back day is 25 hours and a
spring-forward day 23, exactly as the people in that zone lived them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from memvault.vault.config import is_time_zone
from memvault.vault.errors import InvalidRecord
from memvault.vault.layout import DAILY, note_day, note_relpath_candidates

#: the spec's widest range, in local civil days (inclusive of both ends)
MAX_RANGE_DAYS = 31
#: zones are at most UTC-12 … UTC+14 and a note may be written in another zone than the query's:
#: notes this many days either side of the range can hold instants inside it
NOTE_DAY_MARGIN = 2
#: a local day starts this many hours before UTC midnight at the earliest (UTC+14) and ends this
#: many hours after the next UTC midnight at the latest (UTC-12)
_EARLIEST_ZONE_HOURS, _LATEST_ZONE_HOURS = 14, 12
_DATE_RE = re.compile(r"(?P<y>[0-9]{4})-(?P<m>[0-9]{2})-(?P<d>[0-9]{2})")
_MAX_ZONE_CHARS = 64


class JournalRequestError(InvalidRecord):
    """A MemoryJournal request is malformed: a missing field, a bad date or zone, a too-wide range."""

    code = "invalid_journal_request"


@dataclass(frozen=True)
class JournalRange:
    from_date: date
    through_date: date
    time_zone: str
    start: datetime  # UTC, inclusive
    end: datetime  # UTC, exclusive

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)

    def contains(self, epoch_seconds: int) -> bool:
        return self.start.timestamp() <= epoch_seconds < self.end.timestamp()

    def note_relpaths(self) -> list[str]:
        """Every daily note that can hold an instant of this range, oldest first."""
        first = date.fromordinal(max(1, self.from_date.toordinal() - NOTE_DAY_MARGIN))
        last = date.fromordinal(min(date.max.toordinal(), self.through_date.toordinal() + NOTE_DAY_MARGIN))
        days = (first + timedelta(days=offset) for offset in range((last - first).days + 1))
        # flat names and the Daily Notes plugin's YYYY/MM/ layout (vault/layout.py)
        return [path for day in days for path in note_relpath_candidates(DAILY, day)]

    def note_may_overlap(self, relpath: str) -> bool:
        """Whether the daily note `relpath` can hold an instant of this range at all, in any
        zone (UTC-12 … UTC+14). A note that cannot, scanned only because of the day margin, has
        no bearing on whether the range is complete, even when it could not be read whole."""
        day = note_day(relpath)  # flat or daily/YYYY/MM/
        if day is None:
            return True  # not a daily note name: never assume it is irrelevant
        midnight = datetime.combine(day, time(), tzinfo=UTC)
        earliest = midnight - timedelta(hours=_EARLIEST_ZONE_HOURS)
        latest = midnight + timedelta(days=1, hours=_LATEST_ZONE_HOURS)
        return earliest < self.end and self.start < latest

    def to_json(self) -> dict:
        return {
            "fromDate": self.from_date.isoformat(),
            "throughDate": self.through_date.isoformat(),
            "timeZone": self.time_zone,
            "utcStart": iso_z(self.start),
            "utcEnd": iso_z(self.end),
            "interval": "half-open [utcStart, utcEnd)",
        }

    @classmethod
    def from_json(cls, body: dict) -> JournalRange:
        """Rebuild a range echoed by `to_json` (a persisted snapshot), re-resolving it exactly."""
        return resolve_range(body["fromDate"], body["throughDate"], body["timeZone"])


def iso_z(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def resolve_range(from_date: object, through_date: object, time_zone: object) -> JournalRange:
    """Validate the three range fields and resolve them; JournalRequestError names what is wrong."""
    tz_name = _zone_name(time_zone)
    tz = ZoneInfo(tz_name)
    first = _civil_date("fromDate", from_date, tz, tz_name)
    last = _civil_date("throughDate", through_date, tz, tz_name)
    if last < first:
        raise JournalRequestError(
            f"throughDate {last.isoformat()} is before fromDate {first.isoformat()}: the range is inclusive,"
            " give the earlier date as fromDate"
        )
    days = (last - first).days + 1
    if days > MAX_RANGE_DAYS:
        raise JournalRequestError(
            f"the range covers {days} days; the limit is {MAX_RANGE_DAYS}: split it into ranges of at most"
            f" {MAX_RANGE_DAYS} days"
        )
    try:
        end = start_of_local_day(last + timedelta(days=1), tz)
    except OverflowError as exc:
        raise JournalRequestError("throughDate is at the end of the supported calendar: use an earlier date") from exc
    return JournalRange(first, last, tz_name, start_of_local_day(first, tz), end)


def start_of_local_day(day: date, tz: ZoneInfo) -> datetime:
    """The first instant (UTC) whose local date in `tz` is `day` (or the next day's, if `day` was skipped)."""
    return datetime.combine(day, time(0, 0), tzinfo=tz).replace(fold=0).astimezone(UTC)


def _zone_name(value: object) -> str:
    if value is None:
        raise JournalRequestError(
            'timeZone is required: pass the user\'s IANA zone, e.g. "Europe/Amsterdam" (it is never guessed)'
        )
    if not isinstance(value, str):
        raise JournalRequestError(f'timeZone must be a string such as "Europe/Amsterdam", not {_kind(value)}')
    if len(value) > _MAX_ZONE_CHARS or not is_time_zone(value):
        shown = value[:_MAX_ZONE_CHARS].encode("ascii", "backslashreplace").decode("ascii")
        raise JournalRequestError(
            f'timeZone {shown!r} is not an IANA zone name: use one such as "Europe/Amsterdam" or'
            ' "America/St_Johns", spelled exactly (the host\'s zone is never assumed)'
        )
    return value


def _civil_date(field: str, value: object, tz: ZoneInfo, tz_name: str) -> date:
    if value is None:
        raise JournalRequestError(f'{field} is required: a local calendar date like "2026-09-01"')
    if not isinstance(value, str):
        raise JournalRequestError(f'{field} must be a string like "2026-09-01", not {_kind(value)}')
    match = _DATE_RE.fullmatch(value)
    if match is None:
        shown = value[:40].encode("ascii", "backslashreplace").decode("ascii")
        raise JournalRequestError(f'{field} {shown!r} is not a date in the form YYYY-MM-DD (e.g. "2026-09-01")')
    try:
        day = date(int(match["y"]), int(match["m"]), int(match["d"]))
    except ValueError as exc:
        raise JournalRequestError(f"{field} {value} does not exist in the calendar ({exc})") from exc
    if not date(1, 1, 2) <= day <= date(9999, 12, 30):
        raise JournalRequestError(f"{field} {value} is outside the supported calendar (0001-01-02 to 9999-12-30)")
    if start_of_local_day(day, tz).astimezone(tz).date() != day:
        raise JournalRequestError(
            f"{field} {value} did not exist in {tz_name} (the zone skipped that day when it changed its"
            " offset): use the day before or after"
        )
    return day


def _kind(value: object) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", list: "a list", dict: "an object"}.get(
        type(value), type(value).__name__
    )

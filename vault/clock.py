"""Exact instants from the files alone: a note's date, a bullet's wall time and the vault's zone.

Bullet times have minute precision. A wall time that occurs twice (the hour a DST change repeats)
is written with its UTC offset (`01:30+02:00`), so every instant memvault writes is unambiguous.
A bare time a person wrote is read with Python's fold=0 rule: an ambiguous time means its
*first* occurrence, and a time inside a DST gap is read with the offset in force before the gap
(so `02:30` on a spring-forward night in Europe/Amsterdam is 01:30 UTC, i.e. 03:30 CEST).
A bullet without a time stands at the start of its local day.
"""

import re
from datetime import UTC, date, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from memvault.vault.errors import InvalidRecord

_TIME_RE = re.compile(r"(?P<h>[01]\d|2[0-3]):(?P<m>[0-5]\d)(?P<off>[+-](?:[01]\d|2[0-3]):[0-5]\d|Z)?")
TIME_PATTERN = r"(?:[01]\d|2[0-3]):[0-5]\d(?:[+-](?:[01]\d|2[0-3]):[0-5]\d|Z)?"


def zone(name: str) -> ZoneInfo:
    """The IANA zone `name`, or InvalidRecord naming it."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidRecord(f"unknown time zone {name!r}: use an IANA name such as 'Europe/Amsterdam'") from exc


def parse_wall_time(text: str) -> tuple[time, timezone | None]:
    """`14:03` → (14:03, None); `01:30+02:00` → (01:30, UTC+2)."""
    match = _TIME_RE.fullmatch(text)
    if match is None:
        raise InvalidRecord(f"bad bullet time {text!r}: expected HH:MM or HH:MM+HH:MM")
    wall = time(int(match["h"]), int(match["m"]))
    offset = match["off"]
    if offset is None:
        return wall, None
    if offset == "Z":
        return wall, UTC
    sign = 1 if offset[0] == "+" else -1
    hours, minutes = int(offset[1:3]), int(offset[4:6])
    return wall, timezone(sign * timedelta(hours=hours, minutes=minutes))


def bullet_instant(day: date, wall_time: str | None, tz: ZoneInfo) -> datetime:
    """The UTC instant a bullet stands for (see the module docstring for the fold rule)."""
    if wall_time is None:
        return _local_to_utc(datetime.combine(day, time(0, 0)), tz)
    wall, offset = parse_wall_time(wall_time)
    local = datetime.combine(day, wall)
    if offset is not None:
        return local.replace(tzinfo=offset).astimezone(UTC)
    return _local_to_utc(local, tz)


def _local_to_utc(naive: datetime, tz: ZoneInfo) -> datetime:
    return naive.replace(tzinfo=tz, fold=0).astimezone(UTC)


def is_ambiguous(local: datetime) -> bool:
    """True when this zone-aware wall time occurs twice on its day."""
    other = local.replace(fold=1 - local.fold)
    return other.utcoffset() != local.utcoffset()


def aware_instant(value: object) -> datetime:
    """`value` if it is a timezone-aware datetime; otherwise InvalidRecord naming the fix."""
    if not isinstance(value, datetime):
        raise InvalidRecord(
            f"a memory's time must be a timezone-aware datetime, not {type(value).__name__} "
            f"{str(value)[:40]!r}: pass datetime.fromisoformat('2026-11-30T14:03:00+01:00')"
        )
    if value.tzinfo is None:
        raise InvalidRecord("a memory's time must be timezone-aware: pass tzinfo (e.g. ZoneInfo('UTC'))")
    return value


def local_day_and_time(instant: datetime, tz: ZoneInfo) -> tuple[date, str]:
    """Where an instant is written: its local date, and its bullet time at minute precision."""
    local = aware_instant(instant).astimezone(tz).replace(second=0, microsecond=0)
    text = local.strftime("%H:%M")
    if is_ambiguous(local):
        text += _format_offset(local.utcoffset())
    return local.date(), text


def _format_offset(offset: timedelta | None) -> str:
    minutes = int((offset or timedelta()).total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    minutes = abs(minutes)
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def utc_now() -> datetime:
    return datetime.now(UTC)

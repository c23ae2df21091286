"""The periods a question names, as local civil dates: one grammar for routing and for recall.

    question_periods("Which city was Calvin in on October 3, 2023?", today)  -> (Period(2023-10-03, 2023-10-03),)
    question_periods("What did Dave do in the first weekend of October 2023?", today)
                                                                             -> (Period(2023-10-07, 2023-10-08),)
    question_periods("What did we decide two days ago?", date(2026, 12, 2))  -> (Period(2026-11-30, 2026-11-30),)
    question_periods("Which color did Morgan choose?", today)                -> ()

Routing (`routing.py`) builds its broad-period pattern from the vocabulary below (`MONTH`,
`DATE`, `SPAN`, `PERIOD`), so a period routing recognises and a period recall favours are read
by the same words. Here each phrase is also *resolved*: relative phrases ("last week", "two days
ago", "last Friday") against `today`, the caller's date in the vault's zone; a month or season
without a year is its latest occurrence that has begun by `today`.

Pure and deterministic: no I/O, no model call, no clock (the caller passes `today`). Every
pattern is built from literal alternations and bounded repeats and runs only on a normalised
question of at most `MAX_PERIOD_CHARS` characters, so hostile input costs linear time.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, timedelta

from memvault.indexer.search.query_text import normalize_query


def alt(*words: str) -> str:
    return "(?:" + "|".join(words) + ")"


# --- the vocabulary (routing builds its broad-period pattern from these) ------------------------

WEEKDAY = alt("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MONTH = alt(
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "jan",
    "feb",
    "mar",
    "apr",
    "jun",
    "jul",
    "aug",
    "sep",
    "sept",
    "oct",
    "nov",
    "dec",
)
DAY = r"\d{1,2}(?:st|nd|rd|th)?"
DATE = alt(
    r"\d{4}-\d{2}-\d{2}",
    rf"{DAY} (?:of )?{MONTH}(?: \d{{4}})?",
    rf"{MONTH} {DAY}(?: \d{{4}})?",
    rf"(?:last |this )?{WEEKDAY}",
    "yesterday",
    "today",
)
SPAN = alt(
    "week",
    "month",
    "year",
    "quarter",
    "weekend",
    "sprint",
    "fortnight",
    "few days",
    "few weeks",
    "couple of days",
    "couple of weeks",
    r"\d{1,3} (?:days|weeks|months)",
    "two weeks",
    "three weeks",
)
PERIOD = alt(
    rf"(?:last|this|past|previous|the past|the last|the previous|earlier this) {SPAN}",
    rf"(?:(?:in|during|over|for) )?(?:the (?:last|past|previous) ){SPAN}",
    rf"(?:on |since )?{DATE}",
    rf"(?:in |during )?{MONTH}(?: \d{{4}})?",
    r"in \d{4}",
    rf"the week of {DATE}",
    rf"(?:between|from) {DATE} (?:and|to|through|until|till) {DATE}",
)

#: a longer (normalised) question is not read for periods
MAX_PERIOD_CHARS = 400
#: periods read from one question (a question naming more is unusual; the bound keeps work small)
MAX_PERIODS = 4
#: how far back a relative count may reach ("999 days ago" is refused)
_MAX_COUNT = 400

_MONTH_NUMBER = {
    name: number
    for number, names in enumerate(
        (
            (),
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        )
    )
    for name in names
}
_WEEKDAY_NUMBER = {
    name: n for n, name in enumerate(("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"))
}
_COUNT_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "a few": 3,
    "few": 3,
}
_ORDINAL = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3, "fourth": 4, "4th": 4, "last": -1}
#: meteorological seasons (northern hemisphere): first month and length; winter YYYY starts in December YYYY-1
_SEASONS = {"spring": (3, 3), "summer": (6, 3), "autumn": (9, 3), "fall": (9, 3), "winter": (12, 3)}


@dataclass(frozen=True)
class Period:
    """Inclusive local dates, and the words that named them."""

    start: date
    end: date
    phrase: str = ""

    def to_json(self) -> dict:
        return {"from": self.start.isoformat(), "through": self.end.isoformat(), "phrase": self.phrase}


# --- the resolving patterns, most specific first --------------------------------------------------

_B, _E = r"(?<![\w-])", r"(?![\w-])"  # word edges that also keep "2023-10-03" whole
_YEAR = r"(?P<year>(?:19|20|21)\d{2})"
_MONTH_NAME = rf"(?P<month>{MONTH})"
_COUNT = alt(r"\d{1,3}", *sorted((re.escape(w) for w in _COUNT_WORDS), key=len, reverse=True))
_ONE_DATE = alt(  # group names differ per alternative: Python's re refuses a name twice
    r"(?P<iso>\d{4}-\d{2}-\d{2})",
    rf"(?:the )?(?P<dday>\d{{1,2}})(?:st|nd|rd|th)? (?:of )?(?P<dmonth>{MONTH})(?:,? ?(?P<dyear>(?:19|20|21)\d{{2}}))?",
    rf"(?P<mmonth>{MONTH}) (?:the )?(?P<mday>\d{{1,2}})(?:st|nd|rd|th)?(?:,? ?(?P<myear>(?:19|20|21)\d{{2}}))?",
)


def _date_group(prefix: str) -> str:
    """`_ONE_DATE` with its groups renamed, for patterns holding two dates."""
    return re.sub(r"\(\?P<(\w+)>", rf"(?P<{prefix}\1>", _ONE_DATE)


_PATTERNS: tuple[tuple[str, re.Pattern], ...] = tuple(
    (name, re.compile(_B + pattern + _E))
    for name, pattern in (
        ("range", rf"(?:between|from) {_date_group('a')} (?:and|to|through|until|till|-) {_date_group('b')}"),
        ("week_around", rf"(?:the )?week (?P<side>before|after|of) {_ONE_DATE}"),
        (
            "nth_of_month",
            rf"(?:the )?(?P<nth>{alt(*_ORDINAL)}) (?P<unit>week|weekend) (?:of|in) {_MONTH_NAME}(?: {_YEAR})?",
        ),
        ("date", _ONE_DATE),
        (
            "month",
            rf"(?:(?P<edge>early|mid|late|the end of|the beginning of|the start of) )?{_MONTH_NAME}(?: of)?,? {_YEAR}",
        ),
        (
            "season",
            rf"(?:(?P<which>last|this|previous) |(?:in|during|over) (?:the )?)?"
            rf"(?P<season>spring|summer|autumn|fall|winter)"
            rf"(?:(?: of)? {_YEAR})?",
        ),
        ("bare_month", rf"(?P<which>in|during|since|last|this|early|mid|late|of) {_MONTH_NAME}"),
        ("year", rf"(?:(?:in|during|since|of|throughout|by|early|late|mid|the year) ){_YEAR}"),
        ("ago", rf"(?P<count>{_COUNT}) (?P<unit>day|days|week|weeks|month|months|year|years) ago"),
        ("past", rf"(?:the )?(?:past|last) (?P<count>{_COUNT}) (?P<unit>days|weeks|months)"),
        (
            "relative",
            alt(
                "the day before yesterday",
                "yesterday",
                "last night",
                "today",
                "tonight",
                "this morning",
                "this afternoon",
                "this evening",
            ),
        ),
        ("span", r"(?P<which>last|this|past|previous) (?P<unit>week|weekend|month|year|fortnight)"),
        ("weekday", rf"(?P<which>last|this|on|past) (?P<weekday>{WEEKDAY})"),
    )
)


def question_periods(question: str, today: date) -> tuple[Period, ...]:
    """The periods `question` names, resolved against `today`, in the order they appear; () when
    it names none. Overlapping phrases resolve once, by the most specific pattern."""
    if not isinstance(question, str) or len(question) > 4 * MAX_PERIOD_CHARS:
        return ()
    text = normalize_query(question)
    if not text or len(text) > MAX_PERIOD_CHARS:
        return ()
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, Period]] = []
    for name, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            if any(match.start() < end and start < match.end() for start, end in taken):
                continue
            period = _RESOLVERS[name](match, today)
            if period is not None and len(found) < MAX_PERIODS:
                taken.append(match.span())
                found.append((match.start(), Period(period[0], period[1], match.group(0))))
    return tuple(period for _, period in sorted(found, key=lambda pair: pair[0]))


# --- resolvers: a match and today -> (start, end) or None -------------------------------------------

Span = tuple[date, date] | None


def _month_end(year: int, month: int) -> date:
    return date(year, month, calendar.monthrange(year, month)[1])


def _latest_year_for(month: int, today: date, *, strictly_before: bool = False) -> int:
    """The year of the latest `month` that has begun by today (or ended before it)."""
    current = (today.year, today.month)
    if (today.year, month) < current or (not strictly_before and (today.year, month) == current):
        return today.year
    return today.year - 1


def _one_date(match: re.Match, today: date, prefix: str = "", year: int | None = None) -> date | None:
    group = match.groupdict()
    if group.get(prefix + "iso"):
        try:
            return date.fromisoformat(group[prefix + "iso"])
        except ValueError:
            return None
    form = prefix + ("d" if group.get(prefix + "dmonth") else "m")
    month, day = _MONTH_NUMBER[group[form + "month"]], int(group[form + "day"])
    if group.get(form + "year"):  # a stated year beats the caller's default
        year = int(group[form + "year"])
    if year is None:  # no year: the latest such day by today
        year = today.year if (month, day) <= (today.month, today.day) else today.year - 1
    if not 1 <= day <= calendar.monthrange(year, month)[1]:
        return None
    return date(year, month, day)


def _range(match: re.Match, today: date) -> Span:
    end = _one_date(match, today, "b")
    if end is None:
        return None
    start = _one_date(match, today, "a", year=end.year)  # "between August 11 and August 15 2023"
    if start is None:
        return None
    return (start, end) if start <= end else (end, start)


def _week_around(match: re.Match, today: date) -> Span:
    day = _one_date(match, today)
    if day is None:
        return None
    side = match.group("side")
    if side == "before":
        return day - timedelta(days=7), day - timedelta(days=1)
    if side == "after":
        return day + timedelta(days=1), day + timedelta(days=7)
    monday = day - timedelta(days=day.weekday())
    return monday, monday + timedelta(days=6)


def _nth_of_month(match: re.Match, today: date) -> Span:
    month = _MONTH_NUMBER[match.group("month")]
    year = int(match.group("year")) if match.group("year") else _latest_year_for(month, today)
    nth, last = _ORDINAL[match.group("nth")], _month_end(year, month)
    if match.group("unit") == "week":
        if nth < 0:
            return last - timedelta(days=6), last
        start = date(year, month, 1) + timedelta(days=7 * (nth - 1))
        return start, min(start + timedelta(days=6), last)
    saturdays = [day for day in range(1, last.day + 1) if date(year, month, day).weekday() == 5]
    saturday = date(year, month, saturdays[nth - 1 if nth > 0 else -1])
    return saturday, saturday + timedelta(days=1)


def _date(match: re.Match, today: date) -> Span:
    day = _one_date(match, today)
    return None if day is None else (day, day)


def _month(match: re.Match, today: date) -> Span:
    month, year = _MONTH_NUMBER[match.group("month")], int(match.group("year"))
    start, end = date(year, month, 1), _month_end(year, month)
    edge = match.group("edge")
    if edge in ("early", "the beginning of", "the start of"):
        return start, start + timedelta(days=9)
    if edge == "mid":
        return start + timedelta(days=10), start + timedelta(days=19)
    if edge in ("late", "the end of"):
        return date(year, month, 21), end
    return start, end


def _season(match: re.Match, today: date) -> Span:
    first, length = _SEASONS[match.group("season")]
    which, year = match.group("which"), match.group("year")
    if year is None and which is None and not match.group(0).startswith(("in ", "during ", "over ")):
        return None  # a bare "fall" or "spring" is as likely a verb or a noun as a season
    if year is not None:
        start_year = int(year) - 1 if first == 12 else int(year)
    else:
        start_year = today.year if (today.month, today.day) >= (first, 1) else today.year - 1
        if which in ("last", "previous") and _add_months(date(start_year, first, 1), length) > today:
            start_year -= 1  # "last summer" in July is the one before
    start = date(start_year, first, 1)
    return start, _add_months(start, length) - timedelta(days=1)


def _bare_month(match: re.Match, today: date) -> Span:
    month = _MONTH_NUMBER[match.group("month")]
    year = _latest_year_for(month, today, strictly_before=match.group("which") == "last")
    return date(year, month, 1), _month_end(year, month)


def _year(match: re.Match, today: date) -> Span:
    year = int(match.group("year"))
    return date(year, 1, 1), date(year, 12, 31)


def _count(match: re.Match) -> int | None:
    raw = match.group("count")
    count = int(raw) if raw.isdigit() else _COUNT_WORDS.get(raw)
    return count if count is not None and 0 < count <= _MAX_COUNT else None


def _ago(match: re.Match, today: date) -> Span:
    count = _count(match)
    if count is None:
        return None
    unit = match.group("unit").rstrip("s")
    if unit == "day":
        day = today - timedelta(days=count)
        return day, day
    if unit == "week":
        centre = today - timedelta(days=7 * count)
        return centre - timedelta(days=3), centre + timedelta(days=3)
    if unit == "month":
        first = _add_months(date(today.year, today.month, 1), -count)
        return first, _month_end(first.year, first.month)
    return date(today.year - count, 1, 1), date(today.year - count, 12, 31)


def _past(match: re.Match, today: date) -> Span:
    count = _count(match)
    if count is None:
        return None
    unit = match.group("unit")
    start = (
        _add_months(today, -count)
        if unit == "months"
        else today - timedelta(days=count * (7 if unit == "weeks" else 1))
    )
    return start, today


def _relative(match: re.Match, today: date) -> Span:
    phrase = match.group(0)
    offset = 2 if phrase == "the day before yesterday" else 1 if phrase in ("yesterday", "last night") else 0
    day = today - timedelta(days=offset)
    return day, day


def _span(match: re.Match, today: date) -> Span:
    unit, previous = match.group("unit"), match.group("which") != "this"
    monday = today - timedelta(days=today.weekday())
    if unit == "week":
        return (monday - timedelta(days=7), monday - timedelta(days=1)) if previous else (monday, today)
    if unit == "fortnight":
        return today - timedelta(days=14), today
    if unit == "weekend":
        saturday = monday + timedelta(days=5)
        if previous or saturday > today:
            saturday -= timedelta(days=7)
        return saturday, saturday + timedelta(days=1)
    if unit == "month":
        first = date(today.year, today.month, 1)
        if previous:
            first = _add_months(first, -1)
        return first, _month_end(first.year, first.month)
    year = today.year - 1 if previous else today.year
    return date(year, 1, 1), date(year, 12, 31)


def _weekday(match: re.Match, today: date) -> Span:
    back = (today.weekday() - _WEEKDAY_NUMBER[match.group("weekday")]) % 7
    if back == 0 and match.group("which") in ("last", "past"):
        back = 7  # "last Friday" on a Friday is a week ago
    day = today - timedelta(days=back)
    return day, day


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    return date(year, month + 1, min(day.day, calendar.monthrange(year, month + 1)[1]))


_RESOLVERS = {
    "range": _range,
    "week_around": _week_around,
    "nth_of_month": _nth_of_month,
    "date": _date,
    "month": _month,
    "season": _season,
    "bare_month": _bare_month,
    "year": _year,
    "ago": _ago,
    "past": _past,
    "relative": _relative,
    "span": _span,
    "weekday": _weekday,
}

"""The period a question names ("in May 2023", "last summer", "two weeks ago"),
read by fixed rules so that the same question at the same time always means the
same period.

The archive search narrows to the period a question names (and fills up with
the rest of the archive when the period holds fewer turns than asked for).
Relative words are read against `now`: the time the question is asked, which a
caller that replays a conversation may set. Times are UTC. The first rule that
matches wins, in this order:

1. a day: "9 May 2023", "on the 9th of May 2023", "May 9, 2023";
2. a month of a year: "May 2023", "in May of 2023";
3. a season of a year: "summer 2023", "the winter of 2023" (northern seasons:
   spring March-May, summer June-August, autumn or fall September-November,
   winter December to February, the winter of 2023 beginning in December 2023);
4. a year: "in 2023", "during 2023", "of 2023";
5. yesterday, today;
6. this or last week (from Monday), month, year;
7. this or last spring/summer/autumn/fall/winter: this one is the season of the
   current year, last one the latest that has ended;
8. "N days/weeks/months/years ago" (N a number or a word up to twelve, "a"):
   that day; the week (Monday to Sunday) holding the day N weeks back; that
   calendar month; that calendar year;
9. "last Tuesday" (the latest Tuesday before today), "on Tuesday" (the latest
   Tuesday up to today);
10. a month alone, "in May": the latest May that has begun.

A period relative to an event ("the week before the launch") is not read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

MONTHS = {
    name: n
    for n, names in enumerate(
        [
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
        ],
        start=1,
    )
    for name in names
}
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
# Northern seasons: their first month; winter runs into the next year.
SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}
NUMBERS = {
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
}

_MONTH = r"(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_SEASON = r"(?P<season>" + "|".join(SEASONS) + ")"
_COUNT = r"(?P<count>\d{1,3}|" + "|".join(NUMBERS) + ")"
_UNIT = r"(?P<unit>day|week|month|year)s?"
_WEEKDAY = r"(?P<weekday>" + "|".join(WEEKDAYS) + ")"


@dataclass(frozen=True, slots=True)
class Period:
    """What the question said, and the times it covers: `start` <= t < `end`."""

    phrase: str
    start: datetime
    end: datetime


def _utc(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _month(year: int, month: int, months: int = 1) -> tuple[date, date]:
    first = date(year, month, 1)
    later = year * 12 + month - 1 + months
    return first, date(later // 12, later % 12 + 1, 1)


def _season(year: int, name: str) -> tuple[date, date]:
    return _month(year, SEASONS[name], 3)


def _week_of(day: date) -> tuple[date, date]:
    monday = day - timedelta(days=day.weekday())
    return monday, monday + timedelta(days=7)


def _day(day: date) -> tuple[date, date]:
    return day, day + timedelta(days=1)


def _valid_day(year: int, month: int, day: int) -> tuple[date, date] | None:
    try:
        return _day(date(year, month, day))
    except ValueError:
        return None


def _count(text: str) -> int:
    return int(text) if text.isdigit() else NUMBERS[text]


def _ago(today: date, n: int, unit: str) -> tuple[date, date]:
    if unit == "day":
        return _day(today - timedelta(days=n))
    if unit == "week":
        return _week_of(today - timedelta(weeks=n))
    if unit == "month":
        back = today.year * 12 + today.month - 1 - n
        return _month(back // 12, back % 12 + 1)
    return _month(today.year - n, 1, 12)


def _relative(today: date, which: str, unit: str) -> tuple[date, date]:
    """this/last week, month or year."""
    if unit == "week":
        monday, _ = _week_of(today)
        return _week_of(monday - timedelta(weeks=1)) if which == "last" else _week_of(monday)
    if unit == "month":
        return _ago(today, 1 if which == "last" else 0, "month")
    return _month(today.year - (1 if which == "last" else 0), 1, 12)


def _seasonal(today: date, which: str, name: str) -> tuple[date, date]:
    """This season: the current year's. Last: the latest one that has ended."""
    if which == "this":
        # In January and February this winter is the one that began in December.
        winter_began = name == "winter" and today.month <= 2
        return _season(today.year - 1 if winter_began else today.year, name)
    year = today.year
    while _season(year, name)[1] > today:
        year -= 1
    return _season(year, name)


def _weekday(today: date, name: str, strictly_before: bool) -> tuple[date, date]:
    back = (today.weekday() - WEEKDAYS.index(name)) % 7
    if back == 0 and strictly_before:
        back = 7
    return _day(today - timedelta(days=back))


def _month_alone(today: date, month: int) -> tuple[date, date]:
    year = today.year if month <= today.month else today.year - 1
    return _month(year, month)


# (pattern, what it covers given the match and today), tried in order.
_RULES = [
    (rf"\b(?:on\s+)?(?:the\s+)?{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", "day"),
    (rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", "day"),
    (rf"\b(?:in\s+)?{_MONTH}\s+(?:of\s+)?{_YEAR}\b", "month"),
    (rf"\b(?:in\s+|during\s+)?(?:the\s+)?{_SEASON}\s+(?:of\s+)?{_YEAR}\b", "season"),
    (rf"\b(?:in|during|of)\s+{_YEAR}\b", "year"),
    (r"\b(?P<word>yesterday|today)\b", "word"),
    (r"\b(?P<which>this|last)\s+(?P<unit>week|month|year)\b", "relative"),
    (rf"\b(?P<which>this|last)\s+{_SEASON}\b", "seasonal"),
    (rf"\b{_COUNT}\s+{_UNIT}\s+ago\b", "ago"),
    (rf"\b(?P<which>last|on)\s+{_WEEKDAY}\b", "weekday"),
    (rf"\bin\s+{_MONTH}(?!\s+\d)\b", "month_alone"),
]
_COMPILED = [(re.compile(pattern, re.IGNORECASE), kind) for pattern, kind in _RULES]


def _cover(kind: str, m: re.Match[str], today: date) -> tuple[date, date] | None:
    g = {k: v.lower() for k, v in m.groupdict().items() if v is not None}
    if kind == "day":
        return _valid_day(int(g["year"]), MONTHS[g["month"]], int(g["day"]))
    if kind == "month":
        return _month(int(g["year"]), MONTHS[g["month"]])
    if kind == "season":
        return _season(int(g["year"]), g["season"])
    if kind == "year":
        return _month(int(g["year"]), 1, 12)
    if kind == "word":
        return _day(today - timedelta(days=1 if g["word"] == "yesterday" else 0))
    if kind == "relative":
        return _relative(today, g["which"], g["unit"])
    if kind == "seasonal":
        return _seasonal(today, g["which"], g["season"])
    if kind == "ago":
        return _ago(today, _count(g["count"]), g["unit"])
    if kind == "weekday":
        return _weekday(today, g["weekday"], strictly_before=g["which"] == "last")
    return _month_alone(today, MONTHS[g["month"]])


def find_period(question: str, now: datetime) -> Period | None:
    """The period `question` names, read against `now`; None if it names none."""
    today = now.astimezone(UTC).date() if now.tzinfo else now.date()
    for pattern, kind in _COMPILED:
        for m in pattern.finditer(question):
            covered = _cover(kind, m, today)
            if covered is not None:
                start, end = covered
                return Period(" ".join(m.group(0).split()), _utc(start), _utc(end))
    return None

"""Cron expressions in real time zones: a small parser of the standard 5-field syntax and the
next-fire computation, pure (no I/O, no clock: every function takes the time it works from).

Syntax: ``minute hour day-of-month month day-of-week``; each field ``*``, a value, a range
``a-b``, a step ``*/n``, ``a-b/n`` or ``a/n``, or a comma-separated list of those; months
``jan``-``dec`` and days ``sun``-``sat`` by name; day-of-week 0 and 7 are Sunday. When both
day fields are restricted a day matching either fires (as in Vixie cron). Macros: ``@yearly``
(``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``), ``@hourly``.

Times are computed in the schedule's zone (``zoneinfo``) and returned as UTC epoch
milliseconds. **Daylight-saving policy** (what a person reading the cron line expects):

- *A local time that does not exist* (the clock springs forward over it, e.g. 02:30 on
  2026-03-08 in America/New_York): the slot fires at the same wall-clock time shifted forward
  by the gap — 02:30 fires at 03:30 local, once. A shifted slot that lands on the instant of
  another slot fires once (an hourly schedule fires once in each real hour).
- *A local time that occurs twice* (the clock falls back over it, e.g. 01:30 on 2026-11-01 in
  America/New_York): a schedule whose hour field is fixed (``30 1 * * *``) fires once, at the
  first occurrence; a schedule whose hour field is a wildcard (``*``, ``*/2``: hourly or more
  often) fires at both occurrences, so each real hour gets its fire and none is dropped.

This mirrors cronie/Vixie cron's behaviour for fixed-time and wildcard jobs. No library was
used: none of the Python cron packages is in this environment's package lists, and the policy
above needs control over how each candidate local time maps to UTC (``fold``), which is the
whole of the hard part; the parser itself is a few dozen lines, tested directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import BadInputError

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTH_NAMES = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_MONTHS = {m: i + 1 for i, m in enumerate(_MONTH_NAMES)}
_DAYS = {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day-of-week", 0, 7, _DAYS),
)
#: How far ahead a next fire is looked for (a Feb 29 schedule waits up to 8 years).
_HORIZON_DAYS = 366 * 9


@dataclass(frozen=True)
class Cron:
    """A parsed cron expression: the allowed values of each field."""

    expr: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    dom_restricted: bool
    dow_restricted: bool
    #: The hour field is a wildcard (``*``, ``*/n``): fires at both occurrences of a repeated
    #: local hour (see the module's DST policy).
    hour_wild: bool

    def day_matches(self, d: date) -> bool:
        """Whether local date ``d`` is a day this expression fires on."""
        if d.month not in self.months:
            return False
        dom = d.day in self.days
        dow = (d.weekday() + 1) % 7 in self.weekdays
        if self.dom_restricted and self.dow_restricted:
            return dom or dow
        return dom and dow


def parse_cron(expr: str) -> Cron:
    """Parse a 5-field cron expression or macro. BadInputError naming the field and value."""
    if not isinstance(expr, str):
        raise BadInputError(f"cron expression must be a string, not {type(expr).__name__}")
    text = _MACROS.get(expr.strip().lower(), expr.strip())
    parts = text.split()
    if len(parts) != 5:
        raise BadInputError(
            f"cron expression {expr!r} has {len(parts)} fields; expected 5 "
            "(minute hour day-of-month month day-of-week) or a macro like @daily"
        )
    values = [
        _field(expr, part, name, lo, hi, names)
        for part, (name, lo, hi, names) in zip(parts, _FIELDS, strict=True)
    ]
    weekdays = frozenset(v % 7 for v in values[4])
    return Cron(
        expr=expr,
        minutes=tuple(sorted(values[0])),
        hours=tuple(sorted(values[1])),
        days=frozenset(values[2]),
        months=frozenset(values[3]),
        weekdays=weekdays,
        dom_restricted=not parts[2].startswith("*"),
        dow_restricted=not parts[4].startswith("*"),
        hour_wild=parts[1].startswith("*"),
    )


def _digits(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also takes other scripts' digits ("٣"), which no
    cron implementation reads."""
    return text.isascii() and text.isdigit()


def _field(expr: str, text: str, name: str, lo: int, hi: int, names: dict[str, int]) -> set[int]:
    def bad(why: str) -> BadInputError:
        return BadInputError(f"cron expression {expr!r}: {name} field {text!r}: {why}")

    def value(tok: str) -> int:
        tok = tok.lower()
        if tok in names:
            return names[tok]
        if not _digits(tok):
            raise bad(f"{tok!r} is not a number" + (" or a name" if names else ""))
        v = int(tok)
        if not lo <= v <= hi:
            raise bad(f"{v} is out of range {lo}-{hi}")
        return v

    out: set[int] = set()
    for item in text.split(","):
        if not item:
            raise bad("empty list item")
        rng, _, step_text = item.partition("/")
        step = 1
        if step_text:
            if not _digits(step_text) or int(step_text) < 1:
                raise bad(f"step {step_text!r} must be a whole number >= 1")
            step = int(step_text)
        if rng == "*":
            start, end = lo, hi
        elif "-" in rng:
            a, _, b = rng.partition("-")
            start, end = value(a), value(b)
            if start > end:
                raise bad(f"range {rng!r} runs backwards")
        else:
            start = value(rng)
            end = hi if step_text else start
        out.update(range(start, end + 1, step))
    return out


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (BadInputError when unknown)."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise BadInputError(
            f"unknown time zone {name!r} (use an IANA name like 'Europe/Berlin')"
        ) from exc


def _instants(cron: Cron, tz: ZoneInfo, d: date) -> list[int]:
    """The UTC epoch ms of the slots of local date ``d``, ascending, by the DST policy."""
    out: set[int] = set()
    for h in cron.hours:
        for m in cron.minutes:
            naive = datetime(d.year, d.month, d.day, h, m)
            first = naive.replace(tzinfo=tz, fold=0)
            ms0 = int(first.timestamp() * 1000)
            out.add(ms0)  # a non-existent time maps forward by the gap (fold=0, PEP 495)
            if cron.hour_wild:
                second = naive.replace(tzinfo=tz, fold=1)
                back = second.astimezone(UTC).astimezone(tz).replace(tzinfo=None)
                if back == naive:  # a repeated local time: its second occurrence too
                    out.add(int(second.timestamp() * 1000))
    return sorted(out)


def next_fire_ms(cron: Cron, tz: ZoneInfo, after_ms: int) -> int:
    """The first slot strictly after ``after_ms`` (UTC epoch ms), as UTC epoch ms.

    BadInputError when the expression never fires (``0 0 30 2 *``)."""
    local = datetime.fromtimestamp(after_ms / 1000, UTC).astimezone(tz)
    day = local.date() - timedelta(days=1)
    for _ in range(_HORIZON_DAYS):
        if cron.day_matches(day):
            for ms in _instants(cron, tz, day):
                if ms > after_ms:
                    return ms
        day += timedelta(days=1)
    raise BadInputError(f"cron expression {cron.expr!r} never fires")


def fires_between(cron: Cron, tz: ZoneInfo, after_ms: int, until_ms: int, limit: int) -> list[int]:
    """The latest ``limit`` slots in ``(after_ms, until_ms]``, ascending (read backwards from
    ``until_ms``, so a long downtime costs only the days it must look at)."""
    first = datetime.fromtimestamp(after_ms / 1000, UTC).astimezone(tz).date()
    day = datetime.fromtimestamp(until_ms / 1000, UTC).astimezone(tz).date() + timedelta(days=1)
    out: list[int] = []
    while day >= first - timedelta(days=1) and len(out) < limit:
        if cron.day_matches(day):
            out = [ms for ms in _instants(cron, tz, day) if after_ms < ms <= until_ms] + out
        day -= timedelta(days=1)
    return out[-limit:] if limit > 0 else []


__all__ = ["Cron", "fires_between", "next_fire_ms", "parse_cron", "zone"]

"""The cron parser and the daylight-saving policy, as pure next-fire computations over ±48 h
around the 2026 transitions of America/New_York and Europe/Berlin (see torpor.cron)."""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import UTC, date, datetime, timedelta

import pytest

from torpor.cron import fires_between, next_fire_ms, parse_cron, zone
from torpor.errors import BadInputError

#: (zone, spring-forward date, fall-back date), and each zone's repeated / skipped hour.
TRANSITIONS = [
    ("America/New_York", date(2026, 3, 8), "spring"),
    ("America/New_York", date(2026, 11, 1), "fall"),
    ("Europe/Berlin", date(2026, 3, 29), "spring"),
    ("Europe/Berlin", date(2026, 10, 25), "fall"),
]


def fires(expr: str, tz: str, day: date) -> list[datetime]:
    """Every fire from 48 h before local ``day`` to 48 h after it, as aware local datetimes."""
    z = zone(tz)
    start = datetime(day.year, day.month, day.day, tzinfo=z) - timedelta(hours=48)
    end = datetime(day.year, day.month, day.day, tzinfo=z) + timedelta(hours=24 + 48)
    t, end_ms = int(start.timestamp() * 1000), int(end.timestamp() * 1000)
    c = parse_cron(expr)
    out = []
    while True:
        t = next_fire_ms(c, z, t)
        if t > end_ms:
            return out
        out.append(datetime.fromtimestamp(t / 1000, UTC).astimezone(z))


@pytest.mark.parametrize(("tz", "day", "kind"), TRANSITIONS)
def test_daily_17_fires_once_per_local_day(tz: str, day: date, kind: str) -> None:
    got = fires("0 17 * * *", tz, day)
    per_day = Counter(f.date() for f in got)
    assert len(per_day) == 5 and set(per_day.values()) == {1}
    assert all((f.hour, f.minute) == (17, 0) for f in got)
    # On the transition day the fire is 23 h (spring) or 25 h (fall) after the previous one.
    utc = [f.astimezone(UTC) for f in got]  # (aware local datetimes subtract by wall clock)
    gaps = {got[i].date(): utc[i] - utc[i - 1] for i in range(1, len(got))}
    assert gaps[day] == timedelta(hours=23 if kind == "spring" else 25)


@pytest.mark.parametrize(("tz", "day", "kind"), TRANSITIONS)
@pytest.mark.parametrize("expr", ["0 * * * *", "@hourly", "*/20 * * * *"])
def test_sub_daily_fires_once_per_real_slot(tz: str, day: date, kind: str, expr: str) -> None:
    """Hourly (or more often): consecutive fires exactly one interval apart in real time —
    never twice in one real hour, never a real hour dropped — on both transitions."""
    got = fires(expr, tz, day)
    step = timedelta(minutes=20 if expr.startswith("*/20") else 60)
    utc = [f.astimezone(UTC) for f in got]
    assert all(b - a == step for a, b in itertools.pairwise(utc))
    assert len(got) == (48 + 48 + (23 if kind == "spring" else 25)) * 3600 // step.seconds


@pytest.mark.parametrize(("tz", "day", "kind"), TRANSITIONS)
def test_daily_0230_once_on_both_transition_days(tz: str, day: date, kind: str) -> None:
    got = fires("30 2 * * *", tz, day)
    per_day = Counter(f.date() for f in got)
    assert len(per_day) == 5 and set(per_day.values()) == {1}
    on_day = next(f for f in got if f.date() == day)
    if kind == "spring":  # 02:30 does not exist: fires at 03:30, shifted by the gap
        assert (on_day.hour, on_day.minute) == (3, 30)
    else:  # fires once, at the first 02:30 if it repeats (Berlin), else the one 02:30
        assert (on_day.hour, on_day.minute, on_day.fold) == (2, 30, 0)
        if tz == "Europe/Berlin":
            assert on_day.utcoffset() == timedelta(hours=2)  # CEST: the first occurrence
    others = [f for f in got if f.date() != day]
    assert all((f.hour, f.minute) == (2, 30) for f in others)


def test_fixed_time_in_repeated_hour_fires_at_first_occurrence() -> None:
    got = fires("30 1 * * *", "America/New_York", date(2026, 11, 1))
    on_day = [f for f in got if f.date() == date(2026, 11, 1)]
    assert len(on_day) == 1
    assert on_day[0].utcoffset() == timedelta(hours=-4)  # EDT, before falling back


@pytest.mark.parametrize(("tz", "day", "kind"), TRANSITIONS)
def test_every_minute_of_the_transition_days_computes(tz: str, day: date, kind: str) -> None:
    """No crash on any local time of the transition days, existing, skipped or repeated:
    every hour:minute pair, fixed, yields one strictly increasing fire per day."""
    z = zone(tz)
    for h in range(0, 5):
        c = parse_cron(f"*/7 {h} * * *")
        t0 = int(datetime(day.year, day.month, day.day, tzinfo=z).timestamp() * 1000) - 1
        t = t0
        for _ in range(9):
            nxt = next_fire_ms(c, z, t)
            assert nxt > t
            t = nxt


def test_fires_between_reads_backwards_and_keeps_the_latest() -> None:
    c, z = parse_cron("0 9 * * *"), zone("Europe/Berlin")
    start = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
    end = int(datetime(2026, 1, 11, tzinfo=UTC).timestamp() * 1000)
    all_ = fires_between(c, z, start, end, 100)
    assert len(all_) == 10
    assert fires_between(c, z, start, end, 3) == all_[-3:]
    assert fires_between(c, z, start, start + 1000, 5) == []
    # a year of every-minute slots, latest only: reads one day, not a year
    c2 = parse_cron("* * * * *")
    year_end = start + 365 * 86_400_000
    assert fires_between(c2, z, start, year_end, 1) == [year_end - year_end % 60_000]


@pytest.mark.parametrize(
    ("expr", "first"),
    [
        ("15 10 * * mon-fri", datetime(2026, 1, 1, 10, 15)),  # Thursday 1 Jan
        ("15 10 * * sat,sun", datetime(2026, 1, 3, 10, 15)),
        ("0 0 1,15 * *", datetime(2026, 1, 15, 0, 0)),
        ("0 12 * jan,jul 0", datetime(2026, 1, 4, 12, 0)),  # first Sunday
        ("0 6 13 * 5", datetime(2026, 1, 2, 6, 0)),  # dom OR dow: Friday 2 Jan
        ("*/45 3 * * *", datetime(2026, 1, 1, 3, 45)),
        ("5/20 4 * * *", datetime(2026, 1, 1, 4, 5)),
        ("0 0 * * 7", datetime(2026, 1, 4, 0, 0)),  # 7 is Sunday
        ("@monthly", datetime(2026, 2, 1, 0, 0)),
        ("0 0 29 2 *", datetime(2028, 2, 29, 0, 0)),
    ],
)
def test_syntax(expr: str, first: datetime) -> None:
    after = int(datetime(2026, 1, 1, 3, 30, tzinfo=UTC).timestamp() * 1000)
    got = next_fire_ms(parse_cron(expr), zone("UTC"), after)
    assert datetime.fromtimestamp(got / 1000, UTC).replace(tzinfo=None) == first


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("* * * *", "has 4 fields"),
        ("60 * * * *", "minute field '60': 60 is out of range 0-59"),
        ("* 24 * * *", "hour field '24'"),
        ("* * 0 * *", "day-of-month field '0'"),
        ("* * * foo *", "month field 'foo': 'foo' is not a number or a name"),
        ("*/0 * * * *", "step '0'"),
        ("5-1 * * * *", "runs backwards"),
        ("1,,2 * * * *", "empty list item"),
        ("\u0663 * * * *", "minute field '\u0663': '\u0663' is not a number"),  # Arabic-Indic 3
        ("*/\u0663 * * * *", "step '\u0663'"),
    ],
)
def test_bad_expressions_are_named(expr: str, message: str) -> None:
    with pytest.raises(BadInputError, match=message.replace("*", r"\*")):
        parse_cron(expr)


def test_never_firing_and_unknown_zone() -> None:
    with pytest.raises(BadInputError, match="never fires"):
        next_fire_ms(parse_cron("0 0 30 2 *"), zone("UTC"), 0)
    with pytest.raises(BadInputError, match="unknown time zone 'Mars/Olympus'"):
        zone("Mars/Olympus")

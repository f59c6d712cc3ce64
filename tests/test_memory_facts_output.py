"""Facts stated by a tool output's layout (issue 29): markdown table rows, named values
(``label -> id``), a person's comment in a JSON thread, template rows recognised by their
skeleton; and the summary's facts cut by each origin's share, so tool-output facts never
starve the model's and the other way round. Pure functions, cheap; the example texts are
these tests' own (never the planted-fact bench's templates)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from torpor.memory.compaction import Summary, SummaryLine
from torpor.memory.facts import Fact, result_facts
from torpor.memory.facts_output import named_value, prose_key, skeleton, table_rows
from torpor.memory.shares import SHARES, origin, positions


def _noise(rng: random.Random, n: int) -> list[str]:
    return [
        f"Dec {rng.randint(1, 28)} 0{rng.randint(0, 9)}:1{rng.randint(0, 9)}:00 "
        f"host-{rng.randint(1, 9)}"
        f" {rng.choice(('agentd', 'rsyslogd', 'crond'))}[{rng.randint(100, 9999)}]: heartbeat ok"
        f" {rng.getrandbits(48):012x}"
        for _ in range(n)
    ]


def test_a_table_row_is_read_with_its_header_and_becomes_a_fact() -> None:
    doc = "\n".join(
        [
            "# Queue for the mailer",
            "Choices on the table",
            "--------------------",
            "| area | picked | passed over | why |",
            "|---|---|---|---|",
            "| mail queue | **beanstalkd** | sidekiq | p99 enqueue 4113 us lower |",
        ]
    )
    rows = table_rows(doc.splitlines())
    assert list(rows) == [5] and rows[5].emphasised
    assert rows[5].text.startswith("area: mail queue; picked: beanstalkd")
    facts = result_facts({"text": doc}, turn=3)
    assert any("beanstalkd" in f.text and "sidekiq" in f.text and "4113" in f.text for f in facts)
    assert not any(f.text.startswith("area: area") or "---" in f.text for f in facts)


def test_a_named_value_in_a_long_listing_is_kept_and_the_listing_rows_are_not() -> None:
    rng = random.Random(5)
    lines = _noise(rng, 30)
    lines.insert(17, "# current rollout manifest -> MAN-70211")
    facts = result_facts({"output": "\n".join(lines)}, turn=4)
    texts = [f.text for f in facts]
    assert any("MAN-70211" in t for t in texts)
    assert not any("heartbeat" in t for t in texts)  # one template's rows, by skeleton
    assert named_value("# current rollout manifest -> MAN-70211", ["MAN-70211"])
    assert not named_value("src/a.py -> build/a.so", ["src/a.py", "build/a.so"])


def test_a_comment_that_says_something_is_a_fact_and_chatter_is_not() -> None:
    thread = {
        "comments": [
            {"author": {"login": "kim"}, "bodyText": "LGTM"},
            {"author": {"login": "ola"}, "bodyText": "+1, seen on web-3 too"},
            {
                "author": {"login": "ada"},
                "bodyText": "quota dashboard for billing-api: mine, lands before milestone 6620",
            },
            {"author": {"login": "kim"}, "bodyText": "rebased"},
        ]
    }
    facts = result_facts(thread, turn=5)
    said = [f for f in facts if "6620" in f.text]
    assert said and not any("LGTM" in f.text or "rebased" in f.text for f in facts)
    assert all(said[0].score > f.score for f in facts if "web-3" in f.text)  # chatter ranks below
    assert prose_key("bodyText") and prose_key("comment") and not prose_key("created_at")


def test_what_was_tried_stays_with_the_failure_it_printed() -> None:
    out = {
        "exit_code": 1,
        "output": "\n".join([*_noise(random.Random(2), 12), "FATAL lease lost: EROFS on /data"]),
    }
    facts = result_facts(
        out,
        turn=6,
        label='sh({"cmd":"restore --into /data --with copy-on-write"}) -> succeeded',
        args={"cmd": "x"},
    )
    top = next(f for f in facts if f.kind == "failure")
    assert "copy-on-write" in top.text and "EROFS" in top.text


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000))
def test_rows_of_one_template_share_a_skeleton(seed: int) -> None:
    a, b = _noise(random.Random(seed), 2)
    assert skeleton(a) == skeleton(b)
    assert skeleton(a) != skeleton("# current rollout manifest -> MAN-70211")


def _line(turn: int, source: str, score: float, words: int) -> SummaryLine:
    text = " ".join(f"w{turn}x{i}" for i in range(words))
    fact = Fact(kind="finding", text=text, turn=turn, source=source, score=score)  # type: ignore[arg-type]
    return SummaryLine(turn=turn, text=text, weight=2, score=score, fact=fact)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.floats(1, 9), st.integers(3, 30)), min_size=2, max_size=60
    ),
    st.integers(60, 900),
)
def test_each_origin_keeps_its_share_and_unused_share_goes_to_the_other(
    spec: list[tuple[bool, float, int]], keep: int
) -> None:
    lines = [_line(i, "result" if tool else "model", s, w) for i, (tool, s, w) in enumerate(spec)]
    pos = positions(lines)
    for name in SHARES:  # within an origin: the more salient first
        mine = sorted((i for i, x in enumerate(lines) if origin(x) == name), key=lambda i: pos[i])
        assert [lines[i].score for i in mine] == sorted(
            (lines[i].score for i in mine), reverse=True
        )
    kept = Summary(lines=lines).trimmed(keep).lines
    size = Summary(lines=lines).tokens()
    if size + 12 <= keep:  # (trimmed leaves room for its header's count)
        assert len(kept) == len(lines)
        return
    tokens = {n: sum(len(x.shown()) for x in kept if origin(x) == n) for n in SHARES}
    wanted = {n: sum(len(x.shown()) for x in lines if origin(x) == n) for n in SHARES}
    total = sum(tokens.values())
    for n, share in SHARES.items():
        # An origin below its share keeps all it has room for; one cut keeps about its share
        # (within a line's size) unless the other left room to grow into.
        if tokens[n] < wanted[n]:
            other = next(m for m in SHARES if m != n)
            assert tokens[n] + 4 * 40 >= share * total or tokens[other] == wanted[other]

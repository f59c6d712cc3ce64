"""G12 in every encoding (issue 34, item 2), on both backends: a ``torpor.Secret`` a tool echoes
URL-encoded (``%2B``, ``%2F``, ``%3D``, either case), JSON-escaped, ``repr``'d and in base64 at
its three alignments — in its result, in the error it raises, and in the planner's failure —
reaches neither the database (every table of the SQLite file or the PostgreSQL schema), nor
``torpor events``/``show``/``context``, nor an OpenTelemetry span (status, attributes,
exception events), nor an episode's lesson, nor a log record.

The registry of sinks is enumerated: every registered sink has a probe here that writes the
planted forms through that sink's real path, and a sink without a probe (or a probe whose sink
is gone) fails the test — registering a sink is how a new place to write is made, and this is
where it is checked.
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import json
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import torpor
from test_secrets_never_stored import _stored_text
from torpor import Agent, CodePlanner, PlanView, Proposal, Secret, Tools, scrub, step, telemetry
from torpor.cli import main as cli_main

#: A secret with every character an encoding changes: + / = (percent, base64), a backslash
#: (JSON, repr), a non-ASCII letter (JSON's \\u escape, repr's \\x escape).
PROVIDED = "tök+PROVIDED/9a\\2e=zz"
PLANNED = "Pl+anned/Sec\\ret=ü77"


def forms(value: str) -> dict[str, str]:
    """The encodings a tool might echo, computed here (not by torpor's scrubber)."""
    raw = value.encode()
    out = {
        "raw": value,
        "url": quote(value, safe=""),
        "url-lower": re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), quote(value, safe="")),
        "url-plus": quote_plus(value),
        "json": json.dumps(value)[1:-1],
        "json-utf8": json.dumps(value, ensure_ascii=False)[1:-1],
        "repr": repr(value)[1:-1],
    }
    for k, prefix in enumerate((b"", b"B", b"Be")):
        full = base64.b64encode(prefix + raw).decode()
        first, last = -(-8 * k // 6), (8 * (k + len(raw))) // 6
        out[f"b64-{k}"] = full[first:last]  # the characters the secret alone decides
    return out


def echo(value: str) -> str:
    """A text that carries ``value`` in every form of :func:`forms`, as real tools do."""
    auth = [base64.b64encode(p + value.encode()).decode() for p in (b"", b"B", b"Be")]
    return (
        f"GET https://api.example/v1?key={quote(value, safe='')}&k2={forms(value)['url-lower']}"
        f"&k3={quote_plus(value)} body={json.dumps({'key': value})} "
        f"ascii={json.dumps(value)} repr={value!r} auth={auth}"
    )


def _agent(name: str) -> Agent:
    tools = Tools()

    @tools.tool(secrets={"api_key": lambda: PROVIDED})
    def lookup(query: str, api_key: Secret) -> dict[str, Any]:
        return {"query": query, "request": echo(api_key)}

    @tools.tool(retry=None)
    def check(token: Secret) -> str:
        raise ValueError(f"refused: {echo(token)}")

    def planner(view: PlanView) -> Any:
        if view.version == 0:
            return Proposal(
                steps=[step("l", "lookup", query="status"), step("c", "check", token=PLANNED)]
            )
        raise RuntimeError(f"cannot plan again: {echo(PLANNED)}")

    return Agent(
        name, goal="look it up", tools=tools, planner=CodePlanner(planner), task_type="lookup"
    )


def leaks(where: str, text: str) -> list[str]:
    return [
        f"{what} {form} in {where}"
        for what, value in (("provided", PROVIDED), ("planned", PLANNED))
        for form, s in forms(value).items()
        if s in text
    ]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    with contextlib.suppress(SystemExit):
        cli_main(list(args))
    out = capsys.readouterr()
    return out.out + out.err


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.configure(provider)
    yield exporter
    telemetry.reset()
    provider.shutdown()


def _span_text(finished: tuple[ReadableSpan, ...]) -> str:
    parts: list[str] = []
    for s in finished:
        parts += [s.name, str(s.status.description or "")]
        parts += [str(v) for v in (s.attributes or {}).values()]
        for ev in s.events:
            parts += [ev.name, *(str(v) for v in (ev.attributes or {}).values())]
    return "\n".join(parts)


def test_no_encoding_of_a_secret_reaches_any_sink(
    store_url: str,
    spans: InMemorySpanExporter,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    caplog.set_level(logging.DEBUG)
    with torpor.Runtime(store_url) as rt:
        res = rt.run(_agent(f"enc.{len(store_url)}"), {"q": 1}, run_id="enc")
        assert res.outcome == "failed" and "cannot plan again: GET" in res.reason, res
        from torpor.episodes import EpisodeStore

        EpisodeStore(rt.store).capture("enc")
        episodes = EpisodeStore(rt.store).search("lookup refused cannot plan", limit=20)
        lessons = "\n".join(f"{h.summary}\n{h.lesson}" for h in episodes)
    # The paths were taken: what the tools echoed was recorded, its secrets replaced.
    events = "\n".join(str(e.payload) for e in torpor.Client(store_url).events("enc"))
    assert "api.example/v1?key=[secret:" in events and "refused: GET" in events, events
    assert "[secret:" in lessons, lessons
    logging.getLogger("torpor.test").warning("echoed %s", echo(PROVIDED))

    places = {
        "database": _stored_text(store_url, store_url),
        "events": cli(capsys, "--db", store_url, "events", "enc", "--json"),
        "show": cli(capsys, "--db", store_url, "show", "enc"),
        "context": cli(capsys, "--db", store_url, "context", "enc"),
        "spans": _span_text(spans.get_finished_spans()),
        "lessons": lessons,
        "logs": "\n".join(r.getMessage() for r in caplog.records),
    }
    assert "[secret:" in places["spans"], places["spans"]
    assert "refused: GET" in places["context"], places["context"]
    found = [hit for where, text in places.items() for hit in leaks(where, text)]
    assert found == []


# ------------------------------------------------------------------ the registry of sinks

#: The modules that register the sinks torpor has (imported so the registry is complete).
MODULES = [
    "torpor.store.codec",
    "torpor.telemetry.attempt",
    "torpor.memory.context",
    "torpor.episodes.store",
    "torpor.cli.render",
    "torpor.console.app",
    "torpor.streams.writer",
]


def _probe_journal() -> str:
    from torpor.history import Event, StepCompleted
    from torpor.store import codec

    ev = Event(
        run_id="r",
        seq=1,
        type="step_completed",
        at_ms=1,
        epoch=1,
        payload=StepCompleted(step_id="s", policy="read", result={"echo": echo(PROVIDED)}),
    )
    return str(codec.encode(ev)["payload"]) + codec.message_text(
        "r", "signal", {"v": echo(PROVIDED)}
    )


def _probe_telemetry() -> str:
    from torpor.telemetry.attempt import TELEMETRY

    return TELEMETRY.text(echo(PROVIDED))


def _probe_memory() -> str:
    from torpor.memory.context import ContextSection, build_context

    built = build_context(4000, [ContextSection("notes", 1, text=echo(PROVIDED))])
    return "\n".join(m.content for m in built.messages) + "\n".join(built.texts.values())


def _probe_episodes() -> str:
    from torpor.episodes.store import EPISODES

    return EPISODES.text(echo(PROVIDED))


def _probe_logs() -> str:
    record = logging.getLogRecordFactory()(
        "torpor.x", logging.INFO, __file__, 1, "%s", (echo(PROVIDED),), None
    )
    return record.getMessage()


def _probe_cli() -> str:
    from torpor.cli.render import safe_text

    return safe_text(echo(PROVIDED))


def _probe_console() -> str:
    from torpor.console import app

    env = app.jinja2.Environment(autoescape=True, finalize=app._scrubbed)
    return env.from_string("{{ v }}").render(v=echo(PROVIDED))


def _probe_streams() -> str:
    from torpor.streams import HoldBack
    from torpor.streams.writer import STREAMS

    # A model's reply arrives a few characters at a time: every encoding split across deltas.
    hold, text, out = HoldBack(STREAMS.scrubber()), echo(PROVIDED), []
    out += [hold.feed(text[i : i + 3]) for i in range(0, len(text), 3)]
    return "".join(out) + hold.flush()


PROBES: dict[str, Callable[[], str]] = {
    "journal": _probe_journal,
    "telemetry": _probe_telemetry,
    "memory": _probe_memory,
    "episodes": _probe_episodes,
    "logs": _probe_logs,
    "cli": _probe_cli,
    "console": _probe_console,
    "streams": _probe_streams,
}


def test_every_registered_sink_has_a_probe_and_scrubs_every_encoding() -> None:
    for m in MODULES:
        importlib.import_module(m)
    registered = scrub.sinks()
    assert sorted(registered) == sorted(PROBES), (
        "a sink was registered (or removed) without its probe here: add one to PROBES"
    )
    scrub.remember(PROVIDED, "[secret:probe]")
    for name, probe in PROBES.items():
        out = probe()
        assert "[secret:" in out, (name, out)
        assert leaks(f"sink {name}", out) == []


def test_the_scrubber_finds_base64_at_each_alignment_inside_longer_text() -> None:
    s = scrub.Scrubber(((PROVIDED, "[x]"),))
    for prefix in (b"", b"a", b"ab", b"abc", b"Basic user:"):
        for enc in (base64.b64encode, base64.urlsafe_b64encode):
            text = enc(prefix + PROVIDED.encode() + b" trailing").decode()
            assert "[x]" in s.text(text), (prefix, text)

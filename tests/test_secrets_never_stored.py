"""G12, secrets never stored (issue 16, item 1), on both backends.

Distinct secrets are planted through every path a secret takes into an agent's run:

- ``planned``: a ``Secret`` argument written by a ``CodePlanner`` (its recorded compute step —
  the proposal — as well as the plan);
- ``provided``: a tool parameter filled by a secrets provider, echoed by the tool's result;
- ``failing``: a ``Secret`` argument echoed in the error a tool raises (then the planner fails
  with an error that echoes ``planned``: the run's failure and the planner step's);
- ``reconciled``: a secret given to the agent, echoed by an effect tool's reconcile verdict;
- ``password``: the database password in the PostgreSQL URL (errors, the worker's start-up
  line).

Then each is looked for in the SQLite file (and its WAL) or every row of every table of the
test's PostgreSQL schema, the artifact folder, the CLI's output (``ls``, ``show``, ``events
--json``, an unknown run's error, the worker's start-up line) and the log records."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from conftest import HANG_S, ROOT
from torpor import Agent, CodePlanner, PlanView, Proposal, Runtime, Secret, Tools, step
from torpor.store import open_store

SECRETS = {
    "planned": "tok-PLANNED-6f1c",
    "provided": "sk-PROVIDED-9a2e",
    "failing": "tok-FAILING-41bd",
    "reconciled": "tok-RECONCILED-77e0",
    "password": "pw-DATABASE-c3d5",
}


def _with_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        return url
    user_host = parts.netloc.rsplit("@", 1)
    user = user_host[0].split(":", 1)[0] if len(user_host) == 2 else "postgres"
    host = user_host[-1]
    return urlunsplit(parts._replace(netloc=f"{user}:{SECRETS['password']}@{host}"))


def _agent(name: str) -> Agent:
    tools = Tools()
    sent: list[str] = []

    @tools.tool(policy="effect")
    def deploy(service: str, token: Secret, idempotency_key: str) -> dict[str, Any]:
        sent.append(token)
        return {"service": service, "with": token}

    @tools.tool(secrets={"api_key": lambda: SECRETS["provided"]})
    def lookup(query: str, api_key: Secret) -> str:
        return f"{query} looked up with {api_key}"

    @tools.tool()
    def check(token: Secret) -> str:
        raise ValueError(f"token {token} refused by the check")

    def find(call: Any) -> Any:
        import torpor

        return torpor.Applied({"found": SECRETS["reconciled"]})

    @tools.tool(policy="effect", reconcile=find)
    def notify(token: Secret) -> str:
        raise ConnectionError("reply lost")  # in doubt: reconcile decides (and echoes a secret)

    def planner(view: PlanView) -> Any:
        if view.version == 0:
            return Proposal(
                steps=[
                    step("d", "deploy", service="api", token=SECRETS["planned"]),
                    step("l", "lookup", query="status"),
                    step("n", "notify", token=SECRETS["reconciled"]),
                    step("c", "check", token=SECRETS["failing"]),
                ],
                reason=f"plan made with {SECRETS['planned']}",
            )
        raise RuntimeError(f"cannot plan again with {SECRETS['planned']}")

    return Agent(
        name,
        goal="deploy",
        tools=tools,
        planner=CodePlanner(planner),
        secrets=[SECRETS["reconciled"]],
    )


def _cli(url: str, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), TORPOR_HOME=str(home))
    return subprocess.run(
        [sys.executable, "-m", "torpor.cli", "--db", url, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_S,
    )


def _stored_text(url: str, store_url: str) -> str:
    """Everything the database holds, as text."""
    if url.startswith("sqlite"):
        path = Path(url.split("://", 1)[1][1:])
        return "".join(
            p.read_bytes().decode("latin-1")
            for p in path.parent.glob(path.name + "*")
            if p.is_file()
        )
    import psycopg

    out = []
    with psycopg.connect(store_url, autocommit=True) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()
        assert schema is not None and schema[0] != "public"
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (schema[0],),
        ).fetchall()
        assert len(tables) >= 4
        for (table,) in tables:
            rows = conn.execute(f'SELECT t::text FROM "{schema[0]}"."{table}" t').fetchall()
            out.extend(r[0] for r in rows)
    return "\n".join(out)


@pytest.mark.proc
def test_no_secret_is_stored_or_printed(
    store_url: str, torpor_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = _with_password(store_url)
    rt = Runtime(url, auto_approve="test")
    try:
        res = rt.run(_agent(f"g12.{len(store_url)}"), {"service": "api"}, run_id="g12")
        assert res.outcome == "failed" and "cannot plan again with [secret:" in res.reason, res
        state = rt.store.load("g12")
        calls = {k: v.status for k, v in state.plan.items()}
        assert calls == {"d": "succeeded", "l": "succeeded", "c": "failed", "n": "succeeded"}
    finally:
        rt.close()
    # The paths were taken: the values reached the tools (and so could have leaked).
    events = open_store(store_url)
    try:
        settled = [e.payload for e in events.read_events("g12") if e.type == "tool_call_settled"]
    finally:
        events.close()
    assert "[secret:" in str(settled)  # echoed values were replaced by their marker

    out = [
        _cli(url, "ls", home=torpor_home),
        _cli(url, "show", "g12", home=torpor_home),
        _cli(url, "show", "g12", "--json", home=torpor_home),
        _cli(url, "events", "g12", "--json", home=torpor_home),
        _cli(url, "show", "no-such-run", home=torpor_home),
        _cli(url, "worker", "--until-idle", home=torpor_home),
    ]
    assert out[0].returncode == 0 and "g12" in out[0].stdout, out[0]
    assert out[3].returncode == 0 and "plan_recorded" in out[3].stdout, out[3]
    assert out[4].returncode != 0 and "no run 'no-such-run'" in out[4].stderr, out[4]
    assert "worker" in out[5].stdout, out[5]
    printed = "\n".join(p.stdout + p.stderr for p in out)
    if "postgres" in url:
        assert ":***@" in printed  # the URL is shown, its password is not

    places = {
        "database": _stored_text(url, store_url),
        "artifacts": "".join(
            p.read_bytes().decode("latin-1") for p in torpor_home.rglob("*") if p.is_file()
        ),
        "cli": printed,
        "logs": "\n".join(r.getMessage() for r in caplog.records),
    }
    assert "plan_recorded" in places["database"] or "plan" in places["database"]
    leaks = [(what, where) for what, s in SECRETS.items() for where, t in places.items() if s in t]
    assert leaks == []


@pytest.mark.parametrize(
    "url, shown",
    [
        (
            "postgresql://u:p%40ss@h:5432/db?sslmode=require",
            "postgresql://u:***@h:5432/db?sslmode=require",
        ),
        ("postgresql://u@h/db?password=zz&x=1", "postgresql://u@h/db?password=***&x=1"),
        ("host=h password=zz user=u", "host=h password=*** user=u"),
        ("sqlite:///a/b.db", "sqlite:///a/b.db"),
    ],
)
def test_display_url_hides_every_password_form(url: str, shown: str) -> None:
    from torpor.urls import display_url

    assert display_url(url) == shown

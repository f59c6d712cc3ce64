"""MCP servers as durable tools (issue 41), against the real ledger server of
``examples/mcp_ledger`` (the official SDK) over streamable HTTP on loopback and over stdio.

The server appends every call that reaches a tool to a ledger file (fsynced) before it
answers, and ``transfer`` does not deduplicate: the ledger is what the world saw. Each run
uses its own account (its run id), so one shared HTTP server serves every run.

- every fault point of a call: a farm process forks one child per point of the agent's
  ``transfer`` call (and one inside the read before it, two around the ``note`` after it),
  each SIGKILLed there by a fault plan; every run is resumed here. The transfer happens
  exactly once (reconciled by the server's ``find_transfer`` when its answer was lost), the
  read is repeated when it was killed in flight, and a ``note`` in doubt leaves the run
  ``unresolved`` — never sent twice;
- the stdio server killed mid-run: the next call opens a new session and replays the
  recorded setup call first (the transfer lands in the book it opened);
- a server that lists other tools after an upgrade: the resumed run needs attention and
  stays resumable; it continues once the server lists the recorded tools again;
- a stateful server without setup calls whose session is gone: the run ends ``failed``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import torpor
from conftest import HANG_S, ROOT, run_python
from torpor import faults
from torpor.errors import ReleaseRun

pytestmark = pytest.mark.proc

SERVER = ROOT / "examples" / "mcp_ledger" / "server.py"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.mcp_ledger import make_agent, stdio_server  # noqa: E402

from torpor import mcp  # noqa: E402


def entries(ledger: Path, kind: str, **match: Any) -> list[dict[str, Any]]:
    if not ledger.exists():
        return []
    rows = [json.loads(x) for x in ledger.read_text().splitlines() if x.strip()]
    return [r for r in rows if r["kind"] == kind and all(r.get(k) == v for k, v in match.items())]


class HttpLedger:
    """The ledger server over streamable HTTP on a loopback port; :meth:`restart` kills it
    and starts another on the same port."""

    def __init__(self, folder: Path):
        self.ledger = folder / "ledger.jsonl"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "LEDGER_FILE": str(self.ledger)}
        proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--http", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + HANG_S  # a hang guard, not a budget
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return proc
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"ledger server exited: {proc.returncode}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.proc = self._start()


@pytest.fixture(scope="module")
def http_ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpLedger]:
    """One ledger server over streamable HTTP on loopback for the module."""
    server = HttpLedger(tmp_path_factory.mktemp("mcp-http"))
    yield server
    server.stop()


def test_import_torpor_does_not_import_mcp(tmp_path: Path) -> None:
    code = (
        "import sys, torpor, torpor.agents, torpor.cli, torpor.mcp\n"
        "tools = torpor.mcp.toolset(torpor.mcp.http('x', 'http://127.0.0.1:9/mcp'))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'jsonschema')))\n"
    )
    cp = run_python(code, cwd=tmp_path)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.strip() == "[]"


def test_policy_follows_annotations_of_trusted_servers_only(http_ledger: HttpLedger) -> None:
    url = http_ledger.url
    untrusted = mcp.toolset(mcp.http("ledger", url))
    trusted = mcp.toolset(
        mcp.http("ledger", url, trusted=True),
        overrides={
            "note": mcp.Override(policy="read"),
            "transfer": mcp.Override(lookup="find_transfer"),
        },
    )
    try:
        assert untrusted.refresh()["ledger"][0]["name"]
        trusted.refresh()
        # Untrusted: every tool is an effect, no key filled, no reconcile (G2: unresolved).
        assert {t.name: t.policy.value for t in untrusted} == dict.fromkeys(
            ["balance", "transfer", "find_transfer", "note", "open_book", "info"], "effect"
        )
        assert all(not t.engine_params and t.reconcile is None for t in untrusted)
        assert "idempotency_key" in untrusted["transfer"].spec().parameters["properties"]
        # Trusted: readOnlyHint -> read; idempotentHint + idempotency_key -> keyed effect.
        pol = {t.name: t.policy.value for t in trusted}
        assert pol["balance"] == pol["find_transfer"] == pol["info"] == "read"
        assert pol["transfer"] == pol["open_book"] == "effect"
        assert pol["note"] == "read"  # the override wins
        transfer = trusted["transfer"]
        assert transfer.engine_params == {"idempotency_key"} and transfer.reconcile is not None
        params = transfer.spec().parameters
        assert "idempotency_key" not in params["properties"]
        assert params["required"] == ["account", "amount"]
        # Arguments are checked by the server's own JSON schema before anything is sent.
        with pytest.raises(torpor.errors.ToolArgsError) as e:
            transfer.validate({"account": "a", "amount": "ten"})
        assert e.value.details[0]["loc"] == "amount"
        with pytest.raises(torpor.errors.ToolArgsError, match="filled by torpor"):
            transfer.validate({"account": "a", "amount": 1, "idempotency_key": "mine"})
    finally:
        untrusted.close()
        trusted.close()


FARM = """
import json, os, sys
import torpor, torpor.faults as F
from examples.mcp_ledger import http_server, make_agent

DB, URL, TRACE = sys.argv[1], sys.argv[2], sys.argv[3]
agent = make_agent("mcp.farm", http_server(URL))


def child(run_id, plan=None, trace=None):
    pid = os.fork()
    if pid == 0:
        F.install(plan, trace=trace, detail=trace is not None)
        with torpor.Runtime(DB) as rt:
            rt.run(agent, {"account": run_id, "amount": 5}, run_id=run_id)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9


child("farm-trace", trace=TRACE)
# The windows, read off the trace (one name a line; "#step <id>" before each step body): the
# read killed after it ran, before its result is recorded; every point of the transfer's call
# (from the read's settle to its own; an append's committing/committed are its before/after);
# the note's intent and call.
rules, seen, step, window = [], {}, "", ""
for line in open(TRACE).read().splitlines():
    if line.startswith("#step "):
        step = line.split(" ", 1)[1].split("\t")[0]  # (after a tab: the run)
        continue
    seen[line] = seen.get(line, 0) + 1
    rule = f"crash:{line}@{seen[line]}"
    if step == "tool:read@v1" and window == "" and line == "append.before":
        rules.append(("read", rule))
        window = "read"
    elif window == "pay" and line not in ("append.committing", "append.committed"):
        rules.append(("pay", rule))
    elif window == "tell" and line in ("effect.intended", "effect.called"):
        rules.append(("tell", rule))
    if line == "agent.tool.settled":
        window = {"read": "pay", "pay": "tell", "tell": "end"}[window]
assert window == "end", rules
out = []
for k, (window, rule) in enumerate(rules):
    run_id = f"farm-{k}-{window}"
    out.append([run_id, window, rule, child(run_id, F.FaultPlan.parse(rule))])
print("FARM " + json.dumps(out))
"""


def test_sigkill_at_every_fault_point_of_a_call(
    http_ledger: HttpLedger, tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, ledger = http_ledger.url, http_ledger.ledger
    cp = subprocess.run(
        [sys.executable, "-c", FARM, db_url, url, str(tmp_path / "trace")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])},
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert cp.returncode == 0, cp.stderr[-3000:]
    farm = json.loads(cp.stdout.split("FARM ", 1)[1])
    windows = [w for _, w, _, _ in farm]
    assert windows.count("read") == 1 and windows.count("tell") == 2
    assert windows.count("pay") >= 7, farm  # intent, call, observation, settle, their appends
    assert all(killed for *_, killed in farm), farm
    agent = make_agent("mcp.farm", mcp.http("ledger", url, trusted=True))
    assert entries(ledger, "transfer", account="farm-trace") != []
    try:
        with torpor.Runtime(db_url) as rt:
            for run_id, window, rule, _ in farm:
                res = rt.resume(run_id)
                transfers = entries(ledger, "transfer", account=run_id)
                notes = entries(ledger, "note", text=f"paid 5 to {run_id}")
                assert len(transfers) == 1, (rule, transfers)  # G2: never twice
                assert len(notes) <= 1, (rule, notes)
                reads = entries(ledger, "balance", account=run_id)
                if window == "tell":
                    # The note has no reconcile: in doubt, the run waits for a person.
                    assert res.outcome == "unresolved", (rule, res)
                    assert f"{run_id}/tool:tell@v1" in res.reason
                else:
                    assert res.outcome == "succeeded", (rule, res)
                    assert len(notes) == 1
                assert len(reads) == (2 if window == "read" else 1), (rule, reads)
                if window == "pay" and rule.startswith(
                    ("crash:effect.called", "crash:append.deferred")
                ):
                    # Its answer was lost: the server's lookup found it (never sent again).
                    kinds = [e.type for e in rt.store.iter_events(run_id)]
                    assert "effect_reconciled" in kinds, (rule, kinds)
            # The HTTP server restarted mid-run (after the read): the run goes on.
            hook = on_points(monkeypatch)
            hook["agent.tool.settled"] = http_ledger.restart
            before = http_ledger.proc.pid
            res = rt.run(agent, {"account": "h1", "amount": 2}, run_id="h1")
            assert http_ledger.proc.pid != before and not hook
            assert res.outcome == "succeeded", res
            assert len(entries(ledger, "transfer", account="h1")) == 1
            assert len(entries(ledger, "note", text="paid 2 to h1")) == 1
    finally:
        agent.tools.close()  # type: ignore[attr-defined]


def on_points(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Fault points that run a hook: ``hooks[point] = fn`` runs ``fn`` the next time the
    process reaches ``point`` (once), in this process."""
    point = faults.point
    hooks: dict[str, Any] = {}

    def on_point(name: str, *a: Any, **kw: Any) -> Any:
        fn = hooks.pop(name, None)
        if fn is not None:
            fn()
        return point(name, *a, **kw)

    monkeypatch.setattr(faults, "point", on_point)
    return hooks


def release() -> None:
    """A hook: give the run back at this point, as a worker shutting down does."""
    raise ReleaseRun("test: give the run back after its read")


def test_stdio_sessions_survive_restarts_and_tool_lists_are_pinned(
    tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    server = stdio_server(LEDGER_FILE=str(ledger))
    agent = make_agent("mcp.stdio", server)
    tools: mcp.Toolset = agent.tools  # type: ignore[assignment]
    hook = on_points(monkeypatch)
    conn = tools.connections["ledger"]
    first: dict[str, Any] = {}

    def kill_server() -> None:  # after the read settled: the server process dies
        first.update(conn.call("info", {})["structuredContent"])
        os.kill(first["pid"], signal.SIGKILL)

    try:
        with torpor.Runtime(store_url) as rt:
            hook["agent.tool.settled"] = kill_server
            res = rt.run(agent, {"account": "s1", "amount": 7, "note": False}, run_id="s1")
            assert res.outcome == "succeeded", res
            (t,) = entries(ledger, "transfer", account="s1")
            assert t["book"] == "ops" and t["pid"] != first["pid"]  # a new session, set up
            opened = entries(ledger, "open_book")
            assert [o["pid"] for o in opened] == [first["pid"], t["pid"]]
            assert conn.sessions == 2

            # An upgraded server lists another tool: the resumed run needs attention.
            hook["agent.tool.settled"] = release
            res = rt.run(agent, {"account": "s2", "amount": 3, "note": False}, run_id="s2")
            assert res.status != "finished"
            conn.close()
            v2 = replace(server, env={"LEDGER_FILE": str(ledger), "LEDGER_TOOLS": "v2"})
            tools.connections["ledger"] = mcp.Connection(v2)
            with pytest.raises(mcp.McpToolsChangedError, match="added audit"):
                rt.resume("s2")
            st = rt.store.load("s2")
            assert "added audit" in st.attention and st.status.value != "finished"
            assert entries(ledger, "transfer", account="s2") == []
            tools.connections["ledger"].close()
            tools.connections["ledger"] = conn = mcp.Connection(server)
            res = rt.resume("s2")
            assert res.outcome == "succeeded", res
            assert len(entries(ledger, "transfer", account="s2")) == 1
    finally:
        tools.close()


def test_stateful_server_without_setup_cannot_continue(
    tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    server = replace(stdio_server(LEDGER_FILE=str(ledger)), stateful=True, setup=())
    agent = make_agent("mcp.stateful", server)
    tools: mcp.Toolset = agent.tools  # type: ignore[assignment]
    try:
        with torpor.Runtime(db_url) as rt:
            on_points(monkeypatch)["agent.tool.settled"] = release
            res = rt.run(agent, {"account": "s3", "amount": 1}, run_id="s3")
            assert res.status != "finished"
            tools.close()  # the session the run began on is gone
            res = rt.resume("s3")
            assert res.outcome == "failed", res
            said = json.dumps([e.payload for e in rt.store.iter_events("s3")], default=str)
            assert "the run cannot continue on this server" in said
            assert entries(ledger, "transfer", account="s3") == []
    finally:
        tools.close()

"""Helpers for the runtime fault tests (tests/test_runtime_*.py).

Workflows under test live in modules written into the test's ``tmp_path`` and run in real
subprocesses (``conftest.run_python``); a fault point (``TORPOR_CRASH_AT``) or the test itself
kills them with SIGKILL, and a new process resumes. Every side effect a workflow performs is
appended to an external *ledger* file (JSON lines, fsynced) — never to torpor's own records — so
the tests count executions independently of what torpor believes happened.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torpor
from conftest import HANG_S, ROOT, run_python

#: Prepended to every generated workflow module: the ledger helpers.
PRELUDE = '''
import json as _json
import os as _os
import time as _time
from datetime import timedelta

import torpor

LEDGER = {ledger!r}


def ledger(kind, **fields):
    """Append one entry to the external ledger (fsynced: it survives SIGKILL)."""
    entry = {{"kind": kind, "pid": _os.getpid(), "t": _time.time(), **fields}}
    with open(LEDGER, "a") as f:
        f.write(_json.dumps(entry) + "\\n")
        f.flush()
        _os.fsync(f.fileno())


def ledger_entries(kind=None, **match):
    if not _os.path.exists(LEDGER):
        return []
    out = []
    with open(LEDGER) as f:
        for line in f:
            if not line.strip():
                continue
            e = _json.loads(line)
            if kind is not None and e["kind"] != kind:
                continue
            if all(e.get(k) == v for k, v in match.items()):
                out.append(e)
    return out


def work(name, value):
    """A step body: records that it executed, returns a deterministic value."""
    ledger("step", name=name)
    return value


def send(what, idempotency_key):
    """An effect: 'sends' something to the outside world (the ledger), carrying its key."""
    ledger("effect", key=idempotency_key, what=what)
    return {{"sent": what}}


def find_sent(call):
    """Reconcile by operation identity: look for the idempotency key in the outside world."""
    hits = ledger_entries("effect", key=call.idempotency_key)
    if hits:
        return torpor.Applied({{"sent": hits[-1]["what"]}})
    return torpor.Absent()
'''

DRIVER = """
import dataclasses, importlib, json, os, sys
print("PID", os.getpid(), flush=True)
import torpor
importlib.import_module({module!r})
rt = torpor.Runtime({db!r}, **{rt_kw!r})
_barrier = os.environ.get("RT_BARRIER")
if _barrier:  # start together with other processes: say so, then wait for the barrier file
    import time
    open(_barrier + ".ready." + str(os.getpid()), "w").close()
    while not os.path.exists(_barrier):
        time.sleep(0.002)
try:
    if {resume!r}:
        res = rt.resume({run_id!r}, follow_timers={follow!r})
    else:
        res = rt.run({workflow!r}, {input!r}, run_id={run_id!r}, follow_timers={follow!r})
    print("RESULT " + json.dumps(dataclasses.asdict(res)), flush=True)
except torpor.TorporError as exc:
    print("ERROR " + json.dumps({{"type": type(exc).__name__, "msg": str(exc)}}), flush=True)
"""


CRASH_FARM = """
import importlib, json, os, signal
import torpor, torpor.faults
importlib.import_module({module!r})
for rid, point in {cases!r}:
    pid = os.fork()
    if pid == 0:
        os.environ["TORPOR_CRASH_AT"] = point
        importlib.reload(torpor.faults)
        torpor.Runtime({db!r}, **{rt_kw!r}).run({workflow!r}, {input!r}, run_id=rid)
        os._exit(0)  # not reached when the fault point kills the process
    _, status = os.waitpid(pid, 0)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    print(json.dumps({{"rid": rid, "point": point, "pid": pid, "killed": killed}}), flush=True)
"""

RESUME_ALL = """
import dataclasses, importlib, json, os
print("PID", os.getpid(), flush=True)
import torpor
importlib.import_module({module!r})
rt = torpor.Runtime({db!r}, **{rt_kw!r})
out = {{}}
for rid in {run_ids!r}:
    for _ in range(5):
        res = rt.resume(rid)
        if res.status == "finished":
            break
    out[rid] = dataclasses.asdict(res)
print("RESULT " + json.dumps(out), flush=True)
"""


@dataclass
class Proc:
    """What one driver process did."""

    rc: int
    pid: int | None
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    stdout: str
    stderr: str

    @property
    def killed(self) -> bool:
        return self.rc == -signal.SIGKILL

    def describe(self) -> str:
        return f"rc={self.rc}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def parse(rc: int, stdout: str, stderr: str) -> Proc:
    pid = result = error = None
    for line in stdout.splitlines():
        if line.startswith("PID "):
            pid = int(line.split()[1])
        elif line.startswith("RESULT "):
            result = json.loads(line[7:])
        elif line.startswith("ERROR "):
            error = json.loads(line[6:])
    return Proc(rc, pid, result, error, stdout, stderr)


@dataclass
class Lab:
    """One test's world: a directory for workflow modules, a database, a ledger."""

    tmp: Path
    db_url: str
    ledger_path: Path
    pids: list[int] = field(default_factory=list)

    # ------------------------------------------------------------------ modules

    def module(self, name: str, source: str) -> str:
        """Write workflow module ``name`` (the ledger prelude + ``source``); return its name."""
        text = PRELUDE.format(ledger=str(self.ledger_path)) + textwrap.dedent(source)
        (self.tmp / f"{name}.py").write_text(text)
        return name

    # ------------------------------------------------------------------ processes

    def driver_code(
        self,
        module: str,
        run_id: str,
        *,
        workflow: str | None = None,
        input: Any = None,
        resume: bool = False,
        follow_timers: bool = True,
        runtime: dict[str, Any] | None = None,
    ) -> str:
        return DRIVER.format(
            module=module,
            db=self.db_url,
            rt_kw=runtime or {},
            resume=resume,
            run_id=run_id,
            follow=follow_timers,
            workflow=workflow,
            input=input,
        )

    def drive(
        self,
        module: str,
        run_id: str,
        *,
        workflow: str | None = None,
        input: Any = None,
        resume: bool = False,
        crash_at: str | None = None,
        trace: Path | None = None,
        follow_timers: bool = True,
        runtime: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        timeout: float = HANG_S,
    ) -> Proc:
        """Start (or resume) a run in a fresh process; SIGKILLed at ``crash_at`` if given."""
        code = self.driver_code(
            module,
            run_id,
            workflow=workflow,
            input=input,
            resume=resume,
            follow_timers=follow_timers,
            runtime=runtime,
        )
        full_env = dict(env or {})
        if crash_at:
            full_env["TORPOR_CRASH_AT"] = crash_at
        if trace is not None:
            full_env["TORPOR_TRACE_POINTS"] = str(trace)
        cp = run_python(code, cwd=self.tmp, env=full_env, timeout=timeout)
        p = parse(cp.returncode, cp.stdout, cp.stderr)
        if p.pid is not None:
            self.pids.append(p.pid)
        return p

    def spawn(
        self,
        module: str,
        run_id: str,
        *,
        workflow: str | None = None,
        input: Any = None,
        resume: bool = False,
        runtime: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[str]:
        """Like :meth:`drive` but in the background (to kill it at a moment of our choosing)."""
        code = self.driver_code(
            module, run_id, workflow=workflow, input=input, resume=resume, runtime=runtime
        )
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = os.pathsep.join(
            [str(self.tmp), str(ROOT / "src"), full_env.get("PYTHONPATH", "")]
        )
        full_env.update(env or {})
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=self.tmp,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.pids.append(proc.pid)  # processes are ordered by when they started
        return proc

    def crash_farm(
        self,
        module: str,
        workflow: str,
        input: Any,
        cases: list[tuple[str, str]],
        runtime: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Start one run per ``(run_id, "<point>@<n>")``, each in its own process that must die
        by SIGKILL at that fault point. The farm imports torpor once and forks a child per case
        (a real process and a real SIGKILL; the child sets TORPOR_CRASH_AT and reloads the
        fault module as a fresh interpreter would), which keeps dozens of crashes cheap."""
        code = CRASH_FARM.format(
            module=module,
            db=self.db_url,
            workflow=workflow,
            input=input,
            cases=cases,
            rt_kw=runtime or {},
        )
        # Dozens of processes, one after another: twice a single process's hang guard.
        cp = run_python(code, cwd=self.tmp, timeout=2 * HANG_S)
        assert cp.returncode == 0, cp.stderr
        farm = [json.loads(line) for line in cp.stdout.splitlines() if line.startswith("{")]
        assert [f["rid"] for f in farm] == [rid for rid, _ in cases], cp.stdout
        for f in farm:
            assert f["killed"], f"{f['point']}: the process was not killed there: {f}"
            self.pids.append(f["pid"])
        return farm

    def resume_all(
        self, module: str, run_ids: list[str], runtime: dict[str, Any] | None = None
    ) -> dict[str, dict[str, Any]]:
        """Resume every run (to its end, following timers) in one new process."""
        code = RESUME_ALL.format(
            module=module, db=self.db_url, run_ids=run_ids, rt_kw=runtime or {}
        )
        # Many runs in one process: twice a single process's hang guard.
        cp = run_python(code, cwd=self.tmp, timeout=2 * HANG_S)
        p = parse(cp.returncode, cp.stdout, cp.stderr)
        assert p.rc == 0 and p.result is not None and p.pid is not None, p.describe()
        self.pids.append(p.pid)
        return p.result

    def collect(self, proc: subprocess.Popen[str], timeout: float = HANG_S) -> Proc:
        out, err = proc.communicate(timeout=timeout)
        p = parse(proc.returncode, out, err)
        assert p.pid in (None, proc.pid), (p.pid, proc.pid)
        return p

    def resume_until_finished(
        self, module: str, run_id: str, *, max_tries: int = 6, **kw: Any
    ) -> Proc:
        """Resume in new processes until the run has an outcome (or a driver errors)."""
        last: Proc | None = None
        for _ in range(max_tries):
            last = self.drive(module, run_id, resume=True, **kw)
            if last.result is not None and last.result["status"] == "finished":
                return last
            assert last.rc == 0 and last.error is None, last.describe()
        assert last is not None
        raise AssertionError(f"run {run_id} did not finish:\n{last.describe()}")

    # ------------------------------------------------------------------ evidence

    def ledger(self, kind: str | None = None, **match: Any) -> list[dict[str, Any]]:
        if not self.ledger_path.exists():
            return []
        out = []
        for line in self.ledger_path.read_text().splitlines():
            if not line.strip():
                continue
            e = json.loads(line)
            if kind is not None and e["kind"] != kind:
                continue
            if all(e.get(k) == v for k, v in match.items()):
                out.append(e)
        return out

    def client(self) -> torpor.Client:
        return torpor.Client(torpor.open_store(self.db_url))

    def events(self, run_id: str) -> list[torpor.Event]:
        c = self.client()
        try:
            return c.events(run_id)
        finally:
            c.close()

    def state(self, run_id: str) -> torpor.RunState:
        c = self.client()
        try:
            return c.state(run_id)
        finally:
            c.close()

    def check_no_rerun_after_record(self, run_id: str) -> dict[str, int]:
        """G1 against the ledger: no step ran again in a process that started after the one
        that recorded its completion, and the recording process ran it at most once.

        Processes are ordered by start (``self.pids``); an event's writer is found through the
        ``lease_acquired`` event of the epoch it was written under (owner = ``host:pid:…``).
        Ledger entries with a ``run`` field count only for that run. Returns
        ``{step name: executions}``.
        """
        evs = self.events(run_id)
        owner_pid = {
            e.payload.epoch: int(e.payload.owner.split(":")[1])  # type: ignore[attr-defined]
            for e in evs
            if e.type == "lease_acquired"
        }
        order = {pid: i for i, pid in enumerate(self.pids)}
        recorded_by: dict[str, int] = {}
        for e in evs:
            if e.type == "step_completed":
                recorded_by[e.payload.step_id] = order[owner_pid[e.epoch]]  # type: ignore[attr-defined]
        mine = [e for e in self.ledger("step") if e.get("run") in (None, run_id)]
        counts: dict[str, int] = {}
        for entry in mine:
            name = entry["name"]
            counts[name] = counts.get(name, 0) + 1
            assert name in recorded_by, f"step {name} ran but its completion was never recorded"
            proc = order[entry["pid"]]
            assert proc <= recorded_by[name], (
                f"step {name} executed in process #{proc} after its completion was recorded "
                f"by process #{recorded_by[name]}"
            )
        for name, proc in recorded_by.items():
            if name.startswith(("artifact:", "wait:", "sleep", "verify:", "approval:")):
                continue
            same = [e for e in mine if e["name"] == name and order[e["pid"]] == proc]
            assert len(same) <= 1, f"step {name} executed {len(same)} times in process #{proc}"
        return counts


def wait_for_file_count(folder: Path, pattern: str, n: int, timeout: float = HANG_S) -> None:
    """Wait until ``n`` files in ``folder`` match ``pattern`` (a hang guard, not a budget)."""
    deadline = time.monotonic() + timeout
    while len(list(folder.glob(pattern))) < n:
        assert time.monotonic() < deadline, f"{n} files {pattern} never appeared in {folder}"
        time.sleep(0.01)


def wait_for_file(path: Path, timeout: float = HANG_S) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout}s")
        time.sleep(0.01)


def event_types(events: list[torpor.Event]) -> list[str]:
    return [e.type for e in events]


# ---------------------------------------------------------------------- in-process ledger

#: The ledger file of in-process workflows (set per test by :func:`use_ledger`).
_INPROC_LEDGER: list[Path] = []


def use_ledger(path: Path) -> None:
    _INPROC_LEDGER[:] = [path]


def ledger(kind: str, **fields: Any) -> None:
    """Append one entry to the current in-process ledger (fsynced)."""
    entry = {"kind": kind, "pid": os.getpid(), "t": time.time(), **fields}
    with open(_INPROC_LEDGER[0], "a") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()
        os.fsync(f.fileno())


def ledger_entries(kind: str | None = None, **match: Any) -> list[dict[str, Any]]:
    path = _INPROC_LEDGER[0]
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        e = json.loads(line)
        if (kind is None or e["kind"] == kind) and all(e.get(k) == v for k, v in match.items()):
            out.append(e)
    return out

"""The crash-point explorer: crash a workflow at every boundary it crosses, resume, check.

Given a registered workflow (its name and the module that registers it) and an input:

1. **baseline** — run it once, crash-free, in a fresh store and a fresh *world* directory,
   tracing every fault point it reaches (:mod:`torpor.faults`). The crash boundaries are the
   :data:`~torpor.faults.CRASH_POINTS` in the order reached: ``append.after@12`` is the 12th
   ``append.after``.
2. **cases** — for every boundary (or a seeded sample): a fresh store and world; a process that
   dies by SIGKILL at that boundary (``crash``), or whose effect call loses its acknowledgement
   there (``ack``, at ``effect.called``), or whose database connection breaks around a commit
   (``break``, at ``append.committing``/``append.committed``); then ``recovery_crashes``
   resuming processes that are killed again at a seeded boundary of their own (crashes during
   recovery); then resumes until the run finishes.
3. **invariants** of every case, against the baseline:

   - the run finished with the baseline's outcome and result (minus ``ignore_result_keys``);
   - its history folds (:func:`torpor.history.fold`) and loads;
   - every effect key was performed at most once — and exactly once when the run succeeded —
     both by torpor's record and by the effect's own **ledger** (a callable you supply that
     counts what the outside world received per idempotency key);
   - no step body ran again in a process started after its completion was recorded, nor twice
     in the process that recorded it.

Each violation names the case's fault plan and seed; ``torpor explore ... --case PLAN`` (or
``explore(..., cases=[PLAN])``) reruns exactly that case. Cases run in forked children of a
few *lane* processes (:mod:`torpor.testing._lane`) that import torpor and the workflow once.

Every process of a case gets ``TORPOR_EXPLORE_WORLD=<world dir>``; strings in the input that
contain ``{world}`` have it substituted, so effects can reach a per-case outside world (a bare
git remote, a maildir, a ledger file). Timers fire at once (an :class:`OffsetClock` per case).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torpor

from .. import faults
from ..history import Event, fold
from .report import (
    KINDS,
    PROCESS_SEP,
    CaseResult,
    Proc,
    Report,
    Target,
    Violation,
    numbered,
    performed_effects,
    plan_cases,
)

# ---------------------------------------------------------------------- lanes


class Lane:
    """A fork server subprocess (see :mod:`torpor.testing._lane`)."""

    def __init__(self, target: Target, log: Path):
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("TORPOR_") and k not in ("TORPOR_TEST_DATABASE_URL",):
                env.pop(k)
        src = str(Path(torpor.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(
            [*target.paths, os.getcwd(), src, env.get("PYTHONPATH", "")]
        )
        self.log = log.open("a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torpor.testing._lane", target.module],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            start_new_session=True,
        )
        ready = self._read()
        if not ready.get("ready"):
            raise RuntimeError(f"explorer lane did not start (see {log})")

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"explorer lane exited (rc {self.proc.poll()}); see {self.log.name}")
        return dict(json.loads(line))

    def run(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


# ---------------------------------------------------------------------- the explorer


def _substitute(value: Any, world: str) -> Any:
    if isinstance(value, str):
        return value.replace("{world}", world)
    if isinstance(value, list):
        return [_substitute(v, world) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, world) for k, v in value.items()}
    return value


def _strip(result: Any, keys: Sequence[str]) -> Any:
    if isinstance(result, dict) and keys:
        return {k: v for k, v in result.items() if k not in keys}
    return result


class Explorer:
    def __init__(self, target: Target, workdir: Path, *, seed: int, jobs: int):
        self.target = target
        self.workdir = workdir
        self.seed = seed
        self.jobs = max(1, jobs)
        self.ledger = target.ledger_fn()
        self._lanes: queue.Queue[Lane] = queue.Queue()
        self._all_lanes: list[Lane] = []

    # ------------------------------------------------------------ processes

    def _lane(self) -> Lane:
        try:
            return self._lanes.get_nowait()
        except queue.Empty:
            lane = Lane(self.target, self.workdir / f"lane{len(self._all_lanes)}.log")
            self._all_lanes.append(lane)
            return lane

    def close(self) -> None:
        for lane in self._all_lanes:
            lane.close()

    def _world(self, name: str) -> Path:
        w = self.workdir / name
        if w.exists():
            shutil.rmtree(w)
        (w / "home").mkdir(parents=True)
        return w

    def _process(self, lane: Lane, world: Path, n: int, plan: str) -> Proc:
        trace = world / f"trace.{n}"
        result = world / f"result.{n}.json"
        env = {
            **self.target.env,
            "TORPOR_HOME": str(world / "home"),
            "TORPOR_SIGNING_KEY": "torpor-explorer",
            "TORPOR_TRACE_POINTS": str(trace),
            "TORPOR_TRACE_DETAIL": "1",
            "TORPOR_FAULTS": plan,
            "TORPOR_EXPLORE_WORLD": str(world),
        }
        cmd = {
            "env": env,
            "result": str(result),
            "log": str(world / "process.log"),
            "timeout": self.target.timeout_s,
            "run": {
                "db": f"sqlite:///{world / 'torpor.db'}",
                "artifacts": str(world / "artifacts"),
                "workflow": self.target.workflow,
                "input": _substitute(self.target.input, str(world)),
                "run_id": self.target.run_id,
                "auto_approve": self.target.auto_approve,
                "lease_ttl_s": self.target.lease_ttl_s,
                "clock": str(world / "clock"),
            },
        }
        with (world / "process.log").open("a") as log:
            log.write(f"\n=== process {n}: plan {plan or '(none)'}\n")
        ans = lane.run(cmd)
        out: dict[str, Any] = {}
        if result.exists():
            with contextlib.suppress(ValueError):
                out = json.loads(result.read_text())
        lines = trace.read_text().splitlines() if trace.exists() else []
        return Proc(plan, int(ans["pid"]), int(ans["rc"]), bool(ans["killed"]), out, lines)

    def _drive(self, world: Path, plans: Sequence[str], max_resumes: int = 6) -> list[Proc]:
        """Run the case's planned processes, then resume until the run finishes."""
        lane = self._lane()
        procs: list[Proc] = []
        try:
            for plan in plans:
                last = procs[-1] if procs else None
                if last is not None and not last.killed and last.result.get("status") == "finished":
                    break  # finished already: nothing left to crash
                procs.append(self._process(lane, world, len(procs), plan))
            for _ in range(max_resumes):
                last = procs[-1] if procs else None
                if last is not None and not last.killed:
                    if last.result.get("status") == "finished" or "error" in last.result:
                        break
                    if last.result.get("status") == "waiting":
                        break  # waiting on a person or a signal: nothing more will happen
                procs.append(self._process(lane, world, len(procs), ""))
        finally:
            self._lanes.put(lane)
        return procs

    # ------------------------------------------------------------ evidence

    def _open(self, world: Path) -> torpor.Client:
        return torpor.Client(f"sqlite:///{world / 'torpor.db'}")

    def _history(self, world: Path) -> tuple[list[Event], Any]:
        c = self._open(world)
        try:
            return c.events(self.target.run_id), c.state(self.target.run_id)
        finally:
            c.close()

    def _ledger_rows(self, world: Path) -> list[tuple[int, str]]:
        """``(seq, key)`` of the run's fact-ledger rows (issue 30)."""
        c = self._open(world)
        try:
            return [(r.seq, r.key) for r in c.ledger(self.target.run_id)]
        finally:
            c.close()

    # ------------------------------------------------------------ baseline

    def baseline(self) -> tuple[dict[str, Any], list[str], dict[str, list[str]]]:
        world = self._world("baseline")
        t0 = time.monotonic()
        procs = self._drive(world, [""])
        seconds = time.monotonic() - t0
        events, state = self._history(world)
        last = procs[-1].result
        if state.status.value != "finished":
            raise RuntimeError(
                f"the crash-free run did not finish: status {state.status.value} "
                f"{last.get('reason') or last.get('message') or ''} (see {world}/process.log)"
            )
        points = [p for pr in procs for p in pr.points]
        crash = [p for p in points if p in faults.CRASH_POINTS]
        boundaries = numbered(crash)
        other = {
            "ack": [b for b in numbered(points) if b.startswith("effect.called@")],
            "break": [
                b
                for b in numbered(points)
                if b.startswith(("append.committing@", "append.committed@"))
            ],
        }
        ledger = dict(self.ledger(world, self.target.run_id)) if self.ledger else {}
        base = {
            "outcome": state.outcome.value if state.outcome else None,
            "reason": state.outcome_reason,
            "result": state.result,
            "input": self.target.input,
            "ledger": ledger,
            "effects": performed_effects(events),
            "seconds": seconds,
            "events": len(events),
        }
        problems = self._check_history(events, state, world, procs)
        if problems:
            raise RuntimeError("the crash-free run itself breaks an invariant: " + problems[0])
        bad = {k: n for k, n in ledger.items() if n != 1}
        if bad:
            raise RuntimeError(f"the crash-free run's ledger shows {bad}: not once each")
        return base, boundaries, other

    # ------------------------------------------------------------ checks

    def _check_history(
        self, events: list[Event], state: Any, world: Path, procs: list[Proc]
    ) -> list[str]:
        out: list[str] = []
        try:
            folded = fold(events)
            if folded.seq != state.seq or folded.status != state.status:
                out.append(
                    f"loading the run gives seq {state.seq} {state.status.value}, the fold of "
                    f"its history seq {folded.seq} {folded.status.value}"
                )
        except Exception as exc:
            out.append(f"the history does not fold: {type(exc).__name__}: {exc}")
        # Effects by torpor's record: performed at most once per key.
        for key, n in performed_effects(events).items():
            if n > 1:
                out.append(f"effect {key!r} recorded as performed {n} times")
        # No step body ran after its completion was recorded (G1).
        owner_pid: dict[int, int] = {}
        for e in events:
            if e.type == "lease_acquired":
                p: Any = e.payload
                with contextlib.suppress(ValueError, IndexError):
                    owner_pid[p.epoch] = int(p.owner.split(":")[1])
        order = {pr.pid: i for i, pr in enumerate(procs)}
        recorded_by: dict[str, int] = {}
        for e in events:
            if e.type == "step_completed":
                sid = e.payload.step_id  # type: ignore[attr-defined]
                proc = order.get(owner_pid.get(e.epoch, -1), -1)
                recorded_by.setdefault(sid, proc)
        for i, pr in enumerate(procs):
            # (Steps of this run only: child runs of a tree have step ids of their own.)
            mine = [t.partition("\t") for t in pr.steps_run]
            ran = Counter(sid for sid, tab, rid in mine if not tab or rid == self.target.run_id)
            for sid, n in ran.items():
                rec = recorded_by.get(sid)
                if rec is None:
                    continue
                if rec != -1 and i > rec:
                    out.append(
                        f"step {sid!r} ran again in process {i} ({pr.plan or 'resume'}) after "
                        f"process {rec} had recorded its completion"
                    )
                elif i == rec and n > 1:
                    out.append(f"step {sid!r} ran {n} times in process {i}")
        return out

    def check(self, case: CaseResult, world: Path, base: dict[str, Any]) -> None:
        def bad(msg: str) -> None:
            case.violations.append(Violation(case.index, case.plan, case.seed, msg))

        last = case.procs[-1]
        if "error" in last.result:
            bad(f"resuming raised {last.result['error']}: {last.result.get('message')}")
        if last.rc not in (0, -signal.SIGKILL) and last.rc != 0:
            bad(f"the last process exited {last.rc} (see {world}/process.log)")
        try:
            events, state = self._history(world)
        except Exception as exc:
            bad(f"the run cannot be loaded: {type(exc).__name__}: {exc}")
            return
        case.outcome = state.outcome.value if state.outcome else state.status.value
        if state.status.value != "finished":
            bad(f"the run did not finish: it is {state.status.value}")
        elif case.outcome != base["outcome"]:
            hint = ""
            if "no reconcile function" in state.outcome_reason:
                hint = (
                    " — an effect without reconcile= cannot be settled after a crash or a lost "
                    "acknowledgement: give it one that asks the outside world by its key"
                )
            bad(
                f"outcome {case.outcome} ({state.outcome_reason}) where the crash-free run "
                f"ended {base['outcome']}{hint}"
            )
        else:
            keys = self.target.ignore_result_keys
            if _strip(state.result, keys) != _strip(base["result"], keys):
                bad(f"result {state.result!r} differs from the crash-free run's {base['result']!r}")
        for msg in self._check_history(events, state, world, case.procs):
            bad(msg)
        for msg in _check_ledger(events, self._ledger_rows(world)):
            bad(msg)
        # The effects' own ledger: at most once per key, exactly once (as the baseline) on
        # success.
        if self.ledger is not None:
            ledger = dict(self.ledger(world, self.target.run_id))
            for key, n in sorted(ledger.items()):
                if n > 1:
                    bad(
                        f"effect {key!r} reached the outside world {n} times (its ledger) — "
                        "a side effect run as a step, or an effect that is neither idempotent "
                        "nor reconciled: use run.effect(..., reconcile=) and carry its "
                        "idempotency key to the outside world"
                    )
            if case.outcome in ("succeeded", "succeeded_with_warnings"):
                for key in base["ledger"]:
                    if ledger.get(key, 0) == 0:
                        bad(f"effect {key!r} never reached the outside world (its ledger)")
        elif case.outcome in ("succeeded", "succeeded_with_warnings"):
            performed = performed_effects(events)
            for key in base["effects"]:
                if performed.get(key, 0) != 1:
                    bad(f"effect {key!r} performed {performed.get(key, 0)} times by the record")

    # ------------------------------------------------------------ one case

    def run_case(self, index: int, plan: str, seed: int, base: dict[str, Any]) -> CaseResult:
        world = self._world(f"case{index:04d}")
        t0 = time.monotonic()
        procs = self._drive(world, plan.split(PROCESS_SEP))
        case = CaseResult(index, plan, seed, procs)
        case.seconds = time.monotonic() - t0
        first = procs[0]
        kind = plan.split(":", 1)[0]
        if kind == "crash" and not first.killed:
            case.violations.append(
                Violation(
                    index,
                    plan,
                    seed,
                    "the crash never happened: the run took another path than the crash-free "
                    "run (is the workflow deterministic?)",
                )
            )
        self.check(case, world, base)
        if not case.violations:
            shutil.rmtree(world, ignore_errors=True)
        return case


def _check_ledger(events: Sequence[Event], rows: Sequence[tuple[int, str]]) -> list[str]:
    """The fact ledger (issue 30) holds exactly the records of the history's
    ``context_compacted`` events, each once: no record lost with its event, none written
    without it, no key twice."""
    want = [
        (e.seq, str(r["key"]))
        for e in events
        if e.type == "context_compacted"
        for r in getattr(e.payload, "ledger", [])
    ]
    out = []
    if sorted(rows) != sorted(want):
        out.append(
            f"the fact ledger holds {len(rows)} rows where the history's compactions recorded "
            f"{len(want)} records"
        )
    twice = [k for k, n in Counter(k for _, k in rows).items() if n > 1]
    if twice:
        out.append(f"fact-ledger records written twice: {sorted(twice)[:5]}")
    return out


def explore(
    target: Target,
    *,
    sample: int | None = None,
    seed: int | None = None,
    kinds: Sequence[str] = KINDS,
    recovery_crashes: int = 1,
    jobs: int | None = None,
    workdir: str | os.PathLike[str] | None = None,
    cases: Sequence[str] | None = None,
    select: Callable[[list[str]], Sequence[str]] | None = None,
    progress: Callable[[str], None] | None = None,
    keep: bool = False,
) -> Report:
    """Explore ``target`` (see the module docstring); returns a :class:`Report`.

    ``sample``: at most this many cases (seeded; default all). ``kinds``: ``crash``, ``ack``,
    ``break``. ``cases``: run exactly these plans (from a report) instead. ``select``: given
    the crash-free run's crash boundaries, return those to crash at. ``jobs``: cases run
    at once (default: the CPU count, at most 4). ``workdir``: where the worlds go (default a
    temporary directory, removed unless ``keep`` or a violation needs it for inspection).
    """
    seed = random.SystemRandom().randrange(1 << 30) if seed is None else seed
    jobs = jobs or min(4, os.cpu_count() or 1)
    made = workdir is None
    wd = Path(tempfile.mkdtemp(prefix="torpor-explore-") if made else workdir)  # type: ignore[arg-type]
    wd.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda s: None)
    t0 = time.monotonic()
    ex = Explorer(target, wd, seed=seed, jobs=jobs)
    try:
        base, boundaries, other = ex.baseline()
        say(
            f"baseline: {base['outcome']}, {base['events']} events, {len(boundaries)} crash "
            f"boundaries, {base['seconds']:.1f} s"
        )
        if cases is not None:
            planned = [(c, seed) for c in cases]
        else:
            chosen = list(select(boundaries)) if select is not None else boundaries
            planned = plan_cases(
                chosen,
                other,
                kinds=kinds,
                sample=sample,
                seed=seed,
                recovery_crashes=recovery_crashes,
                order=boundaries,
            )
        by_kind = Counter(p.split(":", 1)[0] for p, _ in planned)
        results: list[CaseResult | None] = [None] * len(planned)
        todo: queue.Queue[int] = queue.Queue()
        for i in range(len(planned)):
            todo.put(i)
        errors: list[BaseException] = []

        def worker() -> None:
            while True:
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                plan, cseed = planned[i]
                try:
                    res = ex.run_case(i, plan, cseed, base)
                except BaseException as exc:  # a broken lane: report, stop this worker
                    errors.append(exc)
                    return
                results[i] = res
                mark = "ok" if not res.violations else f"{len(res.violations)} VIOLATION(S)"
                say(
                    f"case {i + 1}/{len(planned)} {plan}: {res.outcome}, {res.landed} "
                    f"kill(s), {res.seconds:.1f} s, {mark}"
                )

        threads = [threading.Thread(target=worker) for _ in range(min(jobs, len(planned)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        report = Report(
            target.spec(),
            seed,
            boundaries,
            dict(by_kind),
            [r for r in results if r is not None],
            base,
            time.monotonic() - t0,
        )
    finally:
        ex.close()
    if made and not keep and report.ok:
        shutil.rmtree(wd, ignore_errors=True)
    return report


__all__ = ["Explorer", "explore"]

"""The flagship agent killed with SIGKILL at randomized moments, resumed until it finishes.

Kills *between* boundaries — while ruff, git, compileall, the CPython tests or the SMTP exchange
run. Kills *at* every kind of boundary (before/after each append, artifact, checkpoint, right
before and after the push and the email, during recovery) are the crash-point explorer's job:
``tests/test_explorer_flagship.py`` runs a seeded sample of at least 30 of them in CI, and
``scripts/flagship_explore.py`` all of them. Two kinds of kill here, chosen by a seeded RNG
(``TORPOR_KILL_SEED`` replays a schedule; the seed and every kill point are printed):

- ``seq``: the test watches the history and kills the whole process group a random delay after
  it reaches a random event number — inside ruff, git, compileall, the CPython tests, SMTP.
- ``time``: the process group is killed a random delay after it started.

(``crash`` kills at a named point, ``TORPOR_CRASH_AT``, are still understood by the helpers and
drawn when ``TORPOR_KILL_CRASH=1``.)

A kill point is *distinct* when the history stood at a different event number when the process
died (per run). After every run: one commit with the key on the remote, one email with the
Message-ID, every planned file step completed exactly once, each effect performed once,
outcome ``succeeded`` with evidence (see ``check_world_and_history``).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import torpor
from conftest import HANG_S
from test_flagship import ROOT, Agent, check_world_and_history, new_agent

#: Real processes killed and resumed: the full suite runs these; the fast tier skips them.
pytestmark = pytest.mark.slow

#: Read at import: the autouse fixture clears TORPOR_* variables before each test runs.
SEED_OVERRIDE = os.environ.get("TORPOR_KILL_SEED")
MIN_DISTINCT_KILLS = int(os.environ.get("TORPOR_KILL_MIN", "12"))
#: Named-point kills are the explorer's (tests/test_explorer_flagship.py); off unless asked.
CRASH_KILLS = os.environ.get("TORPOR_KILL_CRASH", "") not in ("", "0")
MAX_KILLS_PER_RUN = 14
MAX_RUNS = 16  # runs until MIN_DISTINCT_KILLS distinct points are hit; a cap, not a target
#: Event numbers of an uninterrupted json run (63 events): the last artifact is recorded by
#: about 30, the effects begin after about 55.
ARTIFACTS_DONE_SEQ = 28
LATE_SEQ = 55
EFFECT_POINTS = ("effect.called@1", "effect.intended@1", "effect.called@2", "effect.intended@2")


@dataclass
class Kill:
    run: int
    attempt: int
    mode: str
    spec: str
    seq_at_death: int = -1
    killed: bool = False


@dataclass
class Figures:
    seed: int
    runs: int = 0
    attempts: int = 0
    kills: list[Kill] = field(default_factory=list)
    duplicates: int = 0

    def distinct(self) -> int:
        return len({(k.run, k.seq_at_death) for k in self.kills if k.killed})


class SeqWatch:
    """Reads the run's last event number while the agent writes (SQLite WAL: no blocking)."""

    def __init__(self, agent: Agent):
        self.agent = agent
        self.client: torpor.Client | None = None

    def __call__(self) -> int:
        if self.client is None:
            if not (self.agent.home / "torpor.db").exists():
                return 0
            self.client = self.agent.client()
        try:
            return self.client.get(self.agent.run_id).last_seq
        except torpor.errors.RunNotFoundError:
            return 0

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


def _pick(rng: random.Random, current: int) -> tuple[str, str]:
    """The next kill: a little further into the run than where it stands now.

    Near the end of a run (``current`` is its event number) only kills that can still land
    are drawn, so that each run contributes several kill points.
    """
    late = current >= LATE_SEQ
    crash_weight = 4 if CRASH_KILLS else 0
    mode = rng.choices(["crash", "seq", "time"], weights=[crash_weight, 5, 0 if late else 1])[0]
    if mode == "crash":
        points = ["append.after", "append.before", "artifact.stored"]
        weights = [5, 3, 1 if current < ARTIFACTS_DONE_SEQ else 0]
        name = rng.choices(points, weights=weights)[0]
        n = 1 if name == "artifact.stored" else rng.randint(2, 3 if late else 5)
        return mode, f"{name}@{n}"
    # Whom to kill: the whole process group (a machine dying), or only the agent's pid (a
    # `kill -9 PID`: its children — git, ruff, the test runner — live on as orphans and may
    # overlap with the next process).
    whom = rng.choice(["group", "group", "pid"])
    if mode == "seq":
        # A random delay after the history reaches a random event: lands inside ruff, git,
        # compileall, the CPython tests, the SMTP exchange.
        gap = rng.randint(1, 2) if late else rng.randint(2, 9)
        return mode, f"{current + gap}+{rng.uniform(0.0, 0.5):.3f}s/{whom}"
    return mode, f"{rng.uniform(0.4, 2.5):.3f}s/{whom}"


def _attempt(agent: Agent, mode: str, spec: str, orphans: list[int]) -> int:
    """One process of the run; returns its exit code (-9 when killed).

    After a pid-only kill the process group is added to ``orphans`` (killed when the run ends).
    """
    when, _, whom = spec.partition("/")
    cmd = agent.cmd("--quiet")  # a fixed --run-id: the first process starts, later ones rejoin
    env = agent.env(spec if mode == "crash" else None)
    agent.home.parent.mkdir(parents=True, exist_ok=True)
    log = (agent.home.parent / "agent.log").open("a")
    log.write(f"\n=== {mode} {spec}\n")
    log.flush()
    watch = SeqWatch(agent)
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        if mode == "crash":
            return proc.wait(timeout=HANG_S)
        deadline: float | None
        if mode == "time":
            deadline = time.monotonic() + float(when.removesuffix("s"))
        elif mode == "seq":
            target_s, delay_s = when.split("+")
            target, delay = int(target_s), float(delay_s.removesuffix("s"))
            deadline = None
            while proc.poll() is None:
                if watch() >= target:
                    deadline = time.monotonic() + delay
                    break
                time.sleep(0.02)
        else:  # "finish": no kill
            return proc.wait(timeout=HANG_S)
        while proc.poll() is None and deadline is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        if proc.poll() is None:
            if whom == "pid":
                os.kill(proc.pid, signal.SIGKILL)
                orphans.append(proc.pid)  # its process group id
            else:
                os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait(timeout=HANG_S)
    finally:
        if proc.pid not in orphans:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # nothing of this attempt lives on
        watch.close()
        log.close()


def test_flagship_survives_sigkill_at_random_moments(tmp_path: Path) -> None:
    seed = int(SEED_OVERRIDE or random.SystemRandom().randrange(2**32))
    rng = random.Random(seed)
    figs = Figures(seed)
    print(f"\nflagship kill test: seed {seed} (replay with TORPOR_KILL_SEED={seed})")
    effects_from = 40  # about where the file steps are done (json run: 63 events in all)
    t_start = time.monotonic()
    while figs.distinct() < MIN_DISTINCT_KILLS and figs.runs < MAX_RUNS:
        r = figs.runs
        figs.runs += 1
        agent = new_agent(tmp_path / f"run{r}", f"kill-{seed % 100000}-{r}")
        seq = SeqWatch(agent)
        orphans: list[int] = []
        effect_pending = True
        finished = False
        for a in range(MAX_KILLS_PER_RUN):
            current = seq()
            if CRASH_KILLS and effect_pending and current >= effects_from:
                # Exact coverage: die right before/after the push or the email.
                mode, spec = "crash", EFFECT_POINTS[r % len(EFFECT_POINTS)]
                effect_pending = False
            else:
                mode, spec = _pick(rng, current)
            kill = Kill(r, a, mode, spec)
            rc = _attempt(agent, mode, spec, orphans)
            figs.attempts += 1
            kill.seq_at_death = seq()
            if rc == -signal.SIGKILL:
                kill.killed = True
                figs.kills.append(kill)
                where = f"killed at seq {kill.seq_at_death}"
                print(f"  run {r} attempt {a}: {mode:5} {spec:22} {where}")
                continue
            assert rc == 0, f"run {r} attempt {a} ({mode} {spec}) exited {rc}; see agent.log"
            print(f"  run {r} attempt {a}: {mode:5} {spec:22} finished (no kill)")
            finished = True
            break
        if not finished:
            rc = _attempt(agent, "finish", "", orphans)
            figs.attempts += 1
            assert rc == 0, f"run {r}: the final resume exited {rc}; see agent.log"
            print(f"  run {r}: resumed to the end")
        seq.close()
        for pgid in orphans:  # children of pid-only kills that are still running
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        try:
            got = check_world_and_history(agent)
        except AssertionError:
            figs.duplicates += 1
            raise
        print(
            f"  run {r}: succeeded; {got['file_steps']} file steps once each, 1 commit "
            f"{got['commit'][:12]}, 1 email; reconciled {got['reconciled']}"
        )
    elapsed = time.monotonic() - t_start
    by_mode: dict[str, int] = {}
    for k in figs.kills:
        by_mode[k.mode] = by_mode.get(k.mode, 0) + 1
    print(
        f"flagship kill test: seed {seed}: {figs.runs} runs, {figs.attempts} processes, "
        f"{len(figs.kills)} kills ({figs.distinct()} distinct points; by kind {by_mode}), "
        f"{figs.duplicates} duplicates, {elapsed:.0f} s"
    )
    assert figs.distinct() >= MIN_DISTINCT_KILLS, (
        f"only {figs.distinct()} distinct kill points in {figs.runs} runs"
    )

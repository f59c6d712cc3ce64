"""The flagship agent (examples/repo_agent) in real subprocesses: approval, crash points.

Each test runs ``python -m examples.repo_agent`` on a copy of the standard library's ``json``
package, with its own TORPOR_HOME (SQLite store, artifacts), work dir, bare git remote and SMTP
maildir. Crashes are real: ``TORPOR_CRASH_AT`` makes the process SIGKILL itself at a named
boundary. After every run the *world* is checked independently of torpor's records (commits on
the remote carrying the key's trailer, delivered messages carrying the key's Message-ID).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import torpor

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the examples package lives at the repository root
    sys.path.insert(0, str(ROOT))

from examples.repo_agent import world  # noqa: E402

from conftest import HANG_S  # noqa: E402

#: Real processes killed and resumed: the full suite runs these; the fast tier skips them.
pytestmark = pytest.mark.slow

AGENT_TIMEOUT_S = 180


@dataclass
class Agent:
    """One flagship run's locations; :meth:`cmd` builds its command line."""

    run_id: str
    home: Path
    workdir: Path
    packages: str = "json"

    def env(self, crash_at: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TORPOR_CRASH")}
        env["TORPOR_HOME"] = str(self.home)
        env.setdefault("TORPOR_SIGNING_KEY", "test-signing-key")
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src")])
        env["PYTHONUNBUFFERED"] = "1"
        if crash_at:
            env["TORPOR_CRASH_AT"] = crash_at
        return env

    def cmd(self, *extra: str, auto_approve: bool = True, resume: bool = False) -> list[str]:
        args = [sys.executable, "-m", "examples.repo_agent"]
        if resume:
            args += ["--resume", self.run_id]
        else:
            args += [
                "--run-id",
                self.run_id,
                "--packages",
                self.packages,
                "--workdir",
                str(self.workdir),
            ]
        if auto_approve:
            args.append("--auto-approve")
        return [*args, *extra]

    def run(
        self, *extra: str, crash_at: str | None = None, auto_approve: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run (or rejoin: the run id is fixed) the agent to the end, or to its crash."""
        return subprocess.run(
            self.cmd(*extra, auto_approve=auto_approve),
            cwd=ROOT,
            env=self.env(crash_at),
            capture_output=True,
            text=True,
            timeout=AGENT_TIMEOUT_S,
        )

    def client(self) -> torpor.Client:
        return torpor.Client(f"sqlite:///{self.home}/torpor.db")


def new_agent(tmp_path: Path, run_id: str, packages: str = "json") -> Agent:
    return Agent(run_id, tmp_path / "home", tmp_path / "work", packages)


def check_world_and_history(agent: Agent, *, expect_outcome: str | None = None) -> dict[str, Any]:
    """The invariants of a finished run; returns figures for the report.

    One commit with the push key on the remote, one email with the key's Message-ID, every
    planned file step completed exactly once, each effect performed (observed or reconciled as
    applied) exactly once, and an outcome backed by passing evidence.
    """
    rid = agent.run_id
    client = agent.client()
    try:
        st = client.state(rid)
        events = client.events(rid)
    finally:
        client.close()
    assert st.status is torpor.RunStatus.FINISHED, f"run {rid} is {st.status}"
    expected = expect_outcome or "succeeded"
    assert st.outcome is not None and st.outcome.value == expected, (
        f"outcome {st.outcome}: {st.outcome_reason}"
    )
    # G5: evidence for every criterion, all passing.
    for crit in ("compiles", "lint_clean", "tests_pass"):
        v = st.verifications.get(crit)
        assert v is not None and v.passed and v.detail, f"criterion {crit}: {v}"
    assert st.verifications["tests_pass"].detail.get("tests_run", 0) > 0

    # Every planned file step completed exactly once.
    payloads: list[tuple[str, Any]] = [(e.type, e.payload) for e in events]
    plan = next(p.result for t, p in payloads if t == "step_completed" and p.step_id == "plan")
    planned = [f"modernize:{f['path']}" for f in plan["files"]]
    assert planned, "the plan is empty"
    completed = Counter(
        p.step_id
        for t, p in payloads
        if t == "step_completed" and p.step_id.startswith("modernize:")
    )
    assert completed == Counter(planned), f"file steps completed: {dict(completed)}"

    # Each effect performed exactly once (engine view).
    performed: Counter[str] = Counter()
    intents: Counter[str] = Counter()
    for e in events:
        p: Any = e.payload
        if e.type == "effect_intended":
            intents[p.key] += 1
        elif e.type == "effect_observed" or (
            e.type == "effect_reconciled" and p.verdict.value == "applied"
        ):
            performed[p.key] += 1
        assert e.type != "effect_failed", f"an effect failed: {p}"
    push_key, email_key = f"{rid}/push", f"{rid}/email"
    assert performed == Counter({push_key: 1, email_key: 1}), dict(performed)

    # The world: exactly one commit with the key on the remote, one email with the Message-ID.
    report = world.world_report(rid, agent.workdir)
    assert len(report["commits_with_key"]) == 1, report
    assert len(report["ref_updates_logged"]) <= 1, report
    assert len(report["emails_with_message_id"]) == 1, report
    assert st.result["commit"] == report["commits_with_key"][0]
    assert st.result["message_id"] == report["message_id"]
    reconciled = [(p.key, p.verdict.value) for t, p in payloads if t == "effect_reconciled"]
    return {
        "events": len(events),
        "intents": dict(intents),
        "reconciled": reconciled,
        "commit": report["commits_with_key"][0],
        "message_id": report["message_id"],
        "file_steps": len(planned),
    }


def _effect_events(agent: Agent) -> list[tuple[str, str, Any]]:
    client = agent.client()
    try:
        out: list[tuple[str, str, Any]] = []
        for e in client.events(agent.run_id):
            p: Any = e.payload
            if e.type.startswith("effect_"):
                out.append((e.type, p.key, getattr(p, "verdict", None)))
        return out
    finally:
        client.close()


# --------------------------------------------------------------------------- tests


def test_approval_flow_waits_then_publishes_once(tmp_path: Path) -> None:
    """Without --auto-approve the process exits with the run waiting, printing the exact
    approve command and the hash; after the approval a resume publishes once."""
    agent = new_agent(tmp_path, "flag-approve")
    first = agent.run(auto_approve=False)
    assert first.returncode == 2, first.stdout + first.stderr
    out = first.stdout
    assert f"torpor approve {agent.run_id} --as NAME" in out
    client = agent.client()
    try:
        pending = client.pending_approvals(agent.run_id)
        assert len(pending) == 1
        [hashes] = pending.values()
        assert hashes[0] in out  # the full combined-patch hash is shown
        combined = client.state(agent.run_id).artifacts["patch/combined"]
        assert combined.sha256 == hashes[0] and combined.media_type == "text/x-diff"
        # Nothing was published before the approval.
        assert not _effect_events(agent)
        client.decide(agent.run_id, None, "approve", "alice", expect_hash=hashes[0][:12])
    finally:
        client.close()
    second = subprocess.run(
        agent.cmd(auto_approve=False, resume=True),
        cwd=ROOT,
        env=agent.env(),
        capture_output=True,
        text=True,
        timeout=AGENT_TIMEOUT_S,
    )
    assert second.returncode == 0, second.stdout + second.stderr
    figures = check_world_and_history(agent)
    msg = world.effects.git(
        "log", "-1", "--format=%B", figures["commit"], git_dir=agent.workdir / "remote.git"
    ).stdout
    assert f"Torpor-Idempotency-Key: {agent.run_id}/push" in msg
    assert "Torpor-Approved-By: alice" in msg
    assert figures["message_id"] in second.stdout
    # A person can check the world without torpor's records.
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.repo_agent.world",
            agent.run_id,
            "--workdir",
            str(agent.workdir),
        ],
        cwd=ROOT,
        env=agent.env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=True,
    )
    report = json.loads(checked.stdout)
    assert report["commits_with_key"] == [figures["commit"]]
    assert len(report["emails_with_message_id"]) == 1
    _every_seq_folds(agent)
    _a_fork_repeats_no_effect(agent, figures["commit"])


def _every_seq_folds(agent: Agent) -> None:
    """Issue 45: the report of every seq of the flagship's run folds (``show --at``'s
    ``gather_at``), each extending the one before, the last equal to the live state; the
    CLI renders it at the approval wait, the first effect and the end (a CLI call costs
    ~50x a fold)."""
    from typer.testing import CliRunner

    from torpor.cli import app
    from torpor.report.past import gather_at

    client = agent.client()
    try:
        last = client.get(agent.run_id).last_seq
        reps = [gather_at(client, agent.run_id, seq) for seq in range(1, last + 1)]
        first = {e.type: e.seq for e in reversed(client.events(agent.run_id))}
        assert reps[-1].state.model_dump() == client.state(agent.run_id).model_dump()
    finally:
        client.close()
    for a, b in itertools.pairwise(reps):
        assert b.state.seq == a.state.seq + 1
        assert [s.step_id for s in a.steps] == [s.step_id for s in b.steps][: len(a.steps)]
        assert [e.key for e in a.effects] == [e.key for e in b.effects][: len(a.effects)]
        assert a.artifacts == b.artifacts[: len(a.artifacts)]
    db = f"sqlite:///{agent.home}/torpor.db"
    for seq in (first["wait_started"], first["effect_intended"], last):
        out = CliRunner().invoke(app, ["--db", db, "show", agent.run_id, "--at", str(seq)])
        assert out.exit_code == 0 and f"seq {seq} of {last}" in out.output, out.output


def _a_fork_repeats_no_effect(agent: Agent, commit: str) -> None:
    """Issue 45: a fork of the flagship's run just before its push, resumed by the example
    itself, replays the recorded file steps and verifications and refuses the push the origin
    made (blocked, naming it): still one commit and one email in the world."""
    client = agent.client()
    try:
        fork = client.fork(agent.run_id, "push", fork_id=f"{agent.run_id}-fork")
        assert fork.performed and fork.renewed  # the push and the email; the approval
    finally:
        client.close()
    resumed = subprocess.run(
        [sys.executable, "-m", "examples.repo_agent", "--resume", fork.run_id],
        cwd=ROOT,
        env=agent.env(),
        capture_output=True,
        text=True,
        timeout=AGENT_TIMEOUT_S,
    )
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr
    client = agent.client()
    try:
        st = client.state(fork.run_id)
        assert st.outcome is torpor.Outcome.BLOCKED, st.outcome_reason
        assert f"'{agent.run_id}/push'" in st.outcome_reason
    finally:
        client.close()
    report = world.world_report(agent.run_id, agent.workdir)
    assert report["commits_with_key"] == [commit] and len(report["emails_with_message_id"]) == 1
    forked = world.world_report(fork.run_id, agent.workdir)
    assert forked["commits_with_key"] == [] and forked["emails_with_message_id"] == []


@pytest.mark.parametrize(
    ("crash_at", "key", "verdict"),
    [
        # The push reached the remote, then the process died before recording it.
        ("effect.called@1", "push", "applied"),
        # The email was delivered (stored by the server), then the process died.
        ("effect.called@2", "email", "applied"),
        # The push intent was recorded, then the process died before pushing.
        ("effect.intended@1", "push", "absent"),
        # The email intent was recorded, then the process died before sending.
        ("effect.intended@2", "email", "absent"),
    ],
)
def test_crash_around_an_effect_reconciles(
    tmp_path: Path, crash_at: str, key: str, verdict: str
) -> None:
    """Died right before/after an effect: resume reconciles with the world (applied: no second
    push/email; absent: performed once now)."""
    agent = new_agent(tmp_path, f"flag-{key}-{verdict}")
    crashed = agent.run(crash_at=crash_at)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    full_key = f"{agent.run_id}/{key}"
    before = world.world_report(agent.run_id, agent.workdir)
    found_before = before["commits_with_key"] if key == "push" else before["emails_with_message_id"]
    assert len(found_before) == (1 if verdict == "applied" else 0), before
    # The history shows the intent without an observation: the effect is in doubt.
    assert ("effect_intended", full_key, None) in _effect_events(agent)
    assert not any(t == "effect_observed" and k == full_key for t, k, _ in _effect_events(agent))

    resumed = agent.run()
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    figures = check_world_and_history(agent)
    assert (full_key, verdict) in figures["reconciled"]
    # Applied: never performed again; absent: performed exactly once more.
    intents = figures["intents"][full_key]
    assert intents == (1 if verdict == "applied" else 2), figures


def test_artifacts_are_byte_identical_across_resumes(tmp_path: Path) -> None:
    """Killed right after the manifest artifact was recorded: the resumed run replays the
    recorded manifest (which comes back from the history with sorted keys) and must store the
    same bytes again, not a second version of manifest.json or plan.json (issue 13)."""
    agent = new_agent(tmp_path, "flag-canonical")
    crashed = agent.run(crash_at="artifact.stored@2")  # plan.json's bytes stored, unrecorded
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    resumed = agent.run()
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    c = agent.client()
    try:
        versions = [(a.name, a.version) for a in c.artifacts(agent.run_id)]
    finally:
        c.close()
    assert ("manifest.json", 2) not in versions and ("plan.json", 2) not in versions, versions
    check_world_and_history(agent)


def test_the_push_log_survives_a_pusher_killed_before_the_hook_ran(tmp_path: Path) -> None:
    """The world check counts the remote's ref updates from the reflog git writes with each
    update, so a push whose pusher died before the post-receive hook logged it is still seen."""
    from examples.repo_agent import effects as fx

    remote = tmp_path / "remote.git"
    fx.init_bare_remote(remote)
    (remote / "hooks" / "post-receive").unlink()  # as if the pusher died before the hook ran
    work = tmp_path / "work"
    fx.git("init", "-q", str(work))
    (work / "f.txt").write_text("x\n")
    fx.git("-C", str(work), "add", "f.txt")
    env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a"}
    fx.git("-C", str(work), "commit", "-q", "-m", "one", env={**env, "GIT_COMMITTER_EMAIL": "a@b"})
    fx.git("-C", str(work), "push", "-q", str(remote), "HEAD:refs/heads/main")
    head = fx.git("-C", str(work), "rev-parse", "HEAD").stdout.strip()
    assert [(new, ref) for _, new, ref in world.push_log(remote)] == [(head, "refs/heads/main")]

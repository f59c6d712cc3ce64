"""The repository-maintenance workflow: survey, plan, modernize file by file, verify, approve,
push, notify.

Every step is a torpor primitive with a recovery policy, so the process may be killed at any
instant and the run continues from its last boundary:

==================  =========  ==========================================================
step id             policy     what it establishes
==================  =========  ==========================================================
prepare             read       a frozen copy of the code base (``pristine/``) + manifest
survey              compute    ruff's findings per file (input: manifest, rules, ruff)
plan                compute    the planner's plan (recorded; also the ``plan.json`` artifact)
modernize:<path>    compute    one file's patch (artifact ``patch/<path>``, text/x-diff);
                               input hash = original content hash + rules (+ target, ruff)
patch/combined      artifact   every patch, concatenated: what the approval binds
materialize         read       ``tree/`` = pristine + the combined patch, hashes checked
verify:*            read       evidence for the criteria compiles / lint_clean / tests_pass
approval:publish@…  decision   a person's signed approval (or --auto-approve's policy decision)
commit              compute    deterministic commits in a private git dir (trailer = key)
push                effect     git push to the remote; reconciled by the key's trailer
email               effect     SMTP notification; reconciled by the key's Message-ID
==================  =========  ==========================================================

``run.checkpoint`` is taken after planning, every few files, and after the last one: resuming
restores the latest state instead of replaying the loop from the first file.
"""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torpor

from . import codemod, effects, smtp
from .planner import (
    MODEL_PLANNER,
    code_planner,
    get_planner,
    make_model,
    model_commit_message,
    model_plan,
)

CRITERIA = ("compiles", "lint_clean", "tests_pass")
WORKFLOW = "repo_agent.modernize"

_report: Callable[[str], None] = lambda message: None  # noqa: E731


def set_reporter(fn: Callable[[str], None]) -> None:
    """Where the workflow's own progress notes go (the events are reported by the runtime)."""
    global _report
    _report = fn


class Workspace:
    """The run's folders under its work dir (recorded in the run's input)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.pristine = self.root / "pristine"  # frozen copy of the code base
        self.tree = self.root / "tree"  # pristine + approved patches
        self.git_dir = self.root / "work.git"  # private repository for the commits
        self.remote = self.root / "remote.git"  # the default remote (bare)
        self.maildir = self.root / "mail"  # the SMTP server's persisted messages
        self.scratch = self.root / "scratch"  # working directory of the test runs


def _modernize_file(
    run: torpor.Run,
    pristine: Path,
    path: str,
    digest: str,
    rules: list[str],
    target: str,
    unsafe: bool,
) -> dict[str, Any]:
    """One file: apply ruff's fixes to the original, store the diff as an artifact."""
    src = (pristine / path).read_bytes()
    if codemod.sha256_bytes(src) != digest:
        raise RuntimeError(f"{path} changed since it was planned (sha256 {digest[:12]})")
    new = codemod.ruff_fix(src, path, rules, target, unsafe)
    patch = codemod.make_patch(
        path, src.decode("utf-8", "surrogateescape"), new.decode("utf-8", "surrogateescape")
    )
    ref = (
        run.artifact(
            f"patch/{path}",
            patch.encode("utf-8", "surrogateescape"),
            media_type="text/x-diff",
        )
        if patch
        else None
    )
    return {
        "path": path,
        "before": digest,
        "after": codemod.sha256_bytes(new),
        "patch": ref.sha256 if ref else None,
        "added": sum(
            1 for ln in patch.splitlines() if ln.startswith("+") and not ln.startswith("+++")
        ),
        "removed": sum(
            1 for ln in patch.splitlines() if ln.startswith("-") and not ln.startswith("---")
        ),
    }


def _verify_and_publish(run: torpor.Run, cfg: dict[str, Any], state: dict[str, Any]) -> Any:
    ws = Workspace(cfg["workdir"])
    plan = json.loads(run.read_artifact(state["plan"]))
    done: list[dict[str, Any]] = state["done"]
    changed = {d["path"]: d["after"] for d in done if d["patch"]}
    combined = torpor.ArtifactRef(**state["combined"]) if state["combined"] else None

    def materialize() -> dict[str, Any]:
        patches = (
            codemod.split_patch(run.read_artifact(combined).decode("utf-8", "surrogateescape"))
            if combined
            else {}
        )
        manifest = json.loads(run.read_artifact(state["manifest"]))
        codemod.check_manifest(ws.pristine, manifest["files"])
        hashes = codemod.materialize(ws.pristine, ws.tree, patches)
        wrong = sorted(p for p, h in hashes.items() if changed.get(p) != h)
        if wrong or set(hashes) != set(changed):
            raise RuntimeError(f"the combined patch does not reproduce the planned files: {wrong}")
        return {"tree": str(ws.tree), "patched_files": len(hashes)}

    run.step("materialize", materialize, purpose="rebuild tree/ from pristine + combined patch")

    target = plan["target"]
    ok = run.verify("compiles", lambda: codemod.check_compiles(ws.tree))
    ok = run.verify("lint_clean", lambda: codemod.check_lint(ws.tree, plan["files"], target)) and ok
    source = cfg["source"]
    if source["kind"] == "stdlib":
        modules, note = codemod.test_modules_for(source["packages"])
        packages = list(source["packages"])
    else:
        modules = list(cfg.get("tests") or [])
        note = "" if modules else "no test modules given (--test-module)"
        packages = list(cfg.get("test_packages") or [])
    if modules:
        passed = run.verify(
            "tests_pass", lambda: codemod.check_tests(ws.tree, packages, modules, ws.scratch)
        )
        ok = passed and ok
        if note:  # some of the matching test modules are not installed
            run.warn(f"tests partly run: {note}")
    else:
        run.warn(f"tests not run: {note}")
        run.verify("tests_pass", True, {"skipped": note})

    summary = {
        "files_changed": len(changed),
        "findings_fixed": sum(f["findings"] for f in plan["files"] if f["path"] in changed),
        "left_for_a_person": plan["totals"]["left"],
        "patch_sha256": combined.sha256 if combined else None,
    }
    if not ok:
        _report("verification failed: nothing is published")
        return {**summary, "published": False, "reason": "verification failed"}
    if combined is None:
        return {**summary, "published": False, "reason": "nothing to modernize"}

    remote, branch, mail = cfg["remote"], cfg["branch"], cfg["email"]
    approval = run.approval(
        "publish",
        [combined],
        summary=(
            f"push {len(changed)} modernized file(s) ({summary['findings_fixed']} ruff "
            f"{plan['select']} fixes, patch sha256:{combined.sha256[:12]}) to {remote} "
            f"branch {branch}, then email {mail['to']}"
        ),
    )

    # ---- commit (deterministic), then the two effects
    if cfg.get("create_remote"):
        run.step("init-remote", effects.init_bare_remote, ws.remote, purpose="create bare remote")
    when = run.step("commit-time", lambda: int(time.time()), purpose="fix the commit date")
    manifest = json.loads(run.read_artifact(state["manifest"]))
    paths = [f["path"] for f in manifest["files"]]
    push_key = f"{run.run_id}/push"
    roots = ", ".join(manifest["roots"])
    subject = f"Modernize {roots} with ruff {plan['select']} fixes for {target}"
    body = (
        f"{summary['files_changed']} file(s), {summary['findings_fixed']} finding(s) fixed by "
        f"`ruff check --select {plan['select']} --target-version {target} --fix`."
    )
    if cfg.get("planner") == MODEL_PLANNER:  # the model writes the message (recorded call)
        written = model_commit_message(
            run,
            make_model(cfg["model"]),
            {
                "code_base": roots,
                "tool": f"ruff check --select {plan['select']} --target-version {target} --fix",
                "files": {f["path"]: f["rules"] for f in plan["files"] if f["path"] in changed},
                "findings_fixed": summary["findings_fixed"],
                "left_for_a_person": summary["left_for_a_person"],
                "plan_summary": plan.get("summary", ""),
            },
        )
        if written is not None:
            subject, body = written
    message = effects.commit_message(
        subject,
        f"{body}\n"
        f"Verified: compiles, ruff clean for the applied rules, tests pass "
        f"(torpor run {run.run_id}).",
        {
            "Torpor-Run": run.run_id,
            "Torpor-Patch-Sha256": combined.sha256,
            "Torpor-Approved-By": approval.approver,
            effects.TRAILER: push_key,
        },
    )
    commit = run.compute(
        "commit",
        effects.build_commits,
        str(ws.git_dir),
        str(ws.pristine),
        str(ws.tree),
        paths,
        changed,
        branch,
        message,
        f"Import {roots} (unmodified copy)\n\nTorpor-Run: {run.run_id}\n",
        when,
        purpose="commit the approved tree",
    )
    pushed = run.effect(
        "push",
        effects.push_commit,
        str(ws.git_dir),
        remote,
        commit["commit"],
        branch,
        key=push_key,
        reconcile=effects.reconcile_push,
        approval=approval,
        artifacts=[combined],
        operation="git.push",
        purpose=f"push {commit['commit'][:12]} to {remote} {branch}",
    )

    server = smtp.ensure_server(ws.maildir)
    email_key = f"{run.run_id}/email"
    body = (
        f"torpor run {run.run_id} modernized {roots} with ruff {plan['select']} "
        f"(target {target}).\n\n"
        f"  files changed:     {summary['files_changed']}\n"
        f"  findings fixed:    {summary['findings_fixed']}\n"
        f"  left for a person: {summary['left_for_a_person']}\n"
        f"  combined patch:    sha256:{combined.sha256}\n"
        f"  approved by:       {approval.approver}\n"
        f"  pushed:            {pushed['commit']} to {remote} ({branch})\n\n"
        "Verified before approval: the copy compiles, ruff is clean for the applied rules, and "
        "the matching CPython tests pass against it.\n"
    )
    sent = run.effect(
        "email",
        effects.send_email,
        server.host,
        server.port,
        mail["from"],
        mail["to"],
        f"[torpor] {roots}: {summary['files_changed']} file(s) modernized "
        f"({pushed['commit'][:12]})",
        body,
        key=email_key,
        reconcile=functools.partial(effects.reconcile_email, str(ws.maildir)),
        operation="smtp.send",
        purpose=f"notify {mail['to']}",
    )
    return {
        **summary,
        "published": True,
        "commit": pushed["commit"],
        "remote": remote,
        "branch": branch,
        "message_id": sent["message_id"],
        "approved_by": approval.approver,
    }


@torpor.workflow(
    WORKFLOW,
    version="1",
    criteria=CRITERIA,
    goal="modernize a Python code base with ruff's pyupgrade rules, verified, approved, "
    "pushed and announced",
)
def modernize(run: torpor.Run, cfg: dict[str, Any]) -> Any:
    """Modernize a Python code base with ruff's pyupgrade (UP) fixes; see the module docstring."""
    ws = Workspace(cfg["workdir"])
    rv = codemod.ruff_version()
    state = run.restore(None)
    if state is None:
        manifest = run.step(
            "prepare",
            lambda: codemod.copy_sources(cfg["source"], ws.pristine),
            purpose="copy the code base into pristine/",
        )
        # Canonical JSON (sorted keys): a replayed manifest comes back from the history with
        # its keys sorted, and the artifact must be byte-identical across resumes.
        manifest_ref = run.artifact(
            "manifest.json",
            json.dumps(manifest, indent=1, sort_keys=True),
            media_type="application/json",
        )
        findings = run.compute(
            "survey",
            lambda files, select, target, ruff: codemod.survey(ws.pristine, files, select, target),
            manifest["files"],
            cfg["select"],
            cfg["target"],
            rv,
            purpose="ruff findings per file",
        )
        request = {
            "target": cfg["target"],
            "select": cfg["select"],
            "unsafe_fixes": cfg["unsafe_fixes"],
            "files": findings,
        }
        if cfg["planner"] == MODEL_PLANNER:
            plan = model_plan(run, request, make_model(cfg["model"]))
            if plan is None:
                run.warn("the model gave no usable plan: the code planner planned instead")
                plan = run.compute("plan-code", code_planner, request, purpose="plan the fixes")
        else:
            plan = run.compute(
                "plan", get_planner(cfg["planner"]), request, purpose="plan the fixes"
            )
        plan_ref = run.artifact(
            "plan.json", json.dumps(plan, indent=1, sort_keys=True), media_type="application/json"
        )
        state = {
            "phase": "modernize",
            "manifest": manifest_ref.sha256,
            "plan": plan_ref.sha256,
            "next": 0,
            "done": [],
            "combined": None,
        }
        run.checkpoint(state)
    else:
        _report(
            f"restored checkpoint: phase {state['phase']}, {len(state['done'])} file step(s) done"
        )

    if state["phase"] == "modernize":
        plan = json.loads(run.read_artifact(state["plan"]))
        files = plan["files"]
        every = max(1, math.ceil(len(files) / 10))
        for i in range(state["next"], len(files)):
            f = files[i]
            done_before = run.state.steps.get(f"modernize:{f['path']}")
            if done_before is not None and done_before.status == "completed":
                # Finished after the last checkpoint, before the restart: replayed from the
                # record, not redone — said, so the narration skips no file.
                _report(f"{f['path']}: done before the restart (its recorded result is reused)")
            res = run.compute(
                f"modernize:{f['path']}",
                lambda path, digest, rules, target, unsafe, ruff: _modernize_file(
                    run, ws.pristine, path, digest, rules, target, unsafe
                ),
                f["path"],
                f["sha256"],
                f["rules"],
                plan["target"],
                plan["unsafe_fixes"],
                rv,
                purpose=f"apply {', '.join(f['rules'])} to {f['path']}",
            )
            state["done"].append(res)
            state["next"] = i + 1
            if state["next"] % every == 0 and state["next"] < len(files):
                run.checkpoint(state)
        parts = [run.read_artifact(d["patch"]) for d in state["done"] if d["patch"]]
        if parts:
            ref = run.artifact("patch/combined", b"".join(parts), media_type="text/x-diff")
            state["combined"] = ref.model_dump(mode="json")
        state["phase"] = "verify"
        run.checkpoint(state)

    elif not run.state.verifications:
        # Resumed into verification: the checks (tests included) run again if they never
        # finished, which takes a while; say so instead of a long silence.
        _report("re-entering verification after a resume: rebuild tree/, compile, lint, test")
    return _verify_and_publish(run, cfg, state)

"""Command line of the repository agent.

    uv run python -m examples.repo_agent --auto-approve            # stdlib json + email copy
    uv run python -m examples.repo_agent PATH                      # your code; waits for approval
    uv run python -m examples.repo_agent --resume RUN_ID           # continue a run (after kill -9)
    uv run python -m examples.repo_agent --resume RUN_ID --auto-approve   # ... unattended

Exit status: 0 succeeded (with or without warnings), 1 another outcome, 2 waiting for
approval, 3 an error before an outcome (the record is intact; resume once the cause is fixed),
130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.table import Table
from rich.text import Text

import torpor
from torpor.history import Event

from . import codemod, smtp
from .planner import MODEL_PLANNER, PLANNERS
from .workflow import WORKFLOW, Workspace, modernize, set_reporter

DEFAULT_PACKAGES = ("json", "email")
EXIT_OK, EXIT_OUTCOME, EXIT_WAITING, EXIT_ERROR = 0, 1, 2, 3


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m examples.repo_agent",
        description="Durable repository-maintenance agent: modernize Python code with ruff's "
        "pyupgrade fixes, verify, get approval, push to a git remote and email a notification. "
        "Kill it at any moment and --resume it: one push, one email, an honest outcome.",
    )
    p.add_argument(
        "path",
        nargs="?",
        help="code base to modernize (default: a copy of standard-library packages)",
    )
    p.add_argument(
        "--packages",
        default=",".join(DEFAULT_PACKAGES),
        help="standard-library packages to copy when no PATH is given (default: %(default)s)",
    )
    p.add_argument("--run-id", help="run id (default: random); an existing id rejoins that run")
    p.add_argument("--resume", metavar="RUN_ID", help="continue an existing run")
    p.add_argument("--workdir", help="work directory (default: $TORPOR_HOME/repo_agent/RUN_ID)")
    p.add_argument(
        "--auto-approve",
        action="store_true",
        help="approve the combined patch automatically (unattended runs): recorded as a "
        "policy decision of this process, not a signature; give it again with --resume",
    )
    p.add_argument(
        "--approver", default="auto-approve", help="name recorded for --auto-approve decisions"
    )
    p.add_argument("--remote", help="git remote URL (default: a bare repository in the workdir)")
    p.add_argument("--branch", help="branch to push (default: torpor/modernize-RUN_ID)")
    p.add_argument("--email-to", default="maintainers@example.org", help="notification address")
    p.add_argument("--unsafe-fixes", action="store_true", help="also apply ruff's unsafe fixes")
    p.add_argument("--planner", default="code", choices=sorted(PLANNERS), help="planner")
    p.add_argument(
        "--model",
        metavar="NAME",
        help="plan with this model through an OpenAI-compatible endpoint "
        "($TORPOR_MODEL_BASE_URL or --model-base-url; key in $TORPOR_MODEL_API_KEY or "
        "$OPENAI_API_KEY): it picks the files and rules and writes the commit message. "
        "Without an endpoint the code planner is used",
    )
    p.add_argument(
        "--model-base-url",
        default=os.environ.get("TORPOR_MODEL_BASE_URL"),
        metavar="URL",
        help="the model endpoint (default: $TORPOR_MODEL_BASE_URL)",
    )
    p.add_argument(
        "--test-module",
        action="append",
        default=[],
        metavar="MODULE",
        help="with PATH: a unittest module to run against the modified copy (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="print the final summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


# ------------------------------------------------------------------ progress


class Progress:
    """Prints each recorded boundary as it is appended (Runtime(on_event=...))."""

    def __init__(self, console: Console, quiet: bool = False):
        self.console = console
        self.quiet = quiet
        self.t0 = time.monotonic()
        self.effect_steps: dict[str, str] = {}

    def line(self, kind: str, text: str, style: str = "") -> None:
        if self.quiet:
            return
        t = Text(f"{time.monotonic() - self.t0:7.2f}s  ", style="dim")
        t.append(f"{kind:<11}", style="bold " + style if style else "bold")
        t.append(text, style=style)
        self.console.print(t)

    def note(self, message: str) -> None:
        self.line("note", message, "cyan")

    def __call__(self, ev: Event) -> None:
        p: Any = ev.payload
        t = ev.type
        if t == "lease_acquired":
            self.line("lease", f"epoch {p.epoch} ({p.owner})", "dim")
        elif t == "step_completed" and not p.step_id.startswith(
            ("artifact:", "verify:", "approval:", "warn")
        ):
            if p.policy is not None and p.policy.value == "effect":
                return
            self.line("step", f"{p.step_id} ✓ ({p.policy.value if p.policy else '?'})", "green")
        elif t == "step_failed":
            self.line("step", f"{p.step_id} ✗ {p.error}", "red")
        elif t == "artifact_created":
            self.line(
                "artifact",
                f"{p.name} v{p.version} sha256:{p.sha256[:12]} {p.size} B {p.media_type}",
                "blue",
            )
        elif t == "checkpoint_saved":
            st = p.state or {}
            self.line(
                "checkpoint",
                f"phase {st.get('phase')}, {len(st.get('done') or [])} file(s) done",
                "dim",
            )
        elif t == "verification_recorded":
            mark = "✓" if p.passed else "✗"
            style = "green" if p.passed else "red"
            self.line("verify", f"{p.name} {mark} {evidence_text(p.detail)}", style)
        elif t == "warning_recorded":
            self.line("warning", p.message, "yellow")
        elif t == "approval_requested":
            self.line("approval", f"{p.approval_id} requested for sha256:{p.hashes[0][:16]}…")
        elif t == "approval_decided":
            how = {
                "policy": f"policy: --auto-approve given by {p.given_by}, not a signature",
                "hmac": "local shared key: not attributable",
            }.get(p.scheme, f"signed, key {p.key}")
            self.line("approval", f"{p.decision} by {p.approver} ({how})", "magenta")
        elif t == "approval_refused":
            self.line("approval", f"refused a decision by {p.approver}: {p.reason}", "red")
        elif t == "effect_intended":
            self.effect_steps[p.key] = p.step_id
            self.line(
                "effect", f"{p.step_id} intended (key {p.key}, attempt {p.attempt})", "yellow"
            )
        elif t == "effect_observed":
            self.line(
                "effect", f"{self.effect_steps.get(p.key, p.key)} done: {_short(p.result)}", "green"
            )
        elif t == "effect_reconciled":
            self.line(
                "reconcile",
                f"{p.key}: {p.verdict.value} {_short(p.result) if p.result else p.reason}",
                "magenta",
            )
        elif t == "effect_failed":
            self.line("effect", f"{p.key} failed: {p.error}", "red")
        elif t == "wait_started":
            self.line("wait", f"{p.kind}: {p.reason}", "yellow")
        elif t == "run_finished":
            self.line("outcome", f"{p.outcome.value} — {p.reason}", "bold")


def _last_event_ms(client: torpor.Client, run_id: str) -> int:
    """When the run's latest event was recorded (epoch ms)."""
    last = client.get(run_id).last_seq
    return client.events(run_id, after_seq=last - 1, limit=1)[0].at_ms


def evidence_text(detail: Any) -> str:
    """A verification's detail in one human line."""
    if not isinstance(detail, dict):
        return _short(detail)
    if "skipped" in detail:
        return f"skipped: {detail['skipped']}"
    if detail.get("tool") == "compileall":
        text = f"{detail['files']} files compile (compileall, {detail['seconds']} s)"
        return text + (f"; {_short(detail['errors'])}" if detail.get("errors") else "")
    if "rules" in detail:
        text = (
            f"{detail['tool']}: {detail['remaining']} finding(s) left of "
            f"{', '.join(detail['rules']) or 'no rules'} in {detail['files']} file(s)"
        )
        return text + (f": {', '.join(detail['examples'])}" if detail.get("examples") else "")
    if "modules" in detail:
        mods = ", ".join(
            f"{name} {m['run']} run/{m['failures']} failed/{m['errors']} errors/"
            f"{m['skipped']} skipped"
            for name, m in detail["modules"].items()
        )
        origin = (
            "from the modified copy"
            if detail.get("loaded_from_copy")
            else (f"NOT from the copy: {detail.get('not_from_copy')}")
        )
        return f"{detail['tests_run']} tests in {detail['seconds']} s ({mods}); code {origin}"
    return _short(detail)


def _short(value: Any, limit: int = 110) -> str:
    text = json.dumps(value, sort_keys=True, default=str) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ------------------------------------------------------------------ main


def _bad_input(message: str) -> NoReturn:
    """Bad input: one line, exit 3 (an error before any outcome; the README's exit codes)."""
    sys.stderr.write(f"error: {message}\n")
    raise SystemExit(EXIT_ERROR)


def _build_input(args: argparse.Namespace, run_id: str, home: Path) -> dict[str, Any]:
    workdir = Path(args.workdir) if args.workdir else home / "repo_agent" / run_id
    ws = Workspace(workdir.resolve())
    if args.path:
        src = Path(args.path).resolve()
        if not src.exists():
            _bad_input(f"{src} does not exist")
        source: dict[str, Any] = {"kind": "path", "path": str(src)}
        test_packages = [src.name] if (src / "__init__.py").is_file() else []
    else:
        packages = [x.strip() for x in args.packages.split(",") if x.strip()]
        for pkg in packages:
            try:
                codemod.stdlib_dir(pkg)
            except ValueError as exc:
                _bad_input(str(exc))
        source = {"kind": "stdlib", "packages": packages}
        test_packages = packages
    remote = args.remote
    if remote and Path(remote).exists():
        remote = str(Path(remote).resolve())
    return {
        "source": source,
        "workdir": str(ws.root),
        "remote": remote or str(ws.remote),
        "create_remote": not remote,
        "branch": args.branch or f"torpor/modernize-{run_id}",
        "email": {"to": args.email_to, "from": "torpor-repo-agent@localhost"},
        "select": "UP",
        "target": codemod.target_version(),
        "unsafe_fixes": bool(args.unsafe_fixes),
        **_planner(args),
        "tests": list(args.test_module),
        "test_packages": test_packages,
        # Recorded to remind a `--resume` without the flag (the permission itself is never
        # read back from the database: whoever can write it could approve).
        "auto_approve": args.approver if args.auto_approve else None,
    }


def _planner(args: argparse.Namespace) -> dict[str, Any]:
    """The planner part of the run's input: the model (name and endpoint; never the key) when
    ``--model`` is given with an endpoint, else the code planner."""
    if args.model and args.model_base_url:
        return {
            "planner": MODEL_PLANNER,
            "model": {"name": args.model, "base_url": args.model_base_url},
        }
    if args.model:
        sys.stderr.write(
            "note: --model needs an endpoint (--model-base-url or $TORPOR_MODEL_BASE_URL); "
            "using the code planner\n"
        )
    return {"planner": args.planner}


def _summary(
    console: Console, client: torpor.Client, res: torpor.RunResult, t0: float, as_json: bool
) -> dict[str, Any]:
    st = client.state(res.run_id)
    rec = client.get(res.run_id)
    result = st.result if isinstance(st.result, dict) else {}
    data: dict[str, Any] = {
        "run_id": res.run_id,
        "status": res.status,
        "outcome": res.outcome,
        "reason": res.reason,
        "evidence": {
            k: {"passed": v.passed, "detail": v.detail} for k, v in st.verifications.items()
        },
        "commit": result.get("commit"),
        "branch": result.get("branch"),
        "remote": result.get("remote"),
        "message_id": result.get("message_id"),
        "patch_sha256": result.get("patch_sha256"),
        "files_changed": result.get("files_changed"),
        "findings_fixed": result.get("findings_fixed"),
        "left_for_a_person": result.get("left_for_a_person"),
        "published": result.get("published"),
        "not_published_because": result.get("reason"),
        "effects": [
            {"key": e.key, "status": e.status, "reason": e.reason}
            for e in client.effects(res.run_id)
        ],
        "warnings": list(st.warnings),
        "elapsed_s": round(time.monotonic() - t0, 2),
        # Wall time from the run's creation to its latest event (kills and waits included).
        # (The last event's time, not the row's: a later no-op resume touches the row.)
        "run_elapsed_s": round((_last_event_ms(client, res.run_id) - rec.created_at_ms) / 1000, 2),
    }
    if as_json:
        print(json.dumps(data, indent=1, default=str))
        return data
    table = Table(title=f"run {res.run_id}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    outcome = res.outcome or res.status
    table.add_row("outcome", Text(f"{outcome} — {res.reason}"))
    for k, v in data["evidence"].items():
        mark = "✓ " if v["passed"] else "✗ "
        table.add_row(f"evidence {k}", Text(mark + evidence_text(v["detail"])))
    for key in (
        "files_changed",
        "findings_fixed",
        "left_for_a_person",
        "not_published_because",
        "patch_sha256",
        "commit",
        "branch",
        "remote",
        "message_id",
    ):
        if data[key] is not None:
            table.add_row(key.replace("_", " "), Text(str(data[key])))
    for e in data["effects"]:
        table.add_row(
            f"effect {e['key']}", Text(e["status"] + (f" ({e['reason']})" if e["reason"] else ""))
        )
    for w in data["warnings"]:
        table.add_row("warning", Text(w))
    table.add_row(
        "elapsed",
        Text(
            f"{data['elapsed_s']} s this process; "
            f"{data['run_elapsed_s']} s from the run's start to its last event"
        ),
    )
    console.print(table)
    return data


def _waiting(
    console: Console,
    client: torpor.Client,
    run_id: str,
    runtime: torpor.Runtime,
    started_unattended: str | None = None,
) -> None:
    for aid, hashes in client.pending_approvals(run_id).items():
        h = hashes[0]
        console.print(Text(f"\nrun {run_id} is waiting for approval {aid}", style="bold yellow"))
        console.print(Text(f"  it binds the combined patch sha256:{h}"))
        console.print(Text(f"  review:  uv run torpor artifacts {run_id} patch/combined"))
        path = Path(runtime.settings.artifacts_url) / "sha256" / h[:2] / h
        if path.exists():
            console.print(Text(f"           (or: less {path})"))
        console.print(Text(f"  approve: uv run torpor approve {run_id} --as NAME --hash {h[:12]}"))
        console.print(Text("           (no key yet? uv run torpor keys init --as NAME)"))
        console.print(Text(f"  then:    uv run python -m examples.repo_agent --resume {run_id}"))
        if started_unattended and not runtime.auto_approve:
            console.print(
                Text(
                    "  (this run was started with --auto-approve; that permission is never read "
                    "back from the database: resume with --auto-approve to approve it unattended)"
                )
            )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    console = Console(highlight=False, soft_wrap=True)
    progress = Progress(console, quiet=args.quiet or args.json)
    set_reporter(progress.note)
    t0 = time.monotonic()
    settings = torpor.Settings.from_env()
    runtime = torpor.Runtime(
        settings=settings,
        auto_approve=args.approver if args.auto_approve else None,
        on_event=progress,
    )
    client = torpor.Client(runtime.store, settings=settings)
    try:
        if args.resume:
            run_id = args.resume
            cfg = client.state(run_id).input
        else:
            run_id = args.run_id or uuid.uuid4().hex[:12]
            run_id = runtime.start(
                modernize, _build_input(args, run_id, settings.home), run_id=run_id
            )
            cfg = client.state(run_id).input
        rec = client.get(run_id)
        if rec.workflow != WORKFLOW:
            raise torpor.TorporError(f"run {run_id!r} is a {rec.workflow} run, not {WORKFLOW}")
        server = smtp.ensure_server(Workspace(cfg["workdir"]).maildir)
        src = cfg["source"]
        what = (
            f"stdlib {', '.join(src['packages'])} (Python {sys.version.split()[0]})"
            if src["kind"] == "stdlib"
            else src["path"]
        )
        if not progress.quiet:
            console.print(Text(f"torpor repo agent · run {run_id}", style="bold"))
            console.print(Text(f"  code:    {what}"))
            console.print(Text(f"  workdir: {cfg['workdir']}"))
            console.print(Text(f"  remote:  {cfg['remote']} (branch {cfg['branch']})"))
            console.print(
                Text(
                    f"  smtp:    {server.host}:{server.port} -> {Workspace(cfg['workdir']).maildir}"
                )
            )
            console.print(Text(f"  store:   {settings.database_url}"))
        res = runtime.resume(run_id)
        if res.status == torpor.RunStatus.WAITING.value and not args.json:
            _waiting(console, client, run_id, runtime, started_unattended=cfg.get("auto_approve"))
        data = _summary(console, client, res, t0, args.json)
        if res.status == torpor.RunStatus.WAITING.value:
            return EXIT_WAITING
        ok = data["outcome"] in ("succeeded", "succeeded_with_warnings")
        return EXIT_OK if ok else EXIT_OUTCOME
    except KeyboardInterrupt:
        sys.stderr.write(
            "interrupted; the record is intact. Continue with: "
            f"uv run python -m examples.repo_agent --resume {locals().get('run_id', 'RUN_ID')}"
            + (" --auto-approve" if args.auto_approve else "")
            + "\n"
        )
        return 130
    except torpor.TorporError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_ERROR
    finally:
        smtp.stop_servers()
        runtime.close()


if __name__ == "__main__":
    sys.exit(main())

"""Commands that steer a run from outside: decide its approvals (``approve``, ``deny``,
``revoke``), message it (``signal``, ``cancel``), settle an effect in doubt (``resolve``) and
raise its budget (``budget``). Each records its decision; the run applies it when it resumes.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import BadInputError
from .context import open_client, parse_json, resume_command
from .render import console, emit_json, plain
from .root import Approver, JsonFlag, Person, RunId

# --------------------------------------------------------------------------- approvals


def _decide(
    ctx: typer.Context,
    decision: str,
    run_id: str,
    approval_id: str | None,
    approver: str,
    expect_hash: str | None,
    comment: str,
    json_out: bool,
    signing: tuple[Path | None, bool, str | None] = (None, False, None),
    edit: Path | None = None,
) -> None:
    prefix = expect_hash.strip().lower().removeprefix("sha256:") if expect_hash else None
    if expect_hash is not None and not prefix:
        raise BadInputError("--hash needs a prefix of the sha256 you reviewed")
    key, agent, delegate = signing
    if key is not None and agent:
        raise BadInputError("give --key PATH or --agent, not both")
    with open_client(ctx) as client:
        edited = None if edit is None else edited_text(client, run_id, approval_id, edit)
        aid, hashes = client.decide(
            run_id,
            approval_id,
            decision,
            approver,
            expect_hash=prefix,
            comment=comment,
            delegate=delegate,
            key=key,
            agent=agent,
            edited=edited,
        )
        resume = resume_command(client, run_id)
    verb = "approved" if decision == "approve" else "denied"
    if json_out:
        emit_json(
            {
                "run_id": run_id,
                "approval_id": aid,
                "decision": decision,
                "approver": approver,
                "delegate": delegate,
                "hashes": hashes,
            }
        )
        return
    out = console()
    via = f" (signed by delegate {delegate})" if delegate else ""
    out.print(plain(f"{verb} {aid} of run {run_id} as {approver}{via}; the decision binds:"))
    for h in hashes:
        out.print(plain(f"  sha256:{h}" + (" (the proposed content)" if edited else "")))
    if edited is not None:
        from ..serde import sha256_hex

        digest = sha256_hex(edited.encode())
        out.print(plain(f"  sha256:{digest} (the edited content: what runs)"))
    out.print(plain(f"it applies when the run resumes: {resume}", style="cyan"))


HashOpt = Annotated[
    str | None,
    typer.Option(
        "--hash",
        metavar="PREFIX",
        help="Refuse unless the approval binds content whose sha256 starts with PREFIX "
        "(what you reviewed).",
    ),
]
CommentOpt = Annotated[str, typer.Option("--comment", help="A note recorded with the decision.")]
ApprovalIdOpt = Annotated[
    str | None,
    typer.Argument(
        metavar="[APPROVAL_ID]",
        help="The approval id; may be omitted when exactly one is pending.",
        show_default=False,
    ),
]
KeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--key",
        metavar="PATH",
        help="Sign with this Ed25519 private key (OpenSSH or PEM) instead of the one "
        "`torpor keys init --as NAME` made.",
    ),
]
AgentOpt = Annotated[
    bool, typer.Option("--agent", help="Sign with your key held by ssh-agent ($SSH_AUTH_SOCK).")
]
DelegateOpt = Annotated[
    str | None,
    typer.Option(
        "--delegate",
        metavar="NAME",
        help="Sign as delegate NAME for the person --as names (a console that authenticated "
        "them; the keyring must allow it).",
    ),
]


def approve(
    ctx: typer.Context,
    run_id: RunId,
    approver: Approver,
    approval_id: ApprovalIdOpt = None,
    expect_hash: HashOpt = None,
    comment: CommentOpt = "",
    key: KeyOpt = None,
    agent: AgentOpt = False,
    delegate: DelegateOpt = None,
    edit: Annotated[
        Path | None,
        typer.Option(
            "--edit",
            metavar="FILE",
            help="Approve the edited content in FILE instead (start from `torpor approve RUN "
            "--edit -` to print the proposed one); the diff is shown, the signature binds its "
            "sha256 and the effect runs exactly those bytes.",
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Approve exactly the content an approval binds, signed with your own key; prints the
    sha256 hashes approved. No key yet? `torpor keys init --as NAME`.

    Example: torpor approve deploy-42 --as alice --hash 3f2a9c
    """
    _decide(
        ctx,
        "approve",
        run_id,
        approval_id,
        approver,
        expect_hash,
        comment,
        json_out,
        (key, agent, delegate),
        edit,
    )


def edited_text(client: Any, run_id: str, approval_id: str | None, path: Path) -> str:
    """The edit in ``path`` — after printing its diff against the proposed content — or, for
    ``-``, the proposed content printed to start from (and nothing signed: typer.Exit)."""
    from ..client_steer import edit_diff, read_edit

    proposed = client.proposed(run_id, approval_id)
    if str(path) == "-":
        typer.echo(proposed, nl=False)
        raise typer.Exit(0)
    edited = read_edit(path)
    try:
        json.loads(proposed)
    except ValueError:
        pass  # (a text document: any edit is text)
    else:
        try:
            json.loads(edited)
        except ValueError as exc:
            raise BadInputError(
                f"--edit {path}: the proposed content is JSON and the edit is not ({exc}); "
                "nothing was signed"
            ) from None
    diff = edit_diff(proposed, edited)
    if not diff:
        raise BadInputError(f"the edit {path} is the proposed content: approve it without --edit")
    console().print(plain(diff.rstrip("\n")))
    return edited


def deny(
    ctx: typer.Context,
    run_id: RunId,
    approver: Approver,
    approval_id: ApprovalIdOpt = None,
    expect_hash: HashOpt = None,
    comment: CommentOpt = "",
    key: KeyOpt = None,
    agent: AgentOpt = False,
    delegate: DelegateOpt = None,
    json_out: JsonFlag = False,
) -> None:
    """Deny an approval, signed with your own key (prints the sha256 hashes denied); the run
    ends blocked on resume.

    Example: torpor deny deploy-42 --as alice --comment "touches prod config"
    """
    _decide(
        ctx,
        "deny",
        run_id,
        approval_id,
        approver,
        expect_hash,
        comment,
        json_out,
        (key, agent, delegate),
    )


def revoke(
    ctx: typer.Context,
    run_id: RunId,
    approval_id: Annotated[
        str, typer.Argument(metavar="APPROVAL_ID", help="The approval id.", show_default=False)
    ],
    by: Person,
    reason: Annotated[str, typer.Option("--reason", help="Why, recorded.")] = "",
    json_out: JsonFlag = False,
) -> None:
    """Revoke an approval before it is consumed (prints the hashes); its effect won't happen.

    Example: torpor revoke deploy-42 ship@3f2a9c01d4e5 --as alice --reason "wrong branch"
    """
    with open_client(ctx) as client:
        hashes = client.revoke(run_id, approval_id, by, reason)
        resume = resume_command(client, run_id)
    if json_out:
        emit_json({"run_id": run_id, "approval_id": approval_id, "by": by, "hashes": hashes})
        return
    out = console()
    out.print(plain(f"revoked {approval_id} of run {run_id} as {by}; it bound:"))
    for h in hashes:
        out.print(plain(f"  sha256:{h}"))
    out.print(plain(f"it applies when the run resumes: {resume}", style="cyan"))


# --------------------------------------------------------------------------- steering


def signal(
    ctx: typer.Context,
    run_id: RunId,
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="[NAME]",
            help="The signal name (may be omitted with --wait-id).",
            show_default=False,
        ),
    ] = None,
    payload: Annotated[
        str | None,
        typer.Option("--payload", "-p", metavar="JSON", help="Signal payload as JSON, or @FILE."),
    ] = None,
    message_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            metavar="MESSAGE_ID",
            help="Deduplication id: a signal sent twice with one id is delivered once.",
        ),
    ] = None,
    wait_id: Annotated[
        str | None,
        typer.Option(
            "--wait-id",
            metavar="WAIT_ID",
            help="Answer this wait only (the id `torpor show` prints); refused if that wait is "
            "unknown, already answered or timed out.",
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Send signal NAME to a run: a wait for it takes it, else it is buffered until one does.

    Example: torpor signal deploy-42 go --payload '{"window": "22:00"}' --id ticket-981
    """
    if name is None and wait_id is None:
        raise BadInputError("give the signal NAME, or --wait-id WAIT_ID (see torpor show)")
    data = parse_json("--payload", payload)
    mid = message_id or uuid.uuid4().hex
    with open_client(ctx) as client:
        d = client.send_signal(run_id, name, data, message_id=mid, wait_id=wait_id)
    if json_out:
        emit_json(
            {
                "run_id": run_id,
                "name": d.name,
                "message_id": mid,
                "delivered": d.delivered,
                "status": d.status,
                "wait_id": d.wait_id,
            }
        )
        return
    where = f"(run {run_id}, message id {mid})"
    if d.status == "waiting":
        text = f"signal {d.name!r} goes to wait {d.wait_id}, which is waiting for it {where}"
    elif d.status == "late":
        text = (
            f"buffered: it arrived after the deadline of wait {d.wait_id} {where}; "
            f"a later wait for {d.name!r} may take it"
        )
    elif d.status == "buffered":
        text = f"buffered: no wait for {d.name} yet {where}; the first wait for it takes it"
    else:
        text = f"signal {d.name!r} with message id {mid} was already delivered; not sent again"
    console().print(plain(text))


def cancel(
    ctx: typer.Context,
    run_id: RunId,
    reason: Annotated[str, typer.Option("--reason", help="Why, recorded.")] = "",
    by: Annotated[str, typer.Option("--as", metavar="NAME", help="Who cancels.")] = "user",
    json_out: JsonFlag = False,
) -> None:
    """Cancel a run: it ends cancelled at its next boundary (a waiting run when it resumes).

    Example: torpor cancel deploy-42 --reason "superseded by deploy-43"
    """
    with open_client(ctx) as client:
        client.cancel(run_id, by=by, reason=reason)
        resume = resume_command(client, run_id)
    if json_out:
        emit_json({"run_id": run_id, "cancel_requested": True, "by": by, "reason": reason})
        return
    console().print(plain(f"cancel of run {run_id} requested"))
    console().print(plain(f"it ends cancelled at its next boundary: {resume}", style="cyan"))


def resolve(
    ctx: typer.Context,
    run_id: RunId,
    key: Annotated[
        str,
        typer.Argument(
            metavar="EFFECT_KEY", help="The effect's idempotency key (see `torpor show`)."
        ),
    ],
    by: Person,
    applied: Annotated[
        bool, typer.Option("--applied", help="The effect happened (give --result if any).")
    ] = False,
    absent: Annotated[
        bool, typer.Option("--absent", help="The effect did not happen: perform it on resume.")
    ] = False,
    result: Annotated[
        str | None,
        typer.Option("--result", metavar="JSON", help="With --applied: its result, as JSON."),
    ] = None,
    reason: Annotated[str, typer.Option("--reason", help="How you know, recorded.")] = "",
    json_out: JsonFlag = False,
) -> None:
    """Settle an effect in doubt (an unresolved run): --applied or --absent, then resume.

    Example: torpor resolve deploy-42 deploy-42/push --applied --result '{"sha": "9f1c"}' --as bob
    """
    if applied == absent:
        raise BadInputError("give exactly one of --applied or --absent")
    if result is not None and not applied:
        raise BadInputError("--result goes with --applied")
    data = parse_json("--result", result)
    verdict = "applied" if applied else "absent"
    with open_client(ctx) as client:
        client.resolve(run_id, key, verdict, by, result=data, reason=reason)
        resume = resume_command(client, run_id)
    if json_out:
        emit_json({"run_id": run_id, "key": key, "verdict": verdict, "by": by})
        return
    console().print(plain(f"effect {key} of run {run_id} resolved as {verdict} by {by}"))
    console().print(plain(f"continue the run: {resume}", style="cyan"))


def budget(
    ctx: typer.Context,
    run_id: RunId,
    tokens: Annotated[
        int | None, typer.Option("--tokens", min=1, help="New limit on model tokens.")
    ] = None,
    cost: Annotated[
        float | None, typer.Option("--cost", metavar="USD", help="New limit on model cost.")
    ] = None,
    steps: Annotated[
        int | None,
        typer.Option("--steps", min=1, help="New limit on steps (model calls + tool calls)."),
    ] = None,
    wall_clock: Annotated[
        float | None,
        typer.Option("--wall-clock", metavar="SECONDS", help="New wall-clock limit."),
    ] = None,
    by: Annotated[str, typer.Option("--as", metavar="NAME", help="Who raises it.")] = "user",
    reason: Annotated[str, typer.Option("--reason", help="Why, recorded.")] = "",
    json_out: JsonFlag = False,
) -> None:
    """Raise an agent run's budget and reopen it if it is blocked (then resume it).

    Example: torpor budget triage-7 --tokens 200000 --as alice
    """
    if cost is not None and cost <= 0:
        raise BadInputError("--cost must be positive")
    if wall_clock is not None and wall_clock <= 0:
        raise BadInputError("--wall-clock must be positive")
    with open_client(ctx) as client:
        info = client.reopen(
            run_id,
            by,
            reason=reason,
            tokens=tokens,
            cost_usd=cost,
            steps=steps,
            wall_clock_s=wall_clock,
        )
        resume = resume_command(client, run_id)
    if json_out:
        emit_json({"run_id": run_id, "by": by, **info})
        return
    u, lim, tree = info["usage"], info["limits"], info["tree"]
    for k in ("tokens", "cost_usd", "steps", "wall_clock_s"):
        limit = lim.get(k)
        # The limits hold for the run's whole tree (issue 38): the tree's total, its own part.
        used = f"used {u[k]}"
        if tree["runs"] > 1 and k != "wall_clock_s":
            used = f"used {tree[k]} by the {tree['runs']} runs of its tree (this run {u[k]})"
        console().print(plain(f"{k:<13} {used}  limit {limit if limit is not None else 'none'}"))
    if info.get("reopened"):
        console().print(plain("reopened below it: " + ", ".join(info["reopened"])))
    console().print(plain(f"continue the run: {resume}", style="cyan"))


def retry(
    ctx: typer.Context,
    run_id: RunId,
    step: Annotated[
        str | None,
        typer.Option("--step", metavar="STEP", help="The step whose crashed attempts to forgive."),
    ] = None,
    by: Annotated[str, typer.Option("--as", metavar="NAME", help="Who retries it.")] = "user",
    reason: Annotated[str, typer.Option("--reason", help="Why, recorded.")] = "",
) -> None:
    """Reopen a run parked blocked (a step that kept crashing its process) after a fix.

    Example: torpor retry ingest-4 --step parse --as alice
    """
    with open_client(ctx) as client:
        client.retry(run_id, by, step=step, reason=reason)
        resume = resume_command(client, run_id)
    what = f"step {step!r}" if step else "every open step"
    console().print(plain(f"reopened {run_id}: the crashed attempts of {what} are forgiven"))
    console().print(plain(f"continue the run: {resume}", style="cyan"))


def register(app: typer.Typer) -> None:
    """Add the approval and steering commands to ``app``."""
    app.command()(approve)
    app.command()(deny)
    app.command()(revoke)
    app.command()(signal)
    app.command()(cancel)
    app.command()(resolve)
    app.command()(budget)
    app.command()(retry)

"""Commands that talk to a running agent (issue 39): ``steer`` (an operator's message it sees
before its next model call) and ``respond`` (a reply to an approval instead of a decision: the
model reads it, nothing runs). ``approve --edit FILE`` (in :mod:`.steer`) approves edited
arguments. Each is recorded with its disposition when the run takes it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import BadInputError
from .context import open_client, resume_command
from .render import console, emit_json, plain
from .root import Approver, JsonFlag, Person, RunId


def steer(
    ctx: typer.Context,
    run_id: RunId,
    text: Annotated[
        str,
        typer.Argument(metavar="TEXT", help="The message, or @FILE.", show_default=False),
    ],
    by: Person = "user",
    interrupt: Annotated[
        bool,
        typer.Option(
            "--interrupt",
            help="Retract a model reply in flight when the message arrives (its tokens still "
            "count) instead of queueing the message for the next model call.",
        ),
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Tell a running agent something: it sees TEXT before its next model call (once, kept as
    an instruction until a later one supersedes it).

    Example: torpor steer deploy-42 "use the staging database, not prod" --as alice
    """
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInputError(f"cannot read the message from {path}: {exc}") from None
    with open_client(ctx) as client:
        mid = client.steer(run_id, text, by=by, interrupt=interrupt)
        resume = resume_command(client, run_id)
    if json_out:
        emit_json({"run_id": run_id, "message_id": mid, "by": by, "interrupt": interrupt})
        return
    how = "interrupts a reply in flight, then" if interrupt else "queued:"
    out = console()
    out.print(
        plain(f"steering message {mid} to run {run_id} {how} seen before its next model call")
    )
    out.print(plain(f"a waiting run sees it when it resumes: {resume}", style="cyan"))


def respond(
    ctx: typer.Context,
    run_id: RunId,
    reply: Annotated[
        str,
        typer.Argument(metavar="REPLY", help="What the model is told instead.", show_default=False),
    ],
    approver: Approver,
    approval_id: Annotated[
        str | None,
        typer.Option("--approval", metavar="APPROVAL_ID", help="The approval (when several wait)."),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Answer an approval with a reply instead of deciding it: nothing runs, and the model gets
    REPLY as the tool call's result. Signed with your own key, like approve and deny.

    Example: torpor respond deploy-42 "deploy 2.1 to staging first" --as alice
    """
    with open_client(ctx) as client:
        aid, _ = client.respond(run_id, approval_id, reply, approver)
        resume = resume_command(client, run_id)
    if json_out:
        emit_json(
            {"run_id": run_id, "approval_id": aid, "decision": "respond", "approver": approver}
        )
        return
    out = console()
    out.print(plain(f"replied to {aid} of run {run_id} as {approver}; nothing of it runs"))
    out.print(plain(f"it applies when the run resumes: {resume}", style="cyan"))


def register(app: typer.Typer) -> None:
    app.command()(steer)
    app.command()(respond)

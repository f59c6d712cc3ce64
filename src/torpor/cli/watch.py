"""``torpor watch RUN``: print a run's stream as it is written (issue 40,
:mod:`torpor.streams`) — a model's reply token by token, a workflow's progress items one per
line — from the start (or ``--after OFFSET``) until the run finished and everything was read.

A lost connection to the store (a restarted database server, a network blip) is said on
stderr and the reading resumes from the last offset printed, with a growing pause (up to
5 s) between tries: nothing is printed twice or skipped. A part of the reply that was
abandoned (its writer died mid-call; the call is retried) is followed by a line saying so,
and the retry's text comes after it. ``--json``: one JSON object per item.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import BadInputError, RunNotFoundError, StoreError, StoreMissingError
from ..streams import REPLY, StreamItem
from .context import open_client
from .render import console, plain
from .root import JsonFlag, RunId

if TYPE_CHECKING:
    from ..client import Client

#: The longest pause between two tries to reach the store again, seconds.
MAX_PAUSE_S = 5.0


class _Printer:
    """Prints items as a person reads them: text deltas as they come, a line per object."""

    def __init__(self, json_out: bool):
        self.json_out = json_out
        self.part: str | None = None
        self.at_line_start = True

    def _write(self, text: str) -> None:
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()
            self.at_line_start = text.endswith("\n")

    def _newline(self) -> None:
        if not self.at_line_start:
            self._write("\n")

    def item(self, it: StreamItem) -> None:
        if self.json_out:
            self._write(json.dumps(it.to_json(), ensure_ascii=False) + "\n")
            return
        if it.kind == "data" and isinstance(it.data, str):
            if self.part is not None and it.part != self.part:
                self._newline()
            self.part = it.part
            self._write(it.data)
        elif it.kind == "data":
            self._newline()
            self._write(json.dumps(it.data, ensure_ascii=False) + "\n")
        elif it.kind == "end":
            self._newline()
        elif it.kind == "retract":
            self._newline()
            self._write(f"[retracted: the text of {it.part} above is void: {it.data}]\n")
            self.part = None


def watch(
    ctx: typer.Context,
    run_id: RunId,
    stream: Annotated[str, typer.Option("--stream", "-s", help="Which stream of the run.")] = REPLY,
    after: Annotated[
        int, typer.Option("--after", metavar="OFFSET", min=0, help="Only items after OFFSET.")
    ] = 0,
    follow: Annotated[
        bool,
        typer.Option("--follow/--no-follow", help="Wait for new items until the run finished."),
    ] = True,
    json_out: JsonFlag = False,
) -> None:
    """Print the run's stream (default: the model's reply) as it is written.

    Example: torpor watch chat-7 --stream reply
    """
    printer = _Printer(json_out)
    offset, pause, checked = after, 0.2, False
    while True:
        try:
            with open_client(ctx, read_only=True, say_store=False) as client:
                if not checked:
                    _check_stream(client, run_id, stream, follow)
                    checked = True
                reader = client.stream(run_id, stream, after=offset, follow=follow)
                for item in reader:
                    printer.item(item)
                    offset, pause = item.offset, 0.2
            printer._newline()
            return
        except (RunNotFoundError, StoreMissingError, BadInputError):
            raise
        except StoreError as exc:
            console(stderr=True).print(
                plain(
                    f"store unreachable after offset {offset} ({exc}); trying again in "
                    f"{pause:.1f} s",
                    style="yellow",
                )
            )
            time.sleep(pause)
            pause = min(MAX_PAUSE_S, pause * 2)


def _check_stream(client: Client, run_id: str, stream: str, follow: bool) -> None:
    """BadInputError when the run has no stream ``stream`` and will write none (it finished,
    or ``--no-follow``), naming the streams it has; for a live run, the same said on stderr
    (the stream may still come) before waiting for it."""
    names = dict(client.store.stream_names(run_id))
    if stream in names:
        return
    known = ", ".join(sorted(names)) or "none"
    if not follow or client.store.get_run(run_id).status == "finished":
        raise BadInputError(f"run {run_id!r} has no stream {stream!r} (its streams: {known})")
    console(stderr=True).print(
        plain(
            f"run {run_id!r} has no stream {stream!r} yet (its streams: {known}); waiting for "
            "it until the run finishes",
            style="yellow",
        )
    )


def register(app: typer.Typer) -> None:
    """Add ``watch`` to ``app``."""
    app.command()(watch)


__all__ = ["register", "watch"]

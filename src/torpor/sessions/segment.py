"""A session's segment: one normal run of the session's agent that takes the session's
messages one by one, a turn each, and sleeps on a durable wait in between (issue 46).

A segment is an agent run (:class:`~torpor.agents.loop.AgentContext`) whose loop does not end
when the planner answers: the answer is the turn's reply, the message's disposition is
recorded (``handled``, :mod:`torpor.store.sessions`), the loop checkpoints and waits for the
next message (``run.wait_for("session.message")``: no process, no lease). Leases, fencing,
steering, approvals and budgets are the agent's, unchanged.

After ``segment_turns`` turns the segment **continues as new**: a recorded step starts the
next segment's run with the memory carried over — the running summary and the live facts of
the fact ledger — and points the session at it; the segment then ends ``succeeded``. The new
segment records the carried memory as its first compaction (``context_compacted`` number 1,
its ledger records written to its own ledger), so its context, recall and later compactions
see them as their own; its history starts short whatever the session's age.

Which messages a segment takes: the session's pending messages read (a recorded step) when it
starts, then each signal its wait takes — a message's id is taken once per segment; a message
sent while a segment hands over reaches the next one (read from the inbox table or signalled
to it, :func:`torpor.sessions.api.Sessions.send`), and a message an earlier segment already
answered is never answered again (its disposition is written once).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from .. import serde
from ..agents.loop import Agent, AgentContext
from ..agents.models.base import Message
from ..agents.working import WorkingMemory
from ..engine.execution import ENGINE_ERRORS
from ..errors import ApprovalError, Cancelled, ConfigError, RunInterrupt
from ..history import ContextCompacted, Payload, Policy, checkpoint_answers
from ..memory.compaction import Summary
from ..memory.working import SNAPSHOT_VERSION, AgentSnapshot
from ..store import sessions as rows
from ..workflows import workflow
from .start import create_segment, sql_of

#: The signal a segment's wait takes a message by.
SIGNAL = "session.message"
#: At most this many ledger facts cross to the next segment (the newest).
CARRY_FACTS = 500


class SessionAgent:
    """A session's agent: ``SessionAgent(agent, segment_turns=200)`` at module level registers
    the workflow of its segments, ``session:<agent name>`` (workers find it by importing the
    module, as for any agent).

    ``segment_turns``: turns per segment before it continues as new (ConfigError below 1).
    ``version``: the segments' workflow version (default the agent's)."""

    def __init__(self, agent: Agent, *, segment_turns: int = 200, version: str | None = None):
        if not isinstance(agent, Agent):
            raise ConfigError(f"SessionAgent needs a torpor.Agent, not {type(agent).__name__}")
        if (
            isinstance(segment_turns, bool)
            or not isinstance(segment_turns, int)
            or segment_turns < 1
        ):
            raise ConfigError(f"segment_turns must be an int >= 1, not {segment_turns!r}")
        self.agent = agent
        self.segment_turns = segment_turns
        self.workflow = f"session:{agent.name}"
        spec = self

        def session_segment(run: Any, input: Any) -> Any:
            return SegmentContext(agent, run, input, spec=spec).execute_segment()

        session_segment.__qualname__ = f"session:{agent.name}"
        session_segment.__module__ = sys._getframe(1).f_globals.get("__name__", __name__)
        reconcilers = {
            t.name: t.reconcile for t in agent.tools if t.policy is Policy.EFFECT and t.reconcile
        }
        workflow(
            self.workflow,
            version=version or "1",
            goal=agent.goal,
            reconcilers=reconcilers,
            task_type=agent.task_type,
            steerable=True,  # a segment runs the agent's loop, which takes steering
        )(session_segment)
        self.__torpor_workflow__ = self.workflow


def segment_run_id(session: str, segment: int) -> str:
    """The run id of a session's segment ``segment`` (from 1)."""
    return f"session:{session}:{segment}"


class SessionMemory(WorkingMemory):
    """The working memory of a segment: its checkpoint also holds where the session's loop is
    (:meth:`SegmentContext.loop_state`); the carried memory is its first compaction."""

    ctx: SegmentContext

    def save(self, need_plan: bool) -> None:
        self.answers = checkpoint_answers(self.ctx.run.state)
        data = self.snapshot(need_plan).model_dump(mode="json")
        data["session"] = self.ctx.loop_state()
        self.ctx.run.checkpoint(data)

    def restore(self) -> bool | None:
        raw = self.ctx.run.restore(None)
        if not isinstance(raw, dict) or raw.get("v") != SNAPSHOT_VERSION or "session" not in raw:
            return None
        self.ctx.load_loop_state(raw.pop("session"))
        self.load(AgentSnapshot.model_validate(raw))
        self.restored = True
        return bool(raw.get("need_plan", True))

    def carry_in(self, carry: dict[str, Any]) -> None:
        """Record the memory an earlier segment carried over as this segment's first
        compaction (one step, ``carry``): its summary and its ledger records."""
        summary = Summary.model_validate(carry.get("summary") or {})
        data = summary.model_dump(mode="json")
        ledger = [{**r, "compaction": 1} for r in carry.get("ledger") or []]

        def work(sid: str) -> tuple[Any, list[Payload]]:
            return {"summary": data, "facts": len(ledger)}, [
                ContextCompacted(
                    step_id=sid,
                    number=1,
                    summarizer="carried",
                    summary_hash=serde.hash_value(data),
                    summary_tokens=summary.tokens(),
                    buffer_tokens_before=0,
                    buffer_tokens_after=0,
                    ledger=ledger,
                )
            ]

        rec = self.ctx.run.journal.record("carry", work, purpose="memory of the last segment")
        self.summary = Summary.model_validate(rec.result["summary"])
        self.compactions = 1
        self._ledger = None

    def carry_out(self) -> dict[str, Any]:
        """The memory the next segment starts from: the running summary and the ledger's live
        facts (not superseded, not whole turns), the newest :data:`CARRY_FACTS`."""
        store, rid = self.ctx.run.journal.store, self.ctx.run.run_id
        _keys, gone, _live = store.ledger_index(rid, upto=self.compactions)
        facts = [
            r.data
            for r in store.ledger(rid, upto=self.compactions)
            if r.data.get("kind") != "unit" and r.data.get("key") not in gone
        ]
        return {"summary": self.summary.model_dump(mode="json"), "ledger": facts[-CARRY_FACTS:]}


@dataclass
class SegmentContext(AgentContext):
    """One execution of a segment run (see the module doc)."""

    spec: SessionAgent | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.memory: SessionMemory = SessionMemory(self)
        self.turns = 0  # turns this segment handled
        self.current: dict[str, Any] | None = None  # the message of the turn under way
        self.queue: list[dict[str, Any]] = []  # pending messages read when it started
        self.seen: list[str] = []  # ids of the messages it took

    # ------------------------------------------------------------ the checkpoint

    def loop_state(self) -> dict[str, Any]:
        return {
            "turns": self.turns,
            "current": self.current,
            "queue": self.queue,
            "seen": self.seen,
        }

    def load_loop_state(self, s: dict[str, Any]) -> None:
        self.turns = int(s["turns"])
        self.current = s["current"]
        self.queue = list(s["queue"])
        self.seen = list(s["seen"])

    # ------------------------------------------------------------ the loop

    @property
    def session(self) -> str:
        return str(self.input["session"])

    def execute_segment(self) -> Any:
        assert self.spec is not None
        self.agent.tools.prepare(self.run)
        need_plan = self.memory.restore()
        if need_plan is None:
            self._init_budget()
            if self.input.get("carry"):
                self.memory.carry_in(self.input["carry"])
            self.queue = self.run.step("inbox", self._pending, purpose="the session's inbox")
            need_plan = True
        self.episodes()
        try:
            while True:
                if self.current is None:
                    msg = self._next()
                    if msg is None:
                        break
                    self.current = msg
                    self.seen.append(str(msg["id"]))
                    self.note(f"{msg['from']}: {msg['text']}", operator=True)
                    need_plan = True
                self._loop(need_plan)
                self._end_turn()
        except Cancelled:
            self._skip_pending("not run: the run was cancelled")
            self._reject("the segment run was cancelled during its turn")
            raise
        except (RunInterrupt, ApprovalError, *ENGINE_ERRORS):
            raise
        except Exception as exc:
            self._skip_pending("not run: the segment failed")
            self._reject(f"the segment run failed during its turn ({type(exc).__name__})")
            raise
        nxt = self.run.step("continue", self._continue_as_new, purpose="the next segment")
        return {"session": self.session, "turns": self.turns, "next": nxt}

    def _pending(self) -> list[dict[str, Any]]:
        store = sql_of(self.run.journal.store)
        return [m.payload() for m in rows.messages(store, self.session, status="pending")]

    def _next(self) -> dict[str, Any] | None:
        """The next message to answer, or None when the segment is due to continue as new."""
        assert self.spec is not None
        while True:
            if self.queue:
                m = self.queue.pop(0)
            elif self.turns >= self.spec.segment_turns:
                return None
            else:
                m = self.run.wait_for(SIGNAL)
            if not isinstance(m, dict) or "id" not in m or str(m["id"]) in self.seen:
                continue
            mid = str(m["id"])
            status = self.run.step(f"take:{mid}", self._status, mid, purpose="still pending?")
            if status == "pending":
                return m
            self.seen.append(mid)  # superseded or rejected meanwhile: no turn for it

    def _reject(self, why: str) -> None:
        """The message of a turn that will never end gets its disposition (once)."""
        if self.current is not None:
            store = sql_of(self.run.journal.store)
            rows.dispose(
                store, str(self.current["id"]), "rejected", run_id=self.run.run_id, reason=why
            )

    def _status(self, mid: str) -> str:
        got = rows.message(sql_of(self.run.journal.store), mid)
        return got.status if got is not None else "missing"

    def _end_turn(self) -> None:
        assert self.current is not None
        reply = self.final
        self.memory.add_model_turn(Message(role="assistant", content=reply), [], None)
        turn = int(self.input.get("first_turn", 1)) + self.turns
        mid = str(self.current["id"])
        store = sql_of(self.run.journal.store)
        rid = self.run.run_id

        def record() -> dict[str, Any]:
            rows.dispose(store, mid, "handled", run_id=rid, turn=turn, reply=reply)
            return {"message": mid, "turn": turn, "reply": reply}

        self.run.step(f"turn:{turn}", record, purpose=f"reply to message {mid}")
        self.turns += 1
        self.current = None
        self.final = ""
        self._boundary()  # compaction when due, then the checkpoint the wait resumes from

    def _continue_as_new(self) -> str:
        """Start the next segment's run with the memory carried over and point the session at
        it (both idempotent: a repeated step finds them done)."""
        store = self.run.journal.store
        seg = int(self.input["segment"]) + 1
        first = int(self.input.get("first_turn", 1)) + self.turns
        rid = segment_run_id(self.session, seg)
        create_segment(
            store,
            self.run.state.workflow,
            rid,
            {
                "session": self.session,
                "segment": seg,
                "first_turn": first,
                "carry": self.memory.carry_out(),
            },
            module=self.run.state.module,
        )
        rows.move_segment(sql_of(store), self.session, seg, rid, first)
        return rid

"""The agent's working memory (:mod:`torpor.memory`) kept by its loop: the buffer fed from
model turns, plans and settled calls; compaction at boundaries (one atomic recorded
transition, ``context_compacted``); the context of each model call built within the budget and
recorded with the call (``context_built``); and the checkpoint of the loop's state that a
resumed run reads instead of replaying every model turn."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from .. import faults
from ..errors import ModelContextTooLongError, SummaryFailed
from ..history import (
    ContextBuilt,
    Payload,
    Policy,
    WarningRecorded,
    checkpoint_answers,
)
from ..memory.buffer import CallItem, Unit, result_text
from ..memory.compaction import (
    ExtractiveSummarizer,
    Summary,
    SummaryLine,
    call_label,
    choose,
    due,
)
from ..memory.context import PRIORITIES, BuiltContext, ContextSection, SectionRequest
from ..memory.facts import result_facts
from ..memory.tokens import Calibration, estimate_request
from ..memory.working import (
    DURABLE_TEXT,
    SNAPSHOT_VERSION,
    AgentSnapshot,
    goal_text,
    next_context,
    system_text,
    tool_tokens,
)
from .calls import PlannedCall
from .context import Context
from .context_ledger import LedgerCache, recall_section
from .models.base import Message, ModelResponse, ToolSpec
from .proposals import clip
from .working_parts import artifact_excerpts, call_state, compacted_event


class LoopState(Context, Protocol):
    """What the working memory reads and restores of the agent loop
    (:class:`~torpor.agents.loop.AgentContext`)."""

    input: Any
    version: int
    calls: dict[str, PlannedCall]
    order: list[str]
    final: str

    def episodes(self) -> str:
        """The episodes section recorded for the run (``""``: none)."""
        ...


class WorkingMemory:
    """The memory half of an :class:`~torpor.agents.loop.AgentContext` (see the module doc)."""

    def __init__(self, ctx: LoopState):
        self.ctx = ctx
        self.config = ctx.agent.memory
        self.turn = 0
        self.buffer_units: list[Unit] = []
        self.summary = Summary()
        self.compactions = 0
        self.failed_summaries = 0
        self.failed_at = 0
        self.calibration = Calibration()
        self.answers: dict[str, Any] = {}
        self.retired: list[str] = []
        self.pending: BuiltContext | None = None
        self.instructions = ""
        self.extra: list[tuple[str, int, str]] = []
        #: The context's budget after a provider refused one as too long (0: none).
        self.limit_tokens = 0
        #: A run recorded before working memory (event schema <= 3) replays with the whole
        #: transcript as its prompts were built then (:meth:`legacy_conversation`).
        self.legacy = False
        self.legacy_turns: list[tuple[Message, list[str]]] = []
        self.restored = False

    # ------------------------------------------------------------ the snapshot

    def snapshot(self, need_plan: bool) -> AgentSnapshot:
        ctx = self.ctx
        agent = ctx.agent
        from ..memory.buffer import Buffer

        return AgentSnapshot(
            goal_text=goal_text(agent.goal, list(agent.criteria), ctx.input),
            system_text=system_text(agent.instructions),
            tool_tokens=tool_tokens(ctx.tool_specs()),
            budget_tokens=self.config.budget_tokens,
            summary_tokens=self.config.summary_tokens,
            version=ctx.version,
            calls=[call_state(c) for c in ctx.calls.values()],
            order=list(ctx.order),
            retired=list(self.retired),
            need_plan=need_plan,
            final=ctx.final,
            turn=self.turn,
            buffer=Buffer(units=list(self.buffer_units)),
            summary=self.summary,
            compactions=self.compactions,
            failed_summaries=self.failed_summaries,
            failed_at=self.failed_at,
            calibration=self.calibration,
            answers=self.answers,
            artifacts=self._artifact_excerpts(),
            instructions=self.instructions,
            extra=list(self.extra),
            limit_tokens=self.limit_tokens,
            limits=self._limits(),
        )

    def _limits(self) -> dict[str, int]:
        """The limits ``torpor context RUN`` shows (docs/context.md, *Limits*)."""
        cfg = self.config
        return {
            "budget_tokens": cfg.budget_tokens,
            "buffer_tokens": cfg.buffer_tokens,
            "summary_tokens": cfg.summary_tokens,
            "summary_keep_tokens": cfg.summary_keep_tokens,
            "recall_tokens": cfg.recall_tokens,
            "result_chars": cfg.result_clip,
            "max_plan_versions": self.ctx.agent.max_plan_versions,
            "plan_version": self.ctx.version,
        }

    def load(self, snap: AgentSnapshot) -> None:
        ctx = self.ctx
        ctx.version, ctx.final, ctx.order = snap.version, snap.final, list(snap.order)
        ctx.calls = {}
        for c in snap.calls:
            data = c.model_dump(exclude={"in_history"})
            if c.in_history:
                sid = f"settle:{c.call_id}@v{c.version}"
                comp = ctx.run.journal.recorded(sid, Policy.READ)
                if comp is not None:
                    data["observation"] = ctx.run.journal.value(sid, comp.result)["observation"]
            ctx.calls[c.call_id] = PlannedCall(**data)
        self.turn = snap.turn
        self.buffer_units = list(snap.buffer.units)
        self.summary = snap.summary
        self.compactions = snap.compactions
        self.failed_summaries = snap.failed_summaries
        self.failed_at = snap.failed_at
        self.calibration = snap.calibration.model_copy()
        self.answers = dict(snap.answers)
        self.retired = list(snap.retired)
        self.instructions = snap.instructions
        self.extra = list(snap.extra)
        self.limit_tokens = snap.limit_tokens

    def save(self, need_plan: bool) -> None:
        """Checkpoint the loop's state (the run's user checkpoint; see :meth:`restore`); not
        for a run recorded before working memory (it goes on as it was recorded)."""
        if self.legacy:
            return
        self.answers = checkpoint_answers(self.ctx.run.state)
        snap = self.snapshot(need_plan)
        self.ctx.run.checkpoint(snap.model_dump(mode="json"))

    def restore(self) -> bool | None:
        """Read the latest checkpoint: ``need_plan`` from it, or None when there is none (the
        loop then starts from the top)."""
        raw = self.ctx.run.restore(None)
        if not isinstance(raw, dict) or raw.get("v") != SNAPSHOT_VERSION or "goal_text" not in raw:
            st = self.ctx.run.state
            # Model calls recorded and never a context built: recorded before working memory.
            self.legacy = raw is None and st.usage.model_calls > 0 and st.context_tokens == 0
            return None
        snap = AgentSnapshot.model_validate(raw)
        self.load(snap)
        self.restored = True
        return snap.need_plan

    # ------------------------------------------------------------ the buffer

    def add_model_turn(self, message: Message, call_ids: list[str], reported: int | None) -> None:
        self.legacy_turns.append((message, call_ids))
        self.turn += 1
        calls = [
            CallItem(call_id=cid, tool_call_id=tc.id, tool=tc.name, args=tc.arguments)
            for cid, tc in zip(call_ids, message.tool_calls, strict=True)
        ]
        ref = [self._last_model_step] if self._last_model_step else []
        self.buffer_units.append(
            Unit(
                turn=self.turn,
                kind="model",
                text=message.content,
                calls=calls,
                refs=ref,
                reported_tokens=reported or None,
            )
        )

    _last_model_step: str | None = None

    def add_plan(self, reason: str, calls: Sequence[PlannedCall], from_model: bool) -> None:
        """A code planner's plan becomes a unit (a model's turn already is one)."""
        if from_model:
            return
        self.turn += 1
        why = "; ".join(f"{c.call_id}: {c.why}" for c in calls if c.why)
        text = " ".join(x for x in (reason, why) if x)
        self.buffer_units.append(
            Unit(
                turn=self.turn,
                kind="plan",
                text=text,
                calls=[
                    CallItem(call_id=c.call_id, tool_call_id=c.call_id, tool=c.tool, args=c.args)
                    for c in calls
                ],
                refs=[f"plan@v{self.ctx.version}"],
            )
        )

    def note(self, text: str, *, operator: bool = False) -> None:
        """An operator message or a note for the agent, kept in the buffer (the latest
        operator message is never folded away)."""
        self.turn += 1
        kind = "operator" if operator else "note"
        self.buffer_units.append(Unit(turn=self.turn, kind=kind, text=text))

    def settled(self, call_id: str, status: str, observation: Any, step: str | None) -> None:
        """A call's outcome reaches its unit: the result clipped for the buffer
        (``Memory.result_chars``), and the facts found in the whole of it (decoded)."""
        for u in reversed(self.buffer_units):
            for c in u.calls:
                if c.call_id == call_id and c.status == "pending":
                    c.status = status
                    c.step = step
                    c.facts = result_facts(
                        observation,
                        status=status,
                        turn=u.turn,
                        step=step,
                        goal=self.ctx.agent.goal,
                        label=call_label(c.tool, c.args, status, step),
                        args=c.args,
                    )
                    limit = self.config.result_clip
                    c.result = result_text(status, observation, limit, c.facts)
                    return

    def sync(self) -> None:
        """Calls a new plan version superseded are no longer pending in the buffer."""
        for u in self.buffer_units:
            for c in u.calls:
                pc = self.ctx.calls.get(c.call_id)
                if c.status == "pending" and (pc is None or pc.status == "superseded"):
                    c.status = "superseded"
                    c.result = result_text("superseded", None)
                    c.facts = []

    # ------------------------------------------------------------ compaction

    def maybe_compact(self) -> None:
        """Fold the oldest settled units into the summary when the buffer is past its
        threshold: one recorded step (``compact``) holding ``context_compacted``; a failed
        summary leaves everything as it was (a warning says why)."""
        cfg = self.config
        from ..memory.buffer import Buffer

        if self.legacy:
            return
        buf = Buffer(units=self.buffer_units)
        if not due(buf, cfg.buffer_tokens, cfg.compact_at):
            return
        if self.failed_at and len(self.buffer_units) <= self.failed_at:
            return  # the summary failed with this buffer: try again once it has grown
        idx = choose(buf, int(cfg.buffer_tokens * cfg.compact_to))
        if not idx:
            return
        units = [self.buffer_units[i] for i in idx]
        summarizer = cfg.summarizer or ExtractiveSummarizer(
            self.ctx.agent.goal, self._ledger_cache().forms
        )
        try:
            lines = summarizer.summarize(self.ctx, units, self.summary)
        except SummaryFailed as exc:
            self.failed_summaries += 1
            self.failed_at = len(self.buffer_units)
            self.ctx.run.warn(f"compaction skipped, the buffer is unchanged: {exc}")
            return
        before = buf.tokens()
        new = self.summary.folded(units, lines, cfg.summary_keep_tokens)
        call_ids = [c.call_id for u in units for c in u.calls]
        number = self.compactions + 1
        summary_data = new.model_dump(mode="json")
        ledger = self._ledger_records(units, lines, number, summarizer.name == "extractive")

        def work(sid: str) -> tuple[Any, list[Payload]]:
            return {"summary": summary_data, "folded": idx}, [
                compacted_event(
                    sid, number, units, new, summary_data, before, summarizer.name, ledger
                )
            ]

        rec = self.ctx.run.journal.record("compact", work, purpose=f"compaction {number}")
        self._ledger_done(ledger, rec.new)
        self._apply(rec.result["folded"], rec.result["summary"], call_ids, number)
        if rec.new:
            faults.point("memory.compacted")

    # ------------------------------------------------------------ the fact ledger

    _ledger: LedgerCache | None = None

    def _ledger_cache(self) -> LedgerCache:
        """What dedup and supersession need of the run's ledger as of this compaction (read
        from the store once, then kept up to date by this process)."""
        if self._ledger is None:
            run = self.ctx.run
            self._ledger = LedgerCache.read(run.journal.store, run.run_id, self.compactions)
        return self._ledger

    def _ledger_records(
        self, units: Sequence[Unit], lines: Sequence[SummaryLine], number: int, extractive: bool
    ) -> list[dict[str, Any]]:
        """The ledger records compaction ``number`` writes (JSON data for its event): the
        facts of ``units`` deduplicated against the ledger and superseding what they replace,
        scrubbed of every secret this process knows (G12) before they are recorded."""
        goal = self.ctx.agent.goal
        return self._ledger_cache().new_records(
            units, lines, number, goal, extractive, self.ctx.vault.scrub
        )

    def _ledger_done(self, records: list[dict[str, Any]], new: bool) -> None:
        """After the compaction's step: the cache takes its records (a replayed step's are
        read back from the store when next needed)."""
        if new and self._ledger is not None:
            self._ledger.add(records)
        else:
            self._ledger = None

    def _apply(self, folded: list[int], summary: Any, call_ids: list[str], number: int) -> None:
        """A recorded compaction takes effect: the folded units out of the buffer, the new
        summary in, the settled calls it folded out of the plan view."""
        gone = set(folded)
        self.summary = Summary.model_validate(summary)
        self.buffer_units = [u for i, u in enumerate(self.buffer_units) if i not in gone]
        self.compactions = number
        for cid in call_ids:
            c = self.ctx.calls.get(cid)
            if c is not None and c.status != "pending" and cid not in self.ctx.order:
                del self.ctx.calls[cid]
                self.retired.append(f"{cid}@v{c.version}")

    # ------------------------------------------------------------ overflow

    def _next_sid(self, name: str) -> str:
        n = self.ctx.run.journal.counters.get(name, 0) + 1
        return name if n == 1 else f"{name}#{n}"

    def replay_overflow(self, name: str, messages: Sequence[Message]) -> list[Message]:
        """``messages``, or — when this model call was refused as too long before (its
        ``overflow:`` step is recorded: this is a replay) — the harder compaction replayed and
        the context rebuilt, the refused attempt's step id passed over: the retry replays."""
        j = self.ctx.run.journal
        sid = self._next_sid(name)
        if self.pending is None or list(messages) != self.pending.messages:
            return list(messages)
        if j.recorded(f"overflow:{sid}", Policy.READ) is None:
            return list(messages)
        j.next_id(name)  # the refused attempt's id, as the first execution used it
        return self._squeeze(sid, self.pending.total_tokens, None, None)

    def overflowed(
        self, name: str, messages: Sequence[Message], exc: ModelContextTooLongError
    ) -> list[Message] | None:
        """The provider refused ``messages`` as too long: fold every unit that may be folded,
        lower the context's budget below what was refused (to ``limit / sent`` of it when the
        provider said both, else to 60%), in one recorded step ``overflow:<model step>``
        (``context_compacted`` and a warning without the provider's text), and give the
        rebuilt context — or None when ``messages`` is not the context just built (nothing to
        rebuild), or this call was already a retry."""
        if self.legacy or self.pending is None or list(messages) != self.pending.messages:
            return None
        counters = self.ctx.run.journal.counters
        sid = name if counters.get(name, 0) <= 1 else f"{name}#{counters[name]}"
        if self._retrying:
            return None
        return self._squeeze(sid, self.pending.total_tokens, exc.limit, exc.sent)

    _retrying = False

    def _squeeze(
        self, sid: str, refused: int, limit: int | None, sent: int | None
    ) -> list[Message]:
        from ..memory.buffer import Buffer

        ratio = limit / sent if limit and sent and 0 < limit < sent else 0.6
        target = max(256, int(refused * min(ratio, 0.9) * 0.9))
        buf = Buffer(units=self.buffer_units)
        idx = choose(buf, 0)
        units = [self.buffer_units[i] for i in idx]
        forms = self._ledger_cache().forms
        lines = ExtractiveSummarizer(self.ctx.agent.goal, forms).summarize(
            self.ctx, units, self.summary
        )
        new = self.summary.folded(units, lines, self.config.summary_keep_tokens)
        number = self.compactions + 1
        before = buf.tokens()
        call_ids = [c.call_id for u in units for c in u.calls]
        summary_data = new.model_dump(mode="json")
        ledger = self._ledger_records(units, lines, number, True)
        warning = (
            f"the model refused the context of step {sid} as too long ({refused} tokens by "
            f"the estimate): compacted harder and retried within {target} tokens; lower "
            "Memory(budget_tokens=...) to the model's window"
        )

        def work(step: str) -> tuple[Any, list[Payload]]:
            return {"summary": summary_data, "folded": idx, "limit_tokens": target}, [
                compacted_event(
                    step, number, units, new, summary_data, before, "extractive", ledger
                ),
                WarningRecorded(message=warning, step_id=step),
            ]

        rec = self.ctx.run.journal.record(
            f"overflow:{sid}", work, purpose="context too long: compacted harder"
        )
        self._ledger_done(ledger, rec.new)
        self._apply(rec.result["folded"], rec.result["summary"], call_ids, number)
        self.limit_tokens = int(rec.result["limit_tokens"])
        if rec.new:
            faults.point("memory.overflow")
        self._retrying = True
        try:
            return self.conversation(self.instructions)
        finally:
            self._retrying = False

    def retired_ids(self) -> set[str]:
        """Ids of the calls compaction took out of the plan view (``call@vN`` entries)."""
        return {r.rsplit("@v", 1)[0] for r in self.retired}

    def retired_results(self) -> dict[str, Any]:
        """Observations of the retired calls that succeeded, read from their recorded
        outcomes (``settle:<call>@v<version>``): the history keeps what the view let go."""
        out: dict[str, Any] = {}
        j = self.ctx.run.journal
        for entry in self.retired:
            sid = f"settle:{entry}"
            comp = j.recorded(sid, Policy.READ)
            if comp is None:
                continue
            rec = j.value(sid, comp.result)
            if rec.get("outcome") == "succeeded":
                out[entry.rsplit("@v", 1)[0]] = rec.get("observation")
        return out

    # ------------------------------------------------------------ contexts

    def conversation(self, instructions: str, need_plan: bool = True) -> list[Message]:
        if self.legacy:
            return self.legacy_conversation(instructions)
        self.instructions = instructions
        snap = self.snapshot(need_plan)
        extra = self._extra_sections(snap)
        self.extra = [(x.name, x.priority, x.text) for x in extra if x.text]
        self.pending = next_context(snap, instructions=instructions, extra=extra)
        return list(self.pending.messages)

    def legacy_conversation(self, instructions: str) -> list[Message]:
        """The prompt as torpor built it before working memory: system, the goal and input,
        then every model turn followed by one result per tool call it made."""
        ctx = self.ctx
        agent = ctx.agent
        sys_text = "\n\n".join(x for x in (agent.instructions, instructions, DURABLE_TEXT) if x)
        msgs = [
            Message.system(sys_text),
            Message.user(goal_text(agent.goal, list(agent.criteria), ctx.input)),
        ]
        for message, call_ids in self.legacy_turns:
            msgs.append(message)
            for cid, tc in zip(call_ids, message.tool_calls, strict=True):
                c = ctx.calls.get(cid)
                status = c.status if c else "superseded"
                obs = c.observation if c else None
                if status == "succeeded":
                    text = clip(json.dumps(obs, sort_keys=True, default=str))
                else:
                    text = clip(json.dumps({"status": status, "detail": obs}, default=str))
                msgs.append(Message.tool_result(tc.id, text, is_error=status != "succeeded"))
        return msgs

    def facts_for(self, messages: Sequence[Message]) -> Any:
        """``facts(step_id)`` for :func:`call_model_step` when ``messages`` is the context
        just built: the ``context_built`` event."""
        built = self.pending
        if built is None or list(messages) != built.messages:
            return None

        def facts(sid: str) -> list[Payload]:
            return [
                ContextBuilt(
                    step_id=sid,
                    context_hash=built.context_hash,
                    sections=built.sections,
                    total_tokens=built.total_tokens,
                    budget_tokens=built.budget_tokens,
                    cut=built.cut,
                )
            ]

        return facts

    def after_call(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], resp: ModelResponse, sid: str
    ) -> None:
        self._last_model_step = sid
        self.calibration.observe(estimate_request(messages, tools), resp.usage.input_tokens)

    def _extra_sections(self, snap: AgentSnapshot) -> list[ContextSection]:
        out: list[ContextSection] = []
        # The lessons of earlier runs of this agent and task type (issue 18), as the run
        # recorded them at its start: the same text in every context of the run.
        lessons = self.ctx.episodes()
        if lessons:
            out.append(ContextSection("episodes", PRIORITIES["episodes"], lessons))
        recall = self._recall(snap)
        if recall is not None:
            out.append(recall)
        if not self.config.sections:
            return out
        ctx = self.ctx
        focus = self.buffer_units[-1].text if self.buffer_units else ""
        req = SectionRequest(
            run_id=ctx.run.run_id,
            workflow=ctx.run.state.workflow,
            goal=ctx.agent.goal,
            input=ctx.input,
            focus=focus,
            budget_tokens=snap.budget_tokens,
        )
        for provider in self.config.sections:
            s = provider(req)
            if s is not None:
                out.append(s)
        return out

    def _recall(self, snap: AgentSnapshot) -> ContextSection | None:
        """The ``recall`` section: the ledger records and past turns relevant to the current
        plan step and the latest messages (:mod:`torpor.memory.recall`), read from the run's
        ledger as of this process's latest compaction (a resumed run reads what an
        uninterrupted one read)."""
        if not self.compactions or not self.config.recall_share:
            return None
        ctx = self.ctx
        step = ""
        for cid in ctx.order:
            c = ctx.calls.get(cid)
            if c is not None and c.status == "pending":
                step = f"{c.tool} {json.dumps(c.args, default=str)} {c.why}"
                break
        return recall_section(
            ctx.run.journal.store,
            ctx.run.run_id,
            upto=self.compactions,
            units=self.buffer_units,
            step=step,
            goal=ctx.agent.goal,
            pinned=[x.text for x in self.summary.lines if x.pinned],
            gone=self._ledger_cache().gone,
            tokens=snap.calibration.scale(self.config.recall_tokens),
        )

    def _artifact_excerpts(self) -> dict[str, str]:
        """Excerpts of the artifacts the current plan or the newest unit names by sha256
        (:func:`.working_parts.artifact_excerpts`)."""
        ctx = self.ctx
        return artifact_excerpts(
            {a.sha256 for a in ctx.run.state.artifacts.values()},
            (ctx.calls.get(cid) for cid in ctx.order),
            self.buffer_units[-1].text if self.buffer_units else "",
            ctx.run.read_artifact,
            self.config.artifact_chars,
        )

"""Agents: a planner (a model or plain code) decides the steps at run time; the engine records
the plan and every decision as it happens.

::

    agent = torpor.Agent("triage", goal="label new issues", tools=tools,
                         planner=torpor.ReActPlanner(OpenAIChatModel("gpt-4o-mini")),
                         criteria={"labelled": all_labelled}, budget=torpor.Budget(tokens=50_000))
    torpor.Runtime().run(agent, {"repo": "acme/api"})

The loop (one run of the agent's workflow):

1. the planner proposes steps (tool, arguments, dependencies); the plan is recorded as a new
   version (``plan_recorded``); steps that succeeded under an earlier version stay succeeded;
2. ready steps (all dependencies succeeded) execute in plan order, one at a time, or — with
   ``Agent(max_parallel=N)`` — up to N of those ready together side by side, each recorded on
   its own and settled in plan order (:mod:`.parallel`); each runs as a
   torpor step under its tool's recovery policy: arguments validated first (a refusal becomes
   an observation), an approval bound to the hash of the exact arguments when the tool
   requires one, then ``read``/``compute``/``effect`` execution;
3. every planned call gets a recorded outcome (``tool_call_settled``): succeeded, failed,
   invalid, denied, or skipped when the run ends first — never a dangling call;
4. after a failure a plan-and-execute planner revises the plan (version + 1); a ReAct planner
   proposes one model turn of calls at a time and sees every result;
5. when the planner says it is done, the completion criteria are verified — code first, a
   model judge only for criteria declared with :class:`ModelJudge` — and the outcome follows
   the evidence.

Budgets (tokens, cost, steps, wall-clock) are checked before each new model or tool call,
from usage summed by the fold; a limit reached ends the run ``blocked`` with the reason, and
``torpor budget RUN --tokens N`` (:meth:`torpor.Client.reopen`) raises it and reopens the run.

Recovery reads the latest checkpoint (issue 17, G9): before each new plan the loop's state —
plan, working buffer, running summary, counters — is saved with ``run.checkpoint``; a resume
restores it and replays at most one turn's steps, not every model turn since the start. A
ReAct model call gets a context within ``Agent(memory=Memory(...))``'s token budget
(:mod:`torpor.memory`); the oldest turns are compacted into a summary as the buffer fills.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import faults, serde
from ..engine import budgets
from ..engine.escalation import Escalation
from ..engine.execution import ENGINE_ERRORS
from ..errors import (
    ApprovalError,
    Cancelled,
    ModelContextTooLongError,
    NonDeterminismError,
    PlannerError,
    RunInterrupt,
    TorporError,
)
from ..history import (
    Budget,
    BudgetSet,
    Payload,
    PlannedStep,
    PlanRecorded,
    Policy,
    ToolCallSettled,
    plan_problem,
)
from ..memory.config import Memory
from ..run import Run
from ..workflows import workflow
from .calls import PlannedCall, execute_call
from .episode_recall import EpisodeRecall
from .lessons import phrase_lesson
from .models.base import Message, Model, ModelResponse, ToolCall, ToolSpec
from .models.record import call_model_step
from .parallel import execute_batch
from .planners import Planner
from .proposals import PlanView, Proposal, StepView
from .steering import retracted, take
from .tools import Tools, Vault
from .verifiers import ModelJudge, Verifier

# ------------------------------------------------------------------ the agent


class Agent:
    """An agent: ``goal``, ``tools``, a ``planner``, completion ``criteria`` (name ->
    verifier) and a ``budget``; registered as the workflow ``name`` (run it with
    ``Runtime().run(agent, input)``).

    ``secrets``: secret values this process may be handed back in a redacted form (matched by
    their keyed hash after a restart). ``on_denied``: ``"block"`` (the run ends blocked when a
    person denies a tool call, DESIGN.md §1) or ``"replan"`` (the denial is an observation).
    ``task_type``: what its runs' episodes are filed under (:mod:`torpor.episodes`; default
    its name): a new run gets the lessons of earlier runs of the same agent and task type.
    ``lesson_model``: a model that phrases the lesson of a run that had failures, in a
    recorded step at its end (:mod:`torpor.agents.lessons`); without it the lesson is the
    record's own lines.
    ``memory``: the working memory's budget, compaction and extra context sections
    (:class:`~torpor.memory.Memory`; the defaults when omitted).
    ``escalate``: what happens when nobody answers one of its tool calls' approvals — stages
    made with :func:`torpor.engine.escalation.after` (notify, hand over, deny or cancel).
    ``max_parallel``: how many ready calls with no dependency between them (a model's
    parallel tool calls) run at once (:mod:`torpor.agents.parallel`); 1 runs them one by one.
    ``max_plan_versions``: the run fails (PlannerError) when the planner would make more plan
    versions than this — a ReAct planner makes one per model turn, so it caps the model turns
    too (``torpor context RUN`` shows it); the budget (tokens, steps) is the usual limit.
    """

    def __init__(
        self,
        name: str,
        *,
        goal: str,
        tools: Tools,
        planner: Planner,
        criteria: Mapping[str, Verifier] | None = None,
        budget: Budget | None = None,
        version: str = "1",
        compatible: Iterable[str] = (),
        instructions: str = "",
        secrets: Iterable[str] | Callable[[], Iterable[str]] = (),
        max_plan_versions: int = 10_000,
        on_denied: str = "block",
        task_type: str | None = None,
        lesson_model: Model | None = None,
        memory: Memory | None = None,
        escalate: Sequence[Escalation] = (),
        max_parallel: int = 1,
    ):
        if on_denied not in ("block", "replan"):
            raise TorporError("on_denied must be 'block' or 'replan'")
        if isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1:
            raise TorporError(
                f"Agent {name!r}: max_parallel must be an int >= 1, not {max_parallel!r}"
            )
        self.name = name
        self.goal = goal
        self.tools = tools
        self.planner = planner
        self.criteria: dict[str, Verifier] = dict(criteria or {})
        self.budget = budget or Budget()
        self.instructions = instructions
        self._secrets = secrets
        self.max_plan_versions = max_plan_versions
        self.on_denied = on_denied
        self.task_type = task_type or name
        self.lesson_model = lesson_model
        self.memory = memory or Memory()
        self.escalate = tuple(escalate)  # of its tool calls' approvals (issue 39)
        self.max_parallel = max_parallel

        def agent_workflow(run: Run, input: Any) -> Any:
            return AgentContext(self, run, input).execute()

        agent_workflow.__qualname__ = f"agent:{name}"
        # The module that built this agent (recorded with its runs): a resume imports it by
        # itself, as for a plain workflow (it recorded torpor's own module, so `torpor resume
        # RUN` needed --import).
        agent_workflow.__module__ = sys._getframe(1).f_globals.get("__name__", __name__)
        # A new lease owner reconciles an in-flight tool effect before the loop replays.
        reconcilers = {
            t.name: t.reconcile for t in tools if t.policy is Policy.EFFECT and t.reconcile
        }
        workflow(
            name,
            version=version,
            compatible=compatible,
            criteria=list(self.criteria),
            goal=goal,
            reconcilers=reconcilers,
            task_type=self.task_type,
            steerable=True,  # its loop takes steering messages before each model call
        )(agent_workflow)
        self.__torpor_workflow__ = name

    def known_secrets(self) -> list[str]:
        s = self._secrets
        return list(s() if callable(s) else s)


@dataclass
class AgentContext:
    """One execution of an agent's run: what planners and verifiers are given."""

    agent: Agent
    run: Run
    input: Any
    version: int = 0
    calls: dict[str, PlannedCall] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    final: str = ""

    def __post_init__(self) -> None:
        self.vault = Vault(self.run.journal.host.signing_key, self.agent.known_secrets())
        # (Imported here: torpor.memory imports the model types of this package, so the
        # package must import whichever of the two comes first without a cycle.)
        from .working import WorkingMemory

        self.memory = WorkingMemory(self)
        self._lessons = EpisodeRecall(self.run, self.agent.goal, self.input)
        self._from_model = False
        self._parents: list[str] | None = None  # (the ancestors, looked up once)

    # ------------------------------------------------------------ for planners

    def view(self) -> PlanView:
        return PlanView(
            goal=self.agent.goal,
            episodes=self.episodes(),
            input=self.input,
            version=self.version,
            tools=self.agent.tools.names(),
            steps=[
                StepView(
                    call_id=c.call_id,
                    tool=c.tool,
                    args=c.args,
                    depends_on=c.depends_on,
                    why=c.why,
                    status=c.status,
                    observation=c.observation,
                    version=c.version,
                )
                for c in self.calls.values()
            ],
        )

    def tool_specs(self) -> list[ToolSpec]:
        return self.agent.tools.specs()

    def results(self) -> dict[str, Any]:
        """Observations of the calls that succeeded, by call id (those compaction took out of
        the plan view are read back from their recorded outcomes)."""
        live = {k: c.observation for k, c in self.calls.items() if c.status == "succeeded"}
        if not self.memory.retired:
            return live
        return {**self.memory.retired_results(), **live}

    def call_model(
        self,
        model: Model,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        name: str = "model",
    ) -> ModelResponse:
        """A recorded model call: budget checked first, secrets redacted before recording;
        when ``messages`` is the context :meth:`conversation` just built, what it holds is
        recorded with the call (``context_built``). A provider that refuses that context as too
        long (:class:`~torpor.errors.ModelContextTooLongError`) gets one retry after a harder
        compaction (:meth:`WorkingMemory.overflowed`)."""
        messages = self.memory.replay_overflow(name, messages)
        try:
            resp, sid = self._model_step(model, messages, tools, name)
        except ModelContextTooLongError as exc:
            # Compact harder and retry once (recorded); the provider's text reaches no message.
            retry = self.memory.overflowed(name, messages, exc)
            if retry is None:
                raise
            messages = retry
            resp, sid = self._model_step(model, messages, tools, name)
        self.memory.after_call(messages, tools, resp, sid)
        pending = self.memory.pending
        if pending is not None and list(messages) == list(pending.messages):
            # An interrupting steering message arrived during the call: its reply is
            # retracted (its tokens count) and the model is asked again (.steering, issue 39).
            while retracted(self, sid):
                messages = self.conversation(self.memory.instructions)
                resp, sid = self._model_step(model, messages, tools, name)
                self.memory.after_call(messages, tools, resp, sid)
        self._last_response = resp
        return resp

    def _model_step(
        self, model: Model, messages: Sequence[Message], tools: Sequence[ToolSpec], name: str
    ) -> tuple[ModelResponse, str]:
        return call_model_step(
            self.run,
            model,
            messages,
            tools,
            name=name,
            before_call=self.check_budget,
            redact=self._redact_response,
            facts=self.memory.facts_for(messages),
            scrubber=self.vault.scrubber(),
        )

    def episodes(self) -> str:
        """The episodes section for the plan now in force (:class:`.episode_recall.EpisodeRecall`:
        lessons of earlier runs, recorded at the run's start and at each new plan version)."""
        return self._lessons.section(self.version)

    def recall(self, version: int, plan_text: str) -> None:
        """At plan ``version`` (2 and later), recall the episodes most relevant to the goal and
        the new plan (:meth:`.episode_recall.EpisodeRecall.recall`)."""
        self._lessons.recall(version, plan_text)

    def conversation(self, instructions: str = "") -> list[Message]:
        """The messages for the next model turn: the context built from the working memory
        within the agent's token budget (:func:`torpor.memory.working.next_context`) — system
        text with the summary, plan and checkpoint, the lessons of earlier runs (the episodes
        section, :meth:`episodes`), the goal and input, the recent turns — after taking the
        operators' steering messages that arrived since the last one (:mod:`.steering`)."""
        for m in take(self):
            self.note(str(m["text"]), operator=True)
        return self.memory.conversation(instructions)

    def note(self, text: str, *, operator: bool = False) -> None:
        """Add an operator message (``operator=True``: never compacted away while it is the
        latest) or a note to the working buffer; the model sees it in its next context."""
        self.memory.note(text, operator=operator)

    def call_id_for(self, model_call_id: str) -> str:
        retired = self.memory.retired_ids() if self.memory.retired else set()
        cid = model_call_id or f"call-{len(self.calls) + len(retired) + 1}"
        n = 2
        base = cid
        while cid in self.calls or cid in retired:
            cid = f"{base}~{n}"
            n += 1
        return cid

    def add_turn(self, message: Message, call_ids: list[str]) -> None:
        resp = getattr(self, "_last_response", None)
        reported = resp.usage.output_tokens if resp is not None else None
        self.memory.add_model_turn(message, call_ids, reported)
        self._from_model = True

    # ------------------------------------------------------------ budget

    def check_budget(self) -> None:
        """Block the run (durably, with the reason) when a limit is reached: its own, or an
        ancestor's over the ancestor's whole tree of runs (:mod:`torpor.engine.budgets`)."""
        reason = self.budget_exhausted()
        if reason:
            self.run.block(reason)

    def budget_exhausted(self, pending_steps: int = 0) -> str:
        """Why no further call may start, counting ``pending_steps`` calls started and not
        yet settled (a batch's, :mod:`.parallel`); "" while there is room — and while the
        run replays calls that ran already (the tree's usage is today's, not then's)."""
        j = self.run.journal
        if j.replay.replaying:
            return ""
        if self._parents is None:
            self._parents = budgets.ancestors(j.store, self.run.run_id)
        return budgets.exhausted(j.store, self.run.state, j.now_ms(), self._parents, pending_steps)

    # ------------------------------------------------------------ recording

    def _record(
        self,
        name: str,
        payloads: list[Payload],
        result: Any,
        purpose: str,
        *,
        boundary: bool = True,
    ) -> tuple[Any, bool]:
        """A step whose whole work is recording ``payloads``: ``(result, newly recorded)``;
        on replay the recorded result. ``boundary=False`` records even while the run is being
        cancelled (the outcomes of calls that will never run)."""
        rec = self.run.journal.record(
            name, lambda sid: (result, payloads), purpose=purpose, boundary=boundary
        )
        return rec.result, rec.new

    def redact_args(self, tool_name: str, args: Any) -> Any:
        """Secret fields of ``tool_name`` replaced by their keyed hash; known secrets scrubbed."""
        tool = self.agent.tools.get(tool_name)
        if tool is not None and isinstance(args, dict):
            args = {
                k: (self.vault.redact(v) if k in tool.secret_fields and isinstance(v, str) else v)
                for k, v in args.items()
            }
        return self.vault.scrub(args)

    def _redact_response(self, resp: ModelResponse) -> ModelResponse:
        msg = resp.message
        calls = [
            ToolCall(
                id=c.id,
                name=c.name,
                arguments=self.redact_args(c.name, c.arguments),
                raw_arguments=self.vault.scrub(c.raw_arguments),
            )
            for c in msg.tool_calls
        ]
        clean = Message(role=msg.role, content=self.vault.scrub(msg.content), tool_calls=calls)
        return resp.model_copy(update={"message": clean})

    def settle(
        self,
        c: PlannedCall,
        outcome: str,
        observation: Any,
        executed_by: str | None,
        *,
        boundary: bool = True,
    ) -> None:
        obs = self.vault.scrub(serde.to_jsonable(observation))
        rec, new = self._record(
            f"settle:{c.call_id}@v{c.version}",
            [
                ToolCallSettled(
                    call_id=c.call_id, outcome=outcome, observation=obs, executed_by=executed_by
                )
            ],
            {"outcome": outcome, "observation": obs, "executed_by": executed_by},
            f"outcome of {c.tool} call {c.call_id}",
            boundary=boundary,
        )
        c.status, c.observation = rec["outcome"], rec["observation"]
        step = rec.get("executed_by", executed_by) or f"settle:{c.call_id}@v{c.version}"
        self.memory.settled(c.call_id, c.status, c.observation, step)  # as recorded (G9)
        if new:
            faults.point("agent.tool.settled")

    # ------------------------------------------------------------ the loop

    def execute(self) -> Any:
        self.agent.tools.prepare(self.run)  # (before restore: its records are the run's first)
        need_plan = self.memory.restore()
        if need_plan is None:
            self._init_budget()
            need_plan = True
        self.episodes()  # recorded at the first execution; read back by later ones
        try:
            self._loop(need_plan)
            self._verify()
            if self.agent.lesson_model is not None:
                phrase_lesson(self, self.agent.lesson_model)
        except Cancelled:
            self._skip_pending("not run: the run was cancelled")
            raise
        except (RunInterrupt, ApprovalError, *ENGINE_ERRORS):
            # Waiting, blocked, unresolved (a person may reopen the run: its calls stay
            # pending for then), or an engine error that leaves the run resumable as it is.
            raise
        except Exception as exc:
            # The run ends failed: every call not yet run gets its outcome. Its message is
            # recorded as the outcome's reason: known secrets out of it first (G12).
            self._skip_pending(f"not run: the run failed ({type(exc).__name__})")
            exc.args = tuple(self.vault.scrub(a) if isinstance(a, str) else a for a in exc.args)
            raise
        return {
            "final": self.final,
            "plan_version": self.version,
            "calls": {k: c.status for k, c in self.calls.items()},
        }

    def _skip_pending(self, why: str) -> None:
        try:
            for c in list(self.calls.values()):
                if c.status == "pending":
                    self.settle(c, "skipped", {"reason": why}, None, boundary=False)
        except (TorporError, RunInterrupt):
            pass  # the outcome is recorded all the same; the calls stay pending in the record

    def _init_budget(self) -> None:
        want = {
            k: v
            for k, v in self.agent.budget.model_dump().items()
            if v is not None and getattr(self.run.state.budget, k) is None
        }
        payloads: list[Payload] = [BudgetSet(**want, by="agent", reason="the agent's limits")]
        self._record("budget", payloads if want else [], want, "the agent's budget")

    def _loop(self, need_plan: bool) -> None:
        planner = self.agent.planner
        moved = False  # something was recorded since the last boundary
        while True:
            if need_plan:
                if moved:
                    self._boundary()
                    moved = False
                if self.version >= self.agent.max_plan_versions:
                    raise PlannerError(
                        f"the planner revised the plan {self.version} times without finishing "
                        f"(Agent(max_plan_versions={self.agent.max_plan_versions}); a ReAct "
                        "planner makes one plan version per model turn)"
                    )
                proposal = planner.propose(self)
                if proposal.done:
                    self.final = proposal.final
                    self._skip_pending("not run: the planner finished without it")
                    return
                self._record_plan(proposal, planner.name)
                need_plan, moved = False, True
                continue
            ready = self._ready(self.agent.max_parallel)
            if not ready:
                need_plan = True
                continue
            if len(ready) == 1:
                outcomes = [execute_call(self, ready[0])]
            else:
                outcomes = execute_batch(self, ready, self.agent.max_parallel)
            moved = True
            if any(o != "succeeded" for o in outcomes) and planner.replan_on_failure:
                need_plan = True

    def _boundary(self) -> None:
        """The loop's boundary, before each new plan (a model turn for ReAct): compact the
        buffer when it is due, then checkpoint (a resume replays at most one turn's steps)."""
        self.memory.maybe_compact()
        self.memory.save(True)

    def _ready(self, limit: int) -> list[PlannedCall]:
        """Up to ``limit`` pending calls whose dependencies all succeeded, in plan order."""
        out: list[PlannedCall] = []
        for cid in self.order:
            c = self.calls[cid]
            if c.status == "pending" and all(
                self.calls[d].status == "succeeded" for d in c.depends_on
            ):
                out.append(c)
                if len(out) >= limit:
                    break
        return out

    def _record_plan(self, proposal: Proposal, planner_name: str) -> None:
        v = self.version + 1
        steps: list[PlannedStep] = []
        for ps in proposal.steps:
            args = self.redact_args(ps.tool, serde.to_jsonable(ps.args))
            steps.append(
                PlannedStep(
                    call_id=ps.call_id,
                    tool=ps.tool,
                    args=args,
                    args_hash=serde.hash_value({"tool": ps.tool, "args": args}),
                    depends_on=ps.depends_on,
                    why=self.vault.scrub(ps.why),
                )
            )
        # The fold's own rule, against this execution's view of the plan (on replay the state
        # is already at a later version): refused before anything is recorded.
        problem = plan_problem(self.calls, steps, v)
        if problem:
            raise PlannerError(f"plan v{v}: {problem}")
        payload = PlanRecorded(version=v, planner=planner_name, steps=steps, reason=proposal.reason)
        digest = serde.hash_value(payload.model_dump(mode="json"))
        rec, new = self._record(f"plan@v{v}", [payload], {"plan_hash": digest}, f"plan v{v}")
        if new:
            faults.point("agent.plan.recorded")
        if rec.get("plan_hash") != digest:
            raise NonDeterminismError(
                f"run {self.run.run_id!r}: plan v{v} replays differently from the recorded one "
                "(the planner or its inputs changed)"
            )
        self.version = v
        self.recall(v, " ".join([proposal.reason, *(f"{st.tool} {st.why}" for st in steps)]))
        for c in self.calls.values():
            if c.status == "pending":
                c.status = "superseded"
        self.order = []
        new_calls: list[PlannedCall] = []
        for st in steps:
            prev = self.calls.get(st.call_id)
            if prev is not None and prev.status == "succeeded":
                self.order.append(st.call_id)
                continue
            self.calls[st.call_id] = PlannedCall(
                st.call_id, st.tool, st.args, st.args_hash, list(st.depends_on), st.why, v
            )
            new_calls.append(self.calls[st.call_id])
            self.order.append(st.call_id)
        self.memory.sync()
        self.memory.add_plan(proposal.reason, new_calls, from_model=self._from_model)
        self._from_model = False

    # ------------------------------------------------------------ verification

    def _verify(self) -> None:
        code = [(n, v) for n, v in self.agent.criteria.items() if not isinstance(v, ModelJudge)]
        judged = [(n, v) for n, v in self.agent.criteria.items() if isinstance(v, ModelJudge)]
        for name, check in code:
            assert not isinstance(check, ModelJudge)
            fn = check
            self.run.verify(name, lambda fn=fn: fn(self))  # type: ignore[misc]
        for name, judge in judged:
            assert isinstance(judge, ModelJudge)
            if self.run.journal.recorded(f"verify:{name}", Policy.READ) is None:
                passed, detail = judge.judge(self, name)
            else:
                passed, detail = False, None  # recorded: run.verify returns the record
            self.run.verify(name, passed, detail)

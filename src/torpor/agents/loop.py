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
2. ready steps (all dependencies succeeded) execute **one at a time, in plan order** (the
   engine allows concurrency, the agent keeps it sequential so replay stays simple), each as a
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

Recovery is replay, like workflows: on resume the loop runs again from the top and every
recorded model call, plan version, tool call and outcome is returned from the history (never
repeated), so the loop reaches the point where it stopped and continues.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import faults, serde
from ..engine.execution import ENGINE_ERRORS
from ..episodes.context import section_for_run
from ..episodes.store import EpisodeStore
from ..errors import (
    ApprovalError,
    Cancelled,
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
from ..run import Run
from ..store.sqlstore import SQLStore
from ..workflows import workflow
from .calls import PlannedCall, execute_call
from .lessons import phrase_lesson
from .models.base import Message, Model, ModelResponse, ToolCall, ToolSpec
from .models.record import call_model
from .planners import Planner
from .proposals import PlanView, Proposal, StepView, clip
from .tools import Tools, Vault
from .verifiers import ModelJudge, Verifier

#: Tokens the episodes section of the conversation may take (lessons of earlier runs).
EPISODES_TOKENS = 800

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
        max_plan_versions: int = 50,
        on_denied: str = "block",
        task_type: str | None = None,
        lesson_model: Model | None = None,
    ):
        if on_denied not in ("block", "replan"):
            raise TorporError("on_denied must be 'block' or 'replan'")
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

        def agent_workflow(run: Run, input: Any) -> Any:
            return AgentContext(self, run, input).execute()

        agent_workflow.__qualname__ = f"agent:{name}"
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
        )(agent_workflow)
        self.__torpor_workflow__ = name

    def known_secrets(self) -> list[str]:
        s = self._secrets
        return list(s() if callable(s) else s)


@dataclass
class _Turn:
    message: Message
    call_ids: list[str]


@dataclass
class AgentContext:
    """One execution of an agent's run: what planners and verifiers are given."""

    agent: Agent
    run: Run
    input: Any
    version: int = 0
    calls: dict[str, PlannedCall] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    turns: list[_Turn] = field(default_factory=list)
    final: str = ""
    _episodes: str | None = None

    def __post_init__(self) -> None:
        self.vault = Vault(self.run.journal.host.signing_key, self.agent.known_secrets())

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
        """Observations of the calls that succeeded, by call id."""
        return {k: c.observation for k, c in self.calls.items() if c.status == "succeeded"}

    def call_model(
        self,
        model: Model,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        name: str = "model",
    ) -> ModelResponse:
        """A recorded model call: budget checked first, secrets redacted before recording."""
        return call_model(
            self.run,
            model,
            messages,
            tools,
            name=name,
            before_call=self.check_budget,
            redact=self._redact_response,
        )

    def episodes(self) -> str:
        """The episodes section: lessons of earlier runs of this agent and task type in the
        run's scope (:func:`torpor.episodes.section_for_run`). Recorded as a step the first
        time (a resumed run is given the same text); ``""`` for a run not filed for episodes."""
        if self._episodes is None:
            store = self.run.journal.store
            rid = self.run.run_id
            if not isinstance(store, SQLStore) or EpisodeStore(store).filing(rid) is None:
                self._episodes = ""
            else:
                goal = f"{self.agent.goal} {json.dumps(self.input, sort_keys=True, default=str)}"
                rec = self.run.journal.record(
                    "episodes",
                    lambda sid: (
                        section_for_run(
                            store, self.run.run_id, goal=goal, token_budget=EPISODES_TOKENS
                        ),
                        [],
                    ),
                    purpose="lessons of earlier runs",
                )
                self._episodes = str(rec.result or "")
        return self._episodes

    def conversation(self, instructions: str = "") -> list[Message]:
        """The ReAct conversation, rebuilt from the record: system (with the lessons of
        earlier runs), the goal and input, then each model turn followed by one result per
        tool call it made."""
        sys_text = "\n\n".join(
            x
            for x in (
                self.agent.instructions,
                instructions,
                "You are a durable agent. Use the tools to reach the goal; answer without a "
                "tool call when you are done.",
                self.episodes(),
            )
            if x
        )
        crit = ", ".join(self.agent.criteria) or "none declared"
        msgs = [
            Message.system(sys_text),
            Message.user(
                f"Goal: {self.agent.goal}\nCompletion criteria: {crit}\nInput (JSON): "
                + json.dumps(self.input, sort_keys=True)
            ),
        ]
        for turn in self.turns:
            msgs.append(turn.message)
            for cid, tc in zip(turn.call_ids, turn.message.tool_calls, strict=True):
                c = self.calls.get(cid)
                status = c.status if c else "superseded"
                obs = c.observation if c else None
                if status == "succeeded":
                    text = clip(json.dumps(obs, sort_keys=True, default=str))
                else:
                    text = clip(json.dumps({"status": status, "detail": obs}, default=str))
                msgs.append(Message.tool_result(tc.id, text, is_error=status != "succeeded"))
        return msgs

    def call_id_for(self, model_call_id: str) -> str:
        cid = model_call_id or f"call-{len(self.calls) + 1}"
        n = 2
        base = cid
        while cid in self.calls:
            cid = f"{base}~{n}"
            n += 1
        return cid

    def add_turn(self, message: Message, call_ids: list[str]) -> None:
        self.turns.append(_Turn(message, call_ids))

    # ------------------------------------------------------------ budget

    def check_budget(self) -> None:
        """Block the run (durably, with the reason) when a limit is reached."""
        s = self.run.state
        b, u = s.budget, s.usage
        hits = []
        if b.tokens is not None and u.tokens >= b.tokens:
            hits.append(f"tokens: {u.tokens} used of {b.tokens}")
        if b.cost_usd is not None and u.cost_usd >= b.cost_usd:
            hits.append(f"cost: ${u.cost_usd:.4f} used of ${b.cost_usd:.4f}")
        if b.steps is not None and u.steps >= b.steps:
            hits.append(f"steps: {u.steps} used of {b.steps}")
        if b.wall_clock_s is not None and s.started_at_ms:
            elapsed = (self.run.journal.now_ms() - s.started_at_ms) / 1000
            if elapsed >= b.wall_clock_s:
                hits.append(f"wall-clock: {elapsed:.1f} s of {b.wall_clock_s:g} s")
        if hits:
            self.run.block(
                "budget exhausted ("
                + "; ".join(hits)
                + f"); raise it and resume: torpor budget {self.run.run_id} "
                "--tokens N / --cost USD / --steps N / --wall-clock SECONDS"
            )

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

    def _redact_args(self, tool_name: str, args: Any) -> Any:
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
                arguments=self._redact_args(c.name, c.arguments),
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
            {"outcome": outcome, "observation": obs},
            f"outcome of {c.tool} call {c.call_id}",
            boundary=boundary,
        )
        c.status, c.observation = rec["outcome"], rec["observation"]
        if new:
            faults.point("agent.tool.settled")

    # ------------------------------------------------------------ the loop

    def execute(self) -> Any:
        self._init_budget()
        self.episodes()
        try:
            self._loop()
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
            # The run ends failed: every call not yet run gets its outcome.
            self._skip_pending(f"not run: the run failed ({type(exc).__name__})")
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

    def _loop(self) -> None:
        planner = self.agent.planner
        need_plan = True
        while True:
            if need_plan:
                if self.version >= self.agent.max_plan_versions:
                    raise PlannerError(
                        f"the planner revised the plan {self.version} times without finishing"
                    )
                proposal = planner.propose(self)
                if proposal.done:
                    self.final = proposal.final
                    self._skip_pending("not run: the planner finished without it")
                    return
                self._record_plan(proposal, planner.name)
                need_plan = False
                continue
            c = self._next_ready()
            if c is None:
                need_plan = True
                continue
            outcome = execute_call(self, c)
            if outcome != "succeeded" and planner.replan_on_failure:
                need_plan = True

    def _next_ready(self) -> PlannedCall | None:
        for cid in self.order:
            c = self.calls[cid]
            if c.status == "pending" and all(
                self.calls[d].status == "succeeded" for d in c.depends_on
            ):
                return c
        return None

    def _record_plan(self, proposal: Proposal, planner_name: str) -> None:
        v = self.version + 1
        steps: list[PlannedStep] = []
        for ps in proposal.steps:
            args = self._redact_args(ps.tool, serde.to_jsonable(ps.args))
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
        for c in self.calls.values():
            if c.status == "pending":
                c.status = "superseded"
        self.order = []
        for st in steps:
            prev = self.calls.get(st.call_id)
            if prev is not None and prev.status == "succeeded":
                self.order.append(st.call_id)
                continue
            self.calls[st.call_id] = PlannedCall(
                st.call_id, st.tool, st.args, st.args_hash, list(st.depends_on), st.why, v
            )
            self.order.append(st.call_id)

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

"""Talk to a running agent, offline (docs/steering.md): a steering message sent while a model
call is in flight, an approval answered with an edit, and an approval nobody answers that
escalates. Needs an approver key for alice: `torpor keys init --as alice` (once)."""

import json
import sys
import tempfile
from pathlib import Path

import torpor
from torpor.agents.models import ScriptedModel, say, use
from torpor.engine.escalation import after
from torpor.testing import FakeClock

folder = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())
clock = FakeClock(1_800_000_000)
rt = torpor.Runtime(f"sqlite:///{folder}/steer.db", clock=clock)
client = torpor.Client(rt.store)

tools = torpor.Tools()


@tools.tool(policy="effect", requires_approval=lambda a: a["env"] == "prod")
def deploy(env: str, version: str, idempotency_key: str) -> dict:
    """Deploy a version to an environment."""
    print(f"deploying {version} to {env}")
    return {"deployed": version, "env": env}


def first_turn(messages, tools):
    # An operator steers the run while this model call is in flight: queued for the next one.
    client.steer("demo", "ship 2.1, not 2.0", by="alice")
    return use(("deploy", {"env": "prod", "version": "2.0"}))


def second_turn(messages, tools):
    seen = [m.content for m in messages if "ship 2.1" in m.content]
    print(f"the model's next call sees the operator's message: {bool(seen)}")
    return say("deployed as told")


model = ScriptedModel([first_turn, second_turn])
agent = torpor.Agent("steer.demo", goal="deploy", tools=tools, planner=torpor.ReActPlanner(model))
res = rt.run(agent, {}, run_id="demo")
print(res.status, res.wait_kind)  # waiting approval: deploy to prod needs a person

# Approve with an edit: the signature binds the edited bytes, the effect runs exactly them.
edited = client.proposed("demo").replace('"2.0"', '"2.1"')
client.approve_edited("demo", None, edited, "alice")
res = rt.resume("demo")
print(res.outcome)


# An approval nobody answers: notify after an hour, deny after a day.
@torpor.workflow(name="steer.demo.ship")
def ship(run: torpor.Run, patch: str) -> str:
    ref = run.artifact("patch", patch)
    appr = run.approval(
        "ship",
        [ref],
        escalate=[
            after(hours=1, notify=lambda info: print(f"paging on-call: stage {info['stage']}")),
            after(hours=24, then="deny"),
        ],
    )
    return run.effect("push", lambda: "pushed", approval=appr, artifacts=[ref])


print(rt.run(ship, "a patch\n", run_id="ship").wait_kind)
clock.advance(3600)
rt.resume("ship")  # the first stage is due: one page
clock.advance(24 * 3600)
res = rt.resume("ship")  # the last stage: denied, the run is blocked
print(res.outcome, "-", res.reason)
chain = [e.payload.action for e in client.events("ship") if e.type == "wait_escalated"]
print(json.dumps(chain))
rt.close()

"""A ReAct agent as recorded by torpor before issue 17 (event schema 3: no working memory, the
whole transcript in every prompt): ``tests/fixtures/legacy/agent-v3.sqlite`` holds a run of it
killed by SIGKILL after its third model call was recorded. Made with the code of commit
401b8c8::

    TORPOR_FAULTS=crash:model.recorded@3 PYTHONPATH=<401b8c8>/src:tests \\
        python -c "import legacy_agent_flow as f; f.start('sqlite:///agent-v3.sqlite')"
"""

from __future__ import annotations

import torpor
from torpor.agents.models import ScriptedModel, say, use

tools = torpor.Tools()


@tools.tool
def measure(item: str) -> dict:
    return {"item": item, "size": len(item) * 7}


SCRIPT = [
    use(("measure", {"item": "alpha"})),
    use(("measure", {"item": "beta"}), ("measure", {"item": "gamma"})),
    use(("measure", {"item": "delta"})),
    say("alpha 35, beta 28, gamma 35, delta 35"),
]
model = ScriptedModel(SCRIPT)
agent = torpor.Agent(
    "legacy.react",
    goal="measure the items",
    tools=tools,
    planner=torpor.ReActPlanner(model, instructions="Be brief."),
)


def start(url: str) -> None:
    with torpor.Runtime(url) as rt:
        rt.run(agent, {"items": ["alpha", "beta", "gamma", "delta"]}, run_id="react")

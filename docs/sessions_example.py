"""docs/sessions.md's example: a session that lives across segments, offline.

python docs/sessions_example.py [FOLDER]
"""

import re
import sys
import tempfile

import torpor
from torpor.messages import Message, ModelResponse, TokenUsage
from torpor.sessions import SessionAgent, Sessions


class Parrot:
    """An offline model: answers the latest user message."""

    model_id = "parrot"

    def complete(self, messages, tools=()):
        said = re.findall(r"user: (.*)", "\n".join(m.content for m in messages))
        return ModelResponse(
            message=Message(role="assistant", content=f"noted: {said[-1]}"),
            usage=TokenUsage(input_tokens=10, output_tokens=5),
            model="parrot",
        )


agent = torpor.Agent(
    "concierge",
    goal="help the user",
    tools=torpor.Tools(),
    planner=torpor.ReActPlanner(Parrot()),
)
concierge = SessionAgent(agent, segment_turns=2)  # continue as new every 2 turns

if __name__ == "__main__":
    folder = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()
    rt = torpor.Runtime(f"sqlite:///{folder}/sessions.db")
    sessions = Sessions(torpor.Client(rt.store))
    sessions.start("ada", concierge)

    def wake() -> None:  # what a worker does: run the current segment until it sleeps
        while True:
            run_id = sessions.get("ada").run_id
            rt.resume(run_id)
            if sessions.get("ada").run_id == run_id:
                return

    wake()  # the first segment starts and waits for a message
    for text in ["my order is A-1042", "ship it to Lyon", "what was my order?"]:
        sessions.send("ada", text)
        wake()
    for m in sessions.inbox("ada"):
        print(m.seq, m.status, f"turn {m.turn}", m.reply)
    s = sessions.get("ada")
    print(
        f"segment {s.segment}, {s.turns} turns, run {s.run_id}:", rt.store.get_run(s.run_id).status
    )
    rt.close()

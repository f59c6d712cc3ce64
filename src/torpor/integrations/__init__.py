"""Integrations with other agent frameworks, each an optional extra imported only here.

- :mod:`torpor.integrations.pydantic_ai` — run a Pydantic AI agent as a torpor run
  (``pip install 'torpor[pydantic-ai]'``).
- :mod:`torpor.integrations.openai_agents` — run an OpenAI Agents SDK agent durably, a drop-in
  ``Runner`` (``pip install 'torpor[openai-agents]'``).
"""

__all__: list[str] = []

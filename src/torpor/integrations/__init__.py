"""Integrations with other agent frameworks, each an optional extra imported only here.

- :mod:`torpor.integrations.pydantic_ai` — run a Pydantic AI agent as a torpor run
  (``pip install 'torpor[pydantic-ai]'``).
"""

__all__: list[str] = []

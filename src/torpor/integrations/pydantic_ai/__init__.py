"""Pydantic AI agents run durably on torpor (``pip install 'torpor[pydantic-ai]'``).

:class:`TorporAgent` wraps a ``pydantic_ai.Agent`` the way Pydantic AI's ``TemporalAgent`` and
``DBOSAgent`` do: its model requests are recorded steps (never paid twice), its tool calls are
``read`` steps or ``effect``\\ s with reconcile, its run is a torpor run (resumed after
``kill -9`` anywhere), its deferred tool approvals are torpor approvals signed by people, and
its usage counts against torpor budgets. See ``docs/pydantic-ai.md`` for what is recorded and
what is not. Importing :mod:`torpor` never imports Pydantic AI; importing this package does.
"""

from .agent import TorporAgent
from .model import TorporModel
from .toolset import ToolPolicy, TorporToolset, idempotency_key

__all__ = ["ToolPolicy", "TorporAgent", "TorporModel", "TorporToolset", "idempotency_key"]

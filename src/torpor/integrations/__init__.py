"""Integrations with other agent frameworks, each an optional extra imported only when used:
``torpor.integrations.openai_agents`` (``pip install 'torpor[openai-agents]'``)."""

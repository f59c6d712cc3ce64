"""Runnable torpor examples (``python -m examples.repo_agent``)."""

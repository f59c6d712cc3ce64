"""A planner agent splits a modernization of standard-library packages among worker agents,
each a child run with its own approval; fans in, verifies, publishes once (issue 38). Run it
with ``uv run python -m examples.planner_workers --auto-approve``."""

from .team import PLANNER, WORKER, planner, worker

__all__ = ["PLANNER", "WORKER", "planner", "worker"]

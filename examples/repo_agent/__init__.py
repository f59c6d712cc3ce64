"""torpor's flagship example: a durable repository-maintenance agent (DESIGN.md §5).

Given a real Python code base (by default a copy of a few packages of the running interpreter's
standard library), it plans a modernization with ruff's pyupgrade rules, applies it file by file
as ``compute`` steps producing patch artifacts, verifies (compileall, ruff, CPython's own tests),
asks for approval bound to the combined patch hash, then commits and pushes to a git remote and
sends one notification email — each effect recorded before it happens and reconciled after a
crash. Run it with ``uv run python -m examples.repo_agent --auto-approve``.
"""

from .workflow import CRITERIA, WORKFLOW, Workspace, modernize

__all__ = ["CRITERIA", "WORKFLOW", "Workspace", "modernize"]

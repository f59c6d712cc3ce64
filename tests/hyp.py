"""How hard the property tests look: ``TORPOR_HYPOTHESIS=thorough`` (set by ``.ci/run``) runs
every property test's full number of examples; by default (a developer's edit-test loop) a
fifth of them, at least 10. Every test states its full number through :func:`examples`."""

from __future__ import annotations

import os

THOROUGH = os.environ.get("TORPOR_HYPOTHESIS", "quick") == "thorough"


def examples(n: int) -> int:
    """``n`` examples when thorough, else ``max(10, n // 5)``."""
    return n if THOROUGH else max(10, n // 5)

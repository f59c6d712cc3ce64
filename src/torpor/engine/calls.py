"""Calling user code from the engine: sync and async functions, and the engine's keyword
arguments (``idempotency_key``, ``fencing_token``) passed only to functions that take them."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import AsyncMisuseError


def accepts_kw(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` takes a keyword argument ``name`` (or any, with ``**kwargs``). Asked three
    times per effect: remembered per function (``inspect.signature`` costs microseconds)."""
    try:
        return _accepts_kw(fn, name)
    except TypeError:  # an unhashable callable: asked afresh
        return _signature_accepts(fn, name)


def _signature_accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return name in sig.parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()
    )


_accepts_kw = functools.lru_cache(maxsize=512)(_signature_accepts)


def in_loop() -> bool:
    """Whether this thread runs an asyncio event loop."""
    import asyncio  # (here: a process that runs no async code never imports asyncio)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def refuse_async_in_loop(fn: Callable[..., Any]) -> None:
    """Refuse (AsyncMisuseError), before anything is recorded or called, an async function
    given to the sync API inside a running event loop."""
    if inspect.iscoroutinefunction(fn) and in_loop():
        raise AsyncMisuseError()


#: Types a step commonly returns, which are never awaitable (checked first: inspect's ABC check
#: costs a microsecond per step).
_PLAIN = frozenset({int, str, float, bool, dict, list, tuple, type(None), bytes})


def resolve(value: Any) -> Any:
    """Resolve an awaitable returned by a function called from sync code (outside a loop: run
    it; inside one: AsyncMisuseError, with the coroutine closed so nothing ran)."""
    if value.__class__ in _PLAIN:
        return value
    if inspect.isawaitable(value):
        if not in_loop():
            import asyncio

            return asyncio.run(_await(value))
        if inspect.iscoroutine(value):
            value.close()  # never started: nothing ran, and no "never awaited" warning
        raise AsyncMisuseError()
    return value


async def _await(aw: Awaitable[Any]) -> Any:
    return await aw

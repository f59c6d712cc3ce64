"""Attempts: calling user code under a timeout and a retry policy — the one mechanism behind
``run.effect(..., timeout=, retry=)`` and agents' tools (``@tools.tool(timeout=, retry=)``).

:func:`call` runs one attempt and gives back how it ended (:class:`Ended`) or, when the timeout
passed first, the attempt *still running* (:class:`Running`); the caller decides what a late
attempt means (:mod:`torpor.engine.effects` for effects: never a second attempt while the first
may still act). Where an attempt runs:

- no timeout: in the calling thread (nothing to bound);
- a timeout: in a daemon thread of its own. A Python thread cannot be killed: past the timeout
  it keeps running until it returns (:attr:`Running.stoppable` is False);
- an async function with a timeout: as a task (in the running loop, or a thread's own loop
  from sync code), cancelled at the timeout; it has stopped once the task has unwound (work it
  handed to other threads, e.g. ``asyncio.to_thread``, is not stopped: use ``kill``);
- ``Timeout(kill=True)``: in a child process (a new interpreter; the function and arguments
  are pickled, so they must be importable by name), killed with its process group at the
  timeout — provably stopped. On Linux the child also dies with the thread that started it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import os
import pickle
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..errors import AttemptNotStartedError, TorporError, TransientError
from .calls import resolve


@dataclass(frozen=True)
class Retry:
    """Retry failed attempts: ``attempts`` in all, waiting ``initial`` seconds (doubling up to
    ``max_wait``, plus up to ``initial`` of jitter) between them, on the exception types
    ``on`` (and :class:`~torpor.EffectNotApplied`, which says nothing happened).

    A read or compute step (a tool) is retried freely. An effect is retried only when that
    cannot duplicate it: once its attempt has ended (never while a timed-out one may still
    act) and ``reconcile`` (or EffectNotApplied) says it is absent — or, when the function
    takes an ``idempotency_key``, under the same key (the outside world deduplicates by it).
    """

    attempts: int = 3
    on: tuple[type[BaseException], ...] = (TransientError, ConnectionError, TimeoutError)
    initial: float = 0.1
    max_wait: float = 5.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.initial < 0 or self.max_wait < 0:
            raise TorporError(
                f"Retry(attempts={self.attempts}, initial={self.initial}, "
                f"max_wait={self.max_wait}): attempts must be >= 1 and waits >= 0"
            )

    def delay_s(self, failed: int) -> float:
        """Seconds to wait after ``failed`` failed attempts before the next one."""
        return min(self.max_wait, self.initial * 2 ** (failed - 1)) + random.uniform(
            0, self.initial
        )


@dataclass(frozen=True)
class Timeout:
    """How long one attempt may run (``seconds``) and what happens when it runs longer.

    An effect whose attempt runs in a thread, past its timeout, is in doubt: ``reconcile`` is
    asked (``applied`` settles it); otherwise the run waits for that attempt up to ``grace_s``
    seconds — a late return is the observation, a late error is reconciled again (retried only
    on ``absent``) — and an attempt still running after the grace leaves the run
    ``unresolved`` for a person. ``kill=True`` runs each attempt in a child process, killed at
    the timeout: reconcile decides at once (the function and its arguments must be picklable:
    a module-level function, not one defined in ``__main__``).
    """

    seconds: float
    grace_s: float = 30.0
    kill: bool = False
    #: ``kill=True``: seconds the child process may take to start (a new interpreter, the
    #: function's module imported) before its function is called; not counted in ``seconds``,
    #: which starts when the function does. A child still starting after it is killed, and
    #: the attempt — whose function never ran — is an :class:`AttemptNotStartedError`.
    startup_s: float = 60.0

    def __post_init__(self) -> None:
        if not self.seconds > 0 or not self.grace_s >= 0 or not self.startup_s > 0:
            raise TorporError(
                f"Timeout(seconds={self.seconds}, grace_s={self.grace_s}, startup_s="
                f"{self.startup_s}): the timeout must be > 0 s, the start-up > 0 s and the "
                "grace >= 0 s"
            )


def timeout_of(value: float | timedelta | Timeout | None) -> Timeout | None:
    """A :class:`Timeout` from seconds, a timedelta or a Timeout (None: no timeout)."""
    if value is None or isinstance(value, Timeout):
        return value
    if isinstance(value, timedelta):
        return Timeout(value.total_seconds())
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Timeout(float(value))
    raise TorporError(f"timeout must be seconds, a timedelta or a torpor.Timeout, not {value!r}")


@dataclass
class Ended:
    """How an attempt ended: its ``value``, or the exception it raised (``error``);
    ``stopped``: it was killed or cancelled at its timeout (it can do nothing more)."""

    value: Any = None
    error: BaseException | None = None
    stopped: bool = False
    #: A child process's start-up before its function was called, seconds (None: not a child).
    startup_s: float | None = None


class Running:
    """An attempt that did not end within its timeout (see the module docstring)."""

    #: Whether :meth:`cancel` stops it (a child process, a task); a thread cannot be stopped.
    stoppable = False

    def __init__(self) -> None:
        self._done = threading.Event()
        self.ended: Ended | None = None

    def done(self) -> bool:
        """Whether the attempt has ended."""
        return self._done.is_set()

    def join(self, timeout_s: float | None) -> Ended | None:
        """Wait up to ``timeout_s`` seconds for the attempt to end; how it ended, or None."""
        return self.ended if self._done.wait(timeout_s) else None

    async def ajoin(self, timeout_s: float | None) -> Ended | None:
        """:meth:`join` from async code (the loop keeps running meanwhile)."""
        if not self._done.is_set():
            await asyncio.to_thread(self._done.wait, timeout_s)
        return self.ended if self._done.is_set() else None

    def cancel(self) -> None:
        """Stop the attempt if it can be stopped (then :meth:`join` reports ``stopped``)."""

    def describe(self) -> str:
        """Where the attempt runs, for a person reading why a run is unresolved."""
        return f"process {os.getpid()}"

    def _finish(self, ended: Ended) -> None:
        if self.ended is None:
            self.ended = ended
        self._done.set()


class _Thread(Running):
    """An attempt in a daemon thread; a coroutine function runs in the thread's own loop as a
    task that :meth:`cancel` cancels."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]):
        super().__init__()
        self.stoppable = inspect.iscoroutinefunction(fn)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._cancelled = False
        inner = getattr(fn, "fn", fn)  # (a tool's attempt names its function)
        name = f"torpor-attempt:{getattr(inner, '__qualname__', type(fn).__qualname__)}"
        ctx = contextvars.copy_context()
        self.thread = threading.Thread(
            target=ctx.run, args=(self._body, fn, args, kwargs), name=name, daemon=True
        )
        self.thread.start()

    def _body(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            if self.stoppable:
                value = asyncio.run(self._main(fn(*args, **kwargs)))
            else:
                value = resolve(fn(*args, **kwargs))
            self._finish(Ended(value))
        except asyncio.CancelledError:
            self._finish(Ended(error=TimeoutError("cancelled"), stopped=True))
        except Exception as exc:
            self._finish(Ended(error=exc))
        except BaseException as exc:  # (SystemExit in a thread: an error of the attempt)
            self._finish(Ended(error=RuntimeError(f"{type(exc).__name__}: {exc}")))

    async def _main(self, coro: Any) -> Any:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.ensure_future(coro)
        if self._cancelled:
            self._task.cancel()
        return await self._task

    def cancel(self) -> None:
        self._cancelled = True
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            loop.call_soon_threadsafe(task.cancel)

    def describe(self) -> str:
        return f"thread {self.thread.name!r} of process {os.getpid()}"


class _Task(Running):
    """A coroutine attempt as a task of the running loop (an async workflow)."""

    stoppable = True

    def __init__(self, coro: Any):
        super().__init__()
        self.task = asyncio.ensure_future(coro)
        self.task.add_done_callback(self._settled)

    def _settled(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self._finish(Ended(error=TimeoutError("cancelled"), stopped=True))
        elif (exc := task.exception()) is not None:
            self._finish(Ended(error=exc))
        else:
            self._finish(Ended(task.result()))

    async def ajoin(self, timeout_s: float | None) -> Ended | None:
        if not self.task.done():
            await asyncio.wait({self.task}, timeout=timeout_s)
        await asyncio.sleep(0)  # (let the done callback run)
        return self.ended if self.done() else None

    def join(self, timeout_s: float | None) -> Ended | None:
        raise TorporError("an attempt in the running loop is awaited with ajoin()")

    def cancel(self) -> None:
        self.task.cancel()

    def describe(self) -> str:
        return f"an asyncio task of process {os.getpid()}"


#: The child's program: read (fn, args, kwargs) pickled from stdin, write (ok, value) to the
#: result pipe. It imports nothing of the parent's ``__main__``.
_CHILD = """
import asyncio, inspect, os, pickle, sys
fd = int(sys.argv[1])
if sys.platform.startswith("linux"):
    try:
        import ctypes, signal
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the parent
        if os.getppid() == 1:
            os._exit(1)
    except Exception:
        pass
out_file = os.fdopen(fd, "wb")
try:
    fn, args, kwargs = pickle.loads(sys.stdin.buffer.read())
    out_file.write(b"\x01")  # started: the function is imported and about to be called
    out_file.flush()
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value):
        async def _wait(aw):
            return await aw
        value = asyncio.run(_wait(value))
    out = (True, value)
except BaseException as exc:
    out = (False, exc)
try:
    data = pickle.dumps(out)
except Exception as exc:
    exc = RuntimeError(f"the attempt's outcome cannot be sent back: {exc!r}")
    data = pickle.dumps((False, exc))
with out_file:
    out_file.write(data)
"""


def picklable_call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """``(fn, args, kwargs)`` pickled for a child process; TorporError (before anything is
    recorded) when they cannot be sent there."""
    if getattr(fn, "__module__", None) == "__main__":
        raise TorporError(
            f"{getattr(fn, '__qualname__', fn)!r} is defined in __main__: an attempt killed at its "
            "timeout runs in a child process, which imports the function by name; define it in "
            "a module"
        )
    try:
        return pickle.dumps((fn, args, kwargs))
    except Exception as exc:
        raise TorporError(
            f"an attempt killed at its timeout runs in a child process, but "
            f"{getattr(fn, '__qualname__', fn)!r} or its arguments cannot be pickled: {exc}"
        ) from None


class _Child(Running):
    """An attempt in a child process (its own process group), killed by :meth:`cancel`."""

    stoppable = True

    def __init__(self, payload: bytes):
        super().__init__()
        read_fd, write_fd = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(write_fd)],
            stdin=subprocess.PIPE,
            pass_fds=(write_fd,),
            env=env,
            start_new_session=True,
        )
        os.close(write_fd)
        self._killed = False
        self._spawned = time.monotonic()
        self._started = threading.Event()
        #: Seconds from spawning the child to its function being called (None: not called).
        self.startup_s: float | None = None
        self._reader = threading.Thread(target=self._read, args=(read_fd,), daemon=True)
        self._reader.start()
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(payload)
            self.proc.stdin.close()
        except OSError:
            pass  # it died at once; the reader reports how

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as f:
            first = f.read(1)
            if first == b"\x01":
                self.startup_s = time.monotonic() - self._spawned
                self._started.set()
                data = f.read()
            else:
                data = first + f.read()
        self._started.set()  # (or it ended before its function was called)
        code = self.proc.wait()
        try:
            ok, out = pickle.loads(data)
        except Exception:
            if self._killed:
                self._finish(Ended(error=TimeoutError("killed"), stopped=True))
            else:
                err = RuntimeError(f"the child process ended (exit {code}) without an outcome")
                self._finish(Ended(error=err))
            return
        self._finish(Ended(out) if ok else Ended(error=out))

    def cancel(self) -> None:
        if self.proc.poll() is None:
            self._killed = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def wait_started(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for the child to call its function (or end); False
        when it has not by then (a start-up that slow is stopped: see :func:`call`)."""
        return self._started.wait(timeout_s)

    def describe(self) -> str:
        return f"child process {self.proc.pid}"


#: Attempts of effects that outlived their timeout and grace, by ``(store URL, idempotency
#: key)``: while one is alive, no other attempt of that effect starts in this process
#: (:func:`take_left_running`).
_ALIVE: dict[tuple[str, str], Running] = {}


def left_running(effect: tuple[str, str], running: Running) -> None:
    """Note that an attempt of ``effect`` (store URL, idempotency key) was left running (its
    run is unresolved)."""
    _ALIVE[effect] = running


def take_left_running(effect: tuple[str, str]) -> Running | None:
    """The earlier attempt of ``effect`` (store URL, idempotency key) left running in this
    process, if any (taken: note it again with :func:`left_running` if it is still running). A
    person may settle the effect while it runs; it still must not be overlapped here."""
    return _ALIVE.pop(effect, None)


#: Told of every attempt started in this context that may outlive its call (a thread, a task,
#: a child process): the execution's cancel watch, which stops it when the run is cancelled
#: (:mod:`torpor.engine.cancel`). Copied into attempts' threads and tasks like any ContextVar.
_WATCH: contextvars.ContextVar[Callable[[Running], None] | None] = contextvars.ContextVar(
    "torpor_attempt_watch", default=None
)


@contextlib.contextmanager
def watching(on_start: Callable[[Running], None]) -> Any:
    """Within it, ``on_start(running)`` is called for each attempt :func:`call` or
    :func:`acall` starts in a thread, a task or a child process."""
    token = _WATCH.set(on_start)
    try:
        yield
    finally:
        _WATCH.reset(token)


def _started(running: Running) -> Running:
    watch = _WATCH.get()
    if watch is not None:
        watch(running)
    return running


def _with_startup(ended: Ended, running: Running) -> Ended:
    if isinstance(running, _Child) and ended.startup_s is None:
        ended.startup_s = running.startup_s
    return ended


def _not_started(child: _Child, timeout: Timeout) -> Ended:
    """A child still starting after ``timeout.startup_s``: killed. Its function was never
    called — an :class:`AttemptNotStartedError` (nothing happened) — unless it was called at
    the very moment of the kill (then how it ended, as for any killed attempt)."""
    child.cancel()
    ended = child.join(None)
    assert ended is not None
    if child.startup_s is not None:
        return _with_startup(ended, child)
    return Ended(
        error=AttemptNotStartedError(
            f"the attempt's child process had not started its function "
            f"{timeout.startup_s:g} s after it was spawned (start-up: a new interpreter "
            "importing the function's module) and was killed; the function never ran"
        ),
        stopped=True,
    )


def call(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    timeout: Timeout | None,
    payload: bytes | None = None,
) -> Ended | Running:
    """One attempt of ``fn(*args, **kwargs)`` from sync code, bounded by ``timeout`` (see the
    module docstring). ``payload``: :func:`picklable_call`'s, for ``Timeout(kill=True)``."""
    if timeout is None:
        try:
            return Ended(resolve(fn(*args, **kwargs)))
        except Exception as exc:
            return Ended(error=exc)
    running: Running
    if timeout.kill:
        child = _Child(payload if payload is not None else picklable_call(fn, args, kwargs))
        _started(child)
        if not child.wait_started(timeout.startup_s):
            return _not_started(child, timeout)
        running = child
    else:
        running = _Thread(fn, args, kwargs)
        _started(running)
    ended = running.join(timeout.seconds)
    return _with_startup(ended, running) if ended is not None else running


async def acall(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    timeout: Timeout | None,
    payload: bytes | None = None,
) -> Ended | Running:
    """:func:`call` from async code: a coroutine function runs as a task of the running loop;
    a sync one in a thread (or a child), awaited without blocking the loop."""
    if timeout is None:
        try:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
            return Ended(value)
        except Exception as exc:
            return Ended(error=exc)
    running: Running
    if timeout.kill:
        child = _Child(payload if payload is not None else picklable_call(fn, args, kwargs))
        _started(child)
        if not await asyncio.to_thread(child.wait_started, timeout.startup_s):
            return _not_started(child, timeout)
        running = child
    elif inspect.iscoroutinefunction(fn):
        running = _Task(fn(*args, **kwargs))
        _started(running)
    else:
        running = _Thread(fn, args, kwargs)
        _started(running)
    ended = await running.ajoin(timeout.seconds)
    return _with_startup(ended, running) if ended is not None else running


__all__ = [
    "Ended",
    "Retry",
    "Running",
    "Timeout",
    "acall",
    "call",
    "left_running",
    "picklable_call",
    "take_left_running",
    "timeout_of",
    "watching",
]

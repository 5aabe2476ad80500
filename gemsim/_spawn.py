"""Starting a child process that must not be interrupted before it has set up its signals,
and whose start the parent must not abandon half-way."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing import resource_tracker


@contextmanager
def starting_child() -> Iterator[None]:
    """The block starts a child process: `sigint_blocked` for the child, and the parent's
    own SIGINT/SIGTERM handlers deferred until the start has returned (`signals_deferred`)."""
    with signals_deferred(), sigint_blocked():
        yield


@contextmanager
def sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread while a child is started: the child inherits the mask
    across exec and fork (a fork server started in the block, and its forks, too), so a
    Ctrl-C during its start-up (importing JAX takes seconds) stays pending until it has
    chosen what to do with SIGINT. The parent loses nothing: a SIGINT that comes meanwhile is
    delivered to another thread or when the mask is restored."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not POSIX
        yield
        return
    # The first spawn starts multiprocessing's resource tracker, which unblocks SIGINT in the
    # calling thread while it starts: start it before blocking, so the mask holds.
    resource_tracker.ensure_running()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM handled only once the block is done, by the handlers they had.

    A spawn writes the child's start-up data down a pipe; an exception raised by a signal
    handler in the middle of that write leaves the child reading a truncated pipe (it dies
    printing `EOFError: Ran out of input`). Python-level handlers are deferred: a signal that
    comes meanwhile is recorded and its handler is called when the block ends (a handler
    that raises then raises there). Signals left at their default or ignored are untouched,
    and outside the main thread (where Python runs no handlers) nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    handlers = {s: h for s, h in previous.items() if callable(h)}
    pending: list[int] = []
    for s in handlers:
        signal.signal(s, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        for signum in pending:
            handlers[signum](signum, None)

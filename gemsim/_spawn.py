"""Starting a child process that must not be interrupted before it has set up its signals."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing import resource_tracker


@contextmanager
def sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread while a child is started: the child inherits the mask
    across exec, so a Ctrl-C during its start-up (importing JAX takes seconds) stays pending
    until it has chosen what to do with SIGINT. The parent loses nothing: a SIGINT that comes
    meanwhile is delivered to another thread or when the mask is restored."""
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

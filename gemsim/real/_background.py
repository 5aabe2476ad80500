"""Long calls into XLA off the main thread, so that a signal is handled at once.

Python runs signal handlers in the main thread only, between bytecodes: a main thread inside
an XLA compilation (seconds for the paper's CNN on a small machine) would hear SIGINT or
SIGTERM only when the compilation returns. The parameter server's compilations and its final
evaluation therefore run in a daemon thread while the main thread waits, and a
KeyboardInterrupt (or `Terminated`) reaches the waiting main thread at once. The abandoned
thread finishes or dies with the process; the command line then leaves with `os._exit`
(`gemsim.app.exit_now`), which does not wait for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Background(Generic[T]):
    """`fn(*args)` started in a daemon thread; `result()` waits for it (interruptibly)."""

    def __init__(self, fn: Callable[..., T], *args, name: str):
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._target, args=(fn, args), name=name)
        self._thread.daemon = True
        self._thread.start()

    def _target(self, fn: Callable[..., T], args: tuple) -> None:
        try:
            self._value = fn(*args)
        except BaseException as exc:  # handed to the waiting thread, which raises it
            self._error = exc

    def result(self) -> T:
        """The call's value, or its exception raised here. A signal's exception interrupts
        the wait (a lock acquisition is interruptible on POSIX)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def in_background(fn: Callable[..., T], *args, name: str) -> T:
    """`fn(*args)` computed in a daemon thread, waited for in this one."""
    return Background(fn, *args, name=name).result()

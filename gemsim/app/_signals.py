"""SIGINT and SIGTERM end a long-running verb the same way: an exception in the main thread.

Ctrl-C (SIGINT) raises KeyboardInterrupt; SIGTERM, what Slurm, Kubernetes and Ray send to
stop a job, raises `Terminated`, a KeyboardInterrupt too. Whatever catches one (every
`finally`, the real backends' clean-up, a process pool's shutdown) therefore handles both,
and `except Exception` (a run that fails is recorded and the sweep goes on) lets both pass:
an interrupted run is abandoned, not recorded. The command line maps them to exit codes
`ExitCode.SIGINT` and `ExitCode.SIGTERM` (128 + the signal's number, as shells report a death
by that signal).

A SIGINT that is ignored when the verb starts (a background job of a non-interactive shell
starts that way, and Python then installs no KeyboardInterrupt handler) stays ignored:
`nohup gemsim run ... &` must survive the Ctrl-C of the terminal it came from. SIGTERM ends
it still. Only the first signal raises; later ones are ignored so that the bounded clean-up
they would interrupt completes (SIGKILL still ends the process at once).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

from ._exit_codes import RAY_SHUTDOWN_BOUND_S as RAY_SHUTDOWN_BOUND_S
from ._exit_codes import SHUTDOWN_BOUND_S as SHUTDOWN_BOUND_S


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (raised in the main thread inside `interruptible()`).

    A KeyboardInterrupt, so that code which stops cleanly on Ctrl-C stops cleanly on SIGTERM.
    Its only argument is the signal's number, so that ``type(e)(*e.args)`` rebuilds it:
    SimPy re-raises an exception from a process that way.

    Attributes:
        signum: the signal's number.
    """

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(int(signum))
        self.signum = int(signum)

    def __str__(self) -> str:
        return f"terminated by {signal.Signals(self.signum).name}"


@dataclass
class Interrupts:
    """What `interruptible()` saw: the first signal's number, or None."""

    received: int | None = None

    def __call__(self, signum: int, frame) -> None:
        if self.received is not None:
            return  # the clean-up of the first signal is under way: let it finish
        self.received = signum
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signum)


@contextmanager
def interruptible() -> Iterator[Interrupts]:
    """Within the block, SIGTERM raises `Terminated` and SIGINT KeyboardInterrupt (unless it
    was ignored on entry); the previous handlers come back on exit.

    Outside the main thread (where Python cannot set handlers) it changes nothing.
    """
    interrupts = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    ours = [signal.SIGTERM]
    if previous[signal.SIGINT] is not signal.SIG_IGN:
        ours.append(signal.SIGINT)
    try:
        for s in ours:
            signal.signal(s, interrupts)
        yield interrupts
    finally:
        for s in ours:
            signal.signal(s, previous[s])


def exit_code(exc: KeyboardInterrupt, interrupts: Interrupts | None = None) -> int:
    """128 + the number of the signal that `interrupts` saw first, else of the exception's
    (`Terminated`'s, or SIGINT's for a plain KeyboardInterrupt). The record comes first:
    some libraries turn whatever a handler raised into a new KeyboardInterrupt (`ray.get`
    does)."""
    if interrupts is not None and interrupts.received is not None:
        return 128 + interrupts.received
    return 128 + getattr(exc, "signum", signal.SIGINT)


def exit_now(code: int) -> None:
    """End the process with `code` once an interrupt has been cleaned up after.

    `os._exit`, after flushing the standard streams: an interrupt can leave a daemon thread
    inside XLA (a compilation the real backends stopped waiting for), and a normal
    interpreter exit would run atexit hooks and finalizers under it (an abort), or wait for
    pool threads that have nothing left to do. Everything that needed cleaning was cleaned
    by the `finally` blocks the exception went through.
    """
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):  # closed or broken: nothing more can be said
            stream.flush()
    os._exit(code)


def pool_initializer() -> None:
    """The `initializer` of a process pool whose processes run whole runs (`--jobs N`).

    Ctrl-C reaches the whole process group: a pool process ignores SIGINT, and the parent,
    interrupted itself, ends the pool (`multiprocessing.Pool.terminate` sends SIGTERM). On
    SIGTERM a pool process raises `Terminated`, so that the run it holds cleans up as in the
    parent: its own worker processes killed, its half-written folder removed.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, Interrupts())

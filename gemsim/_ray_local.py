"""Starting and stopping Ray from a gemsim command (the Ray backend's actors, sweeps sent to
Ray) with the process's signals meaning what they meant before, during the start too.

`ray.init` runs in a thread of its own (`_Start`) while the main thread waits for it with its
signal handlers live. In the main thread a signal would have to wait for `ray.init` (cut off
half-way, Ray's core worker can abort the process: "terminate called without an active
exception"), and a start-up on a loaded machine can outlast the time a batch scheduler leaves
between SIGTERM and SIGKILL; no handler interrupts the thread (Python runs them in the main
thread only). A signal during the start abandons it: the Ray processes started so far are
stopped and killed by pid, and the handler's exception goes on at once; once `ray.init`
returns, the thread kills what it started since (a command has ended by then, and Linux has
killed those: below). Otherwise the thread waits until Ray is shut down: Ray starts its
processes with PR_SET_PDEATHSIG, which Linux sends when the thread that started them ends,
not the process.

Outside the main thread `ray.init` sets no SIGTERM handler, but Ray's core worker installs
one at the C level (a stack dump, then the handler before), and `ray.shutdown` resets SIGTERM
to its default action at the C level: the handler in place before is set again after both.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

# A signal delivered to the start's thread reaches the main thread's handler within this.
POLL_S = 0.1


@contextmanager
def running(ray, **init_kwargs) -> Iterator[None]:
    """The block runs with Ray initialised: `ray.init(**init_kwargs)` in a thread of its own
    (module docstring) and, when the block is done, `ray.shutdown()` with the SIGTERM handler
    kept, then the Ray processes this block started that are still there killed. A signal
    while Ray starts abandons the start. Ray already initialised in this process (a caller's
    instance) is used and left as it is."""
    if ray.is_initialized():
        yield
        return
    before = ray_processes()
    start = _Start(ray, init_kwargs, before)
    try:
        with keeping_sigterm_handler():
            start.wait()
        yield
    finally:
        try:
            if not start.abandon():  # ray.init returned: stop what it started as Ray does
                with keeping_sigterm_handler():
                    ray.shutdown()
        finally:
            start.release()
            kill_ray_processes(before)


class _Start:
    """`ray.init` in a daemon thread, which stays until `release` (or, abandoned while
    starting, until `ray.init` returns and it has cleaned up after it)."""

    def __init__(self, ray, init_kwargs: dict, before: set):
        self.ray, self.init_kwargs, self.before = ray, init_kwargs, before
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.returned = threading.Event()
        self.released = threading.Event()
        self.abandoned = False

    def wait(self) -> None:
        """Start the thread, and wait until `ray.init` has returned (raising what it
        raised); signal handlers run meanwhile, and what they raise ends the wait."""
        threading.Thread(target=self._run, name="ray-init", daemon=True).start()
        while not self.returned.wait(POLL_S):
            pass
        if self.error is not None:
            raise self.error

    def abandon(self) -> bool:
        """True, and the start abandoned to its thread, if `ray.init` has not returned."""
        with self.lock:
            self.abandoned = not self.returned.is_set()
            return self.abandoned

    def release(self) -> None:
        self.released.set()

    def _run(self) -> None:
        try:
            with _quiet(logging.getLogger("ray._private.worker"), "not the main thread"):
                self.ray.init(**self.init_kwargs)
        except BaseException as exc:  # the main thread's to raise
            self.error = exc
        with self.lock:
            self.returned.set()
            abandoned = self.abandoned
        if abandoned:
            self._clean_up()
        else:
            self.released.wait()

    def _clean_up(self) -> None:
        """After an abandoned start, which the main thread did not wait for: a Ray connected
        to processes that are killed ends this process a minute later (its GCS client)."""
        if self.error is None:
            with suppress(Exception):
                self.ray.shutdown()
        kill_ray_processes(self.before)


@contextmanager
def _quiet(logger: logging.Logger, text: str) -> Iterator[None]:
    """The logger's records containing `text` dropped within the block (Ray warns that it
    sets no SIGTERM handler outside the main thread: gemsim keeps its own, on purpose)."""

    def keep(record: logging.LogRecord) -> bool:
        return text not in record.getMessage()

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


@contextmanager
def keeping_sigterm_handler() -> Iterator[None]:
    """SIGTERM's handler in place before the block set again once it is done (Ray replaces it
    at the C level: module docstring). Outside the main thread, where handlers cannot be set,
    nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def ray_processes() -> set:
    """This process's descendants that Ray started (psutil ships with Ray)."""
    import psutil

    found = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.name().startswith("ray::") or "/ray/" in " ".join(p.cmdline()):
                found.add(p)
        except psutil.Error:
            continue  # gone meanwhile
    return found


def kill_ray_processes(before: set) -> None:
    """Kill the Ray processes started since `before` that are still there. All are stopped
    first, until no new one is found: a stopped process starts no other (a raylet its
    workers), and a child of one is still found among the descendants, where the child of a
    killed one is no longer."""
    import psutil

    stopped: set = set()
    while new := ray_processes() - before - stopped:
        for p in new:
            with suppress(psutil.Error):
                p.suspend()
        stopped |= new
    for p in stopped:
        with suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(stopped, timeout=5)

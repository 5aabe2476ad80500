"""Starting and stopping Ray from a gemsim command (the Ray backend's actors, sweeps sent to
Ray) with the process's signals meaning what they meant before.

`ray.init` installs its own SIGTERM handler (`sys.exit(15)`) in the main thread, and
`ray.shutdown` resets SIGTERM to its default action at the C level: the handler in place
before is put back after both. A Ctrl-C during `ray.init` is handled once it has returned:
interrupted half-way, Ray's core worker can abort the process ("terminate called without an
active exception", exit -6) instead of ending it with 130; Ray's own processes block SIGINT,
so the start completes in its usual seconds. A `ray.init` interrupted all the same has not
registered the processes it started, so what is left of them is killed.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from gemsim._spawn import signals_deferred


@contextmanager
def running(ray, **init_kwargs) -> Iterator[None]:
    """The block runs with Ray initialised: `ray.init(**init_kwargs)` with the signals kept
    (module docstring) and, when the block is done, `ray.shutdown()` with the SIGTERM handler
    kept, then the Ray processes this block started that are still there killed. Ray already
    initialised in this process (a caller's instance) is used and left as it is."""
    if ray.is_initialized():
        yield
        return
    before = ray_processes()
    try:
        with keeping_sigterm_handler(), signals_deferred():
            ray.init(**init_kwargs)
        yield
    finally:
        try:
            with keeping_sigterm_handler():
                ray.shutdown()
        finally:
            kill_ray_processes(before)


@contextmanager
def keeping_sigterm_handler() -> Iterator[None]:
    """Undo Ray's SIGTERM handler once the block returns. A SIGTERM that came during the block
    (Ray's handler raised `SystemExit(15)`) is raised as the exception the handler in place
    before raises (gemsim's command line: `Terminated`); without such a handler the
    `SystemExit` goes on as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield  # Ray sets no handler outside the main thread either
        return
    before = signal.getsignal(signal.SIGTERM)
    try:
        yield
    except SystemExit as exc:
        if exc.code != signal.SIGTERM or not callable(before):
            raise
        before(signal.SIGTERM, None)  # raises what a SIGTERM raises here
        raise KeyboardInterrupt from exc  # it returned: an interrupt is under way already
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
    """Kill the Ray processes started since `before` that are still there."""
    import psutil

    left = ray_processes() - before
    for p in left:
        with suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(left, timeout=5)

"""Traces simulated ahead of execution: while this process executes a unit of a sweep, one or
two timing processes simulate the traces of the units that come next into the trace store
(`_trace_store.py`), so that the engine, not SimPy, sets the pace of a sweep of small runs.

The timing processes are job processes of `_local_jobs.py` (spawned, SIGINT ignored, a
watchdog that ends them when this process dies; see there) running `simulate_ahead` on one
timing input at a time. A feeder thread here hands each idle one the next trace to simulate:
first the traces of the unit under way, from its last run backwards (this process reads them
from its first run forwards, simulating itself any trace no timing process has taken yet),
then those of the next `AHEAD_UNITS` units. A trace is simulated once: both sides go through
the store, which a process holds a key's lock to simulate. Memory stays bounded: a timing
process holds one trace at a time, and this process none of theirs until it reads it.

Nothing here decides a result: a trace is the same whoever simulates it, and a timing process
that dies or is stopped only leaves its traces to be simulated by the executing process.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Sequence
from contextlib import suppress
from multiprocessing import get_context
from multiprocessing.connection import wait

from gemsim._spawn import starting_child

from ._local_jobs import _Slot, _stop, job_main
from ._trace_store import TimingInputs, TraceStore

AHEAD_UNITS = 2
"""Units past the one under way whose traces the timing processes simulate."""
MAX_PROCESSES = 2
"""Timing processes at most (each costs an interpreter and one trace's memory)."""
POLL_S = 0.2


def simulate_ahead(task: tuple[TraceStore, TimingInputs], progress) -> str:
    """The work of a timing process (module level: it is pickled by reference)."""
    del progress  # a trace's simulation reports no progress
    store, inputs = task
    return store.ensure(inputs)


def timing_setup() -> None:
    """A timing process's start. SIGTERM (how a sweep stops one under way) raises SystemExit,
    so that a trace being stored removes its temporary file before the process ends. And what
    its first trace needs is imported now, while the sweep runs its checks: SimPy and the
    timing model, the store's lock, and pyarrow with pandas, which pyarrow imports to encode a
    table. Otherwise the first trace takes 0.3 s, not 20 ms, and the executing process may
    wait for it."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    import filelock  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    import gemsim.timing  # noqa: F401  (the model, SimPy with it)


def _exit_on_sigterm(signum, frame) -> None:
    # SystemExit, not `_signals.Terminated`: multiprocessing ends a process quietly, with this
    # status, on SystemExit, and prints a traceback for any other exception.
    raise SystemExit(128 + signum)


def timing_processes(units_keys: Sequence[Sequence[str]], stored: set[str]) -> int:
    """How many timing processes a sweep gets: none on a single CPU (they would take it from
    the engine) or with fewer than two traces to simulate; else one per spare CPU, at most
    MAX_PROCESSES."""
    todo = {k for keys in units_keys for k in keys} - stored
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    cpus = len(usable) if usable is not None else (os.cpu_count() or 1)
    if len(todo) < 2 or cpus < 2:
        return 0
    return min(MAX_PROCESSES, cpus - 1)


class TraceAhead:
    """Timing processes simulating the traces of `units` (each a list of timing inputs, in
    execution order) ahead of this process; `at(index)` says which unit executes now.

    Use as a context manager: leaving it stops the timing processes (at once, when an
    exception leaves it), with nothing left running.
    """

    def __init__(
        self,
        store: TraceStore | None = None,
        units: Sequence[Sequence[TimingInputs]] = (),
        *,
        processes: int,
    ):
        self.store, self.units, self.processes = store, [list(u) for u in units], processes
        self._sent: set[str] = set()  # handed out, or held by the store (`assign`)
        self._at = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()  # work assigned, a unit begun, or the end
        self._slots: list[_Slot] = []
        self._thread: threading.Thread | None = None

    def __enter__(self) -> TraceAhead:
        if self.processes < 1:
            return self
        ctx = get_context("spawn")
        try:
            for _ in range(self.processes):
                parent, child = ctx.Pipe()
                process = ctx.Process(
                    target=job_main,
                    args=(child, os.getpid(), simulate_ahead, timing_setup),
                    name="gemsim-timing",
                    daemon=True,
                )
                slot = _Slot()
                with starting_child():
                    process.start()
                    child.close()
                    slot.process, slot.conn = process, parent
                self._slots.append(slot)
            self._thread = threading.Thread(target=self._feed, name="gemsim-timing", daemon=True)
            self._thread.start()
        except BaseException:
            _stop(self._slots, gently=False)
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._end(gently=exc_type is None)

    def assign(
        self, store: TraceStore, units: Sequence[Sequence[TimingInputs]], stored: set[str]
    ) -> None:
        """The work, for timing processes started before it was known (a sweep starts them
        before its checks, so that their interpreters are up when its first unit needs
        traces)."""
        with self._lock:
            self.store, self.units = store, [list(u) for u in units]
            self._sent |= set(stored)
        self._wake.set()

    def stop(self) -> None:
        """Stop the timing processes now (a sweep that turns out to have no traces for them)."""
        self._end(gently=True)

    def _end(self, *, gently: bool) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        _stop(self._slots, gently=gently)

    def at(self, index: int) -> None:
        """Unit `index` executes now: the timing processes work on it and the next ones."""
        with self._lock:
            self._at = index
        self._wake.set()

    def _next(self) -> TimingInputs | None:
        with self._lock:
            at = self._at
            if self.store is None:  # no work assigned yet
                return None
        order = list(reversed(self.units[at])) if at < len(self.units) else []
        for unit in self.units[at + 1 : at + 1 + AHEAD_UNITS]:
            order += unit
        for inputs in order:
            if inputs.key not in self._sent:
                self._sent.add(inputs.key)
                return inputs
        return None

    def _finished(self) -> bool:
        """Whether the last unit is under way and every trace has been handed out."""
        with self._lock:
            if self.store is None or self._at < len(self.units) - 1:
                return False
            return all(t.key in self._sent for unit in self.units[self._at :] for t in unit)

    def _retire(self) -> None:
        """Tell the idle timing processes to end now, while the last unit executes, so that
        leaving the context only joins processes that are gone (each takes about 0.1 s to
        exit)."""
        for slot in self._slots:
            if slot.process is not None and slot.unit is None:
                with suppress(OSError):
                    slot.conn.send(("stop",))

    def _feed(self) -> None:
        """The feeder thread: hand idle timing processes their next trace; collect them."""
        count = 0
        while not self._stop.is_set():
            for slot in self._slots:
                if slot.process is not None and slot.unit is None:
                    inputs = self._next()
                    if inputs is None:
                        break
                    try:
                        slot.conn.send(("unit", count, (self.store, inputs)))
                    except OSError:
                        continue  # it died: its closed pipe is seen below
                    slot.unit, count = count, count + 1
            busy = {s.conn: s for s in self._slots if s.process is not None and s.unit is not None}
            if not busy and self._finished():
                self._retire()
                return
            if not busy:
                self._wake.wait(POLL_S)
                self._wake.clear()
                continue
            for conn in wait(list(busy), timeout=POLL_S):
                slot = busy[conn]
                try:
                    message = conn.recv()
                except (EOFError, OSError):  # it died: the executing process simulates instead
                    slot.process.join(timeout=1.0)
                    slot.conn.close()
                    slot.process = slot.conn = slot.unit = None
                    continue
                if message[0] in ("done", "error"):
                    slot.unit = None

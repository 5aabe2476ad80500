"""`gemsim run --jobs N`: the units of a sweep in N job processes on this machine.

Job processes are spawned (a fresh interpreter: nothing of the driver's JAX state is
inherited) and each talks to the driver over its own pipe: the driver sends a unit, the job
process sends progress and then the unit's records. Job processes compute and never write: the
driver writes every run folder (atomically), so a job process killed at any moment leaves
nothing half-written, and the same driver code serves this pool, a Ray cluster and a single
process. (They are not the simulated workers: those live inside each run.)

No orphans, whatever ends the driver: an exception in it (Ctrl-C, SIGTERM turned into an
exception, an error) terminates and joins every job process before it propagates; a driver
that is killed outright is noticed by each job process's watchdog thread within WATCHDOG_S,
and the job process exits. Job processes ignore SIGINT (from their first instruction: they
are spawned with it blocked): Ctrl-C on a terminal reaches the whole process group, and it is
the driver that decides what stops. A job process that dies by itself (a crash, the OOM
killer) is noticed at once (its pipe closes): its unit is reported `Lost` and a new job
process takes the next unit.

Threads: job processes keep the driver's environment and CPUs, and XLA's settings, on
purpose. XLA's CPU backend sizes its thread pool by the CPUs a process may run on (no flag
sets the size), and its results depend on them: the paper's CNN ends 128 commits with other
parameters in a process limited to one CPU than in one with two (benchmarks/RESULTS.md).
Dividing the cores among the job processes (pinning each to its share) would therefore make
`--jobs N` compute other numbers than `--jobs 1`. The one knob that leaves the pool alone,
`--xla_cpu_multi_thread_eigen=false` (single-threaded Eigen calls), changed no result but did
not make `--jobs 2` faster (benchmarks/RESULTS.md), so it is not set. Each job process may
use every core for its large operations, and busy ones share the cores through the OS
scheduler.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.connection import wait
from typing import Any

from gemsim._spawn import starting_child
from gemsim.types import Progress

from ..record._provenance import utc_now

WATCHDOG_S = 0.5  # how often a job process checks that its driver is alive
PROGRESS_EVERY_S = 0.5  # progress messages per unit at most this often
JOIN_TIMEOUT_S = 10.0  # an idle job process told to stop exits well within this

Work = Callable[[Any, Progress], Any]


@dataclass(frozen=True)
class Lost:
    """A unit whose process died before it returned: why, and when the unit started."""

    reason: str
    started: float  # time.perf_counter() in the driver
    started_at: str  # UTC


@dataclass
class _Slot:
    process: Any = None
    conn: Any = None
    unit: int | None = None  # the unit under way
    key: Hashable = None  # what its process compiled last
    started: float = 0.0
    started_at: str = ""


class LocalPool:
    """N spawned job processes running `work(unit, progress)` on the units of a sweep.

    Args:
        jobs: job processes (at most one per unit is started).
        work: a module-level function (it is pickled by reference): `work(unit, progress)`
            returns the unit's result; `progress(done, total)` may be called while it runs.
        on_progress: `on_progress(index, done, total)` in the driver, for unit `index`.
    """

    def __init__(
        self,
        jobs: int,
        work: Work,
        *,
        on_progress: Callable[[int, int, int], None] | None = None,
    ):
        if jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {jobs}")
        self.jobs, self.work, self.on_progress = jobs, work, on_progress
        self._ctx = get_context("spawn")

    def results(
        self, units: Sequence[Any], keys: Sequence[Hashable] | None = None
    ) -> Iterator[tuple[int, Any]]:
        """`(index, result)` for every unit, in the order they finish; the result is a `Lost`
        when the unit's process died. Close the iterator (or let an exception through) and
        every job process is terminated and joined before it returns.

        `keys[i]` names what unit i compiles (units of equal keys share compiled code): an
        idle job process takes the next unit of the key it ran last, else one of a key no
        other one holds, so that each program is compiled by as few job processes as possible.
        """
        keys = list(keys) if keys is not None else list(range(len(units)))
        queue = list(range(len(units)))
        slots = [_Slot() for _ in range(min(self.jobs, max(len(units), 1)))]
        done = False
        try:
            for slot in slots:
                if queue:
                    self._spawn(slot)
            while queue or any(s.unit is not None for s in slots):
                for slot in slots:
                    if slot.unit is None and queue and slot.process is not None:
                        self._assign(slot, _pick(queue, slot, slots, keys), units, keys)
                yield from self._receive(slots, queue)
            done = True
        finally:
            _stop(slots, gently=done)

    def _spawn(self, slot: _Slot) -> None:
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(
            target=job_main,
            args=(child, os.getpid(), self.work),
            name="gemsim-sweep-job",
            daemon=True,
        )
        with starting_child():  # a signal meanwhile is handled once the slot holds the process
            process.start()
            child.close()  # the child's end lives in the child only: its death closes the pipe
            slot.process, slot.conn, slot.unit = process, parent, None

    def _assign(self, slot: _Slot, index: int, units: Sequence[Any], keys) -> None:
        slot.unit, slot.key = index, keys[index]
        slot.started, slot.started_at = time.perf_counter(), utc_now()
        with suppress(OSError):  # the process died: its closed pipe is seen by the next wait
            slot.conn.send(("unit", index, units[index]))

    def _receive(self, slots: list[_Slot], queue) -> Iterator[tuple[int, Any]]:
        live = {s.conn: s for s in slots if s.process is not None}
        for conn in wait(list(live), timeout=PROGRESS_EVERY_S):
            slot = live[conn]
            try:
                message = conn.recv()
            except (EOFError, OSError):
                yield from self._died(slot, queue)
                continue
            if message[0] == "progress" and self.on_progress is not None:
                self.on_progress(*message[1:])
            elif message[0] in ("done", "error"):
                index, result = message[1], message[2]
                if message[0] == "error":
                    result = Lost(result, slot.started, slot.started_at)
                slot.unit = None
                yield index, result

    def _died(self, slot: _Slot, queue) -> Iterator[tuple[int, Any]]:
        slot.process.join(timeout=JOIN_TIMEOUT_S)
        code, pid = slot.process.exitcode, slot.process.pid
        slot.conn.close()
        slot.process = slot.conn = None
        index, slot.unit = slot.unit, None
        slot.key = None  # a fresh process has compiled nothing
        if queue:
            self._spawn(slot)  # the next units get a fresh process
        if index is not None:
            reason = f"the job process (pid {pid}) running it died ({_exit_text(code)})"
            yield index, Lost(reason, slot.started, slot.started_at)


def _pick(queue: list[int], slot: _Slot, slots: list[_Slot], keys: list[Hashable]) -> int:
    """Take the unit `slot` runs next out of `queue` (see `LocalPool.results`)."""
    held = {s.key for s in slots if s is not slot}
    same = [i for i in queue if keys[i] == slot.key]
    fresh = [i for i in queue if keys[i] not in held]
    index = (same or fresh or queue)[0]
    queue.remove(index)
    return index


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running after its pipe closed"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def _stop(slots: list[_Slot], *, gently: bool) -> None:
    """Every job process gone: idle ones are told to stop; any still under way is terminated (its
    work is dropped: a job process wrote nothing, and a timing process removes the temporary
    file of a trace it was storing); one that does not exit in time is killed."""
    for slot in slots:
        if slot.process is None:
            continue
        if gently and slot.unit is None:
            with suppress(OSError):
                slot.conn.send(("stop",))
        else:
            slot.process.terminate()
    for slot in slots:
        if slot.process is None:
            continue
        slot.process.join(timeout=JOIN_TIMEOUT_S)
        if slot.process.is_alive():
            slot.process.kill()
            slot.process.join()
        slot.conn.close()
        slot.process = slot.conn = None


# --- the job process -------------------------------------------------------------------------


def job_main(conn, driver: int, work: Work, setup: Callable[[], None] | None = None) -> None:
    """The spawn target: run the units the driver sends until told to stop or it is gone
    (`setup()` first: a timing process's, `_trace_ahead.timing_setup`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides what Ctrl-C stops
    if hasattr(signal, "pthread_sigmask"):  # blocked since the spawn (starting_child)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    threading.Thread(target=_watch_driver, args=(driver,), daemon=True).start()
    if setup is not None:
        setup()
    try:
        while True:
            message = conn.recv()
            if message[0] != "unit":
                return
            _, index, unit = message
            try:
                result = work(unit, _Reporter(conn, index))
            except Exception as exc:  # a bug outside the runs: report it, take the next unit
                conn.send(("error", index, f"{type(exc).__name__}: {exc}"))
                continue
            conn.send(("done", index, result))
    except (EOFError, OSError):
        pass  # the driver is gone
    finally:
        conn.close()


def _watch_driver(driver: int) -> None:
    """Exit when the driver dies without telling (SIGKILL): this process is re-parented."""
    while True:
        time.sleep(WATCHDOG_S)
        if os.getppid() != driver:
            os._exit(1)


class _Reporter:
    """The `progress(done, total)` of one unit, sent to the driver at most every
    PROGRESS_EVERY_S (and always at the end)."""

    def __init__(self, conn, index: int):
        self.conn, self.index, self.last = conn, index, 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last < PROGRESS_EVERY_S and not 0 < total <= done:
            return
        self.last = now
        self.conn.send(("progress", self.index, done, total))

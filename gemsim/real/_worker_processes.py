"""The worker processes of `--backend process`, as the parameter server holds them (the
server's loop is gemsim/real/_process.py; a worker's own side is gemsim/real/_worker.py).

Workers are forked from `multiprocessing`'s fork server (`forkserver` start method): a fresh
interpreter, started with the first worker, that imports the worker's module (JAX, gemsim)
once; a worker is a fork of it, so it inherits nothing of the server's JAX state and starts
without importing anything. Each worker talks to the server over its own pipe, never a shared
queue: a worker killed while writing a shared queue would leave its lock held and hang the
others. A worker that dies by itself is seen at once (its pipe closes) and recorded.
`WorkerProcesses` starts them, sends and receives their messages, kills them, records their
deaths and stops them all at the end; the server's loop (`ProcessBackend`) decides when.

Interrupts: workers start with SIGINT blocked and then ignore it (Ctrl-C reaches the whole
process group; the server decides), SIGTERM ends one at once.
"""

from __future__ import annotations

import heapq
import multiprocessing as mp
import os
import time
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING

from gemsim._spawn import starting_child

from ._server import WorkerEvent
from ._worker import worker_main

if TYPE_CHECKING:
    from ._clients import ClientPool
    from ._job import RealJob
    from ._server import ServerBook
    from ._shared import SharedArray

# What the fork server imports once for all workers (it never computes: a fork of a process
# whose JAX runtime had started would inherit its threads' locks).
WORKER_MODULES = ["gemsim.real._worker"]
STARTUP_TIMEOUT_S = 600.0  # import + data + compile of a worker on a loaded machine
STALL_TIMEOUT_S = 300.0  # a working worker silent this long is declared hung
STOP_TIMEOUT_S = 5.0  # all workers together, to leave after `stop`; then they are killed


@dataclass
class _Worker:
    process: mp.Process
    conn: Connection
    # starting | ready | working | waiting (a population's slot with no client) | stopped
    # (told to) | exited (after stop) | dead
    state: str
    since: float  # when the state began (run clock)


class WorkerProcesses:
    """The server's side of the worker processes, a base of `ProcessBackend`: their states
    (`_workers`), their start, messages, kills, deaths and final stop, on the run's clock.
    What a message means for the run (`_lost_on_arrival`) and the run's state (`job`,
    `book`, `pool`, `_pending`, the shared `rows` and `outbox`) are the backend's."""

    job: RealJob
    book: ServerBook
    pool: ClientPool | None
    rows: SharedArray
    outbox: SharedArray
    _ctx: mp.context.BaseContext
    _workers: dict[int, _Worker]
    _pending: list[tuple[float, int, int, float]]
    _seq: int
    _t0: float

    def _lost_on_arrival(self, w: int) -> bool:  # pragma: no cover - the backend's
        raise NotImplementedError

    def _clock(self) -> float:
        return time.monotonic() - self._t0

    def _spawn(self, w: int) -> None:
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(
            target=worker_main,
            args=(w, child, self.rows.name, self.outbox.name, self.job, dict(os.environ)),
            name=f"{self.job.name}-worker-{w}",
            daemon=True,
        )
        # A signal during the start is handled at the end of the block, once the worker is
        # known to the clean-up that the signal's exception runs.
        with starting_child():
            # The first start launches the fork server here: it, and every worker forked from
            # it, inherit the blocked SIGINT from their first instruction.
            process.start()
            child.close()  # the worker's end lives in the worker only: its death closes the pipe
            self._workers[w] = _Worker(process, parent, "starting", self._clock())

    def _await_startup(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while any(x.state == "starting" for x in self._workers.values()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers did not start within {STARTUP_TIMEOUT_S:.0f} s")
            self._receive(timeout=0.5)
            dead = [w for w, x in self._workers.items() if x.state == "dead"]
            if dead:
                raise RuntimeError(f"worker {dead[0]} died while starting (see its stderr)")

    def _stop_all(self, exc_type, exc, tb) -> bool:
        """Stop every worker: after a normal end, ask (`stop`) and wait, all together, up to
        STOP_TIMEOUT_S; after an exception (an interrupt, an error), kill at once. Either
        way none is left running. An exit callback of the run's ExitStack."""
        try:
            if exc_type is None:
                self._ask_to_stop()
        finally:
            for x in self._workers.values():
                if x.process.is_alive():
                    x.process.kill()
            for x in self._workers.values():
                x.process.join(timeout=STOP_TIMEOUT_S)
                x.conn.close()
        return False  # the exception, if any, goes on

    def _ask_to_stop(self) -> None:
        alive = [x for x in self._workers.values() if x.process.is_alive()]
        for x in alive:
            with suppress(BrokenPipeError, OSError):
                x.conn.send(("stop",))
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for x in alive:
            x.process.join(timeout=max(0.0, deadline - time.monotonic()))

    def _kill(self, w: int, event: str, detail: str = "") -> None:
        x = self._workers[w]
        if x.process.is_alive():
            x.process.kill()
        x.process.join()
        x.conn.close()
        x.state = "dead"
        if self.pool is not None:
            self.pool.drop(w, self._clock())
        self._pending = [p for p in self._pending if p[2] != w]
        heapq.heapify(self._pending)
        self.book.events.append(WorkerEvent(self._clock(), w, event, detail))

    def _send(self, w: int, message: tuple) -> bool:
        """Send to a worker; a closed pipe means it died (recorded), and False."""
        try:
            self._workers[w].conn.send(message)
        except (BrokenPipeError, OSError):
            self._died(w)
            return False
        return True

    def _receive(self, timeout: float) -> None:
        live = {x.conn: w for w, x in self._workers.items() if x.state not in ("exited", "dead")}
        if not live:
            time.sleep(timeout)
            return
        for conn in wait(list(live), timeout=timeout):
            w = live[conn]
            x = self._workers[w]
            try:
                message = conn.recv()
            except (EOFError, OSError):
                (self._exited if x.state == "stopped" else self._died)(w)
                continue
            if message[0] == "ready":
                x.state, x.since = "ready", self._clock()
            elif message[0] == "work":
                _, compute, sent = message
                if self._lost_on_arrival(w):
                    continue
                heapq.heappush(self._pending, (sent - self._t0, self._seq, w, compute))
                self._seq += 1

    def _reap(self) -> None:
        """Record the deaths the loop had no time to see before the run ended."""
        self._receive(timeout=0)
        for w, x in self._workers.items():
            if x.state in ("exited", "dead") or x.process.is_alive():
                continue
            (self._exited if x.state == "stopped" else self._died)(w)

    def _exited(self, w: int) -> None:
        """A worker told to stop has left (its pipe closed): not a death, unless it failed."""
        x = self._workers[w]
        x.process.join(timeout=STOP_TIMEOUT_S)
        if x.process.exitcode not in (0, None):
            self._died(w)
            return
        x.conn.close()
        x.state = "exited"

    def _died(self, w: int) -> None:
        x = self._workers[w]
        x.process.join(timeout=5)
        code = x.process.exitcode
        x.conn.close()
        x.state = "dead"
        if self.pool is not None:  # its task, if any, is lost: the client is free again
            self.pool.drop(w, self._clock())
        self.book.events.append(WorkerEvent(self._clock(), w, "died", f"exit code {code}"))

    def _check_stalls(self, now: float) -> None:
        for w, x in self._workers.items():
            if x.state == "working" and now - x.since > STALL_TIMEOUT_S:
                self._kill(w, "died", f"no work for {STALL_TIMEOUT_S:.0f} s (hung)")


def _worker_context():
    """The fork server, preloaded; `spawn` where there is none (Windows)."""
    if "forkserver" not in mp.get_all_start_methods():  # pragma: no cover - not POSIX
        return mp.get_context("spawn")
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(WORKER_MODULES)
    return context

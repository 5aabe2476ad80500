"""A worker process: compute the work for the row the server wrote, hand it back, repeat.

Spawned (nothing inherited): it builds its own rule and problem from the job, compiles the
engine's gradient phase, says `ready`, then waits for `("go", first_step, t0, cycle)` (its
next mini-batch, the run's start, and which of the timing model's compute draws it emulates)
or `("stop",)`. It leaves quietly when the server's end of its pipe closes, so that it cannot
outlive the run. It ignores SIGINT (started with SIGINT blocked, see
`gemsim._spawn.starting_child`): Ctrl-C reaches the whole process group, and the server, not
each worker, decides how the run ends. SIGTERM keeps its default: a worker terminated on its
own dies at once and the server records the death.
"""

from __future__ import annotations

import signal
import time

import numpy as np

from gemsim.timing import EmulatedCompute

from ._compiled import Compiled
from ._job import RealJob
from ._shared import SharedArray


def worker_main(worker: int, conn, rows_name: str, outbox_name: str, job: RealJob) -> None:
    """The spawn target of one worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a pending one is dropped
    try:
        _serve(worker, conn, rows_name, outbox_name, job)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the server is gone: nothing to clean up but memory
    finally:
        conn.close()


def _serve(worker: int, conn, rows_name: str, outbox_name: str, job: RealJob) -> None:
    rule, problem = job.build()
    compiled = Compiled.of(rule, problem, job.n_workers)
    n = job.n_workers
    rows = SharedArray.attach(rows_name, (n, compiled.layout.row_size))
    outbox = SharedArray.attach(outbox_name, (n, compiled.work_size))
    try:
        compiled.gradient(np.array(rows.array[worker]), worker, 0)  # compile before `ready`
        emulated = EmulatedCompute(job.spec, job.seed, worker)
        conn.send(("ready",))
        while True:
            message = conn.recv()
            if message[0] != "go":
                return
            first_step, t0, cycle = message[1], message[2], message[3]
            started = time.monotonic()
            work = compiled.gradient(np.array(rows.array[worker]), worker, first_step)
            if job.emulate_latency:
                # The timing model's own draw for this cycle, stretched by the worker's
                # slowdowns at this moment of the run (t0: the run's start, same clock).
                target = emulated(cycle, started - t0)
                time.sleep(max(0.0, target - (time.monotonic() - started)))
            compute = time.monotonic() - started
            outbox.array[worker] = work
            conn.send(("work", compute, time.monotonic()))
    finally:
        rows.close()
        outbox.close()

"""A worker process: compute the work for the row the server wrote, hand it back, repeat.

A fork of `multiprocessing`'s fork server, which imported this module but never computed
(nothing of the parameter server's JAX state is inherited): it takes the parameter server's
environment, builds its own rule and problem from the job, compiles the engine's gradient
phase, says `ready`, then waits for `("go", first_step, t0, cycle, owner, speed, steps)`
(the next mini-batch in the stream of data owner `owner`, the run's start, which of the timing
model's compute draws it emulates, the speed factor that draw is divided by, and the task's
local steps where FedCompass's server gives them, one draw each; else None) or
`("stop",)`. A persistent worker is its own data owner, of speed 1; a population's slot
computes for whichever client the server gives it. It leaves quietly when the server's end
of its pipe closes, so that it cannot outlive the run. It ignores SIGINT (started with
SIGINT blocked, see `gemsim._spawn.starting_child`): Ctrl-C reaches the whole process group,
and the server, not each worker, decides how the run ends. SIGTERM keeps its default: a
worker terminated on its own dies at once and the server records the death.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping

import jax
import numpy as np

from gemsim.timing import EmulatedCompute

from ._compiled import Compiled
from ._job import RealJob
from ._shared import SharedArray

# One XLA thread per worker process: a worker stands for one device, and n multi-threaded
# workers on a few cores would only fight over them.
WORKER_XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def worker_xla_flags(environ: Mapping[str, str]) -> str:
    """The `XLA_FLAGS` of a worker started from `environ`: the server's own flags, then one
    XLA thread (later flags win). The server's flags are kept because XLA's code, hence a
    commit's last bits, depends on them (`--xla_cpu_max_isa`): a replay in the server's
    environment must compute what the workers computed."""
    return " ".join(f for f in (environ.get("XLA_FLAGS", "").strip(), WORKER_XLA_FLAGS) if f)


def worker_main(
    worker: int, conn, rows_name: str, outbox_name: str, job: RealJob, environ: dict[str, str]
) -> None:
    """The target of one worker process; `environ`: the server's environment when it started
    the worker (the fork server's own is that of the process's first run)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a pending one is dropped
    use_worker_environment(environ)
    try:
        _serve(worker, conn, rows_name, outbox_name, job)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the server is gone: nothing to clean up but memory
    finally:
        conn.close()


def use_worker_environment(environ: dict[str, str]) -> None:
    """Take `environ`, with one XLA thread and JAX on the CPU, before the first computation:
    XLA reads `XLA_FLAGS` when JAX first makes its CPU client; JAX read `JAX_PLATFORMS` when
    the fork server imported it, hence the config."""
    os.environ.clear()
    os.environ.update(environ, XLA_FLAGS=worker_xla_flags(environ), JAX_PLATFORMS="cpu")
    jax.config.update("jax_platforms", "cpu")


def _serve(worker: int, conn, rows_name: str, outbox_name: str, job: RealJob) -> None:
    rule, problem = job.build()
    compiled = Compiled.of(
        rule,
        problem,
        job.n_workers,
        population=job.population,
        windows=job.windows,
        buffered=job.compass is not None,
    )
    n = job.n_workers
    rows = SharedArray.attach(rows_name, (n, compiled.layout.row_size))
    outbox = SharedArray.attach(outbox_name, (n, compiled.work_size))
    try:
        # Compiled before `ready` (a task's steps are a run-time value: any count will do).
        steps = None if job.compass is None else 1
        compiled.gradient(np.array(rows.array[worker]), worker, 0, steps)
        emulated = EmulatedCompute(job.spec, job.seed, worker)
        conn.send(("ready",))
        while True:
            message = conn.recv()
            if message[0] != "go":
                return
            _, first_step, t0, cycle, owner, speed, steps = message
            started = time.monotonic()
            work = compiled.gradient(np.array(rows.array[worker]), owner, first_step, steps)
            if job.emulate_latency:
                # The timing model's own draw for this cycle, stretched by the worker's
                # slowdowns at this moment of the run (t0: the run's start, same clock), and
                # divided by a population's client's speed factor, as the timing model does.
                target = emulated(cycle, started - t0, job.task_draws(owner, steps)) / speed
                time.sleep(max(0.0, target - (time.monotonic() - started)))
            compute = time.monotonic() - started
            outbox.array[worker] = work
            conn.send(("work", compute, time.monotonic()))
    finally:
        rows.close()
        outbox.close()

"""SimPy processes of the timing model: workers, the parameter server, crash injectors.

A worker (`worker_process`) loops: pull -> compute ``window`` mini-batches -> push ->
wait at the parameter server (PS) -> commit. The PS (`server_process`) takes one
waiting gradient at a time (FIFO, or uniformly at random among those waiting), serves
it for a service time and commits it at time t as version k + 1.

Asynchronous mode: the pull is atomic with the commit, so the worker's next gradient
is computed on version k + 1; its pull latency starts at t. Synchronous mode (barrier
rounds): after its commit the worker waits until every gradient of the round is
committed (or lost to a crash); then all ready workers pull the current version and
start the next round together.

Pull, compute and push have nothing observable in between, so a worker's cycle is one
delay, drawn when the cycle starts, and the worker process wakes only when its gradient
reaches the PS (see `state.SimState`). A crash during any part of the cycle, or while
queued, loses the gradient; a gradient already in service is committed.

Tie order. Events at the same virtual time run in SimPy's order: by priority
(interrupts, i.e. crashes, first), then in the order they were scheduled. Processes are
created in this order: the server, then workers ``0..n-1``, then crash injectors in
worker order. Consequences:

- with equal constant compute times the workers reach the PS, and commit, in index
  order ``0..n-1`` in every round;
- a gradient reaching an idle PS is taken into service at once, so among gradients
  arriving at one instant the first scheduled is served first even under RANDOM;
- a join or restart at the instant of a commit sees the commit if the commit was
  scheduled first;
- a crash applies when its timer fires and pre-empts other events of that instant
  that were scheduled after the timer.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy
from simpy.events import Event

from ._cluster import Failure
from ._state import SERVING, SimState

Process = Generator[Event, Any, None]


def worker_process(env: simpy.Environment, state: SimState, w: int) -> Process:
    """The life of worker ``w``: join, send gradients, and crash/restart as told.

    Each ``yield`` returns when the worker's gradient reaches the PS, or with `STOP`
    when its budget is spent. A crash arrives as a `simpy.Interrupt` whose cause is
    the `Failure`.
    """
    join_at = state.spec.workers[w].join_at
    if join_at > 0:
        yield env.timeout(join_at)
    # Initial workers start computing on version 0 at t = 0 without a pull.
    pull = join_at > 0
    arrive = state.arrive
    while state.has_quota(w):
        try:
            signal = state.start(w, pull)
            while not (yield signal):
                signal = arrive(w)
            return
        except simpy.Interrupt as crash:
            failure: Failure = crash.cause
        state.crash(w)
        if failure.restart_after is None:
            return
        yield env.timeout(failure.restart_after)
        pull = True


def server_process(env: simpy.Environment, state: SimState) -> Process:
    """The parameter server: serve waiting gradients one at a time and commit them.

    Returns (which ends the run) after the last commit of a CommitBudget, or at the
    first commit that would complete after a SecondsBudget's horizon.
    """
    queue, pick, begin, service = state.queue, state.pick, state.begin_service, state.service
    phase, after_commit, after_round_commit = (
        state.phase,
        state.after_commit,
        state.after_round_commit,
    )
    horizon, max_commits, synchronous = state.horizon, state.max_commits, state.synchronous
    rec_time, rec_worker = state.times.append, state.workers.append
    rec_pulled, rec_compute = state.pulled_versions.append, state.compute_times.append
    rec_queue, rec_service = state.queue_times.append, state.service_times.append
    rec_fresh, rec_round_end = state.fresh.append, state.round_end.append
    timeout = env.timeout
    while True:
        if queue:
            s = begin(pick())
            if service is not None:
                yield timeout(s)
        else:
            # Idle: the next arrival starts its own service and arms this wake-up.
            state.idle = idle = state.new_signal()
            yield idle
        w, start, version_used, compute_time, queued, s, fresh = state.in_service
        now = env.now
        if now > horizon:
            state.partial_busy = max(0.0, horizon - start)
            return
        rec_time(now)
        rec_worker(w)
        rec_pulled(version_used)
        rec_compute(compute_time)
        rec_queue(queued)
        rec_service(s)
        rec_fresh(fresh)
        # Asynchronous: every commit is its own round. Barrier rounds are closed (the flag
        # of their last commit set) when their last member is done: SimState._round_member_done.
        rec_round_end(not synchronous)
        state.version = k = state.version + 1
        live = phase[w] == SERVING  # False if the worker crashed during service
        if synchronous:
            state.round_commits += 1
            after_round_commit(w, live)
        elif live:
            after_commit(w, k)
        if k == max_commits:
            return


def failure_process(
    env: simpy.Environment, worker: simpy.Process, failures: tuple[Failure, ...]
) -> Process:
    """Interrupt ``worker`` at each failure time (unless it has already finished)."""
    for failure in failures:
        yield env.timeout(failure.at - env.now)
        if worker.is_alive:
            worker.interrupt(failure)

"""SimPy processes of the timing model: each worker's life; and the order of events in time.

A worker loops: pull -> compute ``window`` mini-batches -> push -> wait at the parameter
server (PS) -> commit. The PS (`_server.Server`) takes one waiting gradient at a time (FIFO,
or uniformly at random among those waiting), serves it for a service time and commits it
at time t as version k + 1. What a worker does after its commit is the protocol's
(`_protocol_runs.py`): under `Async` its pull is atomic with the commit, so its next
gradient is computed on version k + 1 and its pull latency starts at t.

Pull, compute and push have nothing observable in between, so a worker's cycle is one
delay, drawn when the cycle starts, and nothing wakes until its gradient reaches the PS
(see `_state.SimState`). A worker's process (`worker_process`) only follows its lives: it
comes up (a join at t = 0 without a pull, or later with one), goes down at the start of
each of its down intervals (`_lives.down_intervals`: late join, failures, availability,
churn) and comes back up, pulling, when the interval ends. Going down during any part of
the cycle, or while queued, loses the gradient; a gradient already in service is committed.

Tie order. Events at the same virtual time run in SimPy's order: by priority, then in the
order they were scheduled. The server is idle from the start (it is callbacks, not a process:
`_server.py`); the workers' processes are created in the order ``0..n-1``. Consequences:

- with equal constant compute times the workers reach the PS, and commit, in index
  order ``0..n-1`` in every round;
- a gradient reaching an idle PS is taken into service at once, so among gradients
  arriving at one instant the first scheduled is served first even under RANDOM;
- a commit is made when the server's wake-up at its time runs, scheduled when its service
  began: after the events already due at that time then (with no service time: after the
  other arrivals due at that instant), before those scheduled later;
- a worker coming up at the instant of a commit sees the commit if the commit was
  scheduled first;
- a worker goes down when its timer fires, before the events of that instant that were
  scheduled after the timer (the timer to the first down is set when the worker comes up).

With ``ties=Ties.BY_WORKER`` (`_server_options.py`) arrivals at the server carry the SimPy
priority ``NORMAL + 1 + w`` instead (`_state.arrival_ranks`): gradients reaching it at one
instant are taken in worker index order, after every other event of that instant (a commit
completing, a worker going down or coming up), whatever order their computations started in.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Iterator
from typing import Any

import simpy
from simpy.events import Event

from ._lives import Down
from ._state import DONE, At, SimState

Process = Generator[Event, Any, None]


def worker_process(
    env: simpy.Environment, state: SimState, protocol, w: int, downs: Iterator[Down]
) -> Process:
    """The lives of worker ``w``: up, down at each of ``downs``, and up again after it."""
    down = next(downs, None)
    pull = False
    if down is not None and down.start == 0.0:  # a late join (or down from the start)
        state.downs[w].append((0.0, down.end))
        if math.isinf(down.end):
            return
        yield At(env, down.end)
        pull = True
        down = next(downs, None)
    while state.has_quota(w):
        protocol.start(w, pull)
        if down is None:
            return
        yield At(env, max(down.start, env.now))
        if state.phase[w] == DONE:
            return
        protocol.crash(w)
        state.downs[w].append((down.start, down.end))
        if math.isinf(down.end):
            return
        yield At(env, down.end)
        pull = True
        down = next(downs, None)

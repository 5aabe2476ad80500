"""The parameter server of the timing model: it serves gradients one at a time and commits them.

The PS takes one waiting gradient at a time (FIFO, or uniformly at random among those
waiting), serves it for a service time and commits it at time t as version k + 1; then the
protocol (`_protocol_runs.py`) says what the worker does next.

The server is not a SimPy process but a pair of callbacks, so that waking it costs no
generator resume and, most of the time, no event. When a service begins its end is known
(``now + service time``), and the server wakes then, through a `Timer`. When that Timer
would be the very next event SimPy runs (nothing else is scheduled at or before its time)
and nothing else is left to do in the current event, the service is completed at once
instead: the clock is moved to the Timer's time and the commit made, exactly what SimPy
would do next, one heap push and pop and one `Environment.step` cheaper. So a plain
asynchronous commit costs one event, the worker's arrival, and events at the same time
still run in SimPy's order (see `_processes.py` for the tie order).
"""

from __future__ import annotations

from heapq import heappush

import simpy
from simpy.core import StopSimulation
from simpy.events import NORMAL

from ._state import SERVING, Callbacks, SimState, Timer, schedule_at


class Server:
    """The PS of one run; `SimState.arrive` hands it gradients (`take`) while it is idle."""

    def __init__(self, env: simpy.Environment, state: SimState, protocol) -> None:
        self.env = env
        self.state = state
        self.committed = protocol.committed
        self.busy = False  # serving a gradient (or stopped)
        self.serving = -1  # the worker whose gradient is in service
        self.started = 0.0  # when that service started
        self.wake: Callbacks = [self._served]
        state.server = self

    def begin(self, w: int, now: float) -> float:
        """Start serving worker ``w``'s gradient at ``now``; return when it completes.

        The commit's row of the trace is written now, with the gradient's facts as they are
        now: a crash during service may restart the worker and overwrite them before the
        commit completes (`_cut` takes the row back if the commit never happens).
        """
        state = self.state
        state.phase[w] = SERVING
        if state.limited:
            state.quota[w] -= 1
        self.serving = w
        self.started = now
        service = state.service
        if service is None:
            t = now  # now + 0.0
        else:
            s = service()
            t = now + s
            state.service_times.append(s)
        if state.new_life[w]:
            state.new_life[w] = False
            state.fresh_rows.append(len(state.times))
        state.times.append(t)
        state.workers.append(w)
        state.pulled_versions.append(state.pulled[w])
        state.compute_times.append(state.computed[w])
        state.queue_times.append(now - state.arrived[w])
        if state.drops is not None:  # the pushes the worker lost since its last commit
            state.dropped_rows.append(state.pending_drops[w])
            state.pending_drops[w] = 0
        return t

    def take(self, w: int, last: bool) -> None:
        """The idle server takes worker ``w``'s gradient, which reaches it now.

        ``last``: nothing else happens in the current event after this call, so the service
        may complete at once if no other event comes first.
        """
        self.busy = True
        env = self.env
        t = self.begin(w, env._now)
        queue = env._queue
        if last and (not queue or queue[0][0] > t):
            # The wake-up at t would be the next event SimPy runs: complete the service now.
            env._now = t
            self.serve()
        else:
            # `schedule_at(env, t, None, self.wake)`, inlined.
            timer = Timer()
            timer.callbacks = self.wake
            timer._value = None
            heappush(queue, (t, NORMAL, next(env._eid), timer))

    def _served(self, _timer: Timer) -> None:
        self.serve()

    def serve(self) -> None:
        """The gradient in service completes now: commit it, then serve the next one.

        Called when nothing else happens in the current event after it (from the wake-up's
        Timer, or by `take`). Stops the run after the last commit of a CommitBudget, or at
        the first commit that would complete after a SecondsBudget's horizon.
        """
        env, state = self.env, self.state
        while True:
            now = env._now
            if now > state.horizon:
                self._cut(state.horizon)
                return
            w = self.serving
            state.version = k = state.version + 1
            # Not SERVING: the worker went down meanwhile.
            self.committed(w, k, state.phase[w] == SERVING)
            if k == state.max_commits:
                self._stop()
                return
            if not state.queue:
                self.busy = False
                return
            t = self.begin(state.pick(), now)
            if state.service is None:
                continue  # no service time: the next commit is made now, in this same event
            queue = env._queue
            if queue and queue[0][0] <= t:
                schedule_at(env, t, None, self.wake)  # another event comes first
                return
            env._now = t  # the wake-up at t would be the next event: complete it now

    def _cut(self, horizon: float) -> None:
        """The gradient in service would complete after the horizon: it is not committed."""
        state = self.state
        state.partial_busy = max(0.0, horizon - self.started)
        row = len(state.times) - 1
        for column in (
            state.times,
            state.workers,
            state.pulled_versions,
            state.compute_times,
            state.queue_times,
        ):
            column.pop()
        if state.service is not None:
            state.service_times.pop()
        if state.drops is not None:
            state.dropped_rows.pop()
        if state.fresh_rows and state.fresh_rows[-1] == row:
            state.fresh_rows.pop()
        self._stop()

    def _stop(self) -> None:
        """End the run once the events already scheduled for now have run (as the end of a
        SimPy process would: its own event is scheduled now)."""
        self.env.timeout(0).callbacks.append(StopSimulation.callback)

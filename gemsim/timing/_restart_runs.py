"""The async protocol's run-time variants for the server options (`_server_options.py`): pull
before apply, Ringmaster's calculation stops and Rennala's restarts at every step.

Each is `AsyncRun` with one more thing done when a commit completes; `server_run` picks the
run of a spec (the protocol's own, `_protocol_runs.protocol_run`, when no option is set, so
that every other run is exactly what it was).

A stopped computation is abandoned as a K-sync straggler's is: its arrival, still scheduled,
is ignored when it fires; a gradient that already reached the server and waits in its queue
leaves the queue. The worker starts a new cycle at once, pulling the current version; in the
trace that shows only as the version its next commit was computed on (the engine fills its
snapshot with a plain pull, `on_pull`), never as a commit.
"""

from __future__ import annotations

from collections import deque

from ._cluster import ClusterSpec
from ._protocol_runs import AsyncRun, protocol_run
from ._server_options import BatchRestarts, DelayStops, PullAt
from ._state import CYCLE, DONE, QUEUED, SimState


class PreApplyRun(AsyncRun):
    """`PullAt.BEFORE_APPLY`: a live worker is sent, with its commit's reply, the version the
    server held before applying its gradient (its next gradient has a delay >= 1)."""

    def committed(self, w: int, k: int, live: bool) -> None:
        super().committed(w, k, live)
        state = self.state
        if live and state.phase[w] != DONE:
            state.pulled[w] = k - 1  # version k - 1: the one commit k - 1 was applied to


def stop(state: SimState, w: int) -> None:
    """Abandon worker ``w``'s computation in flight (computing, or queued at the server),
    counted as cancelled, and start it again at once on the current version."""
    now = state.env.now
    if now <= state.horizon:
        state.cancelled[w] += 1
        state.cancelled_compute[w] += state.compute_done(w, now)
    if state.phase[w] == QUEUED:
        state.queue.remove(w)
    state.waits[w] = None  # its scheduled arrival is ignored when it fires
    state.arm(w, True)


class DelayStopsRun(AsyncRun):
    """`DelayStops`: after each commit, the computations that reached ``threshold`` commits of
    delay stop and restart on the new version, in worker order (the authors' loop).

    Cycles start on non-decreasing versions, so the computations in flight are kept in the
    order they started and the stale ones are taken from its front: O(1) per cycle, not a
    pass over every worker at every commit."""

    def __init__(self, state: SimState, threshold: int) -> None:
        super().__init__(state)
        self.threshold = threshold
        self.cycles = [0] * state.spec.n_workers  # cycles started per worker
        self.started: deque[tuple[int, int, int]] = deque()  # (version, worker, its cycle)
        arm = state.arm  # the plain cycle, or the shared link's

        def counted(w: int, pull: bool) -> None:
            arm(w, pull)
            self.cycles[w] += 1
            self.started.append((state.pulled[w], w, self.cycles[w]))

        state.arm = counted

    def committed(self, w: int, k: int, live: bool) -> None:
        super().committed(w, k, live)
        state, started, oldest = self.state, self.started, k - self.threshold
        stale = []
        while started and started[0][0] <= oldest:
            _, v, cycle = started.popleft()
            if cycle == self.cycles[v] and state.phase[v] in (CYCLE, QUEUED):
                stale.append(v)
        for v in sorted(stale):
            stop(state, v)


class BatchRestartsRun(AsyncRun):
    """`BatchRestarts`: every ``batch`` commits, every worker's computation in flight stops and
    every worker starts again on the new version, in worker order (the authors' loop starts
    them in index order, the committing worker among them)."""

    def __init__(self, state: SimState, batch: int) -> None:
        super().__init__(state)
        self.batch = batch

    def committed(self, w: int, k: int, live: bool) -> None:
        if k % self.batch:
            super().committed(w, k, live)
            return
        state = self.state
        for v in range(state.spec.n_workers):
            if v == w:
                super().committed(w, k, live)
            elif state.phase[v] in (CYCLE, QUEUED):
                stop(state, v)


def server_run(state: SimState, spec: ClusterSpec):
    """The run-time object of the spec's protocol with its server options."""
    stops = spec.stops
    if isinstance(stops, DelayStops):
        return DelayStopsRun(state, stops.threshold)
    if isinstance(stops, BatchRestarts):
        return BatchRestartsRun(state, stops.batch)
    if spec.pull_at is PullAt.BEFORE_APPLY:
        return PreApplyRun(state)
    return protocol_run(state, spec.protocol)

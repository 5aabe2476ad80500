"""The server protocols at run time: what a worker does after it comes up and after a commit.

One object per run (`protocol_run`) drives a `SimState` for its protocol (see
`gemsim.timing._server_protocols` for what each protocol means). Each offers:

- ``rounds``: False: every commit closes its own round (the trace's ``round_end`` is True
  throughout); True: the protocol closes rounds itself (`SimState.close_round` after the
  round's last commit);
- ``start(w, pull)``: worker ``w`` comes up (a join, a restart), pulling when ``pull``;
- ``committed(w, k, live)``: the server committed ``w``'s gradient as version ``k``
  (``live``: the worker is still up and waiting for it);
- ``crash(w)``: worker ``w`` goes down;
- ``finish(end)``: the run is over at ``end``; open waits are counted up to it.

Pulls that are not part of a worker's own commit (a barrier, an SSP unblock, the end of a
k_async round) are plain pulls of the current version: in the trace they show only as the
pulled version of the next commit.
"""

from __future__ import annotations

from collections import defaultdict

from ._server_protocols import Async, Grace, KAsync, KSync, ServerProtocol, Ssp, Sync
from ._state import CYCLE, DONE, QUEUED, READY, SERVING, WAITING, SimState


class _Run:
    """What every protocol does the same way."""

    rounds = False

    def __init__(self, state: SimState) -> None:
        self.state = state
        if self.rounds:
            state.round_ends = []

    def start(self, w: int, pull: bool) -> None:
        self.state.start_life(w)
        self.state.arm(w, pull)

    def crash(self, w: int) -> None:
        self.state.crash(w)

    def finish(self, end: float) -> None:
        state = self.state
        for w, phase in enumerate(state.phase):
            if phase in (READY, WAITING):
                state.end_wait(w, until=end)


class AsyncRun(_Run):
    """`Async`: a live worker pulls the version its commit created and goes on at once."""

    def committed(self, w: int, k: int, live: bool) -> None:
        del k
        if live:
            state = self.state
            if state.quota[w] == 0:
                state.phase[w] = DONE
            else:
                state.arm(w, True)


class SspRun(_Run):
    """`Ssp`: clocks (commits made per worker), the slowest live clock, blocked workers.

    A worker is live while it is up and has budget left. One that comes up takes the
    slowest live worker's clock (it is a new process, not a laggard to wait for).
    """

    def __init__(self, state: SimState, bound: float) -> None:
        super().__init__(state)
        self.bound = bound
        n = state.spec.n_workers
        self.clock = [0] * n
        self.count: defaultdict[int, int] = defaultdict(int)  # live workers at each clock
        self.live = 0
        self.slowest = 0
        self.blocked: dict[int, list[int]] = {}  # clock -> workers blocked at it, in order

    def start(self, w: int, pull: bool) -> None:
        if self.live:
            self.clock[w] = self.slowest
        else:
            self.slowest = self.clock[w]
        self.count[self.clock[w]] += 1
        self.live += 1
        super().start(w, pull)

    def committed(self, w: int, k: int, live: bool) -> None:
        del k
        if not live:
            return
        state, c = self.state, self.clock[w]
        self.count[c] -= 1
        self.clock[w] = c + 1
        if state.quota[w] == 0:
            state.phase[w] = DONE
            self.live -= 1
        else:
            self.count[c + 1] += 1
        old = self.slowest
        self._raise_slowest()
        if state.phase[w] != DONE:
            # Its pull is part of its commit, as in `Async`, unless it leads by too much.
            if c + 1 - self.slowest > self.bound:
                self.blocked.setdefault(c + 1, []).append(w)
                state.begin_wait(w, WAITING)
            else:
                state.arm(w, True)
        if self.slowest != old:
            self._release()

    def crash(self, w: int) -> None:
        phase = self.state.crash(w)
        if phase in (CYCLE, QUEUED, SERVING, WAITING):
            c = self.clock[w]
            if phase == WAITING:
                self.blocked[c].remove(w)
            self.count[c] -= 1
            self.live -= 1
            old = self.slowest
            self._raise_slowest()
            if self.slowest != old:
                self._release()

    def _raise_slowest(self) -> None:
        """Move the slowest clock up past clocks no live worker holds any more."""
        if self.live:
            count = self.count
            while not count.get(self.slowest):
                count.pop(self.slowest, None)  # clocks below the slowest never come back
                self.slowest += 1

    def _release(self) -> None:
        """Blocked workers within the bound of the slowest clock pull and go on, in the
        order of their clocks and, within a clock, of blocking."""
        if not self.blocked:
            return
        state, limit = self.state, self.slowest + self.bound
        for c in sorted(c for c in self.blocked if c <= limit):
            for w in self.blocked.pop(c):
                state.end_wait(w)
                state.arm(w, True)


class RoundsRun(_Run):
    """`Sync` and `KSync`: barrier rounds of the workers ready at the round's start.

    A round holds the ready workers (READY) at its start; they pull the round's version
    and compute. With `KSync`, the k-th arrival at the server cancels the members still
    computing (their work is lost and counted as cancelled; they wait for the next round).
    The round closes, and the next starts, when no member is still to commit: committed,
    cancelled, lost to a crash, or (`Sync`) its push lost in the network, which leaves its
    pseudo-gradient out of the round (DiLoCo's robustness study). A worker that comes up
    mid-round waits for the next one.
    """

    rounds = True

    def __init__(self, state: SimState, k: int | None) -> None:
        super().__init__(state)
        n = state.spec.n_workers
        self.cutoff = k if k is not None and k < n else None
        self.needs_pull = [False] * n
        self.members: list[int] = []
        self.outstanding = 0  # members not yet committed, cancelled or lost
        self.pending = False  # a round start is scheduled
        self.commits = 0  # commits recorded in the current round
        self.arrivals = 0  # members' gradients that reached the server this round
        if self.cutoff is not None:
            state.hook_arrivals(self._on_arrival)
        state.on_drop = self._dropped

    def start(self, w: int, pull: bool) -> None:
        state = self.state
        state.start_life(w)
        state.begin_wait(w, READY)
        self.needs_pull[w] = pull
        if self.outstanding == 0 and not self.pending:
            self._schedule_round()

    def committed(self, w: int, k: int, live: bool) -> None:
        del k
        state = self.state
        self.commits += 1
        if live:
            if state.quota[w] == 0:
                state.phase[w] = DONE
            else:
                state.begin_wait(w, READY)
                self.needs_pull[w] = True
        self._member_done()

    def crash(self, w: int) -> None:
        if self.state.crash(w) in (CYCLE, QUEUED):
            self._member_done()

    def _dropped(self, w: int) -> None:
        """Member ``w``'s push was lost: the round goes on without it; it waits for the next
        round and pulls its version then."""
        state = self.state
        state.begin_wait(w, READY)
        self.needs_pull[w] = True
        self._member_done()

    def _member_done(self) -> None:
        self.outstanding -= 1
        if self.outstanding == 0:
            if self.commits:  # the round's last commit closes it (a crash may end it)
                self.state.close_round()
            self._schedule_round()

    def _schedule_round(self) -> None:
        # A zero delay lets every worker that becomes ready at this instant join the round.
        self.pending = True
        self.state.env.timeout(0).callbacks.append(self._start_round)

    def _start_round(self, _event) -> None:
        state = self.state
        self.pending = False
        self.commits = self.arrivals = 0
        self.members = [w for w, phase in enumerate(state.phase) if phase == READY]
        for w in self.members:
            state.end_wait(w)
            state.arm(w, self.needs_pull[w])
        self.outstanding = len(self.members)

    def _on_arrival(self, timer) -> None:
        state = self.state
        w = timer._value
        if state.waits[w] is not timer:
            return
        state.arrive(w)
        self.arrivals += 1
        if self.arrivals == self.cutoff:
            for v in self.members:
                if state.phase[v] == CYCLE:
                    self._cancel(v)

    def _cancel(self, w: int) -> None:
        state = self.state
        now = state.env.now
        if now <= state.horizon:
            state.cancelled[w] += 1
            state.cancelled_compute[w] += state.compute_done(w, now)
        state.waits[w] = None
        state.begin_wait(w, READY)
        self.needs_pull[w] = True
        self.outstanding -= 1


class KAsyncRun(_Run):
    """`KAsync`: rounds of the next k commits, of distinct workers.

    A live worker whose gradient is committed waits for its round to close, then pulls;
    the others keep computing on what they pulled. A round also closes when no gradient is
    in flight any more (so fewer than k live workers cannot hang the run).
    """

    rounds = True

    def __init__(self, state: SimState, k: int) -> None:
        super().__init__(state)
        self.k = k
        self.commits = 0  # commits in the current round
        self.active = 0  # gradients in flight (computing, queued or in service)
        self.waiting: list[int] = []

    def start(self, w: int, pull: bool) -> None:
        self.active += 1
        super().start(w, pull)

    def committed(self, w: int, k: int, live: bool) -> None:
        del k
        state = self.state
        self.commits += 1
        self.active -= 1
        if live:
            if state.quota[w] == 0:
                state.phase[w] = DONE
            else:
                self.waiting.append(w)
                state.begin_wait(w, WAITING)
        if self.commits == self.k or not self.active:
            self._close()

    def crash(self, w: int) -> None:
        phase = self.state.crash(w)
        if phase in (CYCLE, QUEUED):
            self.active -= 1
        elif phase == WAITING:
            self.waiting.remove(w)
        if self.commits and not self.active:
            self._close()

    def _close(self) -> None:
        state = self.state
        state.close_round()
        self.commits = 0
        waiting, self.waiting = self.waiting, []
        for w in waiting:
            state.end_wait(w)
            self.active += 1
            state.arm(w, True)


class GraceRun(KAsyncRun):
    """`Grace`: rounds of the commits made within ``seconds`` of the round's first.

    As in `KAsync`, a live worker whose gradient is committed waits for its round to close,
    then pulls, and a round also closes when no gradient is in flight any more; instead of
    after k commits, it closes when its window ends (a timer set at its first commit).
    """

    def __init__(self, state: SimState, seconds: float) -> None:
        super().__init__(state, k=0)  # k = 0: never closed by a count of commits
        self.seconds = seconds
        self.window = 0  # the open round's number: a timer of a closed round does nothing

    def committed(self, w: int, k: int, live: bool) -> None:
        if self.commits == 0:  # the round's first commit opens its window
            window = self.window
            timer = self.state.env.timeout(self.seconds)
            timer.callbacks.append(lambda _event: self._expire(window))
        super().committed(w, k, live)

    def _expire(self, window: int) -> None:
        if window == self.window and self.commits:
            self._close()

    def _close(self) -> None:
        self.window += 1
        super()._close()


def protocol_run(state: SimState, protocol: ServerProtocol) -> _Run:
    """The run-time object of ``protocol`` for ``state``."""
    if isinstance(protocol, Async):
        return AsyncRun(state)
    if isinstance(protocol, Ssp):
        return SspRun(state, protocol.bound)
    if isinstance(protocol, Sync):
        return RoundsRun(state, None)
    if isinstance(protocol, KSync):
        return RoundsRun(state, protocol.k)
    if isinstance(protocol, KAsync):
        return KAsyncRun(state, protocol.k)
    if isinstance(protocol, Grace):
        return GraceRun(state, protocol.seconds)
    raise ValueError(f"unknown protocol {protocol!r}")  # pragma: no cover - ClusterSpec checks

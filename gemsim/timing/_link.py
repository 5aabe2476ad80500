"""A shared parameter-server link (``ClusterSpec.shared_link``).

Every pull and push crosses the server's network interface, which moves one model
(``model_bytes / bandwidth_bytes_per_s`` seconds) at a time in each direction: pulls queue
first come first served on its send side, pushes on its receive side (a full-duplex link).
A pull is queued when the worker starts its cycle and then travels its pull latency; a push
travels its push latency to the server and then queues. With nothing else limiting, commits
saturate at ``bandwidth / model_bytes`` per second.

Transfers take a fixed time and are served in the order they are requested, so when a
transfer ends is known when it is requested: a cycle costs one more event than without the
shared link (the push reaching the link), never a process.
"""

from __future__ import annotations

from ._state import CYCLE, SimState, Timer, schedule_at


class SharedLink:
    """Arms workers' cycles through the shared link; install with `install`."""

    def __init__(self, state: SimState) -> None:
        self.state = state
        self.transfer = state.spec.transfer_seconds
        self.send_free = 0.0  # when the send side finishes the transfers queued so far
        self.receive_free = 0.0
        self.pushed = [self._pushed]

    def install(self) -> None:
        """Make ``state.arm`` go through the link."""
        self.state.arm = self.arm

    def arm(self, w: int, pull: bool) -> None:
        """Worker ``w`` starts a cycle: pull over the link, compute, push towards it."""
        state = self.state
        now = state.env.now
        state.phase[w] = CYCLE
        state.pulled[w] = state.version
        compute, push, pull_draw = state.draws[w]
        ready = now
        if pull:
            self.send_free = max(now, self.send_free) + self.transfer
            ready = self.send_free + pull_draw()
        c = compute()
        slow = state.slow[w]
        if slow is not None:
            c = slow.stretch(ready, c)
        state.computed[w] = c
        state.compute_from[w] = ready
        delay = (ready - now) + c + push()
        state.waits[w] = schedule_at(state.env, now + delay, w, self.pushed)

    def _pushed(self, timer: Timer) -> None:
        """Worker ``w``'s push reaches the link: it queues on the receive side."""
        state = self.state
        w = timer._value
        if state.waits[w] is not timer:
            return
        now = state.env.now
        self.receive_free = max(now, self.receive_free) + self.transfer
        # At `now + (receive_free - now)`, which may differ from `receive_free` by an ulp.
        t = now + (self.receive_free - now)
        state.waits[w] = schedule_at(state.env, t, w, state.arrivals, state.rank[w])

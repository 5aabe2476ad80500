"""FedCompass's scheduling decisions, without a clock: speed estimates, arrival groups, each
task's local steps (`CompassGroups`).

Li et al. 2024 (ICLR, https://arxiv.org/abs/2309.14675), as the authors' implementation
(APPFL's Compass scheduler) decides; the rules are in `_compass_run.py`'s docstring. The
simulated run (`CompassRun`) and the real backends' servers (`gemsim.real`) make the same
decisions from the times they see, virtual or measured: each calls `arrival` when a task's
work reaches the server, `take_group` when a group is aggregated (its last member in, or
its latest time passed: a timer the caller keeps, from `assign`'s answer), and `assign` when
a worker takes its next task.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ._server_protocols import Compass

ALONE, GENERAL, GROUP = 0, 1, 2
"""Where the server puts a task's work (the trace's ``buffer`` values): applied alone, the
general buffer, its group's buffer."""


@dataclass
class _Group:
    pending: list[int]  # assigned members not arrived yet
    expected: float  # T: when its members are expected (0 once aggregated)
    latest: float  # T_max: when it is aggregated at the latest (0 once aggregated)
    arrived: list[int] = field(default_factory=list)  # waiting in its buffer, in order


class CompassGroups:
    """The scheduler's state: ``n`` workers (or a population's slots, whose task is for
    client ``who[w]``) and one speed estimate per data owner (``n_owners``: the workers, or
    the population's clients)."""

    ALONE, GENERAL, GROUP = ALONE, GENERAL, GROUP  # for the real servers, via `timing`

    def __init__(self, protocol: Compass, n: int, n_owners: int) -> None:
        self.p = protocol
        # Seconds per step, estimated for each owner; None: not seen yet.
        self.speed: list[float | None] = [None] * n_owners
        self.who = list(range(n))
        self.steps = [protocol.q_max] * n  # the task's local steps
        self.assigned = [0.0] * n  # when the task was assigned
        self.group = [-1] * n
        self.kind = [ALONE] * n  # where the worker's next row goes
        self.groups: dict[int, _Group] = {}  # in creation order
        self.created = 0

    def arrival(self, w: int, now: float) -> bool:
        """Worker ``w``'s work reaches the server at ``now``: its owner's estimate is
        updated and ``kind[w]`` says where the work goes; True when it completes its group
        (which the caller then aggregates, `take_group`)."""
        observed = (now - self.assigned[w]) / self.steps[w]
        c = self.who[w]
        old = self.speed[c]
        m = self.p.speed_momentum
        self.speed[c] = observed if old is None else (1 - m) * old + m * observed
        g = self.group[w]
        if g < 0:
            self.kind[w] = ALONE
            return False
        group = self.groups[g]
        group.pending.remove(w)
        if now > group.latest:
            if not group.pending:
                del self.groups[g]
            self.kind[w] = GENERAL
            return False
        group.arrived.append(w)
        self.kind[w] = GROUP
        return not group.pending

    def waiting_in(self, g: int) -> bool:
        """Whether group ``g`` has members waiting in its buffer (its timer then aggregates
        it; an aggregated group has none)."""
        group = self.groups.get(g)
        return group is not None and bool(group.arrived)

    def take_group(self, g: int) -> list[int]:
        """Group ``g`` is aggregated now: its waiting members, in arrival order."""
        group = self.groups[g]
        members, group.arrived = group.arrived, []
        group.expected = group.latest = 0.0
        if not group.pending:
            del self.groups[g]
        return members

    def fastest_first(self, members: list[int]) -> list[int]:
        """An aggregated group's members in the order they take their next tasks (stable:
        arrival order among equal estimates)."""
        speed, who = self.speed, self.who
        return sorted(members, key=lambda v: speed[who[v]])

    def assign(self, w: int, now: float) -> tuple[int, float] | None:
        """Worker ``w``'s next task: its steps and its arrival group (an owner not seen yet:
        ``q_max`` steps in no group, as every worker's first task). Returns ``(group,
        latest)`` when it creates a group, whose timer the caller sets; else None."""
        p, speed, who = self.p, self.speed, self.who
        s = speed[who[w]]
        if s is None:
            self._task(w, now, -1, p.q_max)
            return None
        if not self.groups:
            return self._create(w, now, p.q_max)
        best, best_q = -1, -1
        for g, group in self.groups.items():
            q = math.floor((group.expected - now) / s)
            if q < p.q_min or q < best_q or q > p.q_max:
                continue
            best, best_q = g, q
        if best >= 0:
            self.groups[best].pending.append(w)
            self._task(w, now, best, best_q)
            return None
        best_q = -1
        for group in self.groups.values():
            if now < group.latest:
                fastest = min(speed[who[v]] for v in (*group.pending, *group.arrived))
                q = math.floor((group.latest + fastest * p.q_max - now) / s)
                if q <= p.q_max:
                    best_q = max(best_q, q)
        if 0 <= best_q < p.q_min:
            best_q = p.q_min
        elif best_q < 0:
            best_q = p.q_max
        return self._create(w, now, best_q)

    def _create(self, w: int, now: float, q: int) -> tuple[int, float]:
        s = self.speed[self.who[w]]
        g = self.created
        self.created += 1
        latest = now + q * s * self.p.latest
        self.groups[g] = _Group([w], now + q * s, latest)
        self._task(w, now, g, q)
        return g, latest

    def _task(self, w: int, now: float, g: int, q: int) -> None:
        self.group[w] = g
        self.steps[w] = q
        self.assigned[w] = now

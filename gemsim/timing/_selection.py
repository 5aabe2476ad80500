"""How a free slot chooses its next client (`Selection`), among those up and not busy.

A selector first tries a few candidates drawn by its rule (`TRIES`), keeping the first that
is up at the current time and not in another slot's task: for `Selection.UNIFORM` a client
id drawn uniformly (rejection sampling, so the choice is uniform among the acceptable
clients), for `Selection.WEIGHTED` a client drawn in proportion to its weight (a search of
the cumulative weights; the choice is proportional to the weights among the acceptable),
for `Selection.ROUND_ROBIN` the next ids after the last one chosen. When every try fails
(few clients are acceptable) it looks at every client at once (numpy, `Calendar.down_mask`)
and chooses by the same rule among the acceptable ones, or reports that there is none. While
the last such look found a candidate drawn by the rule acceptable with a probability below
``1 / TRIES`` (a scarce population), it looks at every client at once straight away.

Draws: one uniform ``[0, 1)`` value per candidate (and one more for a choice among all the
acceptable clients), from the server's selection stream (`_draws.SELECTION`); round robin
draws nothing.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable

import numpy as np

from ._calendar import Calendar
from ._draws import SELECTION, uniform_draw
from ._population import Population, Selection

TRIES = 32
"""Candidates tried one by one before every client is looked at at once."""

Pick = tuple[int, float] | None
"""A chosen client and when it next goes down (inf: never), or None: no client is acceptable."""


class Selector:
    """Chooses clients for a run: ``select(t)`` returns a `Pick`.

    ``busy`` is the run's flags (one byte per client, 1 while in a slot's task); the
    selector reads them and never writes them.
    """

    def __init__(
        self, population: Population, calendar: Calendar, busy: bytearray, seed: int
    ) -> None:
        self.n = population.n_clients
        self.calendar = calendar
        self.busy = busy
        self.rule = population.selection
        self.uniform = uniform_draw(seed, SELECTION)
        self.next_id = 0  # round robin: the first id to try next
        # The last look at every client found a drawn candidate unlikely to be acceptable.
        self.scarce = False
        self.select: Callable[[float], Pick] = {
            Selection.UNIFORM: self._uniform,
            Selection.ROUND_ROBIN: self._round_robin,
            Selection.WEIGHTED: self._weighted,
        }[self.rule]
        if self.rule is Selection.WEIGHTED:
            weights = np.asarray(population.weights, dtype=np.float64)
            self.weights = weights
            cumulative = np.cumsum(weights)
            self.total = float(cumulative[-1])
            self.cumulative = array("d", cumulative.tobytes())

    def _uniform(self, t: float) -> Pick:
        if self.scarce:
            return self._among_all(t)
        n, busy, draw, next_down = self.n, self.busy, self.uniform, self.calendar.next_down
        for _ in range(TRIES):
            c = int(draw() * n)
            if not busy[c]:
                d = next_down(c, t)
                if d >= 0.0:
                    return c, d
        return self._among_all(t)

    def _weighted(self, t: float) -> Pick:
        if self.scarce:
            return self._among_all(t)
        n, busy, draw, next_down = self.n, self.busy, self.uniform, self.calendar.next_down
        cumulative, total = self.cumulative, self.total
        for _ in range(TRIES):
            # The client whose share of [0, total) holds the draw (weight 0: an empty share).
            c = bisect.bisect_right(cumulative, draw() * total)
            if c < n and not busy[c]:
                d = next_down(c, t)
                if d >= 0.0:
                    return c, d
        return self._among_all(t)

    def _round_robin(self, t: float) -> Pick:
        n, busy, next_down = self.n, self.busy, self.calendar.next_down
        c = self.next_id
        for _ in range(min(TRIES, n)):
            if not busy[c]:
                d = next_down(c, t)
                if d >= 0.0:
                    self.next_id = (c + 1) % n
                    return c, d
            c = (c + 1) % n
        self.next_id = c
        return self._among_all(t)

    def _among_all(self, t: float) -> Pick:
        """The rule's choice among every acceptable client at ``t``, or None."""
        ok = ~self.calendar.down_mask(t) & (np.frombuffer(self.busy, dtype=np.uint8) == 0)
        if self.rule is Selection.WEIGHTED:
            ok &= self.weights > 0
        candidates = np.flatnonzero(ok)
        if self.rule is Selection.WEIGHTED:
            acceptance = float(self.weights[candidates].sum()) / self.total
        else:
            acceptance = candidates.size / self.n
        self.scarce = acceptance * TRIES < 1.0
        if not candidates.size:
            return None
        if self.rule is Selection.UNIFORM:
            c = int(candidates[int(self.uniform() * candidates.size)])
        elif self.rule is Selection.WEIGHTED:
            cumulative = np.cumsum(self.weights[candidates])
            i = int(np.searchsorted(cumulative, self.uniform() * cumulative[-1], side="right"))
            c = int(candidates[min(i, candidates.size - 1)])
        else:
            after = candidates[candidates >= self.next_id]
            c = int(after[0] if after.size else candidates[0])
            self.next_id = (c + 1) % self.n
        return c, self.calendar.next_down(c, t)

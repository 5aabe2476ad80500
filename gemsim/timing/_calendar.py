"""The clients of a population over time: their speed factors and their availability.

Nothing here holds a Python object per client: per-client state is a few numbers in flat
arrays (`array.array`, seen by numpy without a copy), so a population of a million clients
costs tens of megabytes.

Draws. Every client has its own counter-based streams, keyed by the seed and its id, so
adding client N + 1 changes nothing for clients ``0..N-1``. A stream's key is
``K_kind << 64 | i`` for a ``numpy.random.Philox``, with ``K_kind`` the first 64-bit word of
``SeedSequence(seed, spawn_key=(2, kind))`` (`_draws.CLIENT_KEY`; kind 0 = speeds, 1 =
churn):

- speed factors, drawn in chunks of `SPEED_CHUNK` client ids: chunk ``j`` is
  ``law.sample(Generator(Philox(key=K_0 << 64 | j)), SPEED_CHUNK)`` whatever N is (the last
  chunk is cut at N), so a client's speed depends on the seed and its id only, for any law
  (and, for a client of a `Population.groups` entry, its group's law, drawn the same way);
- churn, drawn when first needed: client ``c``'s ``p``-th period (``p = 0, 1, ...``), an up
  period then a down period, is ``uptime.sample(g, 1)`` then ``downtime.sample(g, 1)`` with
  ``g = Generator(Philox(key=K_1 << 64 | c, counter=p << 128))``. As for a persistent worker
  (`_lives.py`), the periods alternate from t = 0, up first.

Availability. A client is down where its churn or its availability file says so (the union
of both, as `client_down_intervals` lists them; intervals ``[down_at, up_at)``). The
`Calendar` of a run answers, at the run's current time (never decreasing), whether a client
is up and when it next goes down, bringing a client's state forward only when it is asked
about (its current churn interval and period count; a pointer into its file intervals).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator

import numpy as np

from ._draws import CLIENT_CHURN, CLIENT_KEY, CLIENT_SPEED, seed_sequence
from ._lives import Down, merge_downs
from ._population import Population

SPEED_CHUNK = 4096
"""Client ids per chunk of speed draws."""

_INF = math.inf


def stream_key(seed: int, kind: int) -> int:
    """``K_kind``: the high word of the Philox keys of one kind of client draws."""
    return int(seed_sequence(seed, CLIENT_KEY, kind).generate_state(1, np.uint64)[0])


def client_speeds(population: Population, seed: int) -> np.ndarray:
    """Every client's speed factor (float64, one per client; ones without a speed law),
    each from its group's law where it is in a `Population.groups` entry.

    Raises:
        ValueError: if a draw is not a finite number > 0 (naming the client).
    """
    n = population.n_clients
    speeds = np.ones(n, dtype=np.float64)
    if not population.draws_speeds:
        return speeds
    high = stream_key(seed, CLIENT_SPEED) << 64
    for start, stop, law in population.speed_segments():
        if law is not None:
            speeds[start:stop] = _chunk_draws(law, high, start, stop)
            _check_speeds(speeds, start, stop, law)
    return speeds


def _chunk_draws(law, high: int, start: int, stop: int) -> np.ndarray:
    """Clients ``start .. stop - 1``'s draws of ``law``, chunk by chunk (module docstring):
    a client's value depends on the seed, its id and the law only."""
    out = np.empty(stop - start, dtype=np.float64)
    for j in range(start // SPEED_CHUNK, -(-stop // SPEED_CHUNK)):
        chunk = law.sample(np.random.Generator(np.random.Philox(key=high | j)), SPEED_CHUNK)
        low, up = max(start, j * SPEED_CHUNK), min(stop, (j + 1) * SPEED_CHUNK)
        out[low - start : up - start] = chunk[low - j * SPEED_CHUNK : up - j * SPEED_CHUNK]
    return out


def _check_speeds(speeds: np.ndarray, start: int, stop: int, law) -> None:
    bad = ~np.isfinite(speeds[start:stop]) | (speeds[start:stop] <= 0)
    if bad.any():
        c = start + int(np.argmax(bad))
        raise ValueError(
            f"Population.speed {law!r} drew {speeds[c]!r} for client {c}; allowed: speed "
            f"factors that are finite numbers > 0"
        )


class ChurnDraws:
    """Client ``c``'s ``p``-th churn period, ``(up, down)`` seconds (see the module docstring)."""

    def __init__(self, population: Population, seed: int) -> None:
        churn = population.churn
        self.up_law, self.down_law = churn.uptime, churn.downtime
        self.bits = np.random.Philox(0)
        self.gen = np.random.Generator(self.bits)
        self.key = np.array([0, stream_key(seed, CLIENT_CHURN)], dtype=np.uint64)
        self.counter = np.zeros(4, dtype=np.uint64)
        # The state of `Philox(key=K_1 << 64 | c, counter=p << 128)`, set in place: much
        # cheaper than a new Philox per period.
        self.state = {
            "bit_generator": "Philox",
            "state": {"counter": self.counter, "key": self.key},
            "buffer": np.zeros(4, dtype=np.uint64),
            "buffer_pos": 4,
            "has_uint32": 0,
            "uinteger": 0,
        }

    def __call__(self, c: int, p: int) -> tuple[float, float]:
        self.key[0] = c
        self.counter[2] = p
        self.bits.state = self.state
        gen = self.gen
        return float(self.up_law.sample(gen, 1)[0]), float(self.down_law.sample(gen, 1)[0])


def _file_intervals(population: Population) -> tuple[array, array, array]:
    """The availability file as flat arrays: client c's merged down intervals are
    ``starts[off[c]:off[c + 1]]`` and ``ends[...]``, sorted, disjoint and not touching."""
    n = population.n_clients
    starts, ends = array("d"), array("d")
    counts = np.zeros(n + 1, dtype=np.int64)
    for c, intervals in population.availability.items():  # each sorted by down_at
        count = 0
        for a, b in intervals:
            if count and a <= ends[-1]:  # overlapping or touching: one interval
                if b > ends[-1]:
                    ends[-1] = b
                continue
            starts.append(a)
            ends.append(b)
            count += 1
        counts[c + 1] = count
    off = array("q", np.cumsum(counts).tobytes())
    return starts, ends, off


def _zeros(code: str, n: int) -> array:
    return array(code, bytes(array(code).itemsize * n))


class Calendar:
    """Which clients are up at the run's current time, and when they go down or come up.

    Every query passes a time ``t`` that never decreases from one query to the next; the
    client's state is brought forward to ``t`` (`up_time` only looks ahead, it changes
    nothing).
    """

    def __init__(self, population: Population, seed: int) -> None:
        n = self.n = population.n_clients
        self.churn = population.churn is not None
        if self.churn:
            self.draw = ChurnDraws(population, seed)
            # Client c's current churn down interval [cs, ce) (the first ending after the
            # last query; [0, 0) before any) and the number of periods drawn.
            self.cs, self.ce, self.pc = _zeros("d", n), _zeros("d", n), _zeros("q", n)
        self.file = bool(population.availability)
        if self.file:
            self.fs, self.fe, self.off = _file_intervals(population)
            self.fp = array("q", self.off[:-1])  # client c's first interval ending after t

    def next_down(self, c: int, t: float) -> float:
        """-1.0 if client ``c`` is down at ``t``; else when it next goes down (inf: never)."""
        d = _INF
        if self.churn:
            if self.ce[c] <= t:
                self._advance(c, t)
            s = self.cs[c]
            if s <= t:
                return -1.0
            d = s
        if self.file:
            i, stop, fe = self.fp[c], self.off[c + 1], self.fe
            if i < stop and fe[i] <= t:
                i += 1
                while i < stop and fe[i] <= t:
                    i += 1
                self.fp[c] = i
            if i < stop:
                s = self.fs[i]
                if s <= t:
                    return -1.0
                if s < d:
                    d = s
        return d

    def _advance(self, c: int, t: float) -> None:
        """Draw client ``c``'s churn periods until the current one ends after ``t``."""
        start, end, p = self.cs[c], self.ce[c], self.pc[c]
        draw = self.draw
        while end <= t:
            up, down = draw(c, p)
            p += 1
            start = end + up
            end = start + down
        self.cs[c], self.ce[c], self.pc[c] = start, end, p

    def up_time(self, c: int, t: float) -> float:
        """The first time ``>= t`` at which client ``c`` is up (inf: never), without moving
        its state (the run has not reached that time)."""
        e = t
        if self.churn:
            start, end, p = self.cs[c], self.ce[c], self.pc[c]
        if self.file:
            i, stop = self.fp[c], self.off[c + 1]
        while not math.isinf(e):
            moved = False
            if self.churn:
                while end <= e:
                    up, down = self.draw(c, p)
                    p += 1
                    start = end + up
                    end = start + down
                if start <= e:
                    e, moved = end, True
            if self.file:
                while i < stop and self.fe[i] <= e:
                    i += 1
                if i < stop and self.fs[i] <= e:
                    e, moved = self.fe[i], True
            if not moved:
                break
        return e

    # -- every client at once (numpy views of the flat arrays) ----------------------------

    def refresh(self, t: float) -> None:
        """Bring every client's state forward to ``t``."""
        if self.churn:
            stale = np.flatnonzero(np.frombuffer(self.ce, dtype=np.float64) <= t)
            for c in stale.tolist():
                self._advance(c, t)
        if self.file:
            # Within a client's intervals the ends increase: those ending by t are a prefix.
            ended = np.frombuffer(self.fe, dtype=np.float64) <= t
            before = np.concatenate(([0], np.cumsum(ended, dtype=np.int64)))
            off = np.frombuffer(self.off, dtype=np.int64)
            fp = np.frombuffer(self.fp, dtype=np.int64)
            fp[:] = off[:-1] + (before[off[1:]] - before[off[:-1]])

    def _file_now(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """After `refresh`: whether each client is down by its file at ``t``, and the end
        of that interval (inf where it is not down by the file)."""
        fp = np.frombuffer(self.fp, dtype=np.int64)
        stop = np.frombuffer(self.off, dtype=np.int64)[1:]
        has = fp < stop
        starts = np.full(self.n, _INF)
        ends = np.full(self.n, _INF)
        starts[has] = np.frombuffer(self.fs, dtype=np.float64)[fp[has]]
        ends[has] = np.frombuffer(self.fe, dtype=np.float64)[fp[has]]
        down = starts <= t
        return down, np.where(down, ends, _INF)

    def down_mask(self, t: float) -> np.ndarray:
        """Whether each client is down at ``t`` (bool, one per client); refreshes first."""
        self.refresh(t)
        down = np.zeros(self.n, dtype=bool)
        if self.churn:
            down |= np.frombuffer(self.cs, dtype=np.float64) <= t
        if self.file:
            down |= self._file_now(t)[0]
        return down

    def next_change(self, t: float) -> float:
        """The earliest time after ``t`` at which a client down at ``t`` may come up (the
        end of its current down interval, or of the later one where churn and file both hold
        it down); inf if none ever does. Refreshes first."""
        self.refresh(t)
        up_at = np.zeros(self.n)  # 0: up at t
        if self.churn:
            cs = np.frombuffer(self.cs, dtype=np.float64)
            up_at = np.where(cs <= t, np.frombuffer(self.ce, dtype=np.float64), 0.0)
        if self.file:
            down, ends = self._file_now(t)
            up_at = np.where(down, np.maximum(up_at, ends), up_at)
        later = up_at[up_at > t]
        return float(later.min()) if later.size else _INF


def client_down_intervals(
    population: Population, seed: int, client: int, *, until: float = math.inf
) -> Iterator[Down]:
    """Client ``client``'s down intervals in time order, disjoint, those starting before
    ``until``: the union of its availability-file intervals and its churn periods (drawn
    lazily; the sequence may be endless). What the simulation's `Calendar` follows, and what a
    real backend follows to know when a client is up."""
    draws = ChurnDraws(population, seed) if population.churn is not None else None
    return _client_downs(population, draws, client, until)


def _client_downs(
    population: Population, draws: ChurnDraws | None, client: int, until: float
) -> Iterator[Down]:
    sources: list = []
    if population.availability and client in population.availability:
        sources.append([Down(a, b) for a, b in population.availability[client]])
    if draws is not None:
        sources.append(_churn_periods(draws, client))
    return merge_downs(sources, until)


def _churn_periods(draw: ChurnDraws, c: int) -> Iterator[Down]:
    t, p = 0.0, 0
    while True:
        up, down = draw(c, p)
        p += 1
        start = t + up
        t = start + down
        yield Down(start, t)


def client_up_seconds(population: Population, seed: int, duration: float) -> np.ndarray:
    """Each client's time up within ``[0, duration]`` (float64, one per client): the exposure
    against which a selection among the available clients is judged
    (`gemsim.timing.population_summary`). Draws every client's churn up to ``duration``, so it
    costs time in proportion to N (a few microseconds per churn period)."""
    n = population.n_clients
    up = np.full(n, float(duration))
    if population.churn is None and not population.availability:
        return up
    draws = ChurnDraws(population, seed) if population.churn is not None else None
    clients = range(n) if draws is not None else population.availability.keys()
    for c in clients:
        down = 0.0
        for d in _client_downs(population, draws, c, duration):
            down += max(0.0, min(d.end, duration) - min(d.start, duration))
        up[c] -= down
    return up

"""Random draw streams of the timing model, one per (worker, kind) and per server use.

Every stream is a ``numpy.random.Generator`` seeded from its own
``numpy.random.SeedSequence`` child:

- worker ``w``: ``SeedSequence(seed, spawn_key=(0, w))`` with children 0 = compute,
  1 = push, 2 = pull, 3 = churn up periods, 4 = churn down periods, 5 = the normal periods
  between slowdowns, 6 = slowdown factors, 7 = slowdown durations (new kinds of draws are
  new children, so that existing streams never shift);
- the server: ``SeedSequence(seed, spawn_key=(1,))`` with children 0 = service,
  1 = the uniform picks of the RANDOM discipline, 2 = a population's selections of clients;
- a population's clients: ``SeedSequence(seed, spawn_key=(2, kind))`` for kind 0 = speed
  factors, 1 = churn periods, each giving the key of counter-based draws per client (see
  `gemsim.timing._calendar`).

A stream pre-draws its values in blocks (64 values first, doubling up to 8192) and hands
them out one at a time as Python floats. The block schedule is fixed, so the sequence a
stream yields depends only on its seed and distribution, never on how other streams are
consumed; and since a worker's seeds do not depend on the number of workers, adding
worker ``n + 1`` leaves the draws of workers ``0..n`` unchanged.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np

from ._cluster import ClusterSpec
from ._distributions import MAX_DRAW_SECONDS, TAIL_PROBABILITY, Distribution, is_zero
from ._worker_spec import TINY_SECONDS

Draw = Callable[[], float]
"""A zero-argument callable returning the next value of a stream."""

FIRST_BLOCK = 64
MAX_BLOCK = 8192

WORKER_KEY = 0
SERVER_KEY = 1
COMPUTE, PUSH, PULL = 0, 1, 2
CHURN_UP, CHURN_DOWN = 3, 4
SLOW_EVERY, SLOW_FACTOR, SLOW_DURATION = 5, 6, 7
DROP = 8  # a worker's lost pushes (`ClusterSpec.drop_push`)
SERVICE, DISCIPLINE, SELECTION = 0, 1, 2
CLIENT_KEY = 2
CLIENT_SPEED, CLIENT_CHURN = 0, 1


def seed_sequence(seed: int, *spawn_key: int) -> np.random.SeedSequence:
    """The seed sequence of one stream, e.g. ``seed_sequence(seed, 0, w, COMPUTE)``.

    Equal to spawning children step by step from ``SeedSequence(seed)``.
    """
    return np.random.SeedSequence(seed, spawn_key=spawn_key)


def _blocks(
    dist: Distribution, rng: np.random.Generator, group: int, divide: float, add: float
) -> Iterator[list[float]]:
    size = FIRST_BLOCK
    while True:
        values = dist.sample(rng, size * group)
        if group > 1:
            values = values.reshape(size, group).sum(axis=1)
        if divide != 1.0:
            values = values / divide
        if add != 0.0:
            values = values + add
        yield values.tolist()
        size = min(2 * size, MAX_BLOCK)


def draw_stream(
    dist: Distribution | None,
    key: tuple[int, ...],
    *,
    group: int = 1,
    divide: float = 1.0,
    add: float = 0.0,
) -> Draw:
    """A stream of ``sum(group draws of dist) / divide + add`` values.

    Args:
        dist: the law of one draw; ``None`` (or a constant zero) means zero.
        key: this stream's ``(seed, *spawn_key)``, as :func:`seed_sequence` takes them.
        group: draws summed into one value (mini-batches per commit).
        divide: divisor of the sum (a worker's speed factor).
        add: constant added to every value (``model_bytes / bandwidth``).

    Returns:
        A callable that returns the next value each time it is called.
    """
    if is_zero(dist):
        # Skip the generator altogether: no randomness is consumed by a zero law (nor is its
        # seed sequence built, a large share of a short simulation's time: benchmarks/
        # RESULTS.md, section "2026-11-28, the timing model").
        return itertools.repeat(float(add)).__next__
    rng = np.random.default_rng(seed_sequence(*key))
    return itertools.chain.from_iterable(_blocks(dist, rng, group, divide, add)).__next__


def draw_sum(draw: Draw, n: int) -> float:
    """The sum of the next ``n`` values of ``draw``, added in order: a task of ``n`` local
    steps drawn one mini-batch at a time (the timing model and `EmulatedCompute` alike)."""
    total = draw()
    for _ in range(n - 1):
        total += draw()
    return total


def check_compute(law: Distribution, speed: float, window: int = 1) -> None:
    """Refuse a compute law whose commits (``window`` draws divided by ``speed``) exceed
    `MAX_DRAW_SECONDS` with a probability above `TAIL_PROBABILITY` (virtual time would
    overflow: a law bounded at speed 1 may not be at speed 1e-300), or fall below
    `TINY_SECONDS` half the time (virtual time would not advance)."""
    # P(sum of `window` draws > x) <= window * P(one draw > x / window)
    p = min(1.0, window * law.survival(MAX_DRAW_SECONDS * speed / window))
    if p > TAIL_PROBABILITY:
        raise ValueError(
            f"compute {law!r} at speed {speed!r} takes more than {MAX_DRAW_SECONDS:g} s a "
            f"commit with probability {p:.3g}; allowed: a law and speed whose commits exceed "
            f"{MAX_DRAW_SECONDS:g} s with probability <= {TAIL_PROBABILITY:g} (a heavier tail "
            f"overflows virtual time): raise the speed or shorten the law"
        )
    below = 1.0 - law.survival(TINY_SECONDS * speed)
    if below > 0.5:
        raise ValueError(
            f"compute {law!r} at speed {speed!r} takes less than {TINY_SECONDS:g} s a batch "
            f"with probability {below:.3g}; allowed: a law and speed whose median batch takes "
            f"at least {TINY_SECONDS:g} s (virtual time must advance)"
        )


class WorkerDraws(NamedTuple):
    """The three draw streams of one worker (values in seconds)."""

    compute: Draw  # one commit's compute time, `window` batches / speed (or one batch's)
    push: Draw  # push latency, model transfer included
    pull: Draw  # pull latency, model transfer included


def worker_draws(spec: ClusterSpec, seed: int, worker: int) -> WorkerDraws:
    """Build worker ``worker``'s streams; they depend on its own spec and seed only."""
    ws = spec.workers[worker]
    window = spec.window_of(worker)
    if ws.speed != 1.0 or window != 1:  # at speed 1, window 1: checked when it was built
        check_compute(ws.compute, ws.speed, window)
    # Over a shared link the transfer is the link's (`_link.py`), not part of the latency.
    transfer = 0.0 if spec.shared_link else spec.transfer_seconds
    return WorkerDraws(
        compute=draw_stream(
            ws.compute,
            (seed, WORKER_KEY, worker, COMPUTE),
            # A population's own local steps sum a task's batches from a per-batch stream.
            group=1 if spec.batch_draws else window,
            divide=ws.speed,
        ),
        push=draw_stream(spec.push, (seed, WORKER_KEY, worker, PUSH), add=transfer),
        pull=draw_stream(spec.pull, (seed, WORKER_KEY, worker, PULL), add=transfer),
    )


def service_draw(spec: ClusterSpec, seed: int) -> Draw | None:
    """The server's service-time stream, or None when service takes no time."""
    if is_zero(spec.service):
        return None
    return draw_stream(spec.service, (seed, SERVER_KEY, SERVICE))


def drop_draw(seed: int, worker: int, p: float) -> Callable[[], bool]:
    """Whether each push of ``worker`` that reaches the server is lost in the network (with
    probability ``p``), one uniform draw of its own stream per push: the timing model and the
    real backends read the same decisions."""
    uniform = _uniform_stream(seed_sequence(seed, WORKER_KEY, worker, DROP))
    return lambda: uniform() < p


def _uniform_stream(sequence: np.random.SeedSequence) -> Draw:
    rng = np.random.default_rng(sequence)

    def blocks() -> Iterator[list[float]]:
        size = FIRST_BLOCK
        while True:
            yield rng.random(size).tolist()
            size = min(2 * size, MAX_BLOCK)

    return itertools.chain.from_iterable(blocks()).__next__


def uniform_draw(seed: int, use: int = DISCIPLINE) -> Draw:
    """The server's stream of uniform ``[0, 1)`` values for the RANDOM discipline (or, with
    ``use=SELECTION``, for a population's selections)."""
    return _uniform_stream(seed_sequence(seed, SERVER_KEY, use))

"""What can happen to a worker besides computing: churn, availability traces, slowdowns.

- `Churn`: independent alternating up and down periods, per worker, from t = 0 (up first):
  ``up_1, down_1, up_2, down_2, ...`` drawn from the worker's own streams. Going down loses
  the work in flight (a gradient already in service is committed); coming back up is a new
  worker process that pulls the current version (its first commit is ``fresh``).
- availability intervals ``(down_at, up_at)``: the same, from a published device
  availability trace; ``up_at = inf`` means gone for good.
- `Slowdowns`: transient stragglers. Episodes alternate with normal periods from t = 0
  (normal first): a normal period lasts an ``every`` draw, then an episode lasts a
  ``duration`` draw during which compute runs ``factor`` (a draw per episode) times slower.
  A computation spanning a boundary runs at each speed for its share of the time.

Joins, listed failures, churn and availability compose: a worker is up when every one of
them says it is (see `gemsim.timing._lives`). How much work they make a simulation, and the
limit on it, is `gemsim.timing._work`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gemsim._checks import check_instance, check_nonnegative, is_real

from ._distributions import DISTRIBUTION_TYPES, Distribution


def _set(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)


def _law(owner: str, name: str, value: object) -> Distribution:
    check_instance(f"{owner}.{name}", value, DISTRIBUTION_TYPES)
    mean = value.mean()  # type: ignore[union-attr]
    if not (mean > 0 and math.isfinite(mean)):
        raise ValueError(
            f"{owner}.{name} must have a finite mean > 0 (periods of zero or infinite mean "
            f"length never let the worker change state), got {value!r} with mean {mean!r}"
        )
    return value  # type: ignore[return-value]


@dataclass(frozen=True)
class Churn:
    """Alternating up and down periods (seconds), up first from t = 0."""

    uptime: Distribution
    downtime: Distribution

    def __post_init__(self) -> None:
        _law("Churn", "uptime", self.uptime)
        _law("Churn", "downtime", self.downtime)

    def availability(self) -> float:
        """Long-run fraction of time up: ``E[up] / (E[up] + E[down])``."""
        up = self.uptime.mean()
        return up / (up + self.downtime.mean())


@dataclass(frozen=True)
class Slowdowns:
    """Episodes of slow compute: ``every`` s normal, then ``duration`` s at ``factor`` times
    the compute time, repeated from t = 0."""

    every: Distribution
    factor: Distribution
    duration: Distribution

    def __post_init__(self) -> None:
        _law("Slowdowns", "every", self.every)
        _law("Slowdowns", "duration", self.duration)
        check_instance("Slowdowns.factor", self.factor, DISTRIBUTION_TYPES)
        if self.factor.survival(0.0) < 1.0:
            raise ValueError(
                f"Slowdowns.factor must draw values > 0 only (a factor of 0 would compute in no "
                f"time), got {self.factor!r}"
            )

    def time_per_work(self, inverse_factor_mean: float) -> float:
        """Long-run seconds per second of normal-speed compute for a worker that always
        computes: ``(E[every] + E[duration]) / (E[every] + E[duration] E[1/factor])``.

        Equivalently the mixture of normal and slowed compute, weighted by the share of work
        done in each: ``(1 - p) + p E_w[factor]``. ``E[1/factor]`` is given because it has no
        closed form for every law.
        """
        every, duration = self.every.mean(), self.duration.mean()
        return (every + duration) / (every + duration * inverse_factor_mean)


def check_intervals(owner: str, value: object) -> tuple[tuple[float, float], ...]:
    """Down intervals ``(down_at, up_at)`` with ``0 <= down_at < up_at`` (``up_at`` may be
    ``inf``), sorted by ``down_at``; overlapping intervals are allowed and merge."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ValueError(f"{owner} must be a sequence of (down_at, up_at) pairs, got {value!r}")
    out = []
    for i, pair in enumerate(value):
        if isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise ValueError(f"{owner}[{i}] must be a (down_at, up_at) pair, got {pair!r}")
        down = check_nonnegative(f"{owner}[{i}] down_at", pair[0])
        up = pair[1]
        if not (is_real(up) and float(up) > down):
            raise ValueError(
                f"{owner}[{i}] up_at must be a number > down_at ({down!r}) or inf, got {up!r}"
            )
        out.append((down, float(up)))
    return tuple(sorted(out))


MAX_EVENTS = 10**7
"""The most churn and slowdown events (a worker going down or up, an episode starting or
ending) a simulation may be expected to need (`gemsim.timing.check_work`), so that its time
and memory stay within what one run should take (the rate and the memory per event are
measured in benchmarks/RESULTS.md, section "2026-11-28, the timing model"); the bundled
scenarios need a few hundred."""

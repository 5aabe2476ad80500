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
them says it is (see `gemsim.timing._lives`).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from gemsim._checks import check_instance, check_nonnegative, is_real

from ._distributions import DISTRIBUTION_TYPES, MAX_DRAW_SECONDS, Distribution, Empirical


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


# --- how much work a cluster's churn and slowdowns make (checked before it is simulated) ---

MAX_EVENTS = 10**7
"""The most churn and slowdown events (a worker going down or up, an episode starting or
ending) a simulation may be expected to need. Measured on a 2-core machine: about 80,000
events a second and 80 bytes each, so 10^7 take two minutes and under 1 GB; the bundled
scenarios need a few hundred."""

QUANTILE_LEVELS = tuple((j + 0.5) / 32 for j in range(32))
"""Where a law is sampled (deterministically: no random draw) to average over it."""


def _bits(x: float) -> int:
    return struct.unpack("<q", struct.pack("<d", x))[0]


def _float(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<q", bits))[0]


def _quantile(law: Distribution, level: float) -> float:
    """The smallest x with P(draw <= x) >= level, by bisection over the floats' bit patterns
    (ordered like the floats for x >= 0): 63 calls of `survival` at most, exact."""
    if 1.0 - law.survival(0.0) >= level:
        return 0.0
    lo, hi = 0, _bits(MAX_DRAW_SECONDS * 4)  # every law is bounded by MAX_DRAW_SECONDS
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if 1.0 - law.survival(_float(mid)) >= level:
            hi = mid
        else:
            lo = mid
    return _float(hi)


def _quantiles(law: Distribution, cache: dict[int, list[float]]) -> list[float]:
    """The law at `QUANTILE_LEVELS`: an average over them is its mean, finite (the levels
    stop short of the tail), so a law of infinite mean still has a typical value."""
    key = id(law)
    if key not in cache:
        if isinstance(law, Empirical):  # survival is a pass over the samples: sort once
            array = law._array  # noqa: SLF001 - same package
            cache[key] = np.quantile(array, QUANTILE_LEVELS, method="inverted_cdf").tolist()
        else:
            cache[key] = [_quantile(law, level) for level in QUANTILE_LEVELS]
    return cache[key]


def _typical(law: Distribution | None, cache: dict[int, list[float]]) -> float:
    return 0.0 if law is None else math.fsum(_quantiles(law, cache)) / len(QUANTILE_LEVELS)


class WorkerPace(NamedTuple):
    """A worker's commits and churn/slowdown events per second of virtual time (estimates)."""

    commits: float
    events: float


class WorkEstimate(NamedTuple):
    """What a simulation would take, roughly (`expected_work`)."""

    events: float  # churn and slowdown events
    seconds: float  # virtual time (inf: the budget is never reached)
    commits: float
    stuck: int | None  # a worker that cannot commit within its up periods


def _pace(worker, window: int, latency: float, cache: dict[int, list[float]]) -> WorkerPace:
    """Commits per second at the typical cycle (compute of `window` batches at the worker's
    speed, plus pull and push); an up period holds `m(u) ~ max(P(batch <= u), u / cycle - 1)`
    commits (a renewal count's lower bound; work in flight at a down is lost), averaged over
    the up periods' quantiles. Slowdowns divide the pace by the long-run stretch of compute."""
    speed = worker.speed
    # At least the smallest float: a cycle that rounds to 0 s is as fast as can be.
    cycle = max(window * _typical(worker.compute, cache) / speed + latency, math.ulp(0.0))
    commits, events = 1.0 / cycle, 0.0
    if worker.slowdowns is not None:
        slow = worker.slowdowns
        inverse = [1.0 / q if q > 0 else math.inf for q in _quantiles(slow.factor, cache)]
        stretch = slow.time_per_work(math.fsum(inverse) / len(inverse))
        if stretch > 0:
            commits /= stretch
        events += 2.0 / (slow.every.mean() + slow.duration.mean())
    if worker.churn is not None:
        churn = worker.churn
        period = churn.uptime.mean() + churn.downtime.mean()
        per_up = [
            max(1.0 - worker.compute.survival(u * speed), u / cycle - 1.0)
            for u in _quantiles(churn.uptime, cache)
        ]
        commits = min(commits, math.fsum(per_up) / len(per_up) / period)
        events += 2.0 / period
    return WorkerPace(commits, events)


def expected_work(spec) -> WorkEstimate:
    """About how many churn and slowdown events, seconds of virtual time and commits a
    simulation of the `ClusterSpec` ``spec`` needs. Each law counts by its typical value (an
    average over its quantiles, finite even where its mean is not: a Pareto law of
    ``alpha <= 1`` still commits). Rough: within a small factor of a simulation (tests/timing
    checks a few); the limits it is held to are far above what any bundled scenario needs.
    The workers' lives other than churn are left out."""
    from ._cluster import CommitBudget, SecondsBudget

    cache: dict[int, list[float]] = {}
    latency = spec.transfer_seconds + _typical(spec.pull, cache) + _typical(spec.push, cache)
    paces: dict[tuple, WorkerPace] = {}
    workers: list[WorkerPace] = []
    for ws in spec.workers:
        key = (id(ws.compute), ws.speed, id(ws.churn), id(ws.slowdowns))
        if key not in paces:  # workers of one group share their laws: estimate them once
            paces[key] = _pace(ws, spec.window, latency, cache)
        workers.append(paces[key])
    stuck = next((w for w, pace in enumerate(workers) if pace.commits <= 0.0), None)
    rate = math.fsum(p.commits for p in workers)
    service = _typical(spec.service, cache)
    if service > 0:  # one commit at a time at the server
        rate = min(rate, 1.0 / service)
    events_per_second = math.fsum(p.events for p in workers)
    budget = spec.budget
    if isinstance(budget, SecondsBudget):
        seconds = budget.seconds
        return WorkEstimate(seconds * events_per_second, seconds, seconds * rate, stuck)
    if isinstance(budget, CommitBudget):
        seconds = budget.commits / rate if rate > 0 else math.inf
        events = seconds * events_per_second if events_per_second > 0 else 0.0
        return WorkEstimate(events, seconds, float(budget.commits), stuck)
    quota = budget.commits_per_worker(spec.window)  # a StepsBudget: every worker's commits
    spans = [quota / p.commits if p.commits > 0 else math.inf for p in workers]
    events = math.fsum(s * p.events for s, p in zip(spans, workers, strict=True) if p.events)
    return WorkEstimate(events, max(spans), float(quota * len(workers)), stuck)


def _vanishing_ups(spec, seconds: float) -> int | None:
    """A worker whose churn up periods are nearly all below the resolution of the clock at
    the times the simulation reaches (the budget's span, or a long down period): added to
    the time they start at, they vanish, the down periods around them merge without end and
    the worker never comes back up (the merging of down intervals never finishes)."""
    cache: dict[int, list[float]] = {}
    seen: set[int] = set()
    for w, ws in enumerate(spec.workers):
        if ws.churn is None or id(ws.churn) in seen:
            continue
        seen.add(id(ws.churn))
        late = max(seconds, max(_quantiles(ws.churn.downtime, cache)))
        if ws.churn.uptime.survival(late * 2.0**-52) < 1e-3:
            return w
    return None


def check_work(spec) -> None:
    """Refuse a `ClusterSpec` whose simulation would be endless or far too long: churn up
    periods too short for any commit or that vanish beside the clock, more churn and slowdown
    events than `MAX_EVENTS`, or a seconds budget of more commits than a trace may hold at
    the laws' typical values (`ClusterSpec` judges it by their means, and an infinite mean
    counts no commits). A ValueError says which limit was hit and what to change: like the
    budget's own size check, a typo such as `uptime: {dist: constant, value: 1e-6}` must fail
    before simulating, not after hours."""
    from . import _cluster

    work = expected_work(spec)
    if work.stuck is not None and math.isinf(work.seconds):
        ws = spec.workers[work.stuck]
        raise ValueError(
            f"worker {work.stuck} cannot commit: its up periods ({ws.churn.uptime!r}) are too "
            f"short for a commit of {ws.compute!r} at speed {ws.speed!r}, so the budget "
            f"{spec.budget!r} is never reached; allowed: up periods long enough for commits "
            f"(lengthen churn.uptime, or give a seconds budget)"
        )
    vanishing = _vanishing_ups(spec, work.seconds if math.isfinite(work.seconds) else 0.0)
    if vanishing is not None:
        churn = spec.workers[vanishing].churn
        raise ValueError(
            f"worker {vanishing}'s churn up periods ({churn.uptime!r}) are below one part in "
            f"2^52 of the times the simulation reaches (its down periods {churn.downtime!r}, "
            f"about {work.seconds:.3g} s in all): added to the clock they vanish, so the "
            f"worker never comes back up; allowed: up periods longer than that (lengthen "
            f"churn.uptime or shorten churn.downtime)"
        )
    if not work.commits <= _cluster.MAX_COMMITS:
        raise ValueError(
            f"the budget {spec.budget!r} means about {work.commits:.3g} commits at the "
            f"typical compute, network and service times; allowed: at most "
            f"{_cluster.MAX_COMMITS:.0e} (a trace must fit in memory): shorten the budget"
        )
    if not work.events <= MAX_EVENTS:
        raise ValueError(
            f"churn and slowdowns mean about {work.events:.3g} events (a worker going down or "
            f"up, a slowdown starting or ending) over about {work.seconds:.3g} s of virtual "
            f"time for the budget {spec.budget!r}; allowed: at most {MAX_EVENTS:.0e} (the "
            f"simulation must end in reasonable time): lengthen the churn or slowdown "
            f"periods, or shorten the budget"
        )

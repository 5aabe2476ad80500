"""How much work a simulation of a cluster would take, checked before it is simulated.

`expected_work` estimates the churn and slowdown events, the virtual time and the commits a
`ClusterSpec` needs from its laws' typical values; `check_work` refuses a spec whose
simulation would be endless or far too long. The limits are the specs' own modules' facts
(`_cluster_checks.MAX_COMMITS`, `_churn.MAX_EVENTS`) and are read from them at each check.
"""

from __future__ import annotations

import functools
import math
import struct
from typing import NamedTuple

import numpy as np

from . import _churn, _cluster_checks
from ._budget import CommitBudget, SecondsBudget
from ._cluster import ClusterSpec
from ._distributions import MAX_DRAW_SECONDS, Constant, Distribution, Empirical
from ._worker_spec import WorkerSpec

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
        if isinstance(law, Constant):  # every level's smallest x is the value (the bisection's)
            cache[key] = [law.value] * len(QUANTILE_LEVELS)
        elif isinstance(law, Empirical):  # survival is a pass over the samples: sort once
            array = law._array  # noqa: SLF001 - same package
            cache[key] = np.quantile(array, QUANTILE_LEVELS, method="inverted_cdf").tolist()
        else:
            try:
                cache[key] = list(_law_quantiles(law))
            except TypeError:  # a law that cannot be hashed: computed for this check alone
                cache[key] = [_quantile(law, level) for level in QUANTILE_LEVELS]
    return cache[key]


@functools.lru_cache(maxsize=4096)
def _law_quantiles(law: Distribution) -> tuple[float, ...]:
    """`_quantile` at every level, kept per law for the process: the laws are frozen
    dataclasses, equal where their parameters are, and a sweep checks the same laws once per
    run (about 5 ms of bisection each; a cluster may have a law per worker, 1,000 of them)."""
    return tuple(_quantile(law, level) for level in QUANTILE_LEVELS)


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


def _pace(
    worker: WorkerSpec, window: int, latency: float, cache: dict[int, list[float]]
) -> WorkerPace:
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


def expected_work(spec: ClusterSpec) -> WorkEstimate:
    """About how many churn and slowdown events, seconds of virtual time and commits a
    simulation of the `ClusterSpec` ``spec`` needs. Each law counts by its typical value (an
    average over its quantiles, finite even where its mean is not: a Pareto law of
    ``alpha <= 1`` still commits). Rough: within a small factor of a simulation (tests/timing
    checks a few); the limits it is held to are far above what any bundled scenario needs.
    The workers' lives other than churn are left out."""
    cache: dict[int, list[float]] = {}
    latency = spec.transfer_seconds + _typical(spec.pull, cache) + _typical(spec.push, cache)
    if spec.population is not None:
        return _population_work(spec, latency, cache)
    paces: dict[tuple, WorkerPace] = {}
    workers: list[WorkerPace] = []
    for w, ws in enumerate(spec.workers):
        window = spec.window_of(w)
        key = (id(ws.compute), ws.speed, id(ws.churn), id(ws.slowdowns), window)
        if key not in paces:  # workers of one group share their laws: estimate them once
            paces[key] = _pace(ws, window, latency, cache)
        workers.append(paces[key])
    stuck = next((w for w, pace in enumerate(workers) if pace.commits <= 0.0), None)
    # A lost push costs its cycle: commits come (1 - drop_push) as often (at most 1/(1 - p)
    # cycles a commit, bounded since p < 1).
    rate = math.fsum(p.commits for p in workers) * (1.0 - spec.drop_push)
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
    quotas = spec.commit_quotas(budget)  # a StepsBudget: each worker's commits
    pairs = zip(quotas, workers, strict=True)
    spans = [q / p.commits if p.commits > 0 else math.inf for q, p in pairs]
    events = math.fsum(s * p.events for s, p in zip(spans, workers, strict=True) if p.events)
    return WorkEstimate(events, max(spans), float(sum(quotas)), stuck)


def _population_work(
    spec: ClusterSpec, latency: float, cache: dict[int, list[float]]
) -> WorkEstimate:
    """`expected_work` for a population's slots: a task takes the slot's typical cycle with
    the compute divided by the clients' typical speed (an average of ``1/speed`` over its
    quantiles), and completes when its client stays up that long: for a task started at a
    uniform point of an up period of length ``u``, with probability ``max(0, 1 - cycle/u)``,
    averaged over the up periods' quantiles. Churn events: every client's up and down
    periods over the run (the most the calendar may draw)."""
    population = spec.population
    inverse = 1.0
    if population.speed is not None:
        inverse = math.fsum(1.0 / q for q in _quantiles(population.speed, cache)) / len(
            QUANTILE_LEVELS
        )
    churn = population.churn
    rate = 0.0
    stuck = None
    for w, ws in enumerate(spec.workers):
        typical = spec.window * _typical(ws.compute, cache) * inverse / ws.speed
        cycle = max(typical + latency, math.ulp(0.0))
        done = 1.0
        if churn is not None:
            ups = _quantiles(churn.uptime, cache)
            done = math.fsum(max(0.0, 1.0 - cycle / u) if u > 0 else 0.0 for u in ups) / len(ups)
        if done <= 0.0 and stuck is None:
            stuck = w
        rate += done / cycle
    service = _typical(spec.service, cache)
    if service > 0:
        rate = min(rate, 1.0 / service)
    per_second = 0.0
    if churn is not None:
        per_second = population.n_clients * 2.0 / (churn.uptime.mean() + churn.downtime.mean())
    budget = spec.budget
    if isinstance(budget, SecondsBudget):
        seconds = budget.seconds
        return WorkEstimate(seconds * per_second, seconds, seconds * rate, stuck)
    seconds = budget.commits / rate if rate > 0 else math.inf
    events = seconds * per_second if per_second > 0 else 0.0
    return WorkEstimate(events, seconds, float(budget.commits), stuck)


def _vanishing_ups(spec: ClusterSpec, seconds: float) -> int | None:
    """A worker whose churn up periods are nearly all below the resolution of the clock at
    the times the simulation reaches (the budget's span, or a long down period): added to
    the time they start at, they vanish, the down periods around them merge without end and
    the worker never comes back up (the merging of down intervals never finishes)."""
    cache: dict[int, list[float]] = {}
    seen: set[int] = set()
    if spec.population is not None and spec.population.churn is not None:
        churn = spec.population.churn
        late = max(seconds, max(_quantiles(churn.downtime, cache)))
        if churn.uptime.survival(late * 2.0**-52) < 1e-3:
            return -1  # the population's clients
    for w, ws in enumerate(spec.workers):
        if ws.churn is None or id(ws.churn) in seen:
            continue
        seen.add(id(ws.churn))
        late = max(seconds, max(_quantiles(ws.churn.downtime, cache)))
        if ws.churn.uptime.survival(late * 2.0**-52) < 1e-3:
            return w
    return None


def check_work(spec: ClusterSpec) -> None:
    """Refuse a `ClusterSpec` whose simulation would be endless or far too long: churn up
    periods too short for any commit or that vanish beside the clock, more churn and slowdown
    events than `_churn.MAX_EVENTS`, or a seconds budget of more commits than a trace may hold at
    the laws' typical values (`ClusterSpec` judges it by their means, and an infinite mean
    counts no commits). A ValueError says which limit was hit and what to change: like the
    budget's own size check, a typo such as `uptime: {dist: constant, value: 1e-6}` must fail
    before simulating, not after hours."""
    work = expected_work(spec)
    population = spec.population
    if population is not None and work.stuck is not None and math.isinf(work.seconds):
        raise ValueError(
            f"no task can finish: the clients' up periods ({population.churn.uptime!r}) are "
            f"too short for a task of {spec.workers[work.stuck].compute!r} at the clients' "
            f"speeds, so the budget {spec.budget!r} is never reached; allowed: up periods "
            f"long enough for tasks (lengthen Population.churn.uptime, or give a seconds "
            f"budget)"
        )
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
        if vanishing < 0:
            churn, who, what = spec.population.churn, "the clients'", "client"
        else:
            churn, who, what = spec.workers[vanishing].churn, f"worker {vanishing}'s", "worker"
        raise ValueError(
            f"{who} churn up periods ({churn.uptime!r}) are below one part in "
            f"2^52 of the times the simulation reaches (its down periods {churn.downtime!r}, "
            f"about {work.seconds:.3g} s in all): added to the clock they vanish, so the "
            f"{what} never comes back up; allowed: up periods longer than that (lengthen "
            f"churn.uptime or shorten churn.downtime)"
        )
    if not work.commits <= _cluster_checks.MAX_COMMITS:
        raise ValueError(
            f"the budget {spec.budget!r} means about {work.commits:.3g} commits at the "
            f"typical compute, network and service times; allowed: at most "
            f"{_cluster_checks.MAX_COMMITS:.0e} (a trace must fit in memory): shorten the budget"
        )
    if not work.events <= _churn.MAX_EVENTS:
        raise ValueError(
            f"churn and slowdowns mean about {work.events:.3g} events (a worker going down or "
            f"up, a slowdown starting or ending) over about {work.seconds:.3g} s of virtual "
            f"time for the budget {spec.budget!r}; allowed: at most {_churn.MAX_EVENTS:.0e} (the "
            f"simulation must end in reasonable time): lengthen the churn or slowdown "
            f"periods, or shorten the budget"
        )

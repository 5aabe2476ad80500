"""A simulated run (or the replay of a given trace): its trace from the sweep's trace store or
simulated here, executed by the engine with real gradients at the exact stale parameters."""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from gemsim import config
from gemsim._lru import Lru
from gemsim.trace import CommitTrace
from gemsim.types import Progress

from ..record._identity import RunIdentity
from ..record._provenance import utc_now
from ..record._record import Produced
from ..sweep._traces import Traces
from ._stages import EXECUTORS, build_problem


class Inputs(NamedTuple):
    """What a simulated run executes: its rule and problem, its trace and the plan of it, and
    where the trace came from (a population's per-client report with it, its store note)."""

    rule: Any
    problem: Any
    trace: CommitTrace
    plan: Any  # engine.Plan
    clients: Any = None  # timing.ClientReport | None
    note: Any = None


def inputs_of(who: RunIdentity, trace: CommitTrace | None, traces: Traces | None) -> Inputs:
    """A simulated run's inputs: the given `trace` (a replay), else its trace from `traces`
    (a sweep's trace store) or simulated here."""
    from gemsim import engine

    scenario = who.expanded.scenario
    rule, problem = config.build_rule(scenario), build_problem(scenario)
    note, clients = None, None
    if trace is None:
        (trace, clients), note = (traces or Traces()).timed_for(who)
    period = config.eval_period(scenario)
    key = (rule.window, tuple(sorted(period.items())))
    plan = PLANS.get_for(trace, key, lambda: engine.plan_of(trace, window=rule.window, **period))
    return Inputs(rule, problem, trace, plan, clients, note)


PLANS = Lru(8)
"""Plans by trace (`Lru.get_for`), window and evaluation period: the runs of a sweep that
share a trace (its learning rates) share one (a plan of 20,000 commits took about 4 ms to
make)."""


def simulated_run(
    who: RunIdentity,
    trace: CommitTrace | None,
    progress: Progress | None,
    traces: Traces | None = None,
) -> Produced:
    """What a simulated run (or the replay of `trace`) produced; a simulated trace, and a
    population's per-client report with it, comes from `traces` (a sweep's trace store), or
    is simulated here."""
    started, started_at = time.perf_counter(), utc_now()
    rule, problem, trace, plan, clients, note = inputs_of(who, trace, traces)
    executor = EXECUTORS.get(who.expanded.scenario, rule, problem, trace.n_workers)
    out = executor.execute(plan, problem=problem, params=problem.init_params, progress=progress)
    return Produced(
        trace,
        out,
        started,
        started_at,
        executor=type(executor).__name__,
        trace_note=note,
        clients=clients,
    )

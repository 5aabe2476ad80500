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
    where the trace came from (a population's per-client report with it, its store note);
    `rows`: the rows its rule keeps for the clients the trace names, where fewer than all
    (`named_rows`)."""

    rule: Any
    problem: Any
    trace: CommitTrace
    plan: Any  # engine.Plan
    clients: Any = None  # timing.ClientReport | None
    note: Any = None
    rows: int | None = None


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
    owners = config.data_owners(scenario) if config.keeps_client_state(scenario) else None
    key = (rule.window, tuple(sorted(period.items())), owners)

    def make():
        plan = engine.plan_of(trace, window=rule.window, **period)
        return (plan, None) if owners is None else named_rows(plan, owners)

    plan, rows = PLANS.get_for(trace, key, make)
    if rows is not None:
        rule = config.build_rule(scenario, rows)
    return Inputs(rule, problem, trace, plan, clients, note, rows)


def named_rows(plan, n_clients: int) -> tuple[Any, int | None]:
    """``(plan, rows)`` for a rule with per-client state: the plan with each commit's row
    among the clients its trace names and the rows to keep (`engine.kept_rows`), where fewer
    than all N; else the plan as it is and None. A client that never commits has its row never
    read: at N = 10,000 clients of the CNN and 600 commits, 1,024 rows of 0.6 MiB are kept
    instead of 6.1 GiB, and the bits are the same."""
    from gemsim import engine

    with_rows, named = engine.client_rows(plan)
    rows = engine.kept_rows(named, n_clients)
    return (with_rows, rows) if rows < n_clients else (plan, None)


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
    rule, problem, trace, plan, clients, note, rows = inputs_of(who, trace, traces)
    executor = EXECUTORS.get(who.expanded.scenario, rule, problem, trace.n_workers, rows)
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

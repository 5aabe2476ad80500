"""A simulated run (or the replay of a given trace): its trace from the sweep's trace store or
simulated here, executed by the engine with real gradients at the exact stale parameters."""

from __future__ import annotations

import time

from gemsim import config
from gemsim.trace import CommitTrace
from gemsim.types import Progress

from ..record._identity import RunIdentity
from ..record._provenance import utc_now
from ..record._record import Produced
from ..sweep._traces import Traces
from ._stages import EXECUTORS, build_problem


def simulated_run(
    who: RunIdentity,
    trace: CommitTrace | None,
    progress: Progress | None,
    traces: Traces | None = None,
) -> Produced:
    """What a simulated run (or the replay of `trace`) produced; a simulated trace, and a
    population's per-client report with it, comes from `traces` (a sweep's trace store), or
    is simulated here."""
    from gemsim import engine

    scenario = who.expanded.scenario
    started, started_at = time.perf_counter(), utc_now()
    rule, problem = config.build_rule(scenario), build_problem(scenario)
    note, clients = None, None
    if trace is None:
        (trace, clients), note = (traces or Traces()).timed_for(who)
    plan = engine.plan_of(trace, window=rule.window, **config.eval_period(scenario))
    executor = EXECUTORS.get(scenario, rule, problem, trace.n_workers)
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

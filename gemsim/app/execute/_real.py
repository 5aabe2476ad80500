"""A real run: the scenario as a job for a real backend (processes, Ray), run, and what its
parameter server recorded (trace, final state, worker events, a population's clients)."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Mapping
from typing import Any

from gemsim import config
from gemsim.config import Scenario
from gemsim.types import Progress

from ..record._identity import RunIdentity
from ..record._provenance import utc_now
from ..record._record import Produced
from ._stages import build_problem, require


def real_run(who: RunIdentity, progress: Progress | None, address: str | None) -> Produced:
    """What a real run of `who` (its kind the backend) produced; `address` joins an existing
    Ray cluster."""
    from gemsim import real

    started, started_at = time.perf_counter(), utc_now()
    job = real_job(who.expanded.scenario)
    done = real.run_backend(who.kind.value, job, progress=progress, address=address)
    return Produced(
        done.trace,
        done.result,
        started,
        started_at,
        worker_events=tuple(dataclasses.asdict(e) for e in done.events),
        clients=done.clients,  # the server's: its tasks and their per-client sums
    )


def build_rule_and_problem(resolved: Mapping[str, Any]):
    """`(rule, problem)` from a resolved config: what every process of a real run calls
    (module level, so that a partial of it pickles into spawned processes)."""
    scenario = Scenario.model_validate(dict(resolved))
    return config.build_rule(scenario), build_problem(scenario)


def real_job(scenario: Scenario):
    """The scenario as a job for a real backend (a ScenarioError if it has no problem)."""
    from gemsim import real

    require(scenario, "problem")
    resolved = config.resolved_config(scenario)
    return real.RealJob(
        build=functools.partial(build_rule_and_problem, resolved),
        spec=config.build_cluster(scenario),
        seed=scenario.seed,
        emulate_latency=scenario.workers.emulate_latency,
        name=scenario.name,
    )

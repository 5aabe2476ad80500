"""From a validated Scenario to the typed objects the stages take (the schema ends here)."""

from __future__ import annotations

import math

from gemsim import timing

from .optimizer import SyncBlock, window_of
from .schema import Scenario


def build_cluster(
    scenario: Scenario, *, model_bytes: int = 0, steps_per_epoch: int | None = None
) -> timing.ClusterSpec:
    """The timing model's input. `steps_per_epoch` is needed only for an epochs budget."""
    net, server = scenario.network, scenario.server
    return timing.ClusterSpec(
        workers=_worker_specs(scenario),
        pull=net.pull.build() if net.pull else None,
        push=net.push.build() if net.push else None,
        bandwidth_bytes_per_s=net.bandwidth_bytes_per_s,
        model_bytes=int(model_bytes),
        service=server.service.build() if server.service else None,
        discipline=timing.Discipline[server.discipline.upper()],
        window=window_of(scenario.optimizer) if scenario.optimizer else 1,
        synchronous=isinstance(scenario.optimizer, SyncBlock),
        budget=_budget(scenario, steps_per_epoch),
    )


def _worker_specs(scenario: Scenario) -> tuple[timing.WorkerSpec, ...]:
    block = scenario.workers
    default = block.compute.build()
    laws, speeds = [], []
    for group in block.groups:
        law = group.compute.build() if group.compute else default
        laws += [law] * group.count
        speeds += [group.speed] * group.count
    laws += [default] * (block.count - len(laws))
    speeds += [1.0] * (block.count - len(speeds))
    joins = {j.worker: j.at for j in block.joins}
    failures: dict[int, list[timing.Failure]] = {}
    for f in sorted(block.failures, key=lambda f: f.at):
        failures.setdefault(f.worker, []).append(timing.Failure(f.at, f.restart_after))
    return tuple(
        timing.WorkerSpec(
            compute=laws[w],
            speed=speeds[w],
            join_at=joins.get(w, 0.0),
            failures=tuple(failures.get(w, ())),
        )
        for w in range(block.count)
    )


def _budget(scenario: Scenario, steps_per_epoch: int | None):
    budget = scenario.budget
    if budget.commits is not None:
        return timing.CommitBudget(budget.commits)
    if budget.seconds is not None:
        return timing.SecondsBudget(budget.seconds)
    if steps_per_epoch is None:
        raise ValueError("an epochs_per_worker budget needs the problem's steps per epoch")
    return timing.StepsBudget(max(1, math.ceil(budget.epochs_per_worker * steps_per_epoch)))

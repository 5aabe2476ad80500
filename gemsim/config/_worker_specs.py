"""The workers block as the timing model's per-worker specs (laws, speeds, lives)."""

from __future__ import annotations

from gemsim import timing
from gemsim._lru import Lru

from ._cluster_blocks import WorkersBlock
from ._scenario import Scenario

_SPECS = Lru(16)
"""Specs by the workers block's JSON: a sweep's runs that differ elsewhere (a learning rate)
share them; building 256 groups' laws took a few milliseconds, at each of about two builds
a run. The JSON holds the digest of every file a block reads."""


def worker_specs(scenario: Scenario) -> tuple[timing.WorkerSpec, ...]:
    block = scenario.workers
    return _SPECS.get(block.model_dump_json(), lambda: _specs_of(block))


def _specs_of(block: WorkersBlock) -> tuple[timing.WorkerSpec, ...]:
    default = block.compute.build()
    churn = block.churn.build() if block.churn else None
    slowdowns = block.slowdowns.build() if block.slowdowns else None
    laws, speeds, churns, slows = [], [], [], []
    for group in block.groups:
        laws += [group.compute.build() if group.compute else default] * group.count
        speeds += [group.speed] * group.count
        churns += [group.churn.build() if group.churn else churn] * group.count
        slows += [group.slowdowns.build() if group.slowdowns else slowdowns] * group.count
    rest = block.count - len(laws)
    laws, speeds = laws + [default] * rest, speeds + [1.0] * rest
    churns, slows = churns + [churn] * rest, slows + [slowdowns] * rest
    joins = {j.worker: j.at for j in block.joins}
    failures: dict[int, list[timing.Failure]] = {}
    for f in sorted(block.crashes, key=lambda f: f.at):
        failures.setdefault(f.worker, []).append(timing.Failure(f.at, f.restart_after))
    available = block.availability.intervals() if block.availability else {}
    return tuple(
        timing.WorkerSpec(
            compute=laws[w],
            speed=speeds[w],
            join_at=joins.get(w, 0.0),
            failures=tuple(failures.get(w, ())),
            churn=churns[w],
            availability=tuple(available.get(w, ())),
            slowdowns=slows[w],
        )
        for w in range(block.count)
    )

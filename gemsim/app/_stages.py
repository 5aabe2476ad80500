"""The stages a run needs, built from a scenario: its problem, its rule, a compiled executor,
and the job a real backend runs."""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from gemsim import config
from gemsim.config import Scenario, ScenarioError


def require(scenario: Scenario, block: str):
    """The scenario's `block`, or a ScenarioError saying that running needs it."""
    value = getattr(scenario, block)
    if value is None:
        raise ScenarioError(
            scenario.name,
            [f"{block}: required to run (gemsim trace needs only workers and budget)"],
        )
    return value


def build_problem(scenario: Scenario):
    """The scenario's problem: data on the device, streams keyed by the seed."""
    from gemsim import problems

    block = require(scenario, "problem")
    model, dataset = config.problem_args(scenario)
    return problems.make_problem(
        model,
        dataset,
        batch_size=block.batch_size,
        seed=scenario.seed,
        eval_subset=scenario.eval.subset,
    )


def build_rule(scenario: Scenario):
    require(scenario, "optimizer")
    return config.build_rule(scenario)


def build_rule_and_problem(resolved: Mapping[str, Any]):
    """`(rule, problem)` from a resolved config: what every process of a real run calls
    (module level, so that a partial of it pickles into spawned processes)."""
    scenario = Scenario.model_validate(dict(resolved))
    return build_rule(scenario), build_problem(scenario)


def real_job(scenario: Scenario):
    """The scenario as a job for a real backend."""
    from gemsim import real

    resolved = config.resolved_config(scenario)
    return real.RealJob(
        build=functools.partial(build_rule_and_problem, resolved),
        spec=config.build_cluster(scenario),
        seed=scenario.seed,
        emulate_latency=scenario.workers.emulate_latency,
        name=scenario.name,
    )


def compile_key(scenario: Scenario) -> str:
    """What a run's compiled executor depends on, as far as the scenario alone tells (the
    `ExecutorCache` key without building anything): a process that ran one run reuses its
    compiled code for another of the same key, so sweeps hand such runs to the same process."""
    parts = (scenario.optimizer, scenario.problem, scenario.workers.count, scenario.engine)
    return "|".join(p.model_dump_json() if hasattr(p, "model_dump_json") else str(p) for p in parts)


class ExecutorCache:
    """Compiled executors, reused across runs that differ only in seed or timing (repeats and
    timing sweeps then compile once). The key is everything the compiled code depends on."""

    def __init__(self, size: int = 8):
        self._size = size
        self._items: OrderedDict[tuple, Any] = OrderedDict()

    def get(self, scenario: Scenario, rule, problem, n_workers: int):
        import jax

        from gemsim import engine

        kind = engine.ExecutorKind(scenario.engine.executor)
        cls = engine.resolve_executor(kind, n_workers)
        key = (
            cls,
            scenario.optimizer.model_dump_json(),
            jax.tree_util.tree_structure(problem),
            n_workers,
            scenario.engine.chunk,
        )
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        executor = cls(
            rule,
            problem,
            params=problem.init_params,
            n_workers=n_workers,
            chunk=scenario.engine.chunk,
        )
        self._items[key] = executor
        if len(self._items) > self._size:
            self._items.popitem(last=False)
        return executor


# One per process: compiled code is the one thing worth keeping between the runs of a sweep.
EXECUTORS = ExecutorCache()

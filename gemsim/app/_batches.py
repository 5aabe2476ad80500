"""Runs of a sweep executed together in one compiled program (`engine.batch_runs`): which runs
form a batch, and a batch executed into one outcome per run.

Runs join a batch when their compiled code would be the same but for float hyperparameters
(`config.batch_signature`): repeats, seeds, timing sweeps, learning-rate or kappa sweeps.
`batch_runs: auto` batches where it was measured to pay (benchmarks/RESULTS.md, "Many runs in
one program"): on an accelerator always; on a CPU when a commit's gradient is small, at most
`AUTO_CPU_WORK` parameters x examples (a vmapped convolution costs more per sample than one
at a time there: the paper's CNN, at 10.5 M, runs faster one by one). A batch holds at most
`AUTO_MAX_RUNS` runs, and no more than fit in `AUTO_MAX_BYTES` of worker rows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gemsim import config
from gemsim.config import Scenario

from ._identity import RunKind
from ._provenance import utc_now
from ._record import RunIdentity, flat_params, metrics_frame, run_manifest

Progress = Callable[[int, int], None]

AUTO_MAX_RUNS = 64
"""Runs per batch under `auto`: past this the per-commit overhead is already paid for."""
AUTO_MAX_BYTES = 1 << 30
"""Under `auto`, a batch's worker rows (each worker's snapshot and rule state, per run) stay
below this."""
AUTO_CPU_WORK = 2_000_000
"""Under `auto` on a CPU, runs are batched when a commit's parameters x examples is at most
this (logistic regression on MNIST, b = 64: 0.5 M, batched; the paper's CNN: 10.5 M, not)."""
ROW_FLOATS_PER_PARAMETER = 4
"""A worker row's floats per parameter assumed for the memory bound (snapshot and up to three
parameter-sized states: GEM has two)."""


@dataclass(frozen=True)
class BatchPlan:
    """The units of a sweep (lists of positions), the size each unit executes at (`pad_to`:
    0 for a run alone), and what was chosen for each group of runs, one line per group."""

    units: list[list[int]]
    pad_to: list[int]
    notes: list[str]


def plan_batches(who: Sequence[RunIdentity], todo: Sequence[int]) -> BatchPlan:
    """Group the runs to execute (positions `todo` of `who`) into units: runs that may execute
    together in batches, the others alone.

    A group's batch size is chosen from the whole group (every run of the sweep that may join
    it, finished or not), and every batch of the group executes at that size, copies of its
    first run filling a batch that has fewer runs left (after `--resume`): on a CPU, XLA may
    pick other kernels for other batch sizes (a matrix product's summation order), so a run's
    results are a function of the run and its batch size alone, never of which runs were left
    to execute beside it.
    """
    groups: dict[tuple, list[int]] = {}
    for i, w in enumerate(who):
        scenario = w.expanded.scenario
        if w.kind is RunKind.SIM and _may_batch(scenario):
            key = (config.batch_signature(scenario)[0], str(scenario.engine.batch_runs))
            groups.setdefault(key, []).append(i)
    group_of = {i: key for key, members in groups.items() for i in members}
    sizes, notes = {}, []
    for key, members in groups.items():
        size, why = batch_size(who[members[0]].expanded.scenario, len(members))
        sizes[key] = size
        if len(members) > 1:
            setting = who[members[0]].expanded.scenario.engine.batch_runs
            notes.append(f"batch_runs {setting}: {len(members)} runs, batches of {size} ({why})")
    units: list[list[int]] = []
    pad_to: list[int] = []
    pending: dict[tuple, list[int]] = {}
    for i in todo:
        key = group_of.get(i)
        if key is None or sizes[key] < 2:
            units.append([i])
            pad_to.append(0)
            continue
        batch = pending.setdefault(key, [])
        if not batch:
            units.append(batch)  # the batch's place in the sweep order
            pad_to.append(sizes[key])
        batch.append(i)
        if len(batch) == sizes[key]:
            pending[key] = []
    return BatchPlan(units, pad_to, notes)


def _may_batch(scenario: Scenario) -> bool:
    engine = scenario.engine
    return (
        engine.batch_runs != "off"
        and engine.executor != "batched"
        and scenario.problem is not None
        and scenario.optimizer is not None
    )


def batch_size(scenario: Scenario, runs: int) -> tuple[int, str]:
    """How many runs of a group of `runs` execute together, and why: the batches of a group
    are as equal as they can be (at most the setting, or `auto`'s cap)."""
    setting = scenario.engine.batch_runs
    if setting != "auto":
        cap, why = int(setting), f"batch_runs {setting}"
    else:
        cap, why = _auto_cap(scenario)
    count = math.ceil(runs / max(1, cap))
    return math.ceil(runs / count), why


def _auto_cap(scenario: Scenario) -> tuple[int, str]:
    _, model_bytes = config.problem_sizes(scenario)
    params = max(1, model_bytes // 4)
    work = params * scenario.problem.batch_size * config.window_of(scenario.optimizer)
    platform = _platform()
    if platform == "cpu" and work > AUTO_CPU_WORK:
        return 1, (
            f"auto: {work:,} parameters x examples per commit > {AUTO_CPU_WORK:,}: faster one "
            "by one on a cpu"
        )
    row_bytes = 4 * ROW_FLOATS_PER_PARAMETER * params * (scenario.workers.count + 1)
    cap = max(1, min(AUTO_MAX_RUNS, AUTO_MAX_BYTES // row_bytes))
    return cap, f"auto on {platform}: {work:,} parameters x examples per commit"


def _platform() -> str:
    import jax

    return jax.default_backend()


# --- executing a batch ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Prepared:
    who: RunIdentity
    trace: Any
    run: Any  # engine.RunInputs
    executor_key: tuple


class ManyRunsCache:
    """Compiled many-runs executors, one per batch signature and lifted fields (per process)."""

    def __init__(self, size: int = 4):
        self._size, self._items = size, {}

    def get(self, key: tuple, make):
        if key not in self._items:
            if len(self._items) >= self._size:
                self._items.pop(next(iter(self._items)))
            self._items[key] = make()
        return self._items[key]


MANY = ManyRunsCache()


def execute_batch(
    unit: Sequence[RunIdentity], progress: Progress | None = None, *, pad_to: int = 0
) -> list[Any]:
    """The runs of a batch, executed together at `pad_to` runs (copies of the first fill the
    rest; their results are dropped); one outcome per run, in the unit's order. A run whose
    preparation fails (its data, its trace) is a `failed` outcome; the others go on."""
    from jax import errors

    from ._execute import Outcome, failed_outcome

    started, started_at = time.perf_counter(), utc_now()
    floats = [config.batch_signature(w.expanded.scenario)[1] for w in unit]
    lifted = tuple(sorted(p for p in floats[0] if len({f[p] for f in floats}) > 1))
    prepared: list[_Prepared | Any] = []
    for w, f in zip(unit, floats, strict=True):
        try:
            prepared.append(_prepare(w, {p: f[p] for p in lifted}, lifted))
        except Exception as exc:  # one run's bad data must not end the batch
            wall = time.perf_counter() - started
            prepared.append(failed_outcome(w, exc, wall_seconds=wall, started_at=started_at))
    ready = [p for p in prepared if isinstance(p, _Prepared)]
    size = max(pad_to, len(ready))
    try:
        results = _execute(ready + ready[:1] * (size - len(ready)), lifted, progress)
    except (
        errors.ConcretizationTypeError,
        errors.TracerBoolConversionError,
        errors.TracerIntegerConversionError,
        errors.TracerArrayConversionError,
    ) as exc:
        # The rule cannot take these hyperparameters traced (its factory branches on one):
        # batch only the runs whose values are equal.
        return _split_by_values(unit, lifted, floats, progress, exc, pad_to)
    except Exception as exc:  # a bug or resource error of one run must not fail the others
        note = f"the batch raised {type(exc).__name__}: its runs executed one by one"
        return [_alone(w, progress).placed({"batch_note": note}) for w in unit]
    wall = time.perf_counter() - started
    outcomes, done = [], iter(results)
    for i, p in enumerate(prepared):
        if not isinstance(p, _Prepared):
            outcomes.append(p)
            continue
        out = next(done)
        params = flat_params(out.params)
        manifest = run_manifest(
            p.who,
            p.trace,
            out,
            params,
            wall_seconds=wall / len(unit),
            started_at=started_at,
            ended_at=utc_now(),
            executor="ManyRunsExecutor",
        )
        batch = {"runs": size, "index": i, "lifted": list(lifted), "wall_seconds": wall}
        outcome = Outcome(manifest, p.trace, metrics_frame(p.trace, out), params)
        outcomes.append(outcome.placed({"batch": batch}))
    return outcomes


def _prepare(who: RunIdentity, hyper: Mapping[str, float], lifted: tuple[str, ...]):
    from gemsim import engine, timing

    from ._stages import build_problem, build_rule

    scenario = who.expanded.scenario
    rule, problem = build_rule(scenario), build_problem(scenario)
    trace = timing.simulate(config.build_cluster(scenario), seed=scenario.seed)
    plan = engine.plan_of(trace, window=rule.window, eval_every=scenario.eval.every)
    run = engine.RunInputs(plan, problem, problem.init_params, dict(hyper))
    signature, floats = config.batch_signature(scenario)
    constants = tuple((p, v) for p, v in sorted(floats.items()) if p not in lifted)
    return _Prepared(who, trace, run, (signature, lifted, constants, trace.n_workers))


def _execute(ready: list[_Prepared], lifted: tuple[str, ...], progress):
    from gemsim import engine

    if not ready:
        return []
    first = ready[0]
    scenario = first.who.expanded.scenario

    def make():
        rule_of = config.lifted_rule(scenario, lifted)
        return engine.ManyRunsExecutor(
            rule_of,
            first.run,
            n_workers=first.trace.n_workers,
            chunk=scenario.engine.chunk,
        )

    executor = MANY.get(first.executor_key, make)
    return executor.execute([p.run for p in ready], progress=progress)


def _split_by_values(unit, lifted, floats, progress, exc, pad_to) -> list[Any]:
    """The batch again as sub-batches of runs with equal lifted values (no lifting)."""
    groups: dict[tuple, list[int]] = {}
    for i, f in enumerate(floats):
        groups.setdefault(tuple(f[p] for p in lifted), []).append(i)
    outcomes: list[Any] = [None] * len(unit)
    reason = f"{sorted(lifted)} not traced ({type(exc).__name__}): batched by equal values"
    for members in groups.values():
        sub = [unit[i] for i in members]
        done = execute_batch(sub, progress, pad_to=pad_to)
        for i, outcome in zip(members, done, strict=True):
            outcomes[i] = outcome.placed({"batch_note": reason})
    return outcomes


def _alone(who: RunIdentity, progress):
    from ._execute import execute_run

    return execute_run(who, progress=progress)

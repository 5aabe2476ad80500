"""Which runs of a sweep execute together in one compiled program (`engine.many_runs`), and
how many at once; no JAX. Their execution is `_many_runs.py`.

Runs join a group when their compiled code would be the same but for float hyperparameters
(`config.many_runs_signature`): repeats, seeds, timing sweeps, learning-rate or kappa sweeps.
`many_runs: auto` groups runs where it was measured to pay (benchmarks/RESULTS.md, "Many runs
in one program"): on an accelerator always; on a CPU when a commit's gradient is small, at
most `AUTO_CPU_WORK` parameters x examples (a vmapped convolution costs more per sample than
one at a time there: the paper's CNN, at 10.5 M, runs faster one by one). A group executes at
most `AUTO_MAX_RUNS` runs at once, and no more than fit in `AUTO_MAX_BYTES` of worker rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gemsim import config
from gemsim.config import Scenario
from gemsim.types import RunKind

from ._record import RunIdentity

AUTO_MAX_RUNS = 64
"""Runs executed at once under `auto`: past this the per-commit overhead is already paid for."""
AUTO_MAX_BYTES = 1 << 30
"""Under `auto`, the worker rows of the runs executed at once (each worker's snapshot and rule
state, per run) stay below this."""
AUTO_CPU_WORK = 2_000_000
"""Under `auto` on a CPU, runs execute together when a commit's parameters x examples is at
most this (logistic regression on MNIST, b = 64: 0.5 M, together; the paper's CNN: 10.5 M,
not)."""
ROW_FLOATS_PER_PARAMETER = 4
"""A worker row's floats per parameter assumed for the memory bound (snapshot and up to three
parameter-sized states: GEM has two)."""


@dataclass(frozen=True)
class ManyRunsPlan:
    """The units of a sweep (lists of positions), the number of runs each unit executes at
    (`pad_to`: 0 for a run alone), and what was chosen for each group of runs, one line per
    group."""

    units: list[list[int]]
    pad_to: list[int]
    notes: list[str]


def plan_many_runs(who: Sequence[RunIdentity], todo: Sequence[int]) -> ManyRunsPlan:
    """Group the runs to execute (positions `todo` of `who`) into units: runs that may execute
    together, in units of the group's size, and the others alone.

    A group's unit size is chosen from the whole group (every run of the sweep that may join
    it, finished or not), and every unit of the group executes at that size, copies of its
    first run filling a unit that has fewer runs left (after `--resume`): on a CPU, XLA may
    pick other kernels for other numbers of runs (a matrix product's summation order), so a
    run's results are a function of the run and its unit size alone, never of which runs were
    left to execute beside it.
    """
    groups: dict[tuple, list[int]] = {}
    for i, w in enumerate(who):
        scenario = w.expanded.scenario
        if w.kind is RunKind.SIM and _may_join(scenario):
            key = (config.many_runs_signature(scenario)[0], str(scenario.engine.many_runs))
            groups.setdefault(key, []).append(i)
    group_of = {i: key for key, members in groups.items() for i in members}
    sizes, notes = {}, []
    for key, members in groups.items():
        size, why = unit_size(who[members[0]].expanded.scenario, len(members))
        sizes[key] = size
        if len(members) > 1:
            setting = who[members[0]].expanded.scenario.engine.many_runs
            notes.append(f"many_runs {setting}: {len(members)} runs, {size} at once ({why})")
    units: list[list[int]] = []
    pad_to: list[int] = []
    pending: dict[tuple, list[int]] = {}
    for i in todo:
        key = group_of.get(i)
        if key is None or sizes[key] < 2:
            units.append([i])
            pad_to.append(0)
            continue
        unit = pending.setdefault(key, [])
        if not unit:
            units.append(unit)  # the unit's place in the sweep order
            pad_to.append(sizes[key])
        unit.append(i)
        if len(unit) == sizes[key]:
            pending[key] = []
    return ManyRunsPlan(units, pad_to, notes)


def _may_join(scenario: Scenario) -> bool:
    engine = scenario.engine
    return (
        engine.many_runs != "off"
        and engine.executor != "wavefront"
        and scenario.problem is not None
        and scenario.optimizer is not None
    )


def unit_size(scenario: Scenario, runs: int) -> tuple[int, str]:
    """How many runs of a group of `runs` execute at once, and why: the units of a group are
    as equal as they can be (at most the setting, or `auto`'s cap)."""
    setting = scenario.engine.many_runs
    if setting != "auto":
        cap, why = int(setting), f"many_runs {setting}"
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

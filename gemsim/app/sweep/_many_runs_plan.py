"""Which runs of a sweep execute together in one compiled program (`engine.many_runs`), and
how many at once; no JAX. Their execution is `_many_runs.py`.

Runs join a group when their compiled code would be the same but for float hyperparameters
(`config.many_runs_signature`): repeats, seeds, timing sweeps, learning-rate or kappa sweeps.
`many_runs: auto` groups runs where it pays (benchmarks/RESULTS.md, sections `many_runs.py`
and `many_runs_auto.py`): on an accelerator always; on a CPU

- never when a commit's gradient is large, more than `AUTO_CPU_WORK` parameters x examples
  (a vmapped convolution costs more per sample than one at a time there: the paper's CNN, at
  10.5 M, runs faster one by one);
- when a commit reads a batch of `AUTO_MATMUL_EXAMPLES` examples or more (logistic
  regression, perceptrons: their matrix products vmap well), unless the group has one
  distinct rule (seeds, repeats) and fewer than `AUTO_MATMUL_COMMITS` commits in all: one by
  one then compiles one program, and together a larger one whose extra compilation (0.1-1.5 s
  measured on the bundled groups) outweighs what it saves at these budgets (9 of 11 bundled
  groups were slower together at 1,000 commits a run: benchmarks/RESULTS.md,
  `many_runs_auto.py`);
- when it reads fewer (the quadratics: a commit is a few passes over its parameters), where
  the estimate of `_saving` says so: together, a step's fixed cost is shared by its runs but
  every parameter costs more (vmapped passes over R rows, their writes into the [R, n + 1,
  K] slots: the tridiagonal quadratic at d = 10,000 runs 0.8x as fast together), and one
  program is compiled for the group where one by one compiles one per distinct rule (a
  learning-rate sweep, one per rate), a little larger than each. The estimate is a lower
  bound of what together saves on the project's CPU, so `auto` errs towards one by one,
  which is `off`: it may miss a gain, not lose to `off` (benchmarks/many_runs_auto.py
  measures both ways and `auto`'s choice).

A group executes at most `AUTO_MAX_RUNS` runs at once, and no more than fit in
`AUTO_MAX_BYTES` of worker rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gemsim import config
from gemsim.config import Scenario
from gemsim.types import RunKind

from ..record._identity import RunIdentity

AUTO_MAX_RUNS = 64
"""Runs executed at once under `auto`: past this the per-commit overhead is already paid for."""
AUTO_MAX_BYTES = 1 << 30
"""Under `auto`, the worker rows of the runs executed at once (each worker's snapshot and rule
state, and a rule's state per client, per run) stay below this."""
AUTO_CPU_WORK = 2_000_000
"""Under `auto` on a CPU, runs execute together when a commit's parameters x examples is at
most this (logistic regression on MNIST, b = 64: 0.5 M, together; the paper's CNN: 10.5 M,
not)."""
ROW_FLOATS_PER_PARAMETER = 4
"""A worker row's floats per parameter assumed for the memory bound (snapshot and up to three
parameter-sized states: GEM has two)."""
AUTO_MATMUL_COMMITS = 100_000
"""Under `auto` on a CPU, runs of one distinct rule whose commits read `AUTO_MATMUL_EXAMPLES`
or more examples execute together only past this many commits in all (estimated, `_commits`):
at the best gain measured together (25 us a commit, dirichlet_alpha's perceptron) 100,000
commits save 2.5 s, more than the largest extra compilation measured (1.5 s)."""
AUTO_MATMUL_EXAMPLES = 8
"""Examples a commit reads (batch x window) from which its gradient is a matrix product that
vmaps well on a CPU: such runs execute together as before (logistic regression 1.3x, the
perceptrons of the bundled scenarios 1.05-1.1x, benchmarks/RESULTS.md)."""
# The estimate of `_saving`, from the tridiagonal quadratic (downpour, b = 1) on the project's
# 2-core CPU (benchmarks/RESULTS.md, `many_runs_auto.py`, `fixed_costs.py`): one by one a commit
# costs STEP_US + PARAMETER_NS per parameter, together a step costs TOGETHER_STEP_RATIO x STEP_US
# for all its runs and each run PARAMETER_NS + EXTRA_PARAMETER_NS per parameter. STEP_US is the
# cheapest rule's: heavier rules (GEM's diagnostics, a noisy gradient) have a larger fixed cost,
# which together shares, so the estimate only errs on the side of one by one.
STEP_US = 2.0
TOGETHER_STEP_RATIO = 2.5
EXTRA_PARAMETER_NS = 0.65
COMPILE_S = 0.5
"""A commit loop's compilation, about (0.3-0.5 s with the compilation cache warm, 0.5-2 s
cold); the program of runs together compiles in about TOGETHER_COMPILE_RATIO of it."""
TOGETHER_COMPILE_RATIO = 1.4


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
        scenarios = [who[i].expanded.scenario for i in members]
        size, why = unit_size(scenarios[0], len(members), scenarios)
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


def unit_size(
    scenario: Scenario, runs: int, group: Sequence[Scenario] | None = None
) -> tuple[int, str]:
    """How many runs of a group of `runs` execute at once, and why: the units of a group are
    as equal as they can be (at most the setting, or `auto`'s cap). `group`: the group's
    scenarios, which `auto` weighs (default: `runs` runs like `scenario`)."""
    setting = scenario.engine.many_runs
    if setting != "auto":
        cap, why = int(setting), f"many_runs {setting}"
    else:
        cap, why = _auto_cap(scenario, list(group) if group is not None else [scenario] * runs)
    count = math.ceil(runs / max(1, cap))
    return math.ceil(runs / count), why


def _auto_cap(scenario: Scenario, group: Sequence[Scenario]) -> tuple[int, str]:
    _, model_bytes = config.problem_sizes(scenario)
    params = max(1, model_bytes // 4)
    examples = scenario.problem.batch_size * config.window_of(scenario.optimizer)
    work = params * examples
    platform = _platform()
    if config.reads_every_client(scenario):
        # Its sum over every client's row is computed only where a commit needs it (a
        # `lax.cond`); runs executed together compute both branches at every commit.
        return 1, "auto: the rule reads every client's row at some commits: one by one"
    if platform == "cpu" and work > AUTO_CPU_WORK:
        return 1, (
            f"auto: {work:,} parameters x examples per commit > {AUTO_CPU_WORK:,}: faster one "
            "by one on a cpu"
        )
    row_bytes = 4 * ROW_FLOATS_PER_PARAMETER * params * (scenario.workers.count + 1)
    clients = config.client_state_memory(scenario, model_bytes)  # its rows per client, a run
    row_bytes += 0 if clients is None else clients[0]
    cap = max(1, min(AUTO_MAX_RUNS, AUTO_MAX_BYTES // row_bytes))
    why = f"auto on {platform}: {work:,} parameters x examples per commit"
    if platform != "cpu" or cap < 2 or len(group) < 2:
        return cap, why
    if examples >= AUTO_MATMUL_EXAMPLES:
        if len({s.optimizer.model_dump_json() for s in group}) > 1:
            return cap, why
        commits = _group_commits(group)
        if commits >= AUTO_MATMUL_COMMITS:
            return cap, f"{why}; {commits:,.0f} commits of one rule"
        return 1, (
            f"{why}; one rule and {commits:,.0f} commits < {AUTO_MATMUL_COMMITS:,}: one "
            "program each way, the larger one together costs more than it saves: one by one"
        )
    size = math.ceil(len(group) / math.ceil(len(group) / cap))
    saving = _saving(group, params, size)
    if saving <= 0:
        return 1, f"{why}; together would save {saving:+.2f} s (estimated): one by one"
    return cap, f"{why}; together saves about {saving:.2f} s (estimated)"


def _saving(group: Sequence[Scenario], params: int, size: int) -> float:
    """Seconds that executing `group` together, `size` runs at once, saves over one by one
    (estimated, a lower bound on the project's CPU: see the constants above); <= 0: it does
    not pay. `params`: a run's parameters."""
    step_us = STEP_US * (1.0 - TOGETHER_STEP_RATIO / size) - EXTRA_PARAMETER_NS * params / 1e3
    commits = _group_commits(group)
    distinct = len({s.optimizer.model_dump_json() for s in group})  # programs one by one
    return commits * step_us * 1e-6 + (distinct - TOGETHER_COMPILE_RATIO) * COMPILE_S


def _group_commits(group: Sequence[Scenario]) -> float:
    """The group's runs' commits in all, estimated (`_commits`, once per distinct cluster)."""
    known: dict[str, float] = {}
    commits = 0.0
    for s in group:
        key = _cluster_key(s)
        if key not in known:
            known[key] = _commits(s)
        commits += known[key]
    return commits


def _cluster_key(scenario: Scenario) -> str:
    """What a run's commits depend on (runs of a group differ in their seed, rule floats,
    budget or timing)."""
    blocks = (scenario.budget, scenario.workers, scenario.network, scenario.server)
    parts = [b.model_dump_json() for b in blocks]
    parts += [str(config.window_of(scenario.optimizer)), str(scenario.clients)]
    if scenario.budget.epochs_per_worker is not None:  # the data's size, from the seed
        parts.append(str(scenario.seed))
    return "|".join(parts)


def _commits(scenario: Scenario) -> float:
    """A run's commits, about: its commit or steps budget, or its seconds at the workers'
    mean pace (the timing model's own estimate of a trace's size, `ClusterSpec`)."""
    from gemsim import timing

    if scenario.budget.commits is not None:
        return float(scenario.budget.commits)
    sizes = (1, 0)
    try:
        if scenario.budget.epochs_per_worker is not None:
            sizes = (config.problem_sizes(scenario, model_bytes=False)[0], 0)
        spec = config.build_cluster(scenario, sizes=sizes)
    except (ValueError, OSError):  # the run fails where it executes, with the error
        return 0.0
    budget = spec.budget
    if isinstance(budget, timing.StepsBudget):
        return float(sum(spec.commit_quotas(budget)))
    if isinstance(budget, timing.CommitBudget):
        return float(budget.commits)
    rate = sum(
        ws.speed / (spec.window_of(w) * ws.compute.mean()) for w, ws in enumerate(spec.workers)
    )
    if spec.service is not None and spec.service.mean() > 0:
        rate = min(rate, 1.0 / spec.service.mean())
    return budget.seconds * rate


def _platform() -> str:
    import jax

    return jax.default_backend()

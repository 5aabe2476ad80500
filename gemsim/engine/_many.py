"""Many runs in one program: runs that share every shape (rule kind, model, batch size, number of
workers) execute together, their commit loops vmapped over a leading run axis.

A sweep of small problems spends its time in per-commit overhead (a scan step, a few dozen
tiny fused kernels), not in arithmetic; R runs stepped together pay that overhead once per
step for all of them. Each run keeps its own trace, seed, data streams and hyperparameters:

- traces of unequal length are padded with inactive steps (they leave the run unchanged);
- the host steps in at the union of the runs' cut points (snapshot fills, evaluations), each
  run's fills and evaluations applied to that run alone;
- problem leaves that every run shares (a data set loaded once) are passed once, the others
  (keys, per-seed arrays) stacked on the run axis;
- hyperparameters that differ between the runs (`lifted`) reach the rule as traced scalars:
  the rule is built inside the vmapped function from each run's values.

Population runs (K slots serving N clients, `ExecutionPlan.population`) execute together as
persistent ones do, each commit reading its client's data and writing a fresh rule state; a
batch holds population runs only or persistent runs only (`_many_inputs.stack_inputs`):
mixed, the persistent runs would need a run-time select in their commit, and their programs,
and so their bits, would no longer be those of a run alone.

A run that diverges does not stop the others; it is executed again alone by the sequential
executor, so its status, diverging commit and last finite state are exactly those of a run
executed on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gemsim.types import PyTree

from ._executor import (
    EngineResult,
    Progress,
    check_owners,
    engine_result,
    evals_in_loop,
    select_owners,
)
from ._layout import RowLayout, initial_slots, pull_rows
from ._many_inputs import segments, split_problems, stack, stack_hyper, stack_inputs
from ._metrics import MetricsRecorder
from ._plan import ExecutionPlan
from ._sequential import SequentialExecutor
from ._step import (
    Carry,
    StepInput,
    commit_math,
    data_owner,
    gradient_phase,
    loop_steps,
    step_piece,
    traced_once,
)

RuleOf = Callable[[Mapping[str, Any]], Any]
"""Builds the rule from the values of the lifted hyperparameters (floats or traced scalars)."""


@dataclass(frozen=True)
class RunInputs:
    """One of the runs executed together: its plan, its problem (its seed's keys), its initial
    parameters and its values of the lifted hyperparameters (Python floats; {} when none are
    lifted); `eval_owners`, the data owners whose per-worker evaluation it keeps
    (`Executor.execute`; None: every one)."""

    plan: ExecutionPlan
    problem: Any
    params: PyTree
    hyper: Mapping[str, float]
    eval_owners: Any = None


class _RunState(NamedTuple):
    """What `commit_math` reads of one run's carry (its row is carried apart)."""

    theta: PyTree
    server: PyTree
    diverged: jax.Array
    diverged_at: jax.Array


_TIME_MAJOR = StepInput(
    commit=None,
    worker=0,
    staleness=0,
    first_step=0,
    active=0,
    round_end=0,
    client=0,
    pre_pull=0,
    local_steps=0,
    owner=0,
    buffer=0,
    client_row=0,
)  # vmap axes of one step's inputs: the commit index is the same for every run


class ManyRunsExecutor:
    """Executes runs of one rule family on problems of one shape together (final).

    `evals_in_loop`: the runs' evaluations inside the commit loop (True), between segments
    (False), or where the plans evaluate often and evaluations are small (None, as
    `SequentialExecutor`)."""

    def __init__(
        self,
        rule_of: RuleOf,
        example: RunInputs,
        *,
        n_workers: int,
        chunk: int = 512,
        evals_in_loop: bool | None = None,
    ):
        self.rule_of, self.n_workers, self.chunk = rule_of, n_workers, chunk
        self.evals_in_loop = evals_in_loop  # as `SequentialExecutor`'s
        rule = rule_of(example.hyper)
        self.layout = RowLayout.for_rule(rule, example.params, n_workers)
        self._treedef = jax.tree.structure(example.problem)
        self._singles: dict[tuple, SequentialExecutor] = {}
        self._chunk = jax.jit(self._chunk_fn, static_argnums=(6, 7), donate_argnums=2)
        self._eval_chunk = jax.jit(self._chunk_fn, static_argnums=(6, 7, 9), donate_argnums=2)
        self._fill = jax.jit(jax.vmap(self._fill_fn), donate_argnums=0)
        self._eval = jax.jit(self._eval_fn, static_argnums=(3, 4))
        self._carry = jax.jit(jax.vmap(self._carry_fn))

    def _problem(self, shared, stacked, mask):
        it_shared, it_stacked = iter(shared), iter(stacked)
        leaves = [next(it_stacked) if m else next(it_shared) for m in mask]
        return jax.tree.unflatten(self._treedef, leaves)

    def _chunk_fn(
        self,
        shared,
        stacked,
        carry: Carry,
        piece,
        n_steps,
        hyper,
        mask,
        padded,
        flags=None,
        per_worker: bool = False,
    ):
        """Commits [0, n_steps) of a piece of every run's inputs, in one loop.

        With `flags` ([P] bool), every run's central variable is also evaluated after each
        step whose flag is set, in a conditional (`_eval_fn`); the outputs are then
        `(StepOutputs, evaluations)`, zeros where the flag is not set. Without, the program is
        the one it always was.

        `piece` is `(inputs, next_workers)`, time-major ([P] commit index, [P, R] the rest;
        next_workers: whose row each step reads next) and padded to the executor's chunk P,
        so that one compiled program serves every segment length (a scan's length is part
        of its program). Each step vmaps the gradient work and the commit over the runs, then
        writes each run's new row in place: a vmapped row write is a scatter, which XLA on a
        CPU executes as a pass over the whole [R, n + 1, K] slots.
        """
        layout, spare = self.layout, self.n_workers
        inputs, next_workers = piece
        n_runs = carry.slots.shape[0]
        runs = jnp.arange(n_runs)

        def one(stacked, state: _RunState, row, inp: StepInput, hyper):
            problem, rule = self._problem(shared, stacked, mask), self.rule_of(hyper)
            pulled = layout.unravel(row)
            work = gradient_phase(
                rule,
                problem,
                pulled,
                data_owner(inp),
                inp.first_step,
                token=inp.commit,
                steps=inp.local_steps,
            )
            return commit_math(rule, state, inp, work, spare, padded=padded)

        # A persistent batch's inputs have no client (no leaf), most have no pull before
        # apply: their axes go with them.
        axes = _TIME_MAJOR._replace(
            client=None if inputs.client is None else 0,
            pre_pull=None if inputs.pre_pull is None else 0,
            local_steps=None if inputs.local_steps is None else 0,
            owner=None,
            buffer=None if inputs.buffer is None else 0,
            client_row=None if inputs.client_row is None else 0,
        )

        def evaluate(theta):
            return self._eval_fn(shared, stacked, theta, mask, per_worker)

        if flags is not None:
            evaluate, shapes = traced_once(evaluate, carry.theta)
            blank = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)

        def step(carry: Carry, rows, i):
            inp = jax.tree.map(lambda x: x[i], inputs)
            run_state = _RunState(carry.theta, carry.server, carry.diverged, carry.diverged_at)
            done, out = jax.vmap(one, in_axes=(0, 0, 0, axes, 0))(
                stacked, run_state, rows, inp, hyper
            )

            new_rows = jax.vmap(layout.ravel)(done.row_snapshot, done.ws)
            slots = carry.slots.at[runs, done.row_index].set(new_rows, unique_indices=True)
            next_rows = slots[runs, next_workers[i]]
            carry = Carry(done.theta, done.server, slots, done.diverged, done.diverged_at)
            if flags is not None:
                found = jax.lax.cond(flags[i], evaluate, lambda _: blank, carry.theta)
                out = (out, found)
            return carry, next_rows, out

        rows = carry.slots[runs, inputs.worker[0]]
        return loop_steps(step, carry, rows, inputs.commit.shape[0], n_steps)

    def _fill_fn(self, slots, theta, server, rows, fresh, hyper):
        return pull_rows(self.rule_of(hyper), self.layout, slots, theta, server, rows, fresh)

    def _eval_fn(self, shared, stacked, theta, mask, per_worker=True):
        def one(stacked, theta):
            problem = self._problem(shared, stacked, mask)
            return problem.evaluate(theta), problem.evaluate_workers(theta) if per_worker else {}

        return jax.vmap(one)(stacked, theta)

    def _carry_fn(self, params, hyper):
        state = self.rule_of(hyper).init(params, self.n_workers)
        return Carry(
            theta=params,
            server=state.server,
            slots=initial_slots(self.layout, params, state.workers, self.n_workers),
            diverged=jnp.zeros((), bool),
            diverged_at=jnp.full((), -1, jnp.int32),
        )

    def execute(
        self, runs: Sequence[RunInputs], *, progress: Progress | None = None
    ) -> list[EngineResult]:
        """Execute every run; one EngineResult per run, in order, each as if it ran alone."""
        if not runs:
            return []
        for r in runs:
            if r.plan.n_workers != self.n_workers:
                raise ValueError(f"plan has {r.plan.n_workers} workers, executor {self.n_workers}")
            r.plan.check_data_owners(r.problem)
        owners = [check_owners(r.eval_owners) for r in runs]
        shared, stacked, mask = split_problems([r.problem for r in runs], self._treedef)
        problems = (shared, stacked, mask)
        hyper = stack_hyper([r.hyper for r in runs])
        lengths = [len(r.plan) for r in runs]
        total, padded = max(lengths), len(set(lengths)) > 1
        inputs = stack_inputs([r.plan for r in runs], total)
        carry = self._carry(stack([r.params for r in runs]), hyper)
        recorders = [MetricsRecorder() for _ in runs]
        plans = [r.plan for r in runs]
        evals = np.unique(np.concatenate([p.evals for p in plans]))
        in_loop = evals.size > 0 and (
            evals_in_loop(runs[0].problem, total, evals.size)
            if self.evals_in_loop is None
            else self.evals_in_loop
        )
        per_worker = runs[0].problem.has_worker_data and any(
            o is None or o.size for o in owners
        )  # `_host_actions`: per worker only where a run wants some owners' values
        for start, stop in segments(plans, self.chunk, with_evals=not in_loop):
            piece = step_piece(inputs, start, stop, self.chunk, self.n_workers)
            n = np.int32(stop - start)
            if in_loop:
                flags = np.zeros(self.chunk, bool)
                here = evals[(evals >= start) & (evals < stop)]
                flags[here - start] = True
                args = (shared, stacked, carry, piece, n, hyper, mask, padded, flags, per_worker)
                carry, (out, found) = self._eval_chunk(*args)
                out, found = jax.device_get((out, found))
                self._record_evals(runs, here, start, found, recorders, owners)
            else:
                carry, out = self._chunk(shared, stacked, carry, piece, n, hyper, mask, padded)
                out = jax.device_get(out)
            for i, rec in enumerate(recorders):
                rec.add(jax.tree.map(lambda x, i=i, n=n: x[:n, i], out))
            if bool(np.all(np.asarray(carry.diverged))):
                break
            carry = self._host_actions(
                runs, problems, carry, hyper, stop - 1, recorders, owners, evaluate=not in_loop
            )
            if progress is not None:
                progress(stop, total)
        return self._results(runs, carry, recorders, owners)

    def _record_evals(self, runs, here, start: int, found, recorders, owners) -> None:
        """The evaluations made inside the loop at the commits `here`, each given to the runs
        whose plans evaluate there (a run that diverged is executed again alone)."""
        values, workers = found
        for k in here.tolist():
            j = k - start
            for i, r in enumerate(runs):
                if k in r.plan.eval_set:
                    mine = {name: v[j, i] for name, v in workers.items()}
                    mine = select_owners(mine, owners[i])
                    recorders[i].add_eval(k, {name: v[j, i] for name, v in values.items()}, mine)

    def _host_actions(
        self, runs, problems, carry: Carry, hyper, k: int, recorders, owners, *, evaluate=True
    ) -> Carry:
        n = self.n_workers
        fills = [r.plan.host_fills.get(k) for r in runs]
        if any(f is not None for f in fills):
            rows = np.full((len(runs), n), n, dtype=np.int32)
            fresh = np.zeros((len(runs), n), dtype=bool)
            for i, (r, f) in enumerate(zip(runs, fills, strict=True)):
                if f is not None:
                    rows[i, : f.size] = f
                    fresh[i, : f.size] = r.plan.host_fresh[k]
            slots = self._fill(carry.slots, carry.theta, carry.server, rows, fresh, hyper)
            carry = carry._replace(slots=slots)
        wanted = [i for i, r in enumerate(runs) if evaluate and k in r.plan.eval_set]
        if wanted:
            shared, stacked, mask = problems
            # Per worker only where a run wants some owners' values (`Executor.execute`).
            per_worker = any(owners[i] is None or owners[i].size for i in wanted)
            values, workers = jax.device_get(
                self._eval(shared, stacked, carry.theta, mask, per_worker)
            )
            for i in wanted:
                mine = select_owners({name: v[i] for name, v in workers.items()}, owners[i])
                recorders[i].add_eval(k, {name: v[i] for name, v in values.items()}, mine)
        return carry

    def _results(self, runs, carry: Carry, recorders, owners) -> list[EngineResult]:
        carry = jax.device_get(carry)
        results = []
        for i, run in enumerate(runs):
            if int(carry.diverged_at[i]) >= 0:
                results.append(self._alone(run))
                continue
            mine = jax.tree.map(lambda x, i=i: x[i], carry)
            results.append(
                engine_result(
                    run.problem,
                    mine,
                    recorders[i],
                    -1,
                    True,
                    length=len(run.plan),
                    owners=owners[i],
                )
            )
        return results

    def _alone(self, run: RunInputs) -> EngineResult:
        """A run executed on its own by the sequential executor (its rule built from its own
        hyperparameter values): the path of a run that diverged beside others."""
        key = tuple(sorted(run.hyper.items()))
        if key not in self._singles:
            self._singles[key] = SequentialExecutor(
                self.rule_of(run.hyper),
                run.problem,
                params=run.params,
                n_workers=self.n_workers,
                chunk=self.chunk,
            )
        return self._singles[key].execute(
            run.plan, problem=run.problem, params=run.params, eval_owners=run.eval_owners
        )

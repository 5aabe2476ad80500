"""The sequential executor: the reference. Commits run in trace order inside compiled loops of
up to `chunk` commits, one gradient per commit; the host steps in only between segments.

Where a plan evaluates often and its evaluations are small (`_evals_in_loop`), the loop
evaluates the central variable itself after the commits flagged, in a conditional of the
step, and segments end only where the host fills a row: one loop call per chunk instead of
one per evaluation. The commits are the same operations in both loops.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ._executor import Executor, evals_in_loop, select_owners
from ._step import (
    commit_phase,
    data_owner,
    gradient_phase,
    loop_steps,
    make_chunk,
    step_piece,
    traced_once,
)


class SequentialExecutor(Executor):
    """Every commit's gradient then its commit, in order, inside a loop (final).

    `evals_in_loop`: evaluate inside the loop (True), between segments (False), or where a
    plan evaluates often and its evaluations are small (None: `_evals_in_loop`);
    the commits' results are the same bits either way.
    """

    def __init__(
        self,
        rule,
        problem,
        *,
        params,
        n_workers: int,
        chunk: int = 512,
        evals_in_loop: bool | None = None,
    ):
        super().__init__(rule, problem, params=params, n_workers=n_workers, chunk=chunk)
        self.evals_in_loop = evals_in_loop
        self._loop = jax.jit(make_chunk(rule, self.layout), donate_argnums=1)
        evaluating = make_evaluating_chunk(rule, self.layout)
        self._eval_loop = jax.jit(evaluating, static_argnums=5, donate_argnums=1)

    def compiled_programs(self) -> int:
        """How many commit loops have been compiled: one, whatever the segments' lengths (two
        once a plan evaluated inside the loop)."""
        return self._loop._cache_size() + self._eval_loop._cache_size()

    def _run_segment(self, problem, carry, inputs, start, stop, plan, recorder):
        piece = step_piece(inputs, start, stop, self.chunk, self.n_workers)
        carry, out = self._loop(problem, carry, piece, np.int32(stop - start))
        recorder.add(out, count=stop - start)
        return carry

    def _evals_in_loop(self, problem, plan) -> bool:
        if self.evals_in_loop is not None:
            return self.evals_in_loop
        return evals_in_loop(problem, len(plan), plan.evals.size)

    def _run_segment_evaluating(self, problem, carry, inputs, start, stop, plan, recorder, owners):
        piece = step_piece(inputs, start, stop, self.chunk, self.n_workers)
        evals = plan.evals[(plan.evals >= start) & (plan.evals < stop)]
        flags = np.zeros(self.chunk, bool)
        flags[evals - start] = True
        per_worker = problem.has_worker_data and (owners is None or owners.size > 0)
        n = np.int32(stop - start)
        carry, (out, found) = self._eval_loop(problem, carry, piece, n, flags, per_worker)
        recorder.add(out, count=stop - start)
        (values, workers), diverged_at = jax.device_get((found, carry.diverged_at))
        for k in evals.tolist():
            if 0 <= diverged_at <= k:  # the host would not have evaluated past a divergence
                break
            j = k - start
            mine = select_owners({name: v[j] for name, v in workers.items()}, owners)
            recorder.add_eval(k, {name: v[j] for name, v in values.items()}, mine)
        return carry


def make_evaluating_chunk(rule, layout):
    """`chunk(problem, carry, piece, n_steps, flags, per_worker) -> (carry, (outputs, evals))`:
    `make_chunk`'s loop, the same step op for op, which also evaluates the central variable
    after each commit whose flag is set (`Problem.evaluate`, and `evaluate_workers` where
    `per_worker`), in a conditional: `evals` is `(scalars, per-worker values)` stacked by step,
    zeros where the flag is not set."""

    def chunk(problem, carry, piece, n_steps, flags, per_worker: bool):
        inputs, next_workers = piece

        def evaluate(theta):
            return problem.evaluate(theta), problem.evaluate_workers(theta) if per_worker else {}

        evaluate, shapes = traced_once(evaluate, carry.theta)
        blank = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)

        def step(carry, pulled, i):
            inp = jax.tree.map(lambda x: x[i], inputs)
            work = gradient_phase(
                rule, problem, pulled, data_owner(inp), inp.first_step, steps=inp.local_steps
            )
            carry, out = commit_phase(rule, layout, carry, inp, work)
            found = jax.lax.cond(flags[i], evaluate, lambda _: blank, carry.theta)
            return carry, layout.read(carry.slots, next_workers[i]), (out, found)

        pulled = layout.read(carry.slots, inputs.worker[0])
        return loop_steps(step, carry, pulled, inputs.commit.shape[0], n_steps)

    return chunk

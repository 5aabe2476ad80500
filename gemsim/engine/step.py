"""The pure step of the engine: one commit of one worker, as a `lax.scan` body."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gemsim.types import PyTree

from .layout import RowLayout


class Carry(NamedTuple):
    theta: PyTree  # the central variable
    server: PyTree  # the rule's server state
    slots: jax.Array  # float32[n + 1, K]: each worker's snapshot and rule state
    diverged: jax.Array  # bool[]: once set, later commits change nothing
    diverged_at: jax.Array  # int32[]: the commit that produced non-finite values, or -1


class StepInput(NamedTuple):
    commit: jax.Array  # int32[]
    worker: jax.Array  # int32[]
    staleness: jax.Array  # int32[]
    fill_self: jax.Array  # bool[]
    first_step: jax.Array  # int32[]: the commit's first mini-batch in the worker's stream


class StepOutput(NamedTuple):
    batch_loss: jax.Array  # mean loss of the worker's own mini-batches (free with the gradient)
    finite: jax.Array
    info: Any  # the rule's info NamedTuple


def make_step(rule, layout: RowLayout):
    """Build `step(problem, carry, StepInput) -> (carry, StepOutput)` for a rule.

    The problem is an argument, not a closure: it is a pytree whose data arrays then reach
    the compiled program as inputs instead of being baked in as constants.
    """

    def local_work(problem, x0, ws, worker, first):
        grad_fn = jax.value_and_grad(problem.loss)

        def body(carry, i):
            x, acc, ws = carry
            batch = problem.batch(worker, first + i)
            loss, g = grad_fn(x, batch, batch.key)
            x, acc, ws = rule.local_step(x, acc, g, ws)
            return (x, acc, ws), loss

        carry = (x0, rule.init_acc(x0), ws)
        if rule.window == 1:
            carry, loss = body(carry, 0)
            return (*carry, loss)
        carry, losses = jax.lax.scan(body, carry, jnp.arange(rule.window))
        return (*carry, jnp.mean(losses))

    def step(problem, carry: Carry, inp: StepInput):
        row = jax.lax.dynamic_index_in_dim(carry.slots, inp.worker, keepdims=False)
        snapshot, ws = layout.unravel(row)
        x0 = rule.start(snapshot, ws)
        x, acc, ws, loss = local_work(problem, x0, ws, inp.worker, inp.first_step)
        theta, server, ws, info = rule.commit(
            carry.theta, carry.server, ws, x0, x, acc, inp.staleness
        )
        finite = _all_finite(loss, theta)
        apply = finite & ~carry.diverged
        snapshot = _select(inp.fill_self, theta, snapshot)
        new_row = jnp.where(apply, layout.ravel(snapshot, ws), row)
        slots = jax.lax.dynamic_update_index_in_dim(carry.slots, new_row, inp.worker, 0)
        newly = ~finite & ~carry.diverged
        carry = Carry(
            theta=_select(apply, theta, carry.theta),
            server=_select(apply, server, carry.server),
            slots=slots,
            diverged=carry.diverged | ~finite,
            diverged_at=jnp.where(newly, inp.commit, carry.diverged_at),
        )
        return carry, StepOutput(batch_loss=loss, finite=finite, info=info)

    return step


def _all_finite(loss: jax.Array, theta: PyTree) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(theta)]
    return jnp.isfinite(loss) & jnp.stack(leaves).all()


def _select(pred: jax.Array, on_true: PyTree, on_false: PyTree) -> PyTree:
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


def step_inputs(plan) -> StepInput:
    """The scan inputs of a whole plan (numpy; sliced into chunks by the executor)."""
    return StepInput(
        commit=np.arange(len(plan), dtype=np.int32),
        worker=plan.worker,
        staleness=plan.staleness,
        fill_self=plan.fill_self,
        first_step=plan.first_step,
    )

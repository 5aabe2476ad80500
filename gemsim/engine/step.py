"""The engine's step, in two phases: the worker's gradient work (local steps from its start
point) and the atomic commit at the PS. The sequential executor runs them back to back in a
`lax.scan`; the batched executor vmaps the first over a wave of commits, then scans the second.
"""

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
    active: jax.Array  # bool[]: False for the padding of a batched wave


class StepOutput(NamedTuple):
    batch_loss: jax.Array  # mean loss of the worker's own mini-batches (free with the gradient)
    finite: jax.Array
    info: Any  # the rule's info NamedTuple


class Work(NamedTuple):
    """What a worker brings to its commit."""

    row: jax.Array  # its row as read before the work
    snapshot: PyTree
    x0: PyTree
    x: PyTree
    acc: PyTree
    ws: PyTree
    loss: jax.Array


def gradient_phase(rule, layout: RowLayout, problem, row, worker, first_step) -> Work:
    """The worker's local work from its row: `window` gradients and local steps."""
    snapshot, ws = layout.unravel(row)
    x0 = rule.start(snapshot, ws)
    grad_fn = jax.value_and_grad(problem.loss)

    def body(carry, i):
        x, acc, ws = carry
        batch = problem.batch(worker, first_step + i)
        loss, g = grad_fn(x, batch, batch.key)
        x, acc, ws = rule.local_step(x, acc, g, ws)
        return (x, acc, ws), loss

    carry = (x0, rule.init_acc(x0), ws)
    if rule.window == 1:
        (x, acc, ws), loss = body(carry, 0)
    else:
        (x, acc, ws), losses = jax.lax.scan(body, carry, jnp.arange(rule.window))
        loss = jnp.mean(losses)
    return Work(row, snapshot, x0, x, acc, ws, loss)


def commit_phase(rule, layout: RowLayout, carry: Carry, inp: StepInput, work: Work):
    """The atomic commit at the PS, then the worker's row written back (its new rule state,
    and theta as its next snapshot when it pulls at this commit)."""
    theta, server, ws, info = rule.commit(
        carry.theta, carry.server, work.ws, work.x0, work.x, work.acc, inp.staleness
    )
    finite = _all_finite(work.loss, theta) | ~inp.active
    apply = finite & ~carry.diverged & inp.active
    snapshot = _select(inp.fill_self, theta, work.snapshot)
    new_row = jnp.where(apply, layout.ravel(snapshot, ws), work.row)
    row_index = jnp.where(inp.active, inp.worker, carry.slots.shape[0] - 1)
    slots = jax.lax.dynamic_update_index_in_dim(carry.slots, new_row, row_index, 0)
    newly = ~finite & ~carry.diverged
    carry = Carry(
        theta=_select(apply, theta, carry.theta),
        server=_select(apply, server, carry.server),
        slots=slots,
        diverged=carry.diverged | ~finite,
        diverged_at=jnp.where(newly, inp.commit, carry.diverged_at),
    )
    return carry, StepOutput(batch_loss=work.loss, finite=finite, info=info)


def make_step(rule, layout: RowLayout):
    """`step(problem, carry, StepInput) -> (carry, StepOutput)`: one commit, both phases.

    The problem is an argument, not a closure: it is a pytree whose data arrays then reach
    the compiled program as inputs instead of being baked in as constants.
    """

    def step(problem, carry: Carry, inp: StepInput):
        row = jax.lax.dynamic_index_in_dim(carry.slots, inp.worker, keepdims=False)
        work = gradient_phase(rule, layout, problem, row, inp.worker, inp.first_step)
        return commit_phase(rule, layout, carry, inp, work)

    return step


def step_inputs(plan) -> StepInput:
    """The scan inputs of a whole plan (numpy; sliced into chunks by the executors)."""
    return StepInput(
        commit=np.arange(len(plan), dtype=np.int32),
        worker=plan.worker,
        staleness=plan.staleness,
        fill_self=plan.fill_self,
        first_step=plan.first_step,
        active=np.ones(len(plan), dtype=bool),
    )


def _all_finite(loss: jax.Array, theta: PyTree) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(theta)]
    return jnp.isfinite(loss) & jnp.stack(leaves).all()


def _select(pred: jax.Array, on_true: PyTree, on_false: PyTree) -> PyTree:
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)

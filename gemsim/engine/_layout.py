"""One flat row per worker holding its snapshot and its rule state.

Keeping every per-worker array in one `[n + 1, K]` buffer, read and written a row at a time
inside the scan, lets XLA update it in place: separate `[n, P]` arrays each updated with
`.at[w].set` were copied whole on every commit (docs/design.md §9). Row n is a spare row that
padded host fills write to.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from gemsim.rules import pull_state
from gemsim.types import PyTree


@dataclass(frozen=True)
class RowLayout:
    """How a worker's (snapshot, rule state) maps to a flat float32 row."""

    unravel: Callable[[jax.Array], tuple[PyTree, PyTree]]
    snapshot_size: int
    row_size: int
    dtype: jnp.dtype  # of the row (the leaves' common dtype)

    @staticmethod
    def for_rule(rule, params: PyTree, n_workers: int) -> RowLayout:
        """The layout of `rule`'s rows, from the shapes of its worker state alone: its `init`
        is traced, not run, since it may also build server state far larger than a row (a
        rule's per-client rows: 6 GiB for the CNN at N = 10,000)."""
        shapes = jax.eval_shape(lambda p: rule.init(p, n_workers).workers, params)
        row = jax.tree.map(lambda s: jnp.zeros(s.shape[1:], s.dtype), shapes)
        return RowLayout.of(params, row)

    @staticmethod
    def of(params: PyTree, worker_state_row: PyTree) -> RowLayout:
        flat, unravel = ravel_pytree((params, worker_state_row))
        snapshot_size = ravel_pytree(params)[0].size
        return RowLayout(unravel, snapshot_size, flat.size, flat.dtype)

    def ravel(self, snapshot: PyTree, ws: PyTree) -> jax.Array:
        return ravel_pytree((snapshot, ws))[0]

    def read(self, slots: jax.Array, index: jax.Array) -> tuple[PyTree, PyTree]:
        """Row `index` of `slots` as (snapshot, ws), each leaf read straight from the
        buffer: unraveling a row read whole would copy the leaves out of it a second time."""
        row = jax.ShapeDtypeStruct((self.row_size,), slots.dtype)
        leaves, treedef = jax.tree.flatten(jax.eval_shape(self.unravel, row))
        parts, offset = [], 0
        for leaf in leaves:
            flat = jax.lax.dynamic_slice(slots, (index, offset), (1, leaf.size))
            parts.append(jnp.reshape(flat, leaf.shape).astype(leaf.dtype))
            offset += leaf.size
        assert offset == self.row_size, (offset, self.row_size)
        return jax.tree.unflatten(treedef, parts)

    def write(self, slots: jax.Array, index: jax.Array, snapshot: PyTree, ws: PyTree):
        """`slots` with row `index` set to `ravel(snapshot, ws)`, written leaf by leaf into
        its place: each leaf goes straight into the buffer, where writing the raveled row
        would first build it whole (a copy of K floats on every commit)."""
        return _write_rows(slots, index, jax.tree.leaves((snapshot, ws)), 1)


def initial_slots(layout: RowLayout, params: PyTree, workers: PyTree, n_workers: int) -> jax.Array:
    """Every worker's row at the start (the initial parameters and its initial rule state),
    built in one pass: the [n + 1, K] buffer is the largest array of a run."""
    return _initial_slots(layout, params, workers, n_workers)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _initial_slots(layout, params, workers, n_workers):
    # Each leaf gets its n + 1 rows (the spare one zeros) before the rows are raveled, so
    # that the buffer is written once: padding the raveled rows wrote it twice (at n = 100,
    # 198 MB of fresh memory each time).
    def with_spare(stacked):
        return jnp.concatenate([stacked, jnp.zeros((1, *stacked.shape[1:]), stacked.dtype)])

    snapshots = jax.tree.map(
        lambda p: with_spare(jnp.broadcast_to(p, (n_workers, *jnp.shape(p)))), params
    )
    return jax.vmap(layout.ravel)(snapshots, jax.tree.map(with_spare, workers))


def refill_slots(slots: jax.Array, params: PyTree, workers: PyTree, n_workers: int) -> jax.Array:
    """`slots` overwritten with what `initial_slots` builds, leaf by leaf in place (XLA reuses
    a donated buffer for an output computed from it): no fresh memory to fault in."""
    snapshots = jax.tree.map(lambda p: jnp.broadcast_to(p, (n_workers, *jnp.shape(p))), params)
    slots = _write_rows(slots, 0, jax.tree.leaves((snapshots, workers)), n_workers)
    return slots.at[n_workers].set(0)


def _write_rows(slots: jax.Array, first, leaves, n_rows: int) -> jax.Array:
    """`slots` with rows `first .. first + n_rows - 1` set to `leaves` side by side, each leaf
    (`n_rows` leading entries) raveled per row and written straight into its place."""
    offset = 0
    for leaf in leaves:
        flat = jnp.reshape(leaf, (n_rows, -1)).astype(slots.dtype)
        slots = jax.lax.dynamic_update_slice(slots, flat, (first, offset))
        offset += flat.shape[1]
    assert offset == slots.shape[1], (offset, slots.shape)
    return slots


def pull_rows(
    rule, layout: RowLayout, slots: jax.Array, theta: PyTree, server: PyTree, rows, fresh
) -> jax.Array:
    """The given rows (padded with the spare row) pull theta: it becomes their snapshot, and
    their rule state goes through the rule's pull hook (`rules.pull_state`), fresh where a
    new worker life starts."""

    def pulled(row, is_fresh):
        _, ws = layout.unravel(row)
        return layout.ravel(theta, pull_state(rule, ws, theta, server, is_fresh))

    return slots.at[rows].set(jax.vmap(pulled)(slots[rows], fresh))

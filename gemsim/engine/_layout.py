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

from gemsim.types import PyTree


@dataclass(frozen=True)
class RowLayout:
    """How a worker's (snapshot, rule state) maps to a flat float32 row."""

    unravel: Callable[[jax.Array], tuple[PyTree, PyTree]]
    snapshot_size: int
    row_size: int

    @staticmethod
    def of(params: PyTree, worker_state_row: PyTree) -> RowLayout:
        flat, unravel = ravel_pytree((params, worker_state_row))
        snapshot_size = ravel_pytree(params)[0].size
        return RowLayout(unravel=unravel, snapshot_size=snapshot_size, row_size=flat.size)

    def ravel(self, snapshot: PyTree, ws: PyTree) -> jax.Array:
        return ravel_pytree((snapshot, ws))[0]


def initial_slots(layout: RowLayout, params: PyTree, workers: PyTree, n_workers: int) -> jax.Array:
    """Every worker's row at the start (the initial parameters and its initial rule state),
    built in one pass: the [n + 1, K] buffer is the largest array of a run."""
    return _initial_slots(layout, params, workers, n_workers)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _initial_slots(layout, params, workers, n_workers):
    rows = jax.vmap(lambda ws: layout.ravel(params, ws), axis_size=n_workers)(workers)
    return jnp.pad(rows, ((0, 1), (0, 0)))


def fill_snapshots(layout: RowLayout, slots: jax.Array, theta: PyTree, rows: jax.Array):
    """Write theta into the snapshot part of the given rows (padded with the spare row)."""
    flat = ravel_pytree(theta)[0]
    block = jnp.broadcast_to(flat, (rows.shape[0], layout.snapshot_size))
    return slots.at[rows, : layout.snapshot_size].set(block)

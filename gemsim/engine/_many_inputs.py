"""How runs executed together (`_many.py`) are laid out on a leading run axis: their problems'
leaves passed once or stacked, their parameters and lifted hyperparameters stacked, their
traces stacked time-major and padded with inactive steps, and the segments between the cut
points of any run's host."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gemsim.types import PyTree

from ._plan import ExecutionPlan, split_at
from ._step import StepInput

SHARED_MIN_BYTES = 1 << 16
"""A problem leaf is passed once, not stacked per run, when every run holds the very same array
and it is at least this large (a data set loaded once). Small leaves (keys, a quadratic's
curvature) are always stacked, so that which runs execute together never changes the program."""


def split_problems(problems: Sequence[Any], treedef) -> tuple[list, list, tuple[bool, ...]]:
    """The problems' leaves: large ones every problem shares (see `SHARED_MIN_BYTES`) passed
    once, the others stacked on a new leading run axis (mask: True where stacked)."""
    leaves = []
    for p in problems:
        if jax.tree.structure(p) != treedef:
            raise ValueError(
                "runs executed together need problems of one shape (model, data set, batch "
                "size); these differ"
            )
        leaves.append(jax.tree.leaves(p))
    mask = tuple(
        _nbytes(leaves[0][j]) < SHARED_MIN_BYTES or any(ls[j] is not leaves[0][j] for ls in leaves)
        for j in range(len(leaves[0]))
    )
    shared = [leaves[0][j] for j, m in enumerate(mask) if not m]
    stacked = _stacked([[ls[j] for ls in leaves] for j, m in enumerate(mask) if m])
    return shared, stacked, mask


@jax.jit
def _stacked(groups: list[list]) -> list:
    # One program for every leaf: stacked one by one, each leaf's shape was a small eager
    # program of its own, looked up and loaded in every new process.
    return [jnp.stack(group) for group in groups]


def _nbytes(leaf) -> int:
    return int(getattr(leaf, "nbytes", 0) or 0)


def stack(trees: Sequence[PyTree]) -> PyTree:
    return _stacked_trees(list(trees))


@jax.jit
def _stacked_trees(trees: list[PyTree]) -> PyTree:
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def stack_hyper(hypers: Sequence[Mapping[str, float]]) -> dict[str, jax.Array]:
    names = sorted(hypers[0])
    if any(sorted(h) != names for h in hypers):
        raise ValueError("every run executed together must give the same lifted hyperparameters")
    return {k: jnp.asarray([h[k] for h in hypers], jnp.float32) for k in names}


def stack_inputs(plans: Sequence[ExecutionPlan], total: int) -> StepInput:
    """Every run's scan inputs, time-major ([total] commit index, [total, R] the rest),
    padded to `total` steps with inactive steps (they change nothing, see `commit_math`);
    a client column where the runs are populations' (all of them: see `_many.py`)."""
    populations = {p.population for p in plans}
    if len(populations) > 1:
        raise ValueError(
            "runs executed together must all be populations' (a client column in their "
            "traces) or all have persistent workers; execute these in separate batches"
        )
    if len({p.buffer is None for p in plans}) > 1:
        raise ValueError(
            "runs executed together must all be FedCompass's (a buffer column in their "
            "traces) or none; execute these in separate batches"
        )
    if len({p.client_row is None for p in plans}) > 1:
        raise ValueError(
            "runs executed together must all have rows for the clients they name "
            "(engine.client_rows) or none; execute these in separate batches"
        )
    if len({p.local_steps is None for p in plans}) > 1:
        raise ValueError(
            "runs executed together must all have local steps of their own (a local_steps "
            "column in their traces) or none; execute these in separate batches"
        )

    def column(values: np.ndarray, fill, dtype) -> np.ndarray:
        out = np.full(total, fill, dtype)
        out[: values.size] = values
        return out

    def stacked(field: str, fill, dtype) -> np.ndarray:
        return np.stack([column(getattr(p, field), fill, dtype) for p in plans], axis=1)

    return StepInput(
        commit=np.arange(total, dtype=np.int32),
        worker=stacked("worker", 0, np.int32),
        staleness=stacked("staleness", 0, np.int32),
        first_step=stacked("first_step", 0, np.int32),
        active=np.stack([np.arange(total) < len(p) for p in plans], axis=1),
        round_end=stacked("round_end", True, bool),
        client=stacked("client", 0, np.int32) if populations == {True} else None,
        pre_pull=_stacked_pre_pulls(plans, total),
        # Padding takes one step: a count of 0 would divide the loss by zero.
        local_steps=None if plans[0].local_steps is None else stacked("local_steps", 1, np.int32),
        # Padding is inactive: its buffer (0, alone) changes nothing.
        buffer=None if plans[0].buffer is None else stacked("buffer", 0, np.int32),
        # Padding is inactive: its row is written back as it was.
        client_row=None if plans[0].client_row is None else stacked("client_row", 0, np.int32),
    )


def _stacked_pre_pulls(plans: Sequence[ExecutionPlan], total: int) -> np.ndarray | None:
    """The runs' pulls before apply, time-major ([total, R], False where a run has none or
    is padded), or None where no run has one (their programs are then unchanged)."""
    if all(p.fill_pre is None for p in plans):
        return None
    out = np.zeros((total, len(plans)), bool)
    for i, p in enumerate(plans):
        if p.fill_pre is not None:
            out[: len(p), i] = p.fill_pre
    return out


def segments(
    plans: Sequence[ExecutionPlan], max_len: int, *, with_evals: bool = True
) -> list[tuple[int, int]]:
    """[start, stop) ranges that run in one compiled loop, split wherever any run's host acts
    (its evaluations too, unless they are made inside the loop)."""
    cuts = set()
    for plan in plans:
        cuts |= {*plan.host_fills, len(plan) - 1}
        if with_evals:
            cuts |= set(plan.evals.tolist())
    return split_at(cuts, max_len)

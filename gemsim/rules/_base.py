"""Helpers shared by the built-in rules: pytree arithmetic, worker-state stacking and the
package-wide value checks. The `Rule` interface itself is in ``_rule.py``."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
import optax.tree_utils as otu

from gemsim import _checks
from gemsim.rules._rule import (
    CommitContext,
    CommitInfo,
    Rule,
    RuleState,
    Work,
    keep_gradient,
    start_at_snapshot,
    stateless,
    stored,
    zeros_acc,
)
from gemsim.types import PyTree

__all__ = [
    "CommitContext",
    "CommitInfo",
    "Rule",
    "RuleState",
    "Work",
    "keep_gradient",
    "start_at_snapshot",
    "stateless",
    "stored",
    "zeros_acc",
]


# --- pytree helpers -----------------------------------------------------------------------


def stack_workers(tree: PyTree, n_workers: int) -> PyTree:
    """Copies every leaf of ``tree`` onto a new leading axis of length ``n_workers``."""
    return jax.tree.map(lambda a: jnp.broadcast_to(a, (n_workers, *jnp.shape(a))), tree)


def tree_axpy(a: float | jax.Array, x: PyTree, y: PyTree) -> PyTree:
    """``a * x + y`` leafwise, ``a`` a scalar."""
    return otu.tree_add_scale(y, a, x)


def update_norm(update: PyTree) -> jax.Array:
    """L2 norm of a whole pytree, float32."""
    return otu.tree_norm(update).astype(jnp.float32)


def as_float(x: jax.Array | float) -> jax.Array:
    """A float32 scalar from an int/float scalar (staleness arrives as int32)."""
    return jnp.asarray(x).astype(jnp.float32)


def unit_weight() -> jax.Array:
    """The weight reported by rules that apply no staleness weight."""
    return jnp.ones((), jnp.float32)


def init_workers(n_workers: int, make_row: Callable[[], PyTree]) -> PyTree:
    """Per-worker state: ``make_row()`` stacked ``n_workers`` times (validated)."""
    check_int("n_workers", n_workers, 1)
    return stack_workers(make_row(), n_workers)


def empty_state() -> optax.EmptyState:
    """The state of a rule part that holds nothing."""
    return optax.EmptyState()


# --- validation: the package-wide checks (gemsim._checks), re-exported for the rules ------

check_real = _checks.check_real
check_positive = _checks.check_positive
check_int = _checks.check_int
check_enum = _checks.check_enum
check_bool = _checks.check_bool

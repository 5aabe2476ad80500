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


def displacement_only(x0: PyTree) -> tuple:
    """The ``init_acc`` of the local-SGD rules whose commit needs only where the local steps
    started and ended (``work.x0``, ``work.x``)."""
    del x0
    return ()


def local_sgd(lr: float | jax.Array) -> Callable:
    """The ``local_step`` of plain local SGD at ``lr``: ``x <- x - lr * g``."""

    def local_step(x, acc, g, ws):
        return tree_axpy(-lr, g, x), acc, ws

    return local_step


def rate_at_flush(flush: jax.Array, rate: float | jax.Array) -> jax.Array:
    """``rate`` where the buffer flushes, else 0: a run-time value either way, so that XLA
    does not fold a constant rate into the products around it (a run alone, its rate a
    constant, would then round otherwise than beside other runs, where it is traced)."""
    return jnp.where(flush, jnp.asarray(rate, jnp.float32), 0.0)


def step_at_flush(theta: PyTree, update: PyTree, flush: jax.Array, token: jax.Array):
    """``(theta + update where flush else theta, the update's norm, 0 but at flushes)``; the
    update is rounded on its own before the sum (``stored``, ``token`` the commit index)."""
    moved = jax.tree.map(jnp.add, theta, stored(update, token))
    norm = jnp.where(flush, update_norm(update), jnp.float32(0))
    return otu.tree_where(flush, moved, theta), norm


def local_sgd_rule(name: str, lr, window: int, init, commit, **fields) -> Rule:
    """A rule whose workers take ``window`` plain SGD steps at ``lr`` and commit where they
    started and ended (FedBuff's family); ``fields``: the rule's other fields."""
    return Rule(
        name=name,
        init=init,
        commit=commit,
        window=window,
        init_acc=displacement_only,
        local_step=local_sgd(lr),
        **fields,
    )


def empty_state() -> optax.EmptyState:
    """The state of a rule part that holds nothing."""
    return optax.EmptyState()


# --- validation: the package-wide checks (gemsim._checks), re-exported for the rules ------

check_real = _checks.check_real
check_positive = _checks.check_positive
check_int = _checks.check_int
check_enum = _checks.check_enum
check_bool = _checks.check_bool

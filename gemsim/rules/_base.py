"""The rule protocol the engine drives, and helpers shared by the rules.

A rule is a :class:`Rule`: a NamedTuple of pure functions over pytrees plus two
static fields. The engine executes one commit of worker ``w`` with staleness
``tau`` as::

    ws = jax.tree.map(lambda a: a[w], state.workers)
    x0 = rule.start(snapshot_w, ws)
    acc = rule.init_acc(x0)
    for i in range(rule.window):              # a lax.scan in the engine
        g = jax.grad(loss)(x, batch_i)        # x starts at x0
        x, acc, ws = rule.local_step(x, acc, g, ws)
    theta, server, ws, info = rule.commit(theta, state.server, ws, x0, x, acc, tau)
    state = RuleState(server, workers with row w replaced by ws)

Every function is jit-able; ``start``, ``init_acc`` and ``local_step`` are
also vmap-able across workers (one row of ``state.workers`` each).
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
import optax.tree_utils as otu

from gemsim import _checks
from gemsim.types import PyTree

__all__ = [
    "CommitInfo",
    "Rule",
    "RuleState",
]


class RuleState(NamedTuple):
    """All state of a rule besides the central parameters.

    Attributes:
      server: state held by the parameter server (``optax.EmptyState()`` if none).
      workers: per-worker state, every leaf stacked on a leading axis of
        length ``n_workers`` (``optax.EmptyState()`` if none).
    """

    server: PyTree
    workers: PyTree


class CommitInfo(NamedTuple):
    """Diagnostics of one commit for the rules without extra ones.

    Attributes:
      update_norm: L2 norm of the change applied to the central parameters,
        float32, shape ().
      weight: the staleness weight applied to the commit (1 for rules that
        apply none), float32, shape ().
    """

    update_norm: jax.Array
    weight: jax.Array


class Rule(NamedTuple):
    """An update rule: pure functions the engine calls in the order in the module docstring.

    Attributes:
      init: ``(params, n_workers) -> RuleState``.
      start: ``(snapshot, ws) -> x0``, the point where the worker's local
        computation starts, given the central parameters it pulled and its state.
      init_acc: ``(x0) -> acc``, the accumulator the local steps fill.
      local_step: ``(x, acc, g, ws) -> (x, acc, ws)`` with ``g`` the gradient at ``x``.
      commit: ``(theta, server, ws, x0, x, acc, tau) -> (theta, server, ws, info)``,
        atomic at the server; ``tau`` is the commit's staleness (int32 scalar).
      window: number of local steps (mini-batches) per commit.
      name: the rule's name, as in scenario files.
    """

    init: Callable[[PyTree, int], RuleState]
    start: Callable[[PyTree, PyTree], PyTree]
    init_acc: Callable[[PyTree], PyTree]
    local_step: Callable[[PyTree, PyTree, PyTree, PyTree], tuple[PyTree, PyTree, PyTree]]
    commit: Callable[..., tuple[PyTree, PyTree, PyTree, Any]]
    window: int
    name: str


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


def zeros_acc(x0: PyTree) -> PyTree:
    """An accumulator of zeros shaped like the starting point."""
    return otu.tree_zeros_like(x0)


def keep_gradient(x: PyTree, acc: PyTree, g: PyTree, ws: PyTree):
    """Local step of single-step rules: remember the gradient, leave ``x`` unchanged."""
    del acc
    return x, g, ws


# --- validation: the package-wide checks (gemsim._checks), re-exported for the rules ------

check_real = _checks.check_real
check_positive = _checks.check_positive
check_int = _checks.check_int
check_enum = _checks.check_enum

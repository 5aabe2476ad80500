"""Gap-Aware: stale gradients penalised by how far the centre moved, per parameter.

Barkai, Hakimi & Schuster 2020, "Gap-Aware Mitigation of Gradient Staleness" (ICLR),
https://arxiv.org/abs/1909.10802. Staleness is measured not in commits but by the *gap*:
how far each parameter moved between the worker's pull and the commit, in units of the
distance one step typically moves it. Each gradient entry is divided by its gap (never
amplified)::

    C     <- running mean of |g| per parameter (over all commits so far, this one included)
    gap   =  |theta - theta_pulled| / (lr * C)
    g     <- g / max(1, gap)
    v     <- momentum * v + g;   theta <- theta - lr * v        # momentum 0: plain SGD

A parameter that barely moved while the gradient was computed keeps its full step, whatever
the delay; one that moved many typical steps is damped in proportion. ``C`` is the
arithmetic mean of the ``|g|`` the server has received; entries whose gradients have all been
zero have ``C = 0`` and no gap (they have not moved either).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base
from gemsim.types import PyTree


class GapAwareState(NamedTuple):
    """Attributes:
    mean_abs: ``C``, the running mean of ``|g|`` per parameter, like params.
    count: gradients received; int32, shape ().
    velocity: the momentum buffer, like params (zeros, unused with momentum 0).
    """

    mean_abs: PyTree
    count: jax.Array
    velocity: PyTree


class GapAwareInfo(NamedTuple):
    """Attributes:
    update_norm: L2 norm of the change of the central parameters, float32, ().
    weight: mean over parameters of ``1 / max(1, gap)``, float32, ().
    gap_max: the largest penalty ``max(1, gap)`` of the commit, float32, ().
    frac_penalized: fraction of parameters whose gap exceeds 1, float32, ().
    """

    update_norm: jax.Array
    weight: jax.Array
    gap_max: jax.Array
    frac_penalized: jax.Array


def _penalty(gap_abs, c, lr):
    """``max(1, gap_abs / (lr * c))``, 1 where ``c = 0`` (then ``gap_abs`` is 0 too)."""
    bound = lr * c
    over = gap_abs > bound
    return jnp.where(over, gap_abs / jnp.where(over, bound, 1.0), 1.0)


def _stats(penalties) -> tuple[jax.Array, jax.Array, jax.Array]:
    flat = jnp.concatenate([jnp.ravel(p) for p in jax.tree.leaves(penalties)])
    return (
        jnp.mean(1.0 / flat).astype(jnp.float32),
        jnp.max(flat).astype(jnp.float32),
        jnp.mean((flat > 1.0).astype(jnp.float32)),
    )


def gap_aware(lr: float, momentum: float = 0.0) -> _base.Rule:
    """ASGD with every gradient entry divided by ``max(1, |theta - theta_pulled| / (lr C))``.

    Args:
      lr: learning rate; > 0.
      momentum: heavy-ball momentum at the server, applied to the penalised gradients (the
        paper's setting with momentum); in [0, 1), 0 by default.

    Returns:
      The rule; server state :class:`GapAwareState`, no worker state, info
      :class:`GapAwareInfo`.

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("gap_aware: lr", lr)
    momentum = _base.check_real("gap_aware: momentum", momentum, low=0.0, high=1.0, high_open=True)

    def init(params, n_workers):
        _base.check_int("n_workers", n_workers, 1)
        zeros = otu.tree_zeros_like(params)
        server = GapAwareState(zeros, jnp.zeros((), jnp.int32), zeros)
        return _base.RuleState(server, _base.empty_state())

    def commit(theta, server, ws, work, ctx):
        del ctx  # the gap replaces the commit count as the measure of staleness
        count = server.count + 1
        k = count.astype(jnp.float32)
        mean_abs = jax.tree.map(lambda c, g: c + (jnp.abs(g) - c) / k, server.mean_abs, work.acc)
        penalties = jax.tree.map(
            lambda t, x0, c: _penalty(jnp.abs(t - x0), c, lr), theta, work.x0, mean_abs
        )
        g = jax.tree.map(jnp.divide, work.acc, penalties)
        velocity = jax.tree.map(lambda v, gl: momentum * v + gl, server.velocity, g)
        update = otu.tree_scale(-lr, velocity)
        new_theta = otu.tree_add(theta, update)
        weight, gap_max, frac = _stats(penalties)
        info = GapAwareInfo(_base.update_norm(update), weight, gap_max, frac)
        return new_theta, GapAwareState(mean_abs, count, velocity), ws, info

    return _base.Rule(name="gap_aware", init=init, commit=commit)

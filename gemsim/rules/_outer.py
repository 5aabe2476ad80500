"""Outer optimizers for asynchronous local SGD, as optax transformations of pseudo-gradients.

Liu, Douillard et al. 2024, "Asynchronous Local-SGD Training for Language Modeling",
https://arxiv.org/abs/2401.09135. Under the asynchronous protocol the `local` rule hands its
outer optimizer one pseudo-gradient per commit (``g_t = x_pulled - x_local``); these two keep
Nesterov momentum from being driven by every stale one:

- :func:`delayed_nesterov` is the paper's Algorithm 3 (Delayed Nesterov, DN). With step size
  eps, momentum decay beta, N the period and c the momentum activation (0 <= c <= 1/N), at
  the t-th pseudo-gradient::

      t mod N != 0:  Delta <- Delta + g_t
                     theta <- theta - eps (c beta m + g_t / N)
      t mod N == 0:  m <- beta m + (Delta + g_t) / N
                     theta <- theta - eps ((1 - c N + c) beta m + g_t / N);  Delta <- 0

  Over N pseudo-gradients the momentum is applied once in all (``(N - 1) c + 1 - c N + c =
  1``), and it is updated from their mean alone. c = 0 applies it at the N-th only.
- :func:`buffered_nesterov` is the public toy's "buffered" baseline (its ``delayed_sgd``
  synchronisation, `google-deepmind/asyncdiloco`): N pseudo-gradients averaged, then one
  Nesterov SGD step on their mean (optax's ``MultiSteps``), nothing applied in between.

Both count pseudo-gradients, not rounds: with a synchronous protocol the rule averages a
round first and hands them one mean per round.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
import optax.tree_utils as otu

from gemsim.rules import _base

__all__ = ["OUTER_OPTIMIZERS", "DelayedNesterovState", "buffered_nesterov", "delayed_nesterov"]


class DelayedNesterovState(NamedTuple):
    """Attributes:
    momentum: m, like params.
    buffer: Delta, the sum of this period's pseudo-gradients before the current one.
    count: pseudo-gradients so far (t - 1 before the t-th); int32, shape ().
    """

    momentum: optax.Updates
    buffer: optax.Updates
    count: jax.Array


def _check_period(owner: str, period: object) -> int:
    return _base.check_int(f"{owner}: period", period, 1)


def delayed_nesterov(
    learning_rate: float, period: int, momentum: float = 0.9, activation: float = 0.0
) -> optax.GradientTransformation:
    """Delayed Nesterov momentum (Liu et al. 2024, Algorithm 3).

    Args:
      learning_rate: the outer step size eps (> 0).
      period: N, pseudo-gradients per momentum update (the paper: the number of workers);
        integer >= 1 (N = 1 is Nesterov momentum applied at each one).
      momentum: the momentum decay beta, in [0, 1).
      activation: c, the share of the momentum applied at each pseudo-gradient between
        momentum updates, in [0, 1 / N].

    Raises:
      ValueError: a value out of range (named).
    """
    eps = _base.check_positive("delayed_nesterov: learning_rate", learning_rate)
    n = _check_period("delayed_nesterov", period)
    beta = _base.check_real("delayed_nesterov: momentum", momentum, low=0.0, high=1.0)
    if beta >= 1.0:
        raise ValueError(f"delayed_nesterov: momentum must be in [0, 1), got {momentum!r}")
    c = _base.check_real("delayed_nesterov: activation", activation, low=0.0, high=1.0 / n)

    def init(params):
        zeros = otu.tree_zeros_like(params)
        return DelayedNesterovState(zeros, zeros, jnp.zeros((), jnp.int32))

    def update(g, state, params=None):
        del params
        t = state.count + 1
        milestone = t % n == 0
        new_m = jax.tree.map(lambda m, d, gi: beta * m + (d + gi) / n, state.momentum,
                             state.buffer, g)  # fmt: skip
        momentum = otu.tree_where(milestone, new_m, state.momentum)
        weight = jnp.where(milestone, 1.0 - c * n + c, c) * beta
        updates = jax.tree.map(lambda m, gi: -eps * (weight * m + gi / n), momentum, g)
        buffer = otu.tree_where(
            milestone, otu.tree_zeros_like(g), jax.tree.map(jnp.add, state.buffer, g)
        )
        return updates, DelayedNesterovState(momentum, buffer, t)

    return optax.GradientTransformation(init, update)


def buffered_nesterov(
    learning_rate: float, period: int, momentum: float = 0.9
) -> optax.GradientTransformation:
    """The buffered baseline: the mean of ``period`` pseudo-gradients fed to
    ``optax.sgd(learning_rate, momentum, nesterov=True)`` every ``period``-th one (zero
    updates in between).

    Raises:
      ValueError: a value out of range (named).
    """
    eps = _base.check_positive("buffered_nesterov: learning_rate", learning_rate)
    n = _check_period("buffered_nesterov", period)
    beta = _base.check_real("buffered_nesterov: momentum", momentum, low=0.0, high=1.0)
    if beta >= 1.0:
        raise ValueError(f"buffered_nesterov: momentum must be in [0, 1), got {momentum!r}")
    inner = optax.sgd(eps, momentum=beta or None, nesterov=beta > 0)
    return optax.MultiSteps(inner, every_k_schedule=n).gradient_transformation()


OUTER_OPTIMIZERS = {"delayed_nesterov": delayed_nesterov, "buffered_nesterov": buffered_nesterov}
"""gemsim's own transformations, named in scenario files as optax's are (`outer: {name:
delayed_nesterov, learning_rate: 0.7, period: 4}`)."""

"""GEM as an optax ``GradientTransformation``, for users' own training loops."""

from typing import NamedTuple

import optax
import optax.tree_utils as otu

from gemsim.rules._gem import EpsPlacement, gem_step, make_config
from gemsim.types import PyTree


class GemOptaxState(NamedTuple):
    """State of :func:`gem_optax`: one worker's GEM state.

    Attributes:
      m: the momentum proxy, like params; zeros at the start.
      s: the central variable passed as ``params`` to the previous update
        (the initial params at the start).
    """

    m: PyTree
    s: PyTree


def gem_optax(
    lr: float,
    momentum: float = 0.9,
    kappa: float = 1.0,
    pi_max: float = 5.0,
    eps: float = 1e-12,
    eps_placement: EpsPlacement = EpsPlacement.OUTSIDE,
) -> optax.GradientTransformation:
    """One worker's side of GEM as an optax transformation.

    ``update(grads, state, params)`` needs ``params``: the central variable as
    freshly pulled from the server (before this update). It returns
    ``pi * dtheta`` with ``dtheta = -lr * grads``, to be added to the central
    variable (the learning rate is included, as in ``optax.sgd``). The math is
    the same function as the :func:`~gemsim.rules.gem` rule's commit. Where
    the gradient is then taken (after the update, or at ``params``) is up to
    the loop.

    Args:
      lr: learning rate of the proxy; > 0.
      momentum: the proxy's momentum, in [0, 1).
      kappa: proxy amplification; > 0.
      pi_max: upper clip of the per-parameter scale; > 0.
      eps: keeps the division finite where ``dtheta`` vanishes; > 0.
      eps_placement: :class:`~gemsim.rules.EpsPlacement` (or its value string).

    Returns:
      An ``optax.GradientTransformation`` whose state is :class:`GemOptaxState`.

    Raises:
      ValueError: a hyperparameter out of range (at construction), or
        ``update`` called without ``params``.

    Examples:
      >>> import jax, jax.numpy as jnp, optax
      >>> from gemsim.rules import gem_optax
      >>> loss = lambda p: jnp.sum((p["w"] - 3.0) ** 2)
      >>> tx = optax.chain(optax.clip_by_global_norm(10.0), gem_optax(lr=0.1))
      >>> theta = {"w": jnp.zeros(2)}
      >>> state = tx.init(theta)
      >>> for _ in range(50):
      ...     grads = jax.grad(loss)(theta)
      ...     updates, state = tx.update(grads, state, theta)
      ...     theta = optax.apply_updates(theta, updates)
      >>> print(jnp.round(theta["w"], 2))
      [3. 3.]

    References:
      Hermans & Louppe, Gradient Energy Matching for Distributed Asynchronous
      Gradient Descent, 2018, https://arxiv.org/abs/1805.08469
    """
    cfg = make_config(lr, momentum, kappa, pi_max, eps, eps_placement, where="gem_optax")

    def init_fn(params):
        return GemOptaxState(m=otu.tree_zeros_like(params), s=params)

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError(
                "gem_optax: update needs params, the freshly pulled central variable: "
                "call tx.update(grads, state, params)"
            )
        step = gem_step(cfg, params, state.m, state.s, updates)
        return step.update, GemOptaxState(m=step.m, s=params)

    return optax.GradientTransformation(init_fn, update_fn)

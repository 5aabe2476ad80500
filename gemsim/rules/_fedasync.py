"""FedAsync: local (optionally proximal) SGD, mixed into the centre by a staleness weight.

Xie, Koyejo & Gupta 2019, "Asynchronous Federated Optimization",
https://arxiv.org/abs/1903.03934, Algorithm 1. A worker that received the global model
``x_tau`` (with its timestamp ``tau``) takes ``window`` SGD steps on its loss plus the
proximal term ``rho / 2 * |x - x_tau|^2`` (``rho = 0``: plain local SGD); at its epoch
``t`` (``t = 1, 2, ...``: the t-th update creates ``x_t``) the server's updater mixes the
result in with a weight that decays with ``t - tau``::

    x <- x_tau;  repeat window: x <- x - lr * (g(x) + rho * (x - x_tau))
    alpha_t = alpha * s(t - tau)
    x_t     = (1 - alpha_t) * x_{t-1} + alpha_t * x

A worker that received the latest model ``x_{t-1}`` has ``t - tau = 1``: the paper's
staleness counts the update itself. In gemsim's terms commit ``k`` (from 0) creates version
``k + 1`` from a worker that pulled version ``p``, so ``t - tau = k + 1 - p``, the commit's
staleness plus one, and ``s`` is evaluated there: a fresh commit gets ``s(1)``, which for the
default polynomial ``s(t - tau) = (t - tau + 1)^-a`` with ``a = 0.5`` is ``2^-0.5 = 0.71``,
so its mixing weight is ``0.71 * alpha``. ``s`` is one of the staleness weight functions of
``gemsim.rules._staleness`` applied to ``t - tau``: the paper's constant, polynomial and hinge
(``1`` while ``t - tau <= b``), or ``1 / (t - tau + 1)``.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from gemsim.rules import _base
from gemsim.rules._staleness import Polynomial


class FedasyncInfo(NamedTuple):
    """Attributes:
    update_norm: L2 norm of the change of the centre, float32, ().
    weight: the staleness weight ``s(t - tau)``, float32, ().
    mixing: the mixing weight ``alpha_t = alpha * s(t - tau)``, float32, ().
    """

    update_norm: jax.Array
    weight: jax.Array
    mixing: jax.Array


def fedasync(
    lr: float,
    alpha: float = 0.6,
    rho: float = 0.0,
    window: int = 8,
    weight: Callable[[jax.Array], jax.Array] = Polynomial(0.5),  # noqa: B008
) -> _base.Rule:
    """FedAsync: ``theta <- (1 - a) theta + a x_local`` with ``a = alpha * weight(t - tau)``.

    Args:
      lr: learning rate of the workers' local steps; > 0.
      alpha: the paper's mixing hyperparameter, in (0, 1]; a commit's mixing weight is
        ``alpha * weight(t - tau)`` (``t - tau = 1`` for a fresh commit).
      rho: weight of the proximal term pulling local steps back to the pulled parameters;
        >= 0 (0: none).
      window: local steps per commit; integer >= 1.
      weight: ``s``, called with the paper's ``t - tau`` (the commit's staleness plus one,
        >= 1), in [0, 1]: :class:`~gemsim.rules.Polynomial` (default, a = 0.5),
        :class:`~gemsim.rules.Hinge`, :class:`~gemsim.rules.ConstantWeight`,
        :class:`~gemsim.rules.Inverse`, or any jit-able callable.

    Returns:
      The rule; no server or worker state, info :class:`FedasyncInfo`.

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("fedasync: lr", lr)
    alpha = _base.check_real("fedasync: alpha", alpha, low=0.0, high=1.0, low_open=True)
    rho = _base.check_real("fedasync: rho", rho, low=0.0)
    window = _base.check_int("fedasync: window", window, 1)
    if not callable(weight):
        raise ValueError(
            "fedasync: weight must be Polynomial(a), Hinge(a, b), ConstantWeight(), Inverse() "
            f"or a callable tau -> weight; got {weight!r}"
        )

    def init_acc(x0):
        return x0  # the anchor of the proximal term

    def local_step(x, anchor, g, ws):
        if rho > 0:
            g = jax.tree.map(lambda gl, xl, al: gl + rho * (xl - al), g, x, anchor)
        return _base.tree_axpy(-lr, g, x), anchor, ws

    def commit(theta, server, ws, work, ctx):
        s = _base.as_float(weight(ctx.staleness + 1))  # the paper's t - tau
        a = alpha * s
        new_theta = jax.tree.map(lambda t, x: (1.0 - a) * t + a * x, theta, work.x)
        norm = _base.update_norm(jax.tree.map(jnp.subtract, new_theta, theta))
        return new_theta, server, ws, FedasyncInfo(norm, s, a)

    return _base.Rule(
        name="fedasync",
        init=_base.stateless,
        commit=commit,
        window=window,
        init_acc=init_acc,
        local_step=local_step,
    )

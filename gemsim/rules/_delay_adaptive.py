"""Asynchronous SGD with delay-adaptive step sizes.

Mishchenko, Bach, Even & Woodworth 2022, "Asynchronous SGD Beats Minibatch SGD Under
Arbitrary Delays" (NeurIPS), https://arxiv.org/abs/2206.07638. Every gradient is applied, but
one computed ``tau`` commits ago takes a step shortened by how far its delay exceeds a
threshold ``tau_c``::

    theta <- theta - lr * min(1, tau_c / tau) * g        # factor 1 while tau <= tau_c

The paper's delay-adaptive stepsize is ``gamma`` while ``tau_k <= tau_C`` and
``min(gamma, 1 / (4 L tau_k))`` beyond; at ``gamma = 1 / (4 L tau_C)`` that is
``gamma tau_C / tau_k``, the factor above. Every gradient is applied, so the paper's
iterations are commits and ``tau`` is the commit's staleness. With ``tau_c`` of the order of
the number of workers a gradient of typical delay keeps the full step; only the few very
delayed ones (a straggler's) are damped, which is what makes the method robust to a handful
of very slow workers. The threshold defaults to the number of workers the rule is
initialised for.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from gemsim.rules import _base


class DelayAdaptiveState(NamedTuple):
    """Attributes:
    tau_c: the delay threshold; float32, shape ().
    """

    tau_c: jax.Array


def delay_adaptive(lr: float, tau_c: float | None = None) -> _base.Rule:
    """ASGD whose step is scaled by ``min(1, tau_c / tau)``.

    Args:
      lr: learning rate; > 0.
      tau_c: delay threshold (commits); > 0. None: the number of workers.

    Returns:
      The rule; server state :class:`DelayAdaptiveState`, no worker state, info
      :class:`~gemsim.rules.CommitInfo` with weight ``min(1, tau_c / tau)``.

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("delay_adaptive: lr", lr)
    if tau_c is not None:
        tau_c = _base.check_positive("delay_adaptive: tau_c", tau_c)

    def init(params, n_workers):
        del params
        n_workers = _base.check_int("n_workers", n_workers, 1)
        threshold = float(n_workers) if tau_c is None else tau_c
        server = DelayAdaptiveState(jnp.asarray(threshold, jnp.float32))
        return _base.RuleState(server, _base.empty_state())

    def commit(theta, server, ws, work, ctx):
        tau = _base.as_float(ctx.staleness)
        # min(1, tau_c / tau) without dividing by tau = 0.
        factor = jnp.where(tau > server.tau_c, server.tau_c / jnp.maximum(tau, 1.0), 1.0)
        update = jax.tree.map(lambda g: (-lr * factor) * g, work.acc)
        new_theta = jax.tree.map(jnp.add, theta, update)
        info = _base.CommitInfo(_base.update_norm(update), factor.astype(jnp.float32))
        return new_theta, server, ws, info

    return _base.Rule(name="delay_adaptive", init=init, commit=commit)

"""Asynchronous SGD with momentum at the server, optionally corrected for implicit momentum.

Mitliagkas, Zhang, Hadjis & Ré 2016, "Asynchrony begets Momentum, with an Application to
Deep Learning" (Allerton), https://arxiv.org/abs/1605.09774. The server applies each
gradient, staleness-blind, through a heavy-ball buffer::

    v     <- mu_e * v + g
    theta <- theta - lr * v

The paper shows that asynchrony itself acts as momentum: with n workers whose compute times
are exponential, the staleness is geometric and the expected update follows momentum SGD
with momentum ``1 - 1/n`` (and step ``lr / n``). Explicit momentum adds to it, so to reach a
total of ``momentum`` the explicit part must shrink; ``implicit_correction`` sets::

    mu_e = max(0, momentum - (1 - 1/n))           # else mu_e = momentum

with n the number of workers the rule is initialised for.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base
from gemsim.types import PyTree


class ServerMomentumState(NamedTuple):
    """Attributes:
    velocity: the momentum buffer, like params; zeros at the start.
    momentum: the explicit momentum applied, ``mu_e``; float32, shape ().
    """

    velocity: PyTree
    momentum: jax.Array


def effective_momentum(momentum: float, n_workers: int, implicit_correction: bool) -> float:
    """``mu_e``: ``momentum``, or ``max(0, momentum - (1 - 1/n))`` with the correction."""
    if not implicit_correction:
        return momentum
    return max(0.0, momentum - (1.0 - 1.0 / n_workers))


def server_momentum(
    lr: float, momentum: float = 0.9, implicit_correction: bool = False
) -> _base.Rule:
    """Heavy-ball momentum SGD at the server, commit by commit.

    Args:
      lr: learning rate; > 0.
      momentum: the target momentum, in [0, 1).
      implicit_correction: subtract the momentum asynchrony implies, ``1 - 1/n``, from the
        explicit one (floored at 0).

    Returns:
      The rule; server state :class:`ServerMomentumState`, no worker state, info
      :class:`~gemsim.rules.CommitInfo` with weight 1.

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("server_momentum: lr", lr)
    momentum = _base.check_real(
        "server_momentum: momentum", momentum, low=0.0, high=1.0, high_open=True
    )
    if not isinstance(implicit_correction, bool):
        raise ValueError(
            f"server_momentum: implicit_correction must be a bool, got {implicit_correction!r}"
        )

    def init(params, n_workers):
        n_workers = _base.check_int("n_workers", n_workers, 1)
        mu_e = effective_momentum(momentum, n_workers, implicit_correction)
        server = ServerMomentumState(otu.tree_zeros_like(params), jnp.asarray(mu_e, jnp.float32))
        return _base.RuleState(server, _base.empty_state())

    def commit(theta, server, ws, work, ctx):
        del ctx  # staleness-blind: asynchrony's effect is corrected on average, not per commit
        velocity = jax.tree.map(lambda v, g: server.momentum * v + g, server.velocity, work.acc)
        update = otu.tree_scale(-lr, velocity)
        new_theta = otu.tree_add(theta, update)
        new_server = ServerMomentumState(velocity, server.momentum)
        info = _base.CommitInfo(_base.update_norm(update), _base.unit_weight())
        return new_theta, new_server, ws, info

    return _base.Rule(name="server_momentum", init=init, commit=commit)

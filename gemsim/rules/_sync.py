"""Synchronous data-parallel momentum SGD, driven one commit at a time.

The protocol's barrier rounds are marked in the trace (``CommitContext.round_end``): every
worker alive at a round's start computes one gradient at the round's version and commits it.
The server sums the round's gradients and, at the round's last commit, takes one momentum-SGD
step with their mean (optax's ``sgd`` form, so that one worker is exactly ``optax.sgd``)::

    v     <- momentum * v + mean(g over the round's commits)
    theta <- theta - lr * v

A round holds as many commits as it really had: fewer than ``n_workers`` when a worker
crashed or has not joined yet, so gradients of two versions are never averaged together. At
the other commits of a round the central variable does not change. Under an asynchronous
protocol every commit closes its own round (momentum SGD applied commit by commit). This is
the "proxy" dynamics GEM aims to match.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base
from gemsim.types import PyTree


class SyncServerState(NamedTuple):
    """The server's round bookkeeping.

    Attributes:
      velocity: momentum buffer, like params; zeros at the start.
      grad_sum: sum of this round's gradients so far, like params.
      count: commits received in this round so far; int32, shape ().
    """

    velocity: PyTree
    grad_sum: PyTree
    count: jax.Array


def sync(lr: float, momentum: float = 0.9) -> _base.Rule:
    """Synchronous momentum SGD over the protocol's rounds.

    Args:
      lr: learning rate; > 0.
      momentum: heavy-ball momentum, in [0, 1).

    Returns:
      The rule; server state :class:`SyncServerState`, no worker state, info
      :class:`~gemsim.rules.CommitInfo` with weight 1 (update norm 0 at the commits that only
      accumulate).

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("sync: lr", lr)
    momentum = _base.check_real("sync: momentum", momentum, low=0.0, high=1.0, high_open=True)

    def init(params, n_workers):
        _base.check_int("n_workers", n_workers, 1)
        zeros = otu.tree_zeros_like(params)
        server = SyncServerState(velocity=zeros, grad_sum=zeros, count=jnp.zeros((), jnp.int32))
        return _base.RuleState(server, _base.empty_state())

    def commit(theta, server, ws, work, ctx):
        grad_sum = otu.tree_add(server.grad_sum, work.acc)
        count = server.count + 1
        last = ctx.round_end
        n = count.astype(jnp.float32)
        velocity = jax.tree.map(lambda v, s: momentum * v + s / n, server.velocity, grad_sum)
        update = otu.tree_scale(-lr, velocity)
        new_theta = otu.tree_where(last, otu.tree_add(theta, update), theta)
        new_server = SyncServerState(
            velocity=otu.tree_where(last, velocity, server.velocity),
            grad_sum=otu.tree_where(last, otu.tree_zeros_like(grad_sum), grad_sum),
            count=jnp.where(last, jnp.zeros((), jnp.int32), count),
        )
        norm = jnp.where(last, _base.update_norm(update), jnp.float32(0))
        return new_theta, new_server, ws, _base.CommitInfo(norm, _base.unit_weight())

    return _base.Rule(name="sync", init=init, commit=commit, by_rounds=True)

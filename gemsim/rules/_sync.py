"""Synchronous data-parallel momentum SGD, driven one commit at a time.

The timing model runs barrier rounds: each of the ``n`` workers computes one
gradient at the round's version and commits it. The server sums the round's
gradients and, at the round's ``n``-th commit, takes one momentum-SGD step with
their mean (optax's ``sgd`` form, so that ``n = 1`` is exactly ``optax.sgd``)::

    v     <- momentum * v + mean(g)
    theta <- theta - lr * v

At the other commits of a round the central variable does not change. This is
the "proxy" dynamics GEM aims to match. It assumes every round has exactly
``n_workers`` commits (no failures inside a synchronous run).
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
      count: commits received in this round; int32, shape ().
      n_workers: commits per round; int32, shape ().
    """

    velocity: PyTree
    grad_sum: PyTree
    count: jax.Array
    n_workers: jax.Array


def sync(lr: float, momentum: float = 0.9) -> _base.Rule:
    """Synchronous momentum SGD over rounds of ``n_workers`` commits.

    Args:
      lr: learning rate; > 0.
      momentum: heavy-ball momentum, in [0, 1).

    Returns:
      The rule; server state :class:`SyncServerState`, no worker state, info
      :class:`~gemsim.rules.CommitInfo` with weight 1 (update norm 0 at the
      commits that only accumulate).

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("sync: lr", lr)
    momentum = _base.check_real("sync: momentum", momentum, low=0.0, high=1.0, high_open=True)

    def init(params, n_workers):
        n = _base.check_int("n_workers", n_workers, 1)
        zeros = otu.tree_zeros_like(params)
        server = SyncServerState(
            velocity=zeros,
            grad_sum=zeros,
            count=jnp.zeros((), jnp.int32),
            n_workers=jnp.full((), n, jnp.int32),
        )
        return _base.RuleState(server, _base.empty_state())

    def start(snapshot, ws):
        del ws
        return snapshot

    def commit(theta, server, ws, x0, x, acc, tau):
        del x0, x, tau  # the barrier makes every commit of a round see the same version
        grad_sum = otu.tree_add(server.grad_sum, acc)
        count = server.count + 1
        last = count >= server.n_workers
        n = server.n_workers.astype(jnp.float32)
        velocity = jax.tree.map(lambda v, s: momentum * v + s / n, server.velocity, grad_sum)
        update = otu.tree_scale(-lr, velocity)
        new_theta = otu.tree_where(last, otu.tree_add(theta, update), theta)
        new_server = SyncServerState(
            velocity=otu.tree_where(last, velocity, server.velocity),
            grad_sum=otu.tree_where(last, otu.tree_zeros_like(grad_sum), grad_sum),
            count=jnp.where(last, jnp.zeros((), jnp.int32), count),
            n_workers=server.n_workers,
        )
        norm = jnp.where(last, _base.update_norm(update), jnp.float32(0))
        return new_theta, new_server, ws, _base.CommitInfo(norm, _base.unit_weight())

    return _base.Rule(
        init, start, _base.zeros_acc, _base.keep_gradient, commit, window=1, name="sync"
    )

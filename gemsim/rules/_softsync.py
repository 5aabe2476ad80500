"""Staleness-aware ASGD with the n-softsync protocol.

Zhang, Gupta, Lian & Liu 2016, "Staleness-aware Async-SGD for Distributed Deep Learning"
(IJCAI), https://arxiv.org/abs/1511.05950. The server collects ``c`` gradients and then
takes one step in which each gradient's learning rate is divided by its staleness. The
paper's n-softsync with λ learners averages ``c = ⌊λ/n⌋`` gradients per update: ``c = 1`` is
its λ-softsync (an update per gradient) and ``c = λ`` its 1-softsync (one update per λ
gradients)::

    sigma_l = i - t_l                          # server updates since gradient l's weights
    v       <- momentum * v - (lr / c) * sum_l g_l / max(sigma_l, 1)
    theta   <- theta + v
    i       <- i + 1

``i`` is the server's timestamp (updates so far) and ``t_l`` the timestamp of the weights
gradient l was computed on, which its worker records when it pulls. With ``c = 1`` a
timestamp is a commit, so ``sigma`` is the commit staleness and the rule is
``theta -= lr / max(tau, 1) * g`` (plus momentum).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base
from gemsim.types import PyTree


class SoftsyncServerState(NamedTuple):
    """Attributes:
    timestamp: server updates so far; int32, shape ().
    weighted_sum: sum of ``g / max(sigma, 1)`` over this update's gradients so far.
    count: gradients collected for this update so far; int32, shape ().
    velocity: the momentum buffer, like params; zeros at the start.
    """

    timestamp: jax.Array
    weighted_sum: PyTree
    count: jax.Array
    velocity: PyTree


class SoftsyncWorkerState(NamedTuple):
    """Attributes:
    pulled_at: the server timestamp of the weights the worker pulled; int32, shape ().
    """

    pulled_at: jax.Array


def softsync(lr: float, c: int = 1, momentum: float = 0.0) -> _base.Rule:
    """Staleness-aware ASGD: ``c`` gradients per update, each scaled by ``1 / max(sigma, 1)``.

    Args:
      lr: base learning rate; > 0.
      c: gradients collected per server update; integer >= 1.
      momentum: heavy-ball momentum of the server's updates, in [0, 1).

    Returns:
      The rule; server state :class:`SoftsyncServerState`, worker state
      :class:`SoftsyncWorkerState`, info :class:`~gemsim.rules.CommitInfo` with weight
      ``1 / max(sigma, 1)`` of the commit's gradient (update norm 0 between updates).

    Raises:
      ValueError: a hyperparameter out of range.
    """
    lr = _base.check_positive("softsync: lr", lr)
    c = _base.check_int("softsync: c", c, 1)
    momentum = _base.check_real("softsync: momentum", momentum, low=0.0, high=1.0, high_open=True)

    def init(params, n_workers):
        zeros = otu.tree_zeros_like(params)
        zero = jnp.zeros((), jnp.int32)
        server = SoftsyncServerState(zero, zeros, zero, zeros)
        workers = _base.init_workers(n_workers, lambda: SoftsyncWorkerState(zero))
        return _base.RuleState(server, workers)

    def commit(theta, server, ws, work, ctx):
        del ctx  # staleness is counted in server updates, not commits
        sigma = (server.timestamp - ws.pulled_at).astype(jnp.float32)
        weight = 1.0 / jnp.maximum(sigma, 1.0)
        total = _base.tree_axpy(weight, work.acc, server.weighted_sum)
        count = server.count + 1
        step = count >= c
        velocity = jax.tree.map(lambda v, s: momentum * v - (lr / c) * s, server.velocity, total)
        new_theta = otu.tree_where(step, otu.tree_add(theta, velocity), theta)
        timestamp = server.timestamp + step.astype(jnp.int32)
        new_server = SoftsyncServerState(
            timestamp=timestamp,
            weighted_sum=otu.tree_where(step, otu.tree_zeros_like(total), total),
            count=jnp.where(step, jnp.zeros((), jnp.int32), count),
            velocity=otu.tree_where(step, velocity, server.velocity),
        )
        norm = jnp.where(step, _base.update_norm(velocity), jnp.float32(0))
        # The worker pulls right after its commit: the weights of the server's timestamp now.
        return new_theta, new_server, SoftsyncWorkerState(timestamp), _base.CommitInfo(norm, weight)

    def on_pull(ws, theta, server, fresh):
        del ws, theta, fresh
        return SoftsyncWorkerState(server.timestamp)

    return _base.Rule(name="softsync", init=init, commit=commit, on_pull=on_pull)

"""FedBuff: buffered asynchronous aggregation of local-SGD displacements.

Nguyen, Malik, Zhan, Yousefpour, Rabbat, Malek & Huba 2022, "Federated Learning with Buffered
Asynchronous Aggregation" (AISTATS), https://arxiv.org/abs/2106.06639, Algorithm 1. Each
worker takes ``window`` SGD steps from the parameters it pulled and commits its displacement;
the server buffers ``buffer`` of them, each damped by its staleness, then applies their
scaled sum::

    x <- x_pulled;  repeat window: x <- x - lr * g(x)
    delta_i = x - x_pulled
    buffer:  s <- s + delta_i / sqrt(1 + tau_i)
    after `buffer` commits:  theta <- theta + server_lr / buffer * s;  s <- 0;  k <- k + 1

``tau_i`` counts server updates (buffer flushes) between the worker's pull and the flush
(``gemsim.rules._timestamps``); the buffer is flushed right after its last commit, so the
delay at the commit is the delay at the flush.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base, _timestamps
from gemsim.rules._timestamps import DelayInfo, PulledAt
from gemsim.types import PyTree


class FedbuffState(NamedTuple):
    """Attributes:
    timestamp: buffer flushes so far; int32, shape ().
    delta_sum: the buffer: sum of the damped displacements since the last flush, like params.
    count: displacements in the buffer; int32, shape ().
    """

    timestamp: jax.Array
    delta_sum: PyTree
    count: jax.Array


def fedbuff(lr: float, window: int = 8, buffer: int = 10, server_lr: float = 1.0) -> _base.Rule:
    """Local SGD on the workers; the server applies buffered, staleness-damped displacements.

    Args:
      lr: learning rate of the workers' local SGD steps; > 0.
      window: local steps per commit; integer >= 1.
      buffer: displacements per server update (the paper's K); integer >= 1.
      server_lr: the server's learning rate (the paper's eta_g); > 0.

    Returns:
      The rule; server state :class:`FedbuffState`, worker state
      :class:`~gemsim.rules.PulledAt`, info :class:`~gemsim.rules.DelayInfo` (weight
      ``1 / sqrt(1 + tau)``; update norm 0 except at flushes).

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("fedbuff: lr", lr)
    window = _base.check_int("fedbuff: window", window, 1)
    buffer = _base.check_int("fedbuff: buffer", buffer, 1)
    server_lr = _base.check_positive("fedbuff: server_lr", server_lr)

    def init(params, n_workers):
        zero = _timestamps.zero_stamp()
        server = FedbuffState(zero, otu.tree_zeros_like(params), zero)
        return _base.RuleState(server, _timestamps.init_pulled(n_workers))

    def init_acc(x0):
        del x0
        return ()  # the commit needs only where the local steps started and ended

    def local_step(x, acc, g, ws):
        return _base.tree_axpy(-lr, g, x), acc, ws

    def commit(theta, server, ws, work, ctx):
        del ctx  # staleness counts buffer flushes, not commits
        tau = _timestamps.delay(server, ws)
        weight = 1.0 / jnp.sqrt(1.0 + _base.as_float(tau))
        delta_sum = jax.tree.map(
            lambda s, x, x0: s + weight * (x - x0), server.delta_sum, work.x, work.x0
        )
        count = server.count + 1
        flush = count >= buffer
        update = otu.tree_scale(server_lr / buffer, delta_sum)
        new_theta = otu.tree_where(flush, otu.tree_add(theta, update), theta)
        timestamp = server.timestamp + flush.astype(jnp.int32)
        new_server = FedbuffState(
            timestamp=timestamp,
            delta_sum=otu.tree_where(flush, otu.tree_zeros_like(delta_sum), delta_sum),
            count=jnp.where(flush, jnp.zeros((), jnp.int32), count),
        )
        norm = jnp.where(flush, _base.update_norm(update), jnp.float32(0))
        info = DelayInfo(norm, weight, _base.as_float(tau))
        return new_theta, new_server, PulledAt(timestamp), info

    return _base.Rule(
        name="fedbuff",
        init=init,
        commit=commit,
        window=window,
        init_acc=init_acc,
        local_step=local_step,
        on_pull=_timestamps.pull_timestamp,
    )

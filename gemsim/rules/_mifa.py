"""MIFA: the server remembers every client's latest update and steps with their mean.

Gu, Huang, Zhang & Huang 2021, "Fast Federated Learning in the Presence of Arbitrary Device
Unavailability" (NeurIPS), https://arxiv.org/abs/2106.04159, Algorithm 1 (Memory-augmented
Impatient Federated Averaging). The server keeps ``G_i``, client i's latest update (zero
until its first one), and never waits for the clients that are away: each round it steps
with the mean of all N memories, the updates that came in this round and the older ones of
the others::

    x <- x_pulled;  repeat K: x <- x - eta_l * g(x);   Delta_i = x - x_pulled
    on arrival:  G_i <- Delta_i;   m <- m + 1
    after M arrivals:  x <- x + eta * (1/N) sum_{i in [N]} G_i;   m <- 0

Algorithm 1 stores ``G_i = (x_t - x_K) / eta_t`` and steps ``x - eta_t * mean(G)``: with a
constant local learning rate that is ``x + mean(Delta)``, the step above at ``eta = 1``
(``server_lr`` scales it, 1 by default). Its rounds are synchronous (the active clients
start from the round's model); here, as in the asynchronous comparisons that use it
(CA2FL's, FADAS's), a round is ``buffer`` arrivals (1: every arrival, the impatient limit)
and each update starts from the model its client pulled. The memory's sum is kept running,
so a round costs O(params), not O(N params); the commit's delay in rounds is reported.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base, _timestamps
from gemsim.rules._timestamps import DelayInfo, PulledAt
from gemsim.types import PyTree


class MifaState(NamedTuple):
    """Attributes:
    timestamp: rounds (server steps) so far; int32, shape ().
    count: updates in the round so far; int32, shape ().
    memory_sum: the sum of every client's remembered update, like params.
    """

    timestamp: jax.Array
    count: jax.Array
    memory_sum: PyTree


def mifa(lr: float, window: int = 8, buffer: int = 1, server_lr: float = 1.0) -> _base.Rule:
    """Local SGD on the clients; the server steps with the mean of every client's latest update.

    Args:
      lr: learning rate of the clients' local SGD steps (eta_t, constant); > 0.
      window: local steps per update (K); integer >= 1.
      buffer: arrivals per round (1: a step at every arrival); integer >= 1.
      server_lr: scales the server's step (1: Algorithm 1's); > 0.

    Returns:
      The rule, with per-client state (``client_init``: one remembered update like params,
      to be kept by ``rules.with_clients``); server state :class:`MifaState`, worker state
      :class:`~gemsim.rules.PulledAt`, info :class:`~gemsim.rules.DelayInfo` (weight 1;
      update norm 0 but at the round's last arrival).

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("mifa: lr", lr)
    window = _base.check_int("mifa: window", window, 1)
    buffer = _base.check_int("mifa: buffer", buffer, 1)
    server_lr = _base.check_positive("mifa: server_lr", server_lr)

    def init(params, n_workers):
        zero = _timestamps.zero_stamp()
        server = MifaState(zero, zero, otu.tree_zeros_like(params))
        return _base.RuleState(server, _timestamps.init_pulled(n_workers))

    def commit(theta, server, ws, work, ctx, remembered):
        tau = _timestamps.delay(server, ws)
        delta = jax.tree.map(jnp.subtract, work.x, work.x0)
        memory_sum = jax.tree.map(lambda s, d, g: s + (d - g), server.memory_sum, delta, remembered)
        count = server.count + 1
        flush = count >= buffer
        eta = _base.rate_at_flush(flush, server_lr)
        update = jax.tree.map(lambda s: eta * (s / ctx.n_clients), memory_sum)
        new_theta, norm = _base.step_at_flush(theta, update, flush, ctx.commit)
        timestamp = server.timestamp + flush.astype(jnp.int32)
        new_server = MifaState(
            timestamp=timestamp,
            count=jnp.where(flush, jnp.zeros((), jnp.int32), count),
            memory_sum=memory_sum,
        )
        info = DelayInfo(norm, _base.unit_weight(), _base.as_float(tau))
        return new_theta, new_server, PulledAt(timestamp), info, delta

    return _base.local_sgd_rule(
        "mifa",
        lr,
        window,
        init,
        commit,
        on_pull=_timestamps.pull_timestamp,
        client_init=otu.tree_zeros_like,
    )

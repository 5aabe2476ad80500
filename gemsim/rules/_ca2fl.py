"""CA2FL: buffered asynchronous aggregation calibrated by each client's cached update.

Wang, Cao, Wu, Chen & Chen 2024, "Tackling the Data Heterogeneity in Asynchronous Federated
Learning with Cached Update Calibration" (ICLR), https://openreview.net/forum?id=4aywmeb97I,
Algorithm 1. The server caches each client's latest update ``h_i`` (zero until the client's
first one) and their mean ``h_t`` over all N clients. Each client takes ``window`` (K) SGD
steps at ``lr`` (eta_l) from the model it received and sends its displacement ``Delta_i``;
the server adds ``Delta_i - h_i`` to the round's calibration and caches ``h_i <- Delta_i``.
After ``buffer`` (M) updates it steps with the cached mean plus the calibration::

    x <- x_pulled;  repeat K: x <- x - eta_l * g(x);   Delta_i = x - x_pulled
    on arrival:  s <- s + (Delta_i - h_i);  h_i <- Delta_i;  m <- m + 1
    after M arrivals:
        v = h_t + s / M;   x <- x + eta * v
        h_{t+1} = (1/N) sum_{i in [N]} h_i;   s <- 0;  m <- 0

A client that returns twice within one round is calibrated against the cache its previous
update left (``h_i`` at arrival), the order the server sees them; the paper's rounds hold
each client once, where both readings agree. ``h_t`` is kept as a running sum of the cache,
so a round costs O(params), not O(N params). Like FADAS, no update is damped by its
staleness; the commit's delay in global rounds is reported (``gemsim.rules._timestamps``).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base, _timestamps
from gemsim.rules._timestamps import DelayInfo, PulledAt
from gemsim.types import PyTree


class Ca2flState(NamedTuple):
    """Attributes:
    timestamp: global rounds so far; int32, shape ().
    calibration: the round's sum of ``Delta_i - h_i``, like params.
    count: updates in the round so far; int32, shape ().
    cache_mean: ``h_t``, the mean cached update at the round's start, like params.
    cache_sum: the sum of every client's cached update now, like params.
    """

    timestamp: jax.Array
    calibration: PyTree
    count: jax.Array
    cache_mean: PyTree
    cache_sum: PyTree


def ca2fl(lr: float, window: int = 8, buffer: int = 10, server_lr: float = 1.0) -> _base.Rule:
    """Local SGD on the clients; the server steps with its cached updates, calibrated.

    Args:
      lr: learning rate of the clients' local SGD steps (eta_l); > 0.
      window: local steps per update (K); integer >= 1.
      buffer: updates per global round (M; the paper's experiments: 10); integer >= 1.
      server_lr: the global learning rate (eta); > 0.

    Returns:
      The rule, with per-client state (``client_init``: one cached update like params, to
      be kept by ``rules.with_clients``); server state :class:`Ca2flState`, worker state
      :class:`~gemsim.rules.PulledAt`, info :class:`~gemsim.rules.DelayInfo` (weight 1;
      update norm 0 but at the round's last update).

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("ca2fl: lr", lr)
    window = _base.check_int("ca2fl: window", window, 1)
    buffer = _base.check_int("ca2fl: buffer", buffer, 1)
    server_lr = _base.check_positive("ca2fl: server_lr", server_lr)

    def init(params, n_workers):
        zero, zeros = _timestamps.zero_stamp(), otu.tree_zeros_like(params)
        server = Ca2flState(zero, zeros, zero, zeros, zeros)
        return _base.RuleState(server, _timestamps.init_pulled(n_workers))

    def commit(theta, server, ws, work, ctx, cached):
        tau = _timestamps.delay(server, ws)
        delta = jax.tree.map(jnp.subtract, work.x, work.x0)
        change = jax.tree.map(jnp.subtract, delta, cached)  # Delta_i - h_i
        calibration = jax.tree.map(jnp.add, server.calibration, change)
        cache_sum = jax.tree.map(jnp.add, server.cache_sum, change)
        count = server.count + 1
        flush = count >= buffer
        v = jax.tree.map(lambda h, s: h + s / buffer, server.cache_mean, calibration)
        update = otu.tree_scale(_base.rate_at_flush(flush, server_lr), v)
        new_theta, norm = _base.step_at_flush(theta, update, flush, ctx.commit)
        mean_now = jax.tree.map(lambda s: s / ctx.n_clients, cache_sum)
        timestamp = server.timestamp + flush.astype(jnp.int32)
        new_server = Ca2flState(
            timestamp=timestamp,
            calibration=otu.tree_where(flush, otu.tree_zeros_like(calibration), calibration),
            count=jnp.where(flush, jnp.zeros((), jnp.int32), count),
            cache_mean=otu.tree_where(flush, mean_now, server.cache_mean),
            cache_sum=cache_sum,
        )
        info = DelayInfo(norm, _base.unit_weight(), _base.as_float(tau))
        return new_theta, new_server, PulledAt(timestamp), info, delta

    return _base.local_sgd_rule(
        "ca2fl",
        lr,
        window,
        init,
        commit,
        on_pull=_timestamps.pull_timestamp,
        client_init=otu.tree_zeros_like,
    )

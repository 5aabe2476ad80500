"""Ringmaster ASGD: asynchronous SGD that discards gradients past a delay threshold.

Maranjyan, Tyurin & Richtárik 2025, "Ringmaster ASGD: The First Asynchronous SGD with Optimal
Time Complexity" (ICML), https://arxiv.org/abs/2501.16168, Algorithm 1. The server applies
a gradient only if it is fresh enough and throws it away otherwise::

    tau = k - k_pulled                  # iterations (applied updates) since the worker pulled
    if tau < threshold:  theta <- theta - lr * g;  k <- k + 1
    else:                discard g      # the worker pulls the current theta and starts again

As in the paper, the delay counts iterations of the central variable, so discarded gradients
do not age the others (``gemsim.rules._timestamps``); a worker that joins or restarts
records the iteration it pulled. The paper's threshold ``R`` grows with the gradient noise
over the target accuracy; here it defaults to the number of workers, so that with equal
workers (mean delay n - 1) only the unusually stale gradients of slow workers are dropped.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base, _timestamps
from gemsim.rules._timestamps import DelayInfo, PulledAt


class RingmasterState(NamedTuple):
    """Attributes:
    timestamp: updates applied so far (the paper's iteration k); int32, shape ().
    threshold: the delay threshold R; int32, shape ().
    """

    timestamp: jax.Array
    threshold: jax.Array


def ringmaster(lr: float, threshold: int | None = None) -> _base.Rule:
    """Apply ``-lr * g`` when the gradient's delay is below ``threshold``, else discard it.

    Args:
      lr: learning rate; > 0.
      threshold: delay threshold R (applied updates); integer >= 1 (1 keeps only gradients
        computed at the current parameters). None: the number of workers.

    Returns:
      The rule; server state :class:`RingmasterState`, worker state
      :class:`~gemsim.rules.PulledAt`, info :class:`~gemsim.rules.DelayInfo` (weight 1 for an
      applied gradient, 0 for a discarded one).

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("ringmaster: lr", lr)
    if threshold is not None:
        threshold = _base.check_int("ringmaster: threshold", threshold, 1)

    def init(params, n_workers):
        del params
        n_workers = _base.check_int("n_workers", n_workers, 1)
        r = n_workers if threshold is None else threshold
        server = RingmasterState(_timestamps.zero_stamp(), jnp.asarray(r, jnp.int32))
        return _base.RuleState(server, _timestamps.init_pulled(n_workers))

    def commit(theta, server, ws, work, ctx):
        del ctx  # the delay counts applied updates, not commits
        tau = _timestamps.delay(server, ws)
        keep = tau < server.threshold
        update = otu.tree_scale(-lr, work.acc)
        new_theta = otu.tree_where(keep, otu.tree_add(theta, update), theta)
        timestamp = server.timestamp + keep.astype(jnp.int32)
        norm = jnp.where(keep, _base.update_norm(update), jnp.float32(0))
        info = DelayInfo(norm, keep.astype(jnp.float32), _base.as_float(tau))
        # The worker pulls right after its commit: the parameters of the current timestamp.
        return new_theta, server._replace(timestamp=timestamp), PulledAt(timestamp), info

    return _base.Rule(
        name="ringmaster", init=init, commit=commit, on_pull=_timestamps.pull_timestamp
    )

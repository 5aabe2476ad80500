"""Ringmaster ASGD: asynchronous SGD that discards gradients past a delay threshold.

Maranjyan, Tyurin & Richtárik 2025, "Ringmaster ASGD: The First Asynchronous SGD with Optimal
Time Complexity" (ICML), https://arxiv.org/abs/2501.16168, Algorithm 1. The server applies
a gradient only if it is fresh enough and throws it away otherwise::

    tau = the commit's staleness        # commits since the worker pulled
    if tau < threshold:  theta <- theta - lr * g
    else:                discard g      # the worker pulls the current theta and starts again

``tau`` is the staleness every gemsim rule sees (commits applied since the worker's pull,
discarded ones included). The paper counts iterations of the central variable, which
discarded gradients do not advance; the two agree until a gradient is discarded, and differ
by the number of discards in between after. The paper's threshold ``R`` grows with the
gradient noise over the target accuracy; here it defaults to the number of workers, so that
with equal workers (mean staleness n - 1) only the unusually stale gradients of slow workers
are dropped.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base
from gemsim.rules._timestamps import DelayInfo


class RingmasterState(NamedTuple):
    """Attributes:
    threshold: the staleness threshold R; int32, shape ().
    """

    threshold: jax.Array


def ringmaster(lr: float, threshold: int | None = None) -> _base.Rule:
    """Apply ``-lr * g`` when the gradient's delay is below ``threshold``, else discard it.

    Args:
      lr: learning rate; > 0.
      threshold: staleness threshold R (commits); integer >= 1 (1 keeps only gradients
        computed at the current version). None: the number of workers.

    Returns:
      The rule; server state :class:`RingmasterState`, no worker state, info
      :class:`~gemsim.rules.DelayInfo` (weight 1 for an applied gradient, 0 for a discarded
      one; delay = the staleness).

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
        return _base.RuleState(RingmasterState(jnp.asarray(r, jnp.int32)), _base.empty_state())

    def commit(theta, server, ws, work, ctx):
        tau = ctx.staleness
        keep = tau < server.threshold
        update = otu.tree_scale(-lr, work.acc)
        new_theta = otu.tree_where(keep, otu.tree_add(theta, update), theta)
        norm = jnp.where(keep, _base.update_norm(update), jnp.float32(0))
        info = DelayInfo(norm, keep.astype(jnp.float32), _base.as_float(tau))
        return new_theta, server, ws, info

    return _base.Rule(name="ringmaster", init=init, commit=commit)

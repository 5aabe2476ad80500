"""Rennala SGD: the server waits for a batch of gradients at its current parameters.

Tyurin & Richtárik 2023, "Optimal Time Complexities of Parallel Stochastic Optimization
Methods Under a Fixed Computation Model" (NeurIPS), https://arxiv.org/abs/2305.12387,
Algorithm "Rennala SGD" (server) with its worker method. The server holds ``x^k`` fixed while
it collects ``S = batch`` gradients computed at ``x^k`` (a worker may contribute several; a
gradient computed at older parameters is discarded), then steps with their mean. Its loop,
with ``(g, k')`` a gradient and the index of the point it was computed at::

    for k = 0, 1, ...:
        g^k = 0;  s = 1
        while s <= S:
            receive (g, k') from a worker
            if k' == k:  g^k = g^k + g / S;  s = s + 1
            send (x^k, k) to that worker
        x^{k+1} = x^k - lr * g^k

Fast workers contribute more gradients to a step than slow ones, and no step waits for the
slowest worker. Indices are server timestamps (``gemsim.rules._timestamps``): a worker's
gradient counts when the index it received is the server's. The worker whose gradient
completes a batch is sent ``(x^k, k)`` *before* the step, as the loop above does, so its next
gradient carries index ``k`` after the server moved to ``k + 1`` and is always discarded;
gemsim records that old index for it (where gemsim computes that gradient does not matter:
it is discarded). The batch size defaults to the number of workers.

With ``restarts=True``, Rennala SGD as its authors' code runs it (`RennalaSGD` in the
repository vectozavr/ringmaster-lmo, its asynchronous algorithms): at every step each worker
drops the computation in flight and starts again on the new point ``x^{k+1}``, the worker
that completed the batch among them. The timing model does the restarts
(`gemsim.timing.BatchRestarts`, `optimizer: {rule: rennala, restarts: true}`), so every
gradient arrives computed at the current point and none is discarded; the rule differs in one
thing: the completing worker records the index ``k + 1`` of the point it restarts on. Where
the paper's loop keeps every worker busy and discards its stale work, the authors' code
throws work in flight away at each step and keeps every gradient it receives.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base, _timestamps
from gemsim.rules._timestamps import DelayInfo, PulledAt
from gemsim.types import PyTree


class RennalaState(NamedTuple):
    """Attributes:
    timestamp: server steps so far; int32, shape ().
    grad_sum: sum of the gradients collected for this step, like params.
    count: gradients collected for this step; int32, shape ().
    batch: gradients per step; int32, shape ().
    """

    timestamp: jax.Array
    grad_sum: PyTree
    count: jax.Array
    batch: jax.Array


def rennala(lr: float, batch: int | None = None, *, restarts: bool = False) -> _base.Rule:
    """Step with the mean of ``batch`` gradients computed at the current parameters.

    Args:
      lr: learning rate; > 0.
      batch: gradients per server step; integer >= 1. None: the number of workers.
      restarts: the authors' code (the module docstring): the worker whose gradient completes
        a batch is sent the new point and its index, for a trace in which every worker
        restarts at each step (`gemsim.timing.BatchRestarts`). False: the paper's loop.

    Returns:
      The rule; server state :class:`RennalaState`, worker state
      :class:`~gemsim.rules.PulledAt`, info :class:`~gemsim.rules.DelayInfo` (weight 1 for a
      collected gradient, 0 for a discarded one; update norm 0 except at steps).

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("rennala: lr", lr)
    if batch is not None:
        batch = _base.check_int("rennala: batch", batch, 1)
    restarts = _base.check_bool("rennala: restarts", restarts)

    def init(params, n_workers):
        n_workers = _base.check_int("n_workers", n_workers, 1)
        b = n_workers if batch is None else batch
        zero = _timestamps.zero_stamp()
        server = RennalaState(zero, otu.tree_zeros_like(params), zero, jnp.asarray(b, jnp.int32))
        return _base.RuleState(server, _timestamps.init_pulled(n_workers))

    def commit(theta, server, ws, work, ctx):
        del ctx  # freshness is judged by timestamps, not commit staleness
        tau = _timestamps.delay(server, ws)
        current = tau == 0
        grad_sum = otu.tree_where(current, otu.tree_add(server.grad_sum, work.acc), server.grad_sum)
        count = server.count + current.astype(jnp.int32)
        step = count >= server.batch
        size = server.batch.astype(jnp.float32)
        update = jax.tree.map(lambda s: -lr * (s / size), grad_sum)
        new_theta = otu.tree_where(step, otu.tree_add(theta, update), theta)
        timestamp = server.timestamp + step.astype(jnp.int32)
        new_server = RennalaState(
            timestamp=timestamp,
            grad_sum=otu.tree_where(step, otu.tree_zeros_like(grad_sum), grad_sum),
            count=jnp.where(step, jnp.zeros((), jnp.int32), count),
            batch=server.batch,
        )
        norm = jnp.where(step, _base.update_norm(update), jnp.float32(0))
        info = DelayInfo(norm, current.astype(jnp.float32), _base.as_float(tau))
        # "send (x^k, k) to the worker" comes before the step: a worker is sent the index k
        # of this commit's start, also when its gradient completed the batch. The authors'
        # code restarts it after the step, on x^{k+1}.
        sent = timestamp if restarts else server.timestamp
        return new_theta, new_server, PulledAt(sent), info

    return _base.Rule(name="rennala", init=init, commit=commit, on_pull=_timestamps.pull_timestamp)

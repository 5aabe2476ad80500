"""Ringmaster ASGD: asynchronous SGD that discards gradients past a delay threshold.

Maranjyan, Tyurin & Richtárik 2025, "Ringmaster ASGD: The First Asynchronous SGD with Optimal
Time Complexity" (ICML), https://arxiv.org/abs/2501.16168: "Ringmaster ASGD (without
calculation stops)", Algorithm 4 of the ICML version (arXiv v3; gemsim 0.2 cited it as
Algorithm 1).
The server holds the iteration counter ``k``, the number of gradients it has *applied*; a
worker receives ``x^k`` with its index, and a gradient computed at ``x^{k - delta}`` has
delay ``delta``, counted in applied updates::

    delta = k - (the index of the point the worker received)
    if delta < R:  x^{k+1} = x^k - lr * g;  k <- k + 1;  the worker receives x^{k+1}
    else:          ignore g;                          the worker receives x^k

A discarded gradient does not advance ``k``: discards do not make the other gradients in
flight staler. ``k`` and each worker's received index are server timestamps
(``gemsim.rules._timestamps``): ``server.timestamp`` is ``k``, ``ws.pulled_at`` the index
the worker received at its own commit or at any other pull (a join, a restart, a barrier).
Counting commits instead (discards included) locks training up for thresholds below the
number of workers: every discard ages every gradient in flight without moving ``x``.

The paper sets ``R = max(1, ceil(sigma^2 / epsilon))`` from the gradient noise ``sigma^2``
and the target accuracy ``epsilon``, which gemsim does not know; the threshold defaults to
the number of workers n instead, so that with n equal workers (delays near n - 1) only the
unusually stale gradients of slow workers are dropped. ``R = 1`` keeps exactly the gradients
computed at the current ``x^k``.

With calculation stops (the paper's other algorithm, "Ringmaster ASGD" with stops, and what
the authors' code runs: `RingmasterASGD` in the repository vectozavr/ringmaster-lmo), a
worker whose computation reaches the delay ``R`` stops it and starts again at once on the
current ``x^k``, instead of finishing it to see it discarded. No gradient then arrives with
``delta >= R``; every one is applied, and the slow workers' time goes into fresh gradients
instead of discarded ones. Which computations stop depends on delays alone, so the timing
model makes the stops (`gemsim.timing.DelayStops`, `optimizer: {rule: ringmaster, stops:
true}`) and this rule, unchanged, applies what arrives: its threshold never discards on
such a trace.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base, _timestamps
from gemsim.rules._timestamps import DelayInfo, PulledAt


class RingmasterState(NamedTuple):
    """Attributes:
    timestamp: the iteration counter k, gradients applied so far; int32, shape ().
    threshold: the delay threshold R; int32, shape ().
    """

    timestamp: jax.Array
    threshold: jax.Array


def ringmaster(lr: float, threshold: int | None = None) -> _base.Rule:
    """Apply ``-lr * g`` when the gradient's delay is below ``threshold``, else discard it.

    Args:
      lr: learning rate; > 0.
      threshold: delay threshold R, in applied updates; integer >= 1 (1 keeps only the
        gradients computed at the current parameters). None: the number of workers.

    Returns:
      The rule; server state :class:`RingmasterState`, worker state
      :class:`~gemsim.rules.PulledAt`, info :class:`~gemsim.rules.DelayInfo` (weight 1 for
      an applied gradient, 0 for a discarded one; delay = the paper's delta).

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
        delta = _timestamps.delay(server, ws)
        keep = delta < server.threshold
        update = otu.tree_scale(-lr, work.acc)
        new_theta = otu.tree_where(keep, otu.tree_add(theta, update), theta)
        timestamp = server.timestamp + keep.astype(jnp.int32)
        norm = jnp.where(keep, _base.update_norm(update), jnp.float32(0))
        info = DelayInfo(norm, keep.astype(jnp.float32), _base.as_float(delta))
        # The worker receives x^{k+1} after an applied gradient, x^k after a discarded one:
        # in both cases the server's point and index right after this commit.
        new_server = RingmasterState(timestamp, server.threshold)
        return new_theta, new_server, PulledAt(timestamp), info

    return _base.Rule(
        name="ringmaster", init=init, commit=commit, on_pull=_timestamps.pull_timestamp
    )

"""Malenia SGD: every worker's gradients at the current parameters averaged, then the workers.

Tyurin & Richtárik 2023, "Optimal Time Complexities of Parallel Stochastic Optimization
Methods Under a Fixed Computation Model" (NeurIPS), https://arxiv.org/abs/2305.12387,
Algorithm "Malenia SGD" (server) with its worker method: the heterogeneous-data counterpart
of ``rennala``. Worker ``i`` holds its own data (its own ``f_i``); the server holds ``x^k``
fixed while it collects gradients computed at ``x^k``, keeps each worker's sum ``g_i^k`` and
count ``s_i`` apart, and steps once the harmonic mean of the counts reaches ``S / n``::

    for k = 0, 1, ...:
        g_i^k = 0;  s_i = 0  for every worker i
        while (1/n sum_i 1/s_i)^{-1} < S/n:          # 1/0 = inf: every worker contributes
            receive (g, k') from worker j
            if k' == k:  g_j^k = g_j^k + g;  s_j = s_j + 1
            send (x^k, k) to worker j
        g^k = 1/n sum_i g_i^k / s_i
        x^{k+1} = x^k - lr * g^k

Each worker's gradients are averaged before the workers are weighed equally, so a fast worker
cannot pull the step toward its own data: the step is an unbiased estimate of the gradient of
``1/n sum_i f_i``. Plain asynchronous SGD (``downpour``) weighs each worker by how often it
commits, and with heterogeneous data settles at a commit-frequency-weighted stationary point.

Readings (gemsim's, where the paper leaves a choice or gemsim's API needs one):

- The loop's test is the one above, strict: the server steps as soon as every worker has
  contributed and ``(1/n sum_i 1/s_i)^{-1} >= S/n``. Equivalently, and so computed,
  ``missing == 0`` and ``sum_i 1/s_i <= n^2/S``. With ``S <= n`` (the default ``S = n``) the
  second part always holds: a step takes one gradient or more from every worker. Tyurin's
  later restatement ("Bridging the gap between homogeneous and heterogeneous asynchronous
  optimization is surprisingly difficult", Algorithm 1) writes the loop with ``<=``; for
  Rennala that restatement collects S + 1 gradients where Rennala's own algorithm
  (``rennala``) collects S, and gemsim keeps the strict test, which matches Rennala's count.
- The test in integers, so that it depends on the counts alone (not on their order of
  arrival or on how numpy and XLA round): ``missing`` is an int32 count of the workers with
  ``s_i = 0``, and ``sum_i 1/s_i <= n^2/S`` is read in fixed point, ``sum_i floor(U / s_i) <=
  floor(U n^2 / S)`` with ``U = 2^K``, K the largest with ``n U < 2^31`` (K = 28 for n = 4, 21
  for n = 1000). The sum is kept in int32 as the gradients come (worker j's ``s_j -> s_j + 1``
  adds ``floor(U / (s_j + 1)) - floor(U / s_j)``, the second term 0 when ``s_j = 0``), which
  is exactly the sum computed afresh. It holds whenever the exact test holds, ties included
  (each floor rounds down); it steps early only where ``sum_i 1/s_i`` exceeds ``n^2/S`` by
  less than ``n / U`` (under 2^-26 for n = 4, 2^-11 for n = 1000), a margin small counts
  cannot produce (for n = 3 and counts up to 12 it is exact: tests/rules/test_rules_malenia.py).
- Where the state lives: the engine gives ``commit`` only the committing worker's row, so
  ``g_j^k`` and ``s_j`` (the paper's server memory) are kept in the worker's row, tagged with
  the timestamp ``k`` they belong to (a row tagged with an older one counts as ``s_j = 0``);
  the server keeps the running sum ``sum_i g_i^k / s_i``, updated at each collected gradient
  by removing worker j's old term and adding its new one, so the step needs no other row.
  Memory: one parameter-sized sum per worker and one at the server.
- Indices are server timestamps (``gemsim.rules._timestamps``). As in ``rennala``, the worker
  whose gradient completes a step is sent ``(x^k, k)`` before the step, so its next gradient is
  discarded; so is every gradient in flight at a step (computed at ``x^k``): the paper stops
  the workers' calculations or ignores them, gemsim's workers finish and are ignored.
- A pull other than at a worker's own commit (a late join, a restart, a barrier) records the
  server's timestamp; a restart keeps the worker's ``g_j^k`` and ``s_j``: the server received
  them. A worker counts in ``n`` from the start: no step is taken before a late joiner's first
  gradient, nor after a worker leaves for good.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base, _timestamps
from gemsim.rules._timestamps import DelayInfo
from gemsim.types import PyTree


class MaleniaState(NamedTuple):
    """Attributes:
    timestamp: server steps so far (the paper's k); int32, shape ().
    mean_sum: ``sum_i g_i^k / s_i`` over the workers with ``s_i >= 1``, like params.
    inv_counts: ``sum_i floor(unit / s_i)`` over the workers with ``s_i >= 1`` (``sum_i 1/s_i``
      in fixed point); int32, shape ().
    missing: workers without a gradient at ``x^k`` yet (``s_i = 0``); int32, shape ().
    bound: ``floor(unit n^2 / S)`` (capped at ``n unit``), the most ``inv_counts`` may be at
      a step; int32, shape ().
    unit: ``2^K``, the fixed point's one; int32, shape ().
    n_workers: n; int32, shape ().
    """

    timestamp: jax.Array
    mean_sum: PyTree
    inv_counts: jax.Array
    missing: jax.Array
    bound: jax.Array
    unit: jax.Array
    n_workers: jax.Array


class MaleniaWorkerState(NamedTuple):
    """A worker's row: what it pulled, and the server's record of its gradients at ``x^k``.

    Attributes:
      pulled_at: the server timestamp of the parameters the worker pulled (the index ``k'``
        its next gradient carries); int32, shape ().
      stamp: the server timestamp ``count`` and ``grad_sum`` belong to (an older one than
        the server's counts as no gradient); int32, shape ().
      count: ``s_j``, the worker's gradients collected at ``x^stamp``; int32, shape ().
      grad_sum: ``g_j^k``, their sum, like params.
    """

    pulled_at: jax.Array
    stamp: jax.Array
    count: jax.Array
    grad_sum: PyTree


def malenia(lr: float, batch: int | None = None) -> _base.Rule:
    """Step with the mean over workers of each worker's mean gradient at the current point.

    Args:
      lr: learning rate; > 0.
      batch: the paper's S; the server steps once every worker has contributed and the
        harmonic mean of the workers' counts is at least ``S / n``; integer >= 1. None: the
        number of workers n (one gradient or more from every worker).

    Returns:
      The rule; server state :class:`MaleniaState`, worker state
      :class:`MaleniaWorkerState`, info :class:`~gemsim.rules.DelayInfo` (weight 1 for a
      collected gradient, 0 for a discarded one; update norm 0 except at steps).

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("malenia: lr", lr)
    if batch is not None:
        batch = _base.check_int("malenia: batch", batch, 1)

    def init(params, n_workers):
        n_workers = _base.check_int("n_workers", n_workers, 1)
        size = n_workers if batch is None else batch
        unit = _fixed_point_unit(n_workers)
        bound = min(unit * n_workers * n_workers // size, unit * n_workers)
        zero = _timestamps.zero_stamp()
        server = MaleniaState(
            timestamp=zero,
            mean_sum=otu.tree_zeros_like(params),
            inv_counts=zero,
            missing=jnp.asarray(n_workers, jnp.int32),
            bound=jnp.asarray(bound, jnp.int32),
            unit=jnp.asarray(unit, jnp.int32),
            n_workers=jnp.asarray(n_workers, jnp.int32),
        )

        def row():
            return MaleniaWorkerState(zero, zero, zero, otu.tree_zeros_like(params))

        return _base.RuleState(server, _base.init_workers(n_workers, row))

    def commit(theta, server, ws, work, ctx):
        del ctx  # freshness is judged by timestamps, not commit staleness
        tau = _timestamps.delay(server, ws)
        current = tau == 0  # the paper's k' == k
        server, row = _collect(server, ws, work.acc, current)
        step = (server.missing == 0) & (server.inv_counts <= server.bound)
        size = server.n_workers.astype(jnp.float32)
        update = jax.tree.map(lambda s: -lr * (s / size), server.mean_sum)
        new_theta = otu.tree_where(step, otu.tree_add(theta, update), theta)
        new_server = otu.tree_where(step, _next_round(server), server)
        norm = jnp.where(step, _base.update_norm(update), jnp.float32(0))
        info = DelayInfo(norm, current.astype(jnp.float32), _base.as_float(tau))
        return new_theta, new_server, row, info

    def on_pull(ws, theta, server, fresh):
        del theta, fresh  # g_j^k and s_j were received by the server: a restart keeps them
        return ws._replace(pulled_at=server.timestamp)

    return _base.Rule(name="malenia", init=init, commit=commit, on_pull=on_pull)


def _collect(server: MaleniaState, ws: MaleniaWorkerState, g: PyTree, current: jax.Array):
    """The server and the worker's row after receiving ``g`` (kept when ``current``):
    ``g_j^k += g; s_j += 1``, the server's sums updated by worker j's change of term."""
    ours = ws.stamp == server.timestamp  # a row of an older step counts as s_j = 0
    count = jnp.where(ours, ws.count, jnp.zeros((), jnp.int32))
    grad_sum = otu.tree_where(ours, ws.grad_sum, otu.tree_zeros_like(ws.grad_sum))
    new_count = count + current.astype(jnp.int32)
    new_sum = otu.tree_where(current, otu.tree_add(grad_sum, g), grad_sum)
    old_c, new_c = jnp.maximum(count, 1), jnp.maximum(new_count, 1)
    old_inv = jnp.where(count > 0, server.unit // old_c, jnp.zeros((), jnp.int32))
    old_f, new_f = old_c.astype(jnp.float32), new_c.astype(jnp.float32)
    change = jax.tree.map(lambda new, old: new / new_f - old / old_f, new_sum, grad_sum)
    collected = server._replace(
        mean_sum=otu.tree_add(server.mean_sum, change),
        inv_counts=server.inv_counts + (server.unit // new_c - old_inv),
        missing=server.missing - (count == 0).astype(jnp.int32),
    )
    # "send (x^k, k) to worker j" comes before the step: the row records index k.
    row = MaleniaWorkerState(server.timestamp, server.timestamp, new_count, new_sum)
    return otu.tree_where(current, collected, server), row


def _next_round(server: MaleniaState) -> MaleniaState:
    """``k <- k + 1``; every ``g_i`` and ``s_i`` back to zero (rows tagged k now count as 0)."""
    return server._replace(
        timestamp=server.timestamp + 1,
        mean_sum=otu.tree_zeros_like(server.mean_sum),
        inv_counts=jnp.zeros((), jnp.int32),
        missing=server.n_workers,
    )


def _fixed_point_unit(n_workers: int) -> int:
    """``2^K`` with K the largest such that ``n_workers * 2^K < 2^31``: the one of the fixed
    point in which the stopping test sums ``floor(2^K / s_i)`` over n workers in int32."""
    unit = 1
    while n_workers * unit * 2 < 2**31:
        unit *= 2
    return unit

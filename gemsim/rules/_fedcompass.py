"""FedCompass's aggregation: arrival groups and a general buffer, damped by staleness.

Li, Chaturvedi, He, Chen, Singh, Kindratenko, Huerta, Kim & Madduri 2024, "FedCompass:
Efficient Cross-Silo Federated Learning on Heterogeneous Client Devices Using a Computing
Power-Aware Scheduler" (ICLR, https://arxiv.org/abs/2309.14675), with the aggregation of the
authors' implementation (APPFL's FedCompass aggregator, gradient-based, equal weights). The
scheduler that groups the workers and gives each task its local steps is the timing model's
(`gemsim.timing.Compass`); it tells the rule where each commit went (``ctx.buffer``).

Each worker takes its task's SGD steps at ``lr`` from the model it received (``window`` =
Q_max is the most) and sends its pseudo-gradient ``Delta = x_pulled - x_local``. The server
counts its aggregations ``A``; a commit's staleness is ``A`` now minus ``A`` when its worker
pulled, and its weight ``server_lr * (tau + 1) ** -staleness_exponent / N`` (N workers)::

    applied alone (a worker's first arrival):  x <- x - w(tau) Delta;  A <- A + 1
    general buffer (a late arrival):           keep (Delta, its pull's A), one per worker
    its group's buffer:                        add w(tau) Delta to the group's sum; at the
      group's last commit:  x <- x - (group's sum + sum of w(A - A_i) Delta_i over the general
      buffer);  the general buffer emptied;  A <- A + 1

A worker whose update is in its group's buffer leaves the general buffer at that aggregation
(one update per worker: the implementation merges the buffers by worker, the group's last).
The general buffer is the rule's per-client state (`rules.with_clients`, one row a client,
N rows; N the workers, or a population's clients, whose tasks the scheduler then groups), so
an aggregation costs O(N params): the paper's federations are cross-silo, a few tens of
clients.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base, _timestamps
from gemsim.rules._timestamps import DelayInfo, PulledAt
from gemsim.types import PyTree

ALONE, GENERAL, GROUP = 0, 1, 2  # ctx.buffer (`gemsim.timing.Compass`'s trace column)


class FedcompassState(NamedTuple):
    """Attributes:
    timestamp: aggregations so far (A); int32, shape ().
    group: the open group's sum of weighted pseudo-gradients, like params.
    """

    timestamp: jax.Array
    group: PyTree


class GeneralRow(NamedTuple):
    """A client's row: its update in the general buffer, if it has one there.

    Attributes:
    update: the update, like params.
    pulled_at: the timestamp it was pulled at; int32, shape ().
    held: whether the client has one there; bool, shape ().
    """

    update: PyTree
    pulled_at: jax.Array
    held: jax.Array


def fedcompass(
    lr: float,
    window: int = 100,
    server_lr: float = 0.9,
    staleness_exponent: float = 0.5,
) -> _base.Rule:
    """FedCompass's server over the timing model's arrival groups (`timing.Compass`).

    Args:
      lr: learning rate of the workers' local SGD steps; > 0.
      window: the most local steps a task holds (Q_max; the authors' configuration: 100);
        integer >= 1. Each commit's own count comes from the trace (``local_steps``).
      server_lr: alpha, the aggregation's rate (the authors' default 0.9); > 0.
      staleness_exponent: a in the weight (tau + 1) ** -a (the authors' configuration:
        0.5); >= 0.

    Returns:
      The rule, with per-client state (``client_init``: a :class:`GeneralRow`, the general
      buffer's, to be kept by ``rules.with_clients``, which gives the commit every row:
      ``client_table``); server state :class:`FedcompassState`, worker state
      :class:`~gemsim.rules.PulledAt`, info :class:`~gemsim.rules.DelayInfo` (update norm
      0 but at aggregations; weight the commit's own).

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("fedcompass: lr", lr)
    window = _base.check_int("fedcompass: window", window, 1)
    server_lr = _base.check_positive("fedcompass: server_lr", server_lr)
    exponent = _base.check_real("fedcompass: staleness_exponent", staleness_exponent)
    if exponent < 0:
        raise ValueError(f"fedcompass: staleness_exponent must be >= 0, got {exponent!r}")

    def init(params, n_workers):
        server = FedcompassState(_timestamps.zero_stamp(), otu.tree_zeros_like(params))
        return _base.RuleState(server, _timestamps.init_pulled(n_workers))

    def client_init(params):
        return GeneralRow(
            otu.tree_zeros_like(params), _timestamps.zero_stamp(), jnp.zeros((), bool)
        )

    def weight(tau, n):
        # A run-time rate (as `_base.rate_at_flush`): runs alone and together round alike.
        rate = jnp.asarray(server_lr, jnp.float32)
        return rate * (tau.astype(jnp.float32) + 1.0) ** jnp.float32(-exponent) / n

    def commit(theta, server, ws, work, ctx, general: GeneralRow):
        c, n, live = ctx.row, ctx.n_clients, jnp.asarray(ctx.active, bool)
        tau = _timestamps.delay(server, ws)
        w = weight(tau, n)
        delta = jax.tree.map(jnp.subtract, work.x0, work.x)  # the pseudo-gradient
        alone, grouped = ctx.buffer == ALONE, ctx.buffer == GROUP
        general_now = (ctx.buffer == GENERAL) & live
        closes = grouped & ctx.round_end & live
        # The group's sum, with this commit's weighted update where it joins it.
        group = jax.tree.map(lambda s, d: jnp.where(grouped, s + w * d, s), server.group, delta)
        held = general.held.at[c].set(jnp.where(grouped & live, False, general.held[c]))
        held = held.at[c].set(jnp.where(general_now, True, held[c]))
        at = general.pulled_at.at[c].set(jnp.where(general_now, ws.pulled_at, general.pulled_at[c]))
        kept = jax.tree.map(
            lambda b, d: b.at[c].set(jnp.where(general_now, d, b[c])), general.update, delta
        )
        # The general buffer's weighted sum, read at a group's close only: it reads every
        # row (N params), and a population's commits mostly do not close a group.
        def buffered():
            weights = jnp.where(held, weight(server.timestamp - at, n), 0.0)
            return jax.tree.map(lambda b: jnp.tensordot(weights, b, axes=1), kept)

        none = lambda: otu.tree_zeros_like(group)  # noqa: E731 - the branch beside buffered
        total = jax.tree.map(jnp.add, group, jax.lax.cond(closes, buffered, none))
        update = jax.tree.map(
            lambda t, d: jnp.where(closes, -t, jnp.where(alone, -w * d, jnp.zeros_like(d))),
            total,
            delta,
        )
        applied = alone | closes
        new_theta, norm = _base.step_at_flush(theta, update, applied, ctx.commit)
        timestamp = server.timestamp + applied.astype(jnp.int32)
        new_server = FedcompassState(
            timestamp=timestamp,
            group=otu.tree_where(closes, otu.tree_zeros_like(group), group),
        )
        rows = GeneralRow(kept, at, jnp.where(closes, jnp.zeros_like(held), held))
        info = DelayInfo(norm, w, _base.as_float(tau))
        return new_theta, new_server, PulledAt(timestamp), info, rows

    return _base.local_sgd_rule(
        "fedcompass",
        lr,
        window,
        init,
        commit,
        on_pull=_timestamps.pull_timestamp,
        client_init=client_init,
        client_table=True,
    )

"""Server state per client: a rule's declared row, kept for each of N clients.

A rule that remembers clients declares one client's row (``Rule.client_init``) and reads
and writes it at the client's commits (``commit(..., cs) -> (..., cs)``; a rule that reads
other clients' rows takes and returns them all, ``Rule.client_table``). `with_clients`
makes it a plain rule for the engine and both real backends: its server state is
`ClientServer`, the rule's own state beside every client's row stacked on a leading axis of
length N, and its commit reads and writes the row of ``ctx.client``. Nothing else changes
for the executors: the rows travel with the server state (runs executed together stack them
per run, the real backends' server holds them, a replay starts from the same rows).

A row holds ``client_init(params)`` until its client's first commit: the rule tells a
client it has not heard from by the row's own content (MIFA's and CA2FL's zero update).
The memory is N times the row, allocated when the run starts (`client_state_bytes` says
how much before anything is allocated). A simulator knows its trace before it runs: the rows
of clients that never commit are never read, so it may keep fewer (``rows``), one for each
client the trace names, at the row index the engine gives each commit (``ctx.row``,
`engine.client_rows`); the arithmetic is the same, so are the bits.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gemsim.rules._rule import CommitContext, Rule, RuleState, apart
from gemsim.types import PyTree


class ClientServer(NamedTuple):
    """The server state of a rule with per-client state.

    Attributes:
      rule: the rule's own server state.
      clients: every client's row, each leaf stacked on a leading axis of length N.
    """

    rule: PyTree
    clients: PyTree


def has_client_state(rule: Rule) -> bool:
    """Whether the rule declares per-client state and still needs `with_clients`."""
    return rule.client_init is not None


def client_row_shapes(rule: Rule, params: PyTree) -> PyTree:
    """The shapes and dtypes of one client's row (nothing is computed)."""
    if rule.client_init is None:
        raise ValueError(f"rule {rule.name!r} keeps no state per client")
    return jax.eval_shape(rule.client_init, params)


def client_state_bytes(rule: Rule, params: PyTree, n_clients: int) -> int:
    """Bytes of the server's per-client state for ``n_clients`` clients: N times the row."""
    leaves = jax.tree.leaves(client_row_shapes(rule, params))
    row = sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in leaves)
    return int(n_clients) * row


def with_clients(rule: Rule, n_clients: int, rows: int | None = None) -> Rule:
    """``rule`` with every client's row kept in its server state (see the module docstring).

    Args:
      rule: a rule that declares ``client_init``.
      n_clients: N, the clients the runs' commits name (``ctx.client`` in [0, N)).
      rows: the rows kept, if fewer than N: each commit then reads and writes row
        ``ctx.row`` (the engine's `client_rows`: one row per client its plan names), not
        ``ctx.client``; in [1, N]. None: N rows, at ``ctx.client``.

    Returns:
      A rule without ``client_init``: ``commit`` and ``on_pull`` take the usual arguments.

    Raises:
      ValueError: the rule keeps no per-client state, or ``n_clients`` is not >= 1, or
        ``rows`` is not in [1, N].
    """
    if rule.client_init is None:
        raise ValueError(f"rule {rule.name!r} keeps no state per client")
    n_clients = _count("n_clients", n_clients, 1)
    kept = n_clients if rows is None else _count("rows", rows, 1, n_clients)
    by_row = kept < n_clients
    client_init, inner_commit, table = rule.client_init, rule.commit, rule.client_table

    def init(params, n_workers):
        state = rule.init(params, n_workers)
        row = client_init(params)
        rows = jax.tree.map(lambda a: jnp.broadcast_to(a, (kept, *jnp.shape(a))), row)
        return RuleState(ClientServer(state.server, rows), state.workers)

    def commit(theta, server: ClientServer, ws, work, ctx: CommitContext):
        if by_row and ctx.row is None:
            raise ValueError(
                f"rule {rule.name!r} keeps {kept} of {n_clients} clients' rows: its commits "
                "need their row index (ctx.row, from engine.client_rows)"
            )
        client = jnp.asarray(ctx.row if by_row else ctx.client, jnp.int32)
        if table:  # the rule reads other clients' rows and keeps the padding's itself
            ctx = ctx._replace(n_clients=n_clients, row=client)
            theta, inner, ws, info, rows = inner_commit(
                theta, server.rule, ws, work, ctx, server.clients
            )
            return theta, ClientServer(inner, rows), ws, info
        # The row in buffers of its own: left to itself, XLA fuses its read into every
        # computation that uses it, each then reading the N rows after the commit wrote them
        # in place, and copies all N rows twice a commit to keep the old ones (15x the
        # commit's cost at N = 1,000 and logistic regression).
        row = apart(jax.tree.map(lambda a: a[client], server.clients), ctx.commit)
        ctx = ctx._replace(n_clients=n_clients)
        theta, inner, ws, info, new_row = inner_commit(theta, server.rule, ws, work, ctx, row)
        # Padding's row is written back as it was, so that the engine need not select over
        # every client's row (N rows) to discard the padding's effect.
        active = jnp.asarray(ctx.active, bool)
        rows = jax.tree.map(
            lambda a, new, old: a.at[client].set(jnp.where(active, new, old)),
            server.clients,
            new_row,
            row,
        )
        return theta, ClientServer(inner, rows), ws, info

    on_pull = None
    if rule.on_pull is not None:
        inner_pull = rule.on_pull

        def on_pull(ws, theta, server: ClientServer, fresh):
            return inner_pull(ws, theta, server.rule, fresh)

    return rule._replace(
        init=init, commit=commit, on_pull=on_pull, client_init=None, client_table=False
    )


def _count(name: str, value, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be at most n_clients ({high}), got {value!r}")
    return int(value)

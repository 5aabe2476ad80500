"""The public `Rule` interface: what a parameter-server update rule is to gemsim.

A rule is a NamedTuple of pure, jit-able functions over pytrees (optax's style: the
factory validates its hyperparameters and closes over them). The engine, and each real
backend's server and workers, run one commit of worker ``w`` as::

    ws = state.workers[w]                         # the worker's row of the stacked states
    x0 = rule.start(snapshot, ws)                 # snapshot: the version the worker pulled
    acc = rule.init_acc(x0)
    for i in range(rule.window):                  # a lax.scan in the engine
        g = grad(loss)(x, batch_i)                # x starts at x0
        x, acc, ws = rule.local_step(x, acc, g, ws)
    theta, server, ws, info = rule.commit(theta, server, ws, Work(x0, x, acc), ctx)

and, when a worker pulls the central variable other than at its own commit (a late join, a
restart, a barrier, a blocked worker resuming), ``ws = rule.on_pull(ws, theta, server,
fresh)`` with ``fresh`` true when the pull starts a new worker process (a join or a restart:
state that lived in the process is gone). See docs/rules.md for a complete example.

A rule that remembers clients (MIFA, CA2FL: the server keeps each client's latest update)
declares one client's state with ``client_init(params) -> row`` and takes and returns that
row at the commit: ``rule.commit(theta, server, ws, work, ctx, cs) -> (theta, server, ws,
info, cs)``. ``rules.with_clients(rule, n_clients)`` turns it into a plain rule whose server
state holds every client's row (`ClientServer`), read and written at ``ctx.client``;
``gemsim.config.build_rule`` does so with the scenario's clients (a population's N, or the
workers themselves).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.types import PyTree


class RuleState(NamedTuple):
    """All state of a rule besides the central parameters.

    Attributes:
      server: state held by the parameter server (``optax.EmptyState()`` if none).
      workers: per-worker state, every leaf stacked on a leading axis of length
        ``n_workers`` (``optax.EmptyState()`` if none).
    """

    server: PyTree
    workers: PyTree


class Work(NamedTuple):
    """What a worker brings to its commit.

    Attributes:
      x0: where its local computation started (``rule.start``).
      x: where its local steps ended (equal to ``x0`` for single-step rules that do not move).
      acc: what its local steps accumulated (the gradient, for single-step rules).
    """

    x0: PyTree
    x: PyTree
    acc: PyTree


class CommitContext(NamedTuple):
    """What the server knows about a commit besides the work (traced scalars).

    Attributes:
      staleness: commits applied since the worker pulled the version its work started
        from; int32, shape ().
      commit: the commit's index k (it creates version k + 1); int32, shape ().
      round_end: the protocol closes a round at this commit: always true for asynchronous
        protocols, true at the last commit of each barrier round; bool, shape ().
      client: whose work it is: a population's client, else the worker; int32, shape ().
      active: false for the padding of a wave or of runs of unequal length executed
        together, whose effect the engine discards; bool, shape ().
      n_clients: N, the clients whose rows the server keeps (set by ``with_clients`` for a
        rule with per-client state; 1 elsewhere); a Python int.
      buffer: where a FedCompass server puts the commit (`gemsim.timing.Compass`): 0 applied
        alone, 1 its general buffer, 2 its arrival group's buffer (applied at the group's
        last commit, ``round_end``); 0 under every other protocol; int32, shape ().
      row: the committer's row among the per-client rows a simulator keeps for only the
        clients its trace names (`rules.with_clients` ``rows``, `engine.client_rows`); None
        where the rows are every client's, at ``client``; int32, shape ().
    """

    staleness: jax.Array
    commit: jax.Array
    round_end: jax.Array
    client: jax.Array | int = 0
    active: jax.Array | bool = True
    n_clients: int = 1
    buffer: jax.Array | int = 0
    row: jax.Array | None = None


def commit_context(
    staleness=0, commit=0, round_end=True, client=0, active=True, buffer=0
) -> CommitContext:
    """A `CommitContext` from Python values (for driving a rule by hand, e.g. in tests)."""
    return CommitContext(
        staleness=jnp.asarray(staleness, jnp.int32),
        commit=jnp.asarray(commit, jnp.int32),
        round_end=jnp.asarray(round_end, bool),
        client=jnp.asarray(client, jnp.int32),
        active=jnp.asarray(active, bool),
        buffer=jnp.asarray(buffer, jnp.int32),
    )


class CommitInfo(NamedTuple):
    """Diagnostics of one commit for the rules without extra ones.

    Attributes:
      update_norm: L2 norm of the change applied to the central parameters, float32, ().
      weight: the staleness weight applied to the commit (1 for rules that apply none),
        float32, ().
    """

    update_norm: jax.Array
    weight: jax.Array


def start_at_snapshot(snapshot: PyTree, ws: PyTree) -> PyTree:
    """The usual ``start``: local work begins at the version the worker pulled."""
    del ws
    return snapshot


def zeros_acc(x0: PyTree) -> PyTree:
    """The usual ``init_acc``: zeros shaped like the starting point."""
    return otu.tree_zeros_like(x0)


def keep_gradient(x: PyTree, acc: PyTree, g: PyTree, ws: PyTree):
    """The ``local_step`` of single-step rules: keep the gradient, leave ``x`` unchanged."""
    del acc
    return x, g, ws


class Rule(NamedTuple):
    """An update rule (see the module docstring for the order of calls).

    Attributes:
      name: the rule's name, as in scenario files.
      init: ``(params, n_workers) -> RuleState``.
      commit: ``(theta, server, ws, work: Work, ctx: CommitContext) -> (theta, server, ws,
        info)``, atomic at the server; ``info`` is a NamedTuple of float32 diagnostics with
        at least ``update_norm`` (the engine detects divergence with it).
      window: local steps (mini-batches) per commit.
      start: ``(snapshot, ws) -> x0``; default: the snapshot.
      init_acc: ``(x0) -> acc``; default: zeros like ``x0``.
      local_step: ``(x, acc, g, ws) -> (x, acc, ws)`` with ``g`` the gradient at ``x``;
        default: keep the gradient in ``acc``.
      on_pull: ``(ws, theta, server, fresh) -> ws`` at a pull that is not the worker's own
        commit; None: keep ``ws``, or reset it to ``init(theta)``'s row when ``fresh``.
      by_rounds: the rule moves the central variable only at round ends
        (``ctx.round_end``), so it follows any server protocol; False: it applies each commit
        as it comes and follows only protocols whose rounds hold one commit (async, ssp,
        k_sync/k_async with k = 1).
      client_init: ``(params) -> row``: the state the server keeps for each client, as it is
        before the client's first commit (see the module docstring); None: no per-client state.
      client_table: the commit takes and returns every client's row (stacked, the
        committer's at ``ctx.row``), not its own: for a rule whose step reads the rows of
        clients other than the committer (FedCompass's general buffer). It then leaves the
        rows as they were where ``ctx.active`` is False (the padding of runs executed
        together).
    """

    name: str
    init: Callable[[PyTree, int], RuleState]
    commit: Callable[..., tuple[PyTree, PyTree, PyTree, Any]]
    window: int = 1
    start: Callable[[PyTree, PyTree], PyTree] = start_at_snapshot
    init_acc: Callable[[PyTree], PyTree] = zeros_acc
    local_step: Callable[..., tuple[PyTree, PyTree, PyTree]] = keep_gradient
    on_pull: Callable[..., PyTree] | None = None
    by_rounds: bool = False
    client_init: Callable[[PyTree], PyTree] | None = None
    client_table: bool = False


def stored(tree: PyTree, token: jax.Array) -> PyTree:
    """``tree``, rounded on its own before anything reads it.

    Where a product feeds a sum (``theta + pi * dtheta``), XLA on a CPU may fuse both into
    one fused multiply-add, rounded once instead of twice, and whether it does depends on
    the shapes and on what else reads the product: the same commit could then round
    differently alone, beside other runs in one program (`engine: {many_runs}`) and in a real
    backend. ``stored`` multiplies every leaf by a one known only at run time (``token``:
    any traced int32 scalar >= 0, such as the commit index ``ctx.commit``). The product
    is then rounded where it is computed, whatever follows: a multiply-add that takes
    ``x * 1`` as its product is ``theta + x`` rounded once, the sum numpy computes. The
    multiplication fuses into its neighbours, so nothing is stored to memory: a
    conditional on the token, which XLA also keeps, copied the tree on every commit
    (benchmarks/RESULTS.md, "Figures the code cites"). XLA drops optimization barriers on a CPU.
    """
    one = jnp.asarray(token >= 0)
    return jax.tree.map(lambda leaf: leaf * one.astype(leaf.dtype), tree)


def apart(tree: PyTree, token: jax.Array) -> PyTree:
    """``tree`` in buffers of its own before anything reads it: a boundary XLA does not fuse
    through. It is a loop whose trip count XLA cannot know (``token``: any traced int32
    scalar >= 0, so it never runs), which XLA keeps on a CPU, where it drops optimization
    barriers; the loop's state is the tree's own buffers (a conditional returning the tree
    copied it). The engine stores a worker's work with it before the commit reads it, and
    `with_clients` a client's row before the commit uses it."""

    def never(state):
        # Never runs, but must change the tree: XLA forwards a loop's unchanged elements
        # past the loop, and the boundary would vanish.
        count, tree = state
        return count + 1, jax.tree.map(lambda leaf: leaf + leaf, tree)

    _, tree = jax.lax.while_loop(lambda state: state[0] < -1 - token, never, (0, tree))
    return tree


def stateless(params: PyTree, n_workers: int) -> RuleState:
    """The ``init`` of a rule with neither server nor worker state."""
    del params
    if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
        raise ValueError(f"n_workers must be an integer >= 1, got {n_workers!r}")
    return RuleState((), ())


def fresh_row(rule: Rule, theta: PyTree) -> PyTree:
    """A worker's state as a new process that just pulled ``theta`` has it: row 0 of
    ``rule.init(theta, 1)``."""
    return jax.tree.map(lambda a: a[0], rule.init(theta, 1).workers)


def pull_state(rule: Rule, ws: PyTree, theta: PyTree, server: PyTree, fresh: jax.Array):
    """The worker state after a pull of ``theta`` (``rule.on_pull``, or its default)."""
    if rule.on_pull is not None:
        return rule.on_pull(ws, theta, server, fresh)
    return otu.tree_where(jnp.asarray(fresh), fresh_row(rule, theta), ws)

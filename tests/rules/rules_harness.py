"""Shared fixtures for the rule tests: a small pytree, given gradients, traces and drivers.

Gradients are those of a separable quadratic, ``g = a * x + b[w, k, i]`` per
leaf, with ``b`` drawn once from a numpy generator and indexed by worker,
commit and local step; so local steps are well defined and where the gradient
is taken matters. The drivers follow the engine's loop (docs/design.md §5) with a
jitted commit; the numpy references in the tests use :func:`np_grad`.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from compiles import count_compiles
from jax import lax

from gemsim import rules
from gemsim.rules import Rule, RuleState

# Leaves of different shapes; sizes 5, 24, 12, 660: odd and even counts, and one leaf long
# enough (> 512) for the selection medians rather than a sort.
SHAPES = {"b": (5,), "conv": {"w": (2, 3, 4)}, "dense": (4, 3), "wide": (33, 20)}
MAX_WINDOW = 4
# Scale of the parameters and of the gradient shifts (so of the optimum), typical of network
# weights. A power of two: scaling it changes no rounding, only the size of absolute errors.
# GEM's per-parameter pi is scale-free and sensitive to one-ulp differences where |dtheta| is
# small (XLA on CPU fuses multiply-adds, numpy does not), so its float32 trajectories drift
# apart by a few ulps per commit: ~1.2e-6 after 24 commits at scale 1, a quarter of that here.
SCALE = 0.25


class Problem(NamedTuple):
    """A separable quadratic: curvature per element ``a``, shifts ``b[w, k, i]`` per leaf."""

    params: dict
    a: list  # per leaf, float32 like the leaf
    b: list  # per leaf, float32 (n_workers, n_commits, MAX_WINDOW, *leaf.shape)


def make_problem(seed: int, n_workers: int, n_commits: int) -> Problem:
    rng = np.random.default_rng(seed)
    shapes = jax.tree.leaves(SHAPES, is_leaf=lambda s: isinstance(s, tuple))
    structure = jax.tree.structure(SHAPES, is_leaf=lambda s: isinstance(s, tuple))
    leaves = [rng.normal(0.0, SCALE, s).astype(np.float32) for s in shapes]
    a = [rng.uniform(0.5, 1.5, s).astype(np.float32) for s in shapes]
    b = [
        rng.normal(0.0, SCALE, (n_workers, n_commits, MAX_WINDOW, *s)).astype(np.float32)
        for s in shapes
    ]
    # Device arrays, as a problem's init returns: numpy inputs would add a jit cache entry.
    params = jax.tree.unflatten(structure, [jnp.asarray(x) for x in leaves])
    return Problem(params, a, b)


def np_grad(problem: Problem, x: list, w: int, k: int, i: int) -> list:
    """The gradient at numpy leaves ``x`` for worker ``w``, commit ``k``, local step ``i``."""
    return [a * xl + b[w, k, i] for a, xl, b in zip(problem.a, x, problem.b, strict=True)]


def jax_grad(problem: Problem, x, w, k, i):
    """The same gradient through ``jax.grad`` of the quadratic's loss."""

    def loss(x):
        leaves = jax.tree.leaves(x)
        terms = [
            jnp.sum(0.5 * jnp.asarray(a) * xl * xl + jnp.asarray(b)[w, k, i] * xl)
            for a, xl, b in zip(problem.a, leaves, problem.b, strict=True)
        ]
        return sum(terms)

    return jax.grad(loss)(x)


def async_trace(seed: int, n_workers: int, n_commits: int) -> list[tuple[int, int]]:
    """(worker, pulled_version) per commit with pull-at-commit and uneven worker speeds."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.3, 1.0, n_workers)
    p /= p.sum()
    last = {}
    order = []
    for k in range(n_commits):
        w = int(rng.choice(n_workers, p=p))
        order.append((w, last.get(w, -1) + 1))
        last[w] = k
    return order


def sync_trace(seed: int, n_workers: int, n_rounds: int) -> list[tuple[int, int]]:
    """Barrier rounds: every worker commits once per round, pulled at the round's start."""
    rng = np.random.default_rng(seed)
    return [(int(w), r * n_workers) for r in range(n_rounds) for w in rng.permutation(n_workers)]


def round_ends(order) -> list[bool]:
    """True at the last commit of each run of commits sharing a pulled version: the rounds
    of a :func:`sync_trace`."""
    pulled = [pv for _, pv in order]
    return [k == len(order) - 1 or pulled[k + 1] != pulled[k] for k in range(len(order))]


def staleness_of(order) -> list[int]:
    return [k - pv for k, (_, pv) in enumerate(order)]


def local_phase(rule: Rule, problem: Problem):
    """start -> init_acc -> ``window`` local steps (lax.scan), as the engine runs them."""

    def run(snapshot, ws, w, k):
        x0 = rule.start(snapshot, ws)

        def step(carry, i):
            x, acc, ws = carry
            g = jax_grad(problem, x, w, k, i)
            return rule.local_step(x, acc, g, ws), None

        steps = jnp.arange(rule.window, dtype=jnp.int32)
        (x, acc, ws), _ = lax.scan(step, (x0, rule.init_acc(x0), ws), steps)
        return x0, x, acc, ws

    return run


class Driven(NamedTuple):
    versions: list  # theta after each commit, version 0 first (pytrees)
    infos: list
    state: RuleState
    commit_cache_size: int  # entries in the jitted commit's cache
    local_cache_size: int
    commit_first_compiles: int  # XLA compilations during the first commit call
    commit_recompiles: int  # XLA compilations during the commit calls after the first


def drive(
    rule: Rule,
    problem: Problem,
    order,
    n_workers: int,
    *,
    vmapped: bool = False,
    round_end=None,
    fresh=None,
) -> Driven:
    """Runs ``order`` through ``rule`` as the engine's loop does; commit jitted.

    ``round_end`` (one bool per commit) marks the protocol's round ends; default: every
    commit (asynchronous). For a :func:`sync_trace` pass :func:`round_ends`.

    ``fresh`` (one bool per commit) marks the commits that start a new worker life (a join,
    a restart); default: each worker's first. A pull other than at the worker's own last
    commit, or a fresh one past version 0, goes through the rule's pull hook right after the
    commit that created the pulled version (:func:`host_pulls`), as in the engine.

    With ``vmapped`` the local phase runs for all workers at once (``jax.vmap``
    over their stacked states, each from the snapshot of its next commit) and
    the committing worker's row is taken, as a wavefront executor would.
    """
    state = rule.init(problem.params, n_workers)
    theta = problem.params
    versions, infos = [theta], []
    first_compiles = recompiles = 0
    commit = jax.jit(rule.commit)
    if round_end is None:
        round_end = [True] * len(order)
    pulls = host_pulls(order, fresh)
    pull = jax.jit(functools.partial(rules.pull_state, rule))
    one = local_phase(rule, problem)
    local = jax.jit(jax.vmap(one, in_axes=(0, 0, 0, None)) if vmapped else one)
    for k, (w, pv) in enumerate(order):
        tau = jnp.asarray(k - pv, jnp.int32)
        kk = jnp.asarray(k, jnp.int32)
        if vmapped:
            snaps = [versions[_next_pull(order, k, v, pv)] for v in range(n_workers)]
            stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *snaps)
            rows = local(stacked, state.workers, jnp.arange(n_workers, dtype=jnp.int32), kk)
            x0, x, acc, ws = jax.tree.map(lambda a, w=w: a[w], rows)
        else:
            ws = jax.tree.map(lambda a, w=w: a[w], state.workers)
            x0, x, acc, ws = local(versions[pv], ws, jnp.asarray(w, jnp.int32), kk)
        with count_compiles() as compiles:
            ctx = rules.CommitContext(tau, kk, jnp.asarray(round_end[k]))
            theta, server, ws, info = commit(theta, state.server, ws, rules.Work(x0, x, acc), ctx)
        first_compiles = compiles[0] if k == 0 else first_compiles
        recompiles += compiles[0] if k > 0 else 0
        workers = jax.tree.map(lambda a, r, w=w: a.at[w].set(r), state.workers, ws)
        for v, is_fresh in pulls.get(k, []):
            row = jax.tree.map(lambda a, v=v: a[v], workers)
            row = pull(row, theta, server, jnp.asarray(is_fresh))
            workers = jax.tree.map(lambda a, r, v=v: a.at[v].set(r), workers, row)
        state = RuleState(server, workers)
        versions.append(theta)
        infos.append(info)
    return Driven(
        versions,
        infos,
        state,
        commit._cache_size(),
        local._cache_size(),
        first_compiles,
        recompiles,
    )


def default_fresh(order) -> list[bool]:
    """Each worker's first commit starts its life."""
    seen, out = set(), []
    for w, _ in order:
        out.append(w not in seen)
        seen.add(w)
    return out


def host_pulls(order, fresh=None) -> dict[int, list[tuple[int, bool]]]:
    """commit k -> [(worker, fresh)] pulling version k + 1 other than at their own commit."""
    fresh = default_fresh(order) if fresh is None else list(fresh)
    last, pulls = {}, {}
    for k, (w, pv) in enumerate(order):
        prev = last.get(w, -1)
        assert prev < pv <= k, f"commit {k}: worker {w} pulled {pv} after its commit {prev}"
        own = prev >= 0 and pv == prev + 1 and not fresh[k]
        if pv > 0 and not own:
            pulls.setdefault(pv - 1, []).append((w, bool(fresh[k])))
        last[w] = k
    return pulls


# A hand-built asynchronous trace with churn, 4 workers, 24 commits: (worker, pulled
# version, fresh). Worker 2 is slow (staleness 4 to 7); worker 3 joins late, pulling version
# 5; worker 1 restarts and pulls version 14 (its last commit made version 12); worker 3 is
# held back once and pulls version 20 without a restart (a plain pull, as after a barrier).
CHURN = [
    (0, 0, True), (1, 0, True), (0, 1, False), (1, 2, False), (2, 0, True), (0, 3, False),
    (3, 5, True), (1, 4, False), (0, 6, False), (3, 7, False), (0, 9, False), (1, 8, False),
    (2, 5, False), (3, 10, False), (0, 11, False), (1, 14, True), (0, 15, False),
    (3, 14, False), (1, 16, False), (2, 13, False), (0, 17, False), (3, 20, False),
    (1, 19, False), (0, 21, False),
]  # fmt: skip


def churn_trace() -> tuple[list[tuple[int, int]], list[bool]]:
    """(order, fresh) of :data:`CHURN`."""
    return [(w, pv) for w, pv, _ in CHURN], [f for _, _, f in CHURN]


def _next_pull(order, k, v, pv_k):
    """Version worker ``v`` pulls for its next commit at or after ``k``, if it exists yet."""
    for w, pv in order[k:]:
        if w == v:
            return min(pv, k)
    return pv_k


def leaves_np(tree) -> list:
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def max_abs_error(tree, ref_leaves) -> float:
    got = leaves_np(tree)
    assert [g.shape for g in got] == [r.shape for r in ref_leaves]
    return max(float(np.max(np.abs(g - r))) for g, r in zip(got, ref_leaves, strict=True))

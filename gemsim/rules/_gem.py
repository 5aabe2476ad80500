"""Gradient Energy Matching (GEM), Hermans & Louppe 2018, https://arxiv.org/abs/1805.08469.

Each worker keeps a proxy, momentum SGD ``m <- mu*m + dtheta`` on its own
updates ``dtheta = -lr*g``, and the server scales every commit per parameter so
that the energy of the central variable's motion matches the proxy's::

    d     = theta - s        # the central variable's motion since my previous pull,
                             # my own last commit included (the others' commits and mine)
    pi    = clip((kappa*|m| - |d|) / (|dtheta| + eps), 0, pi_max)
    theta = theta + pi * dtheta
    s     = theta before this commit         # the value this worker pulls now

``m`` starts at zero and ``s`` at the initial parameters. Where ``pi`` is not
clipped, ``|d| + pi*|dtheta| = kappa*|m|`` (up to ``pi*eps``).

Energies (unit mass, per parameter, summed): the proxy's is ``0.5 * m**2`` (the
paper's eq. 25); ``kappa`` amplifies the proxy's motion, so the central
variable's motion ``d + pi*dtheta`` is matched to ``kappa*|m|``, the energy
``0.5 * (kappa*m)**2``, ``kappa**2`` times the proxy's (:class:`GemInfo`).
"""

from enum import StrEnum
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base
from gemsim.rules._select import binned_histograms, bisected_tree_medians, histogram_medians
from gemsim.types import PyTree


class EpsPlacement(StrEnum):
    """Where ``eps`` enters the denominator of ``pi``.

    OUTSIDE: ``|dtheta| + eps`` (the paper). INSIDE: ``|dtheta + eps|`` (the
    authors' code; larger ``pi`` where ``dtheta < 0``).
    """

    OUTSIDE = "outside"
    INSIDE = "inside"


class GradientAt(StrEnum):
    """Where a worker's next gradient is computed.

    POST_COMMIT: at the central variable right after its own commit (the
    authors' code; the engine's snapshot with pull-at-commit). PULLED: at the
    value pulled before its commit, ``s`` (the paper's Algorithm 1).
    """

    POST_COMMIT = "post_commit"
    PULLED = "pulled"


class GemConfig(NamedTuple):
    """GEM's validated hyperparameters (static)."""

    lr: float
    momentum: float
    kappa: float
    pi_max: float
    eps: float
    eps_placement: EpsPlacement


class GemWorkerState(NamedTuple):
    """One worker's GEM state (stacked on a leading worker axis in ``RuleState``).

    Attributes:
      m: the momentum proxy, like params; zeros at the start.
      s: the central variable this worker pulled at its previous commit, like
        params; the initial parameters at the start.
    """

    m: PyTree
    s: PyTree


class GemInfo(NamedTuple):
    """Diagnostics of one GEM commit; float32, shape () unless stated.

    The statistics of ``pi`` cover the *included* entries, those with ``dtheta != 0``:
    where the gradient is exactly zero, ``pi`` is set by ``eps`` alone (0 or ``pi_max``)
    and says nothing about the energies, and the update there is zero whatever it is. The
    excluded fraction is ``frac_dtheta_zero``. A statistic over no entries (every
    ``dtheta`` of the commit, or of a leaf, zero) is NaN; so is a median over entries one
    of which is NaN (as ``np.median``).

    Attributes:
      update_norm: L2 norm of ``pi * dtheta``, the change to the central variable.
      weight: mean of ``pi`` over the included entries.
      pi_median: median of ``pi`` over the included entries. Exact (``np.median``) for
        models of at most 256 parameters (a bisection); above, read from a histogram
        of 1,024 equal bins over ``(0, pi_max)`` plus exact bins for 0 and ``pi_max``:
        within ``pi_max / 2048`` (plus float32 rounding, ``< pi_max * 1e-6``) of the exact
        median, and exact when both middle values are 0 or ``pi_max``
        (:func:`~gemsim.rules._select.histogram_medians`).
      frac_pi_zero: fraction of the included entries with ``pi`` clipped at 0.
      frac_pi_max: fraction of the included entries with ``pi`` at ``pi_max``.
      frac_dtheta_zero: fraction of all parameters with ``dtheta == 0``, left out of the
        statistics of ``pi``.
      proxy_energy: the kinetic energy of the proxy, ``0.5 * sum(m**2)`` over all
        parameters with the updated ``m`` (unit mass; the paper's eq. 25). It does not
        depend on ``kappa``.
      target_energy: the energy the central variable's motion is matched to,
        ``0.5 * sum((kappa*m)**2) = kappa**2 * proxy_energy``: where ``0 < pi < pi_max``,
        ``|d + pi*dtheta| = kappa*|m|`` entry by entry.
      central_energy: ``0.5 * sum((d + pi*dtheta)**2)`` over all parameters, the energy
        of the central variable's motion since the worker's previous pull, this commit
        included. At most ``target_energy`` except through entries with ``pi`` clipped
        at 0, where ``|d|`` alone exceeds ``kappa*|m|``.
      pi_median_per_leaf: median of ``pi`` per parameter leaf over its included entries,
        as ``pi_median``, shape ``(n_leaves,)`` in ``jax.tree.leaves`` order; NaN for a
        leaf whose ``dtheta`` is zero everywhere.
    """

    update_norm: jax.Array
    weight: jax.Array
    pi_median: jax.Array
    frac_pi_zero: jax.Array
    frac_pi_max: jax.Array
    frac_dtheta_zero: jax.Array
    proxy_energy: jax.Array
    target_energy: jax.Array
    central_energy: jax.Array
    pi_median_per_leaf: jax.Array


class GemStep(NamedTuple):
    """Everything one GEM step computes, leafwise pytrees shaped like params."""

    update: PyTree  # pi * dtheta
    m: PyTree  # the updated proxy
    pi: PyTree
    dtheta: PyTree
    d: PyTree


def make_config(
    lr, momentum, kappa, pi_max, eps, eps_placement, *, where: str = "gem"
) -> GemConfig:
    """Validates GEM's hyperparameters (ValueError naming the parameter)."""
    return GemConfig(
        lr=_base.check_positive(f"{where}: lr", lr),
        momentum=_base.check_real(
            f"{where}: momentum", momentum, low=0.0, high=1.0, high_open=True
        ),
        kappa=_base.check_positive(f"{where}: kappa", kappa),
        pi_max=_base.check_positive(f"{where}: pi_max", pi_max),
        eps=_base.check_positive(f"{where}: eps", eps),
        eps_placement=_base.check_enum(f"{where}: eps_placement", eps_placement, EpsPlacement),
    )


def gem_step(cfg: GemConfig, theta: PyTree, m: PyTree, s: PyTree, g: PyTree) -> GemStep:
    """The GEM math for gradient ``g``, central variable ``theta``, proxy ``m``, pull ``s``.

    This is the only implementation of GEM's update; the rule's commit and
    :func:`gem_optax` both call it.
    """

    def leaf(theta, m, s, g):
        dtheta = -cfg.lr * g
        m = cfg.momentum * m + dtheta
        d = theta - s
        if cfg.eps_placement is EpsPlacement.INSIDE:
            denom = jnp.abs(dtheta + cfg.eps)
        else:
            denom = jnp.abs(dtheta) + cfg.eps
        pi = jnp.clip((cfg.kappa * jnp.abs(m) - jnp.abs(d)) / denom, 0.0, cfg.pi_max)
        return pi * dtheta, m, pi, dtheta, d

    out = jax.tree.map(leaf, theta, m, s, g)
    # Transpose the tree of 5-tuples into five trees.
    treedef = jax.tree.structure(theta)
    columns = zip(*treedef.flatten_up_to(out), strict=True)
    return GemStep(*(treedef.unflatten(col) for col in columns))


# Inner bins of the pi histogram: medians within pi_max / (2 * _PI_BINS).
_PI_BINS = 1024
# Parameters up to which the medians are exact, by bisection (32 rounds over a few hundred
# values cost less than the histogram's bins there).
_EXACT_AT_MOST = 256


def _leaf_sums(step: GemStep, included) -> jax.Array:
    """``[sum of pi over the included entries, sum of m**2, sum of (d + update)**2]``."""
    trees = (step.pi, included, step.m, step.d, step.update)
    parts = zip(*(jax.tree.leaves(t) for t in trees), strict=True)
    return sum(
        jnp.stack([jnp.sum(jnp.where(inc, p, 0)), jnp.sum(m * m), jnp.sum((d + u) * (d + u))])
        for p, inc, m, d, u in parts
    ).astype(jnp.float32)


def gem_info(
    cfg: GemConfig, step: GemStep, full: jax.Array | bool = True, token: jax.Array | None = None
) -> GemInfo:
    """The diagnostics of one step (see :class:`GemInfo`).

    ``update_norm`` is always computed (the engine detects divergence with it); the rest
    is NaN unless ``full``. The full set costs a histogram of each leaf's pi (a scatter-add
    per leaf; an exact bisection instead for at most 256 parameters) and three sums: on a
    CPU a few percent of a batch-64 CNN gradient. ``token``: a run-time int32 scalar >= 0
    (the commit index), which keeps the histograms' copy pattern out of memory (see
    :func:`~gemsim.rules._select.binned_histograms`); the values do not depend on it.
    """
    pis = jax.tree.leaves(step.pi)
    n = sum(p.size for p in pis)
    norm = jnp.sqrt(sum(jnp.sum(u * u) for u in jax.tree.leaves(step.update)))

    def everything():
        included = [dth != 0 for dth in jax.tree.leaves(step.dtheta)]
        if n <= _EXACT_AT_MOST:  # a few hundred values: exact, cheaper than the histogram
            median, per_leaf = bisected_tree_medians(pis, included)
            inc = jnp.concatenate([jnp.ravel(i) for i in included])
            every = jnp.concatenate([jnp.ravel(p) for p in pis])
            count = lambda where: jnp.sum(inc & where, dtype=jnp.int32)
            n_in, n_zero, n_max = count(True), count(every <= 0), count(every >= cfg.pi_max)
        else:
            hist = binned_histograms(pis, cfg.pi_max, _PI_BINS, included, token)
            rows = jnp.concatenate([hist.sum(0, keepdims=True), hist])
            medians = histogram_medians(rows, cfg.pi_max)
            median, per_leaf = medians[0], medians[1:]
            counts = hist.sum(0)  # int32: exact
            n_in, n_zero, n_max = jnp.sum(counts), counts[0], counts[_PI_BINS + 1]
        frac = lambda count, total: count.astype(jnp.float32) / jnp.float32(total)
        sums = _leaf_sums(step, included)
        proxy = 0.5 * sums[1]
        return GemInfo(
            update_norm=norm,
            weight=sums[0] / n_in.astype(jnp.float32),
            pi_median=median,
            frac_pi_zero=frac(n_zero, n_in),
            frac_pi_max=frac(n_max, n_in),
            frac_dtheta_zero=frac(n - n_in, n),
            proxy_energy=proxy,
            target_energy=cfg.kappa**2 * proxy,
            central_energy=0.5 * sums[2],
            pi_median_per_leaf=per_leaf,
        )

    if full is True:
        return everything()
    nan = jnp.float32(jnp.nan)
    only_norm = lambda: GemInfo(norm, *[nan] * 8, jnp.full((len(pis),), nan))
    return jax.lax.cond(full, everything, only_norm)


def gem(
    lr: float,
    momentum: float = 0.9,
    kappa: float = 1.0,
    pi_max: float = 5.0,
    eps: float = 1e-12,
    eps_placement: EpsPlacement = EpsPlacement.OUTSIDE,
    gradient_at: GradientAt = GradientAt.POST_COMMIT,
    diagnostics_every: int = 1,
) -> _base.Rule:
    """Gradient Energy Matching as a :class:`~gemsim.rules.Rule` (one mini-batch per commit).

    Args:
      lr: learning rate of the proxy, ``dtheta = -lr * g``; > 0.
      momentum: the proxy's momentum ``mu``, in [0, 1).
      kappa: proxy amplification (the paper's appendix B uses 1 to 4); > 0.
      pi_max: upper clip of the per-parameter scale ``pi``; > 0.
      eps: keeps the division finite where ``dtheta`` vanishes; > 0.
      eps_placement: :class:`EpsPlacement` (or its value string).
      gradient_at: :class:`GradientAt` (or its value string); ``PULLED`` makes
        ``start`` return the worker's ``s`` and is meant for pull-at-commit traces.
      diagnostics_every: compute ``info`` in full on every k-th commit (counted at the
        server, from the first) and only ``update_norm`` on the others (NaN elsewhere).
        1, the default, gives everything on every commit: histograms of pi (a
        scatter-add per leaf) and three sums, a few percent of a batch-64 gradient of the paper's
        164k-parameter CNN on a CPU.

    Returns:
      The rule; worker state :class:`GemWorkerState`, server state the commit count
      (int32), info :class:`GemInfo`.

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    cfg = make_config(lr, momentum, kappa, pi_max, eps, eps_placement)
    at = _base.check_enum("gem: gradient_at", gradient_at, GradientAt)
    every = _base.check_int("gem: diagnostics_every", diagnostics_every, 1)

    def init(params, n_workers):
        row = lambda: GemWorkerState(m=otu.tree_zeros_like(params), s=params)
        return _base.RuleState(jnp.zeros((), jnp.int32), _base.init_workers(n_workers, row))

    def start(snapshot, ws):
        return ws.s if at is GradientAt.PULLED else snapshot

    def commit(theta, server, ws, work, ctx):
        # GEM reacts to staleness through d, not through ctx.staleness.
        step = gem_step(cfg, theta, ws.m, ws.s, work.acc)
        # pi * dtheta rounded on its own, then added: see rules.stored.
        new_theta = jax.tree.map(jnp.add, theta, _base.stored(step.update, ctx.commit))
        info = gem_info(cfg, step, True if every == 1 else server % every == 0, ctx.commit)
        return new_theta, server + 1, GemWorkerState(m=step.m, s=theta), info

    def on_pull(ws, theta, server, fresh):
        # s is the central variable at the worker's latest pull, whatever the pull; the proxy
        # lives in the worker process, so a new process (join, restart) starts it at zero.
        del server
        m = otu.tree_where(jnp.asarray(fresh), otu.tree_zeros_like(ws.m), ws.m)
        return GemWorkerState(m=m, s=theta)

    return _base.Rule(name="gem", init=init, commit=commit, start=start, on_pull=on_pull)

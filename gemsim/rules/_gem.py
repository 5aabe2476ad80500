"""Gradient Energy Matching (GEM), Hermans & Louppe 2018, https://arxiv.org/abs/1805.08469.

Each worker keeps a proxy, momentum SGD ``m <- mu*m + dtheta`` on its own
updates ``dtheta = -lr*g``, and the server scales every commit per parameter so
that the energy of the central variable's motion matches the proxy's::

    d     = theta - s                        # what the others moved since my last pull
    pi    = clip((kappa*|m| - |d|) / (|dtheta| + eps), 0, pi_max)
    theta = theta + pi * dtheta
    s     = theta before this commit         # the value this worker pulls now

``m`` starts at zero and ``s`` at the initial parameters. Where ``pi`` is not
clipped, ``|d| + pi*|dtheta| = kappa*|m|`` (up to ``pi*eps``).
"""

from enum import StrEnum
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base
from gemsim.rules._select import tree_medians
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

    Attributes:
      update_norm: L2 norm of ``pi * dtheta``, the change to the central variable.
      weight: mean of ``pi`` over all parameters.
      pi_median: median of ``pi`` over all parameters (exact).
      frac_pi_zero: fraction of parameters with ``pi`` clipped at 0.
      frac_pi_max: fraction of parameters with ``pi`` at ``pi_max``.
      proxy_energy: ``0.5 * sum((kappa*m)**2)`` with the updated ``m``.
      central_energy: ``0.5 * sum((d + pi*dtheta)**2)``.
      pi_median_per_leaf: median of ``pi`` per parameter leaf, shape
        ``(n_leaves,)`` in ``jax.tree.leaves`` order.
    """

    update_norm: jax.Array
    weight: jax.Array
    pi_median: jax.Array
    frac_pi_zero: jax.Array
    frac_pi_max: jax.Array
    proxy_energy: jax.Array
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


def _leaf_sums(cfg: GemConfig, pi, update, m, d) -> jax.Array:
    """Sums over one leaf of [pi, pi at 0, pi at pi_max, m^2, (d + update)^2].

    Stacked so that XLA emits one reduction per leaf instead of five: on a CPU
    the per-kernel overhead, not the arithmetic, dominates these sums.
    """
    one, zero = jnp.float32(1), jnp.float32(0)
    terms = [
        pi,
        jnp.where(pi <= 0, one, zero),
        jnp.where(pi >= cfg.pi_max, one, zero),
        m * m,
        (d + update) * (d + update),
    ]
    return jnp.sum(jnp.stack([t.astype(jnp.float32).ravel() for t in terms]), axis=1)


def gem_info(cfg: GemConfig, step: GemStep, full: jax.Array | bool = True) -> GemInfo:
    """The diagnostics of one step (see :class:`GemInfo`).

    ``update_norm`` is always computed (the engine detects divergence with it); the rest
    (medians, clip fractions, mean pi, energies) is NaN unless ``full``: on a CPU it costs
    about half a batch-64 CNN gradient.
    """
    pis = jax.tree.leaves(step.pi)
    n = sum(p.size for p in pis)
    norm = jnp.sqrt(sum(jnp.sum(u * u) for u in jax.tree.leaves(step.update)))

    def everything():
        parts = zip(pis, *(jax.tree.leaves(t) for t in (step.update, step.m, step.d)), strict=True)
        sums = sum(_leaf_sums(cfg, *leaf) for leaf in parts)
        pi_median, per_leaf = tree_medians(pis)
        return GemInfo(
            update_norm=norm,
            weight=sums[0] / n,
            pi_median=pi_median,
            frac_pi_zero=sums[1] / n,
            frac_pi_max=sums[2] / n,
            proxy_energy=0.5 * cfg.kappa**2 * sums[3],
            central_energy=0.5 * sums[4],
            pi_median_per_leaf=per_leaf,
        )

    if full is True:
        return everything()
    nan = jnp.float32(jnp.nan)
    only_norm = lambda: GemInfo(norm, nan, nan, nan, nan, nan, nan, jnp.full((len(pis),), nan))
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
        1, the default, gives everything on every commit; on a CPU the exact pi medians
        and the sums cost about 1.6 ms per commit for the paper's 164k-parameter CNN,
        half a batch-64 gradient.

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
        del ctx  # GEM reacts to staleness through d, not through the staleness count
        step = gem_step(cfg, theta, ws.m, ws.s, work.acc)
        new_theta = jax.tree.map(jnp.add, theta, step.update)
        info = gem_info(cfg, step, True if every == 1 else server % every == 0)
        return new_theta, server + 1, GemWorkerState(m=step.m, s=theta), info

    def on_pull(ws, theta, server, fresh):
        # s is the central variable at the worker's latest pull, whatever the pull; the proxy
        # lives in the worker process, so a new process (join, restart) starts it at zero.
        del server
        m = otu.tree_where(jnp.asarray(fresh), otu.tree_zeros_like(ws.m), ws.m)
        return GemWorkerState(m=m, s=theta)

    return _base.Rule(name="gem", init=init, commit=commit, start=start, on_pull=on_pull)

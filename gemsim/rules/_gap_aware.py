"""Gap-Aware: stale gradients penalised by how far the centre moved, per parameter.

Barkai, Hakimi & Schuster 2020, "Gap-Aware Mitigation of Gradient Staleness" (ICLR),
https://arxiv.org/abs/1909.10802. Staleness is measured not in commits but by the *gap*: how
far each parameter moved between the worker's pull and the commit, in units of ``C``, the
distance one step typically moves it. Each gradient entry is divided by the penalty
``G = 1 + gap / C``, then the server takes a heavy-ball momentum step (torch.optim.SGD's
form)::

    t     <- t + 1                                        # commits so far, this one included
    r     <- ema * r + (1 - ema) * u^2                     # u: v (momentum > 0) or g (momentum 0)
    C     =  lr * (sqrt(r / (1 - ema^t)) + eps)
    G     =  1 + |theta - theta_pulled| / C               # per parameter
    v     <- momentum * v + g / G;   theta <- theta - lr * v

``C`` follows the formula of the authors' group's public PyTorch ``GapAware`` class: a
bias-corrected exponential moving average (as Adam's) of the squared step direction, so
that ``C`` is the size of a typical *step*: the momentum buffer ``v`` when ``momentum > 0``
(the buffer before this commit's gradient is added: their code updates the average before
the optimizer's step), the gradient ``g`` at momentum 0. With momentum the step is about
``1 / (1 - momentum)`` times the gradient; measuring ``C`` on ``g`` would count each step of
gap as that many. A gap of exactly one typical step gives ``G = 2``; gaps below one step are
penalised too (``G > 1`` whenever the parameter moved), and an exponential average lets
``C`` follow the step size as training goes (an all-time mean of ``|g|`` keeps early large
gradients forever). ``eps = 1e-8`` as in that code; ``ema`` is its ``big_gamma`` (0.999).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base
from gemsim.types import PyTree

# Added to the root of the mean square in C (the authors' group's default epsilon).
EPS = 1e-8


class GapAwareState(NamedTuple):
    """Attributes:
    mean_square: ``r``, the exponential moving average of the squared step direction per
      parameter, like params; zeros at the start.
    count: commits received, ``t``; int32, shape ().
    velocity: the momentum buffer ``v``, like params (zeros, unused with momentum 0).
    """

    mean_square: PyTree
    count: jax.Array
    velocity: PyTree


class GapAwareInfo(NamedTuple):
    """Attributes:
    update_norm: L2 norm of the change of the central parameters, float32, ().
    weight: mean over parameters of ``1 / G``, float32, ().
    gap_max: the largest penalty ``G`` of the commit, float32, ().
    frac_penalized: fraction of parameters with ``G > 1`` (that moved since the pull),
      float32, ().
    """

    update_norm: jax.Array
    weight: jax.Array
    gap_max: jax.Array
    frac_penalized: jax.Array


def _stats(penalties) -> tuple[jax.Array, jax.Array, jax.Array]:
    flat = jnp.concatenate([jnp.ravel(p) for p in jax.tree.leaves(penalties)])
    return (
        jnp.mean(1.0 / flat).astype(jnp.float32),
        jnp.max(flat).astype(jnp.float32),
        jnp.mean((flat > 1.0).astype(jnp.float32)),
    )


def gap_aware(lr: float, momentum: float = 0.0, ema: float = 0.999) -> _base.Rule:
    """ASGD with every gradient entry divided by ``G = 1 + |theta - theta_pulled| / C``.

    Args:
      lr: learning rate; > 0.
      momentum: heavy-ball momentum at the server, applied to the penalised gradients; in
        [0, 1), 0 by default.
      ema: decay of the moving average of the squared step direction that sets ``C`` (the
        paper's gamma); in [0, 1), 0.999 by default.

    Returns:
      The rule; server state :class:`GapAwareState`, no worker state, info
      :class:`GapAwareInfo`.

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("gap_aware: lr", lr)
    momentum = _base.check_real("gap_aware: momentum", momentum, low=0.0, high=1.0, high_open=True)
    ema = _base.check_real("gap_aware: ema", ema, low=0.0, high=1.0, high_open=True)

    def init(params, n_workers):
        _base.check_int("n_workers", n_workers, 1)
        zeros = otu.tree_zeros_like(params)
        server = GapAwareState(zeros, jnp.zeros((), jnp.int32), zeros)
        return _base.RuleState(server, _base.empty_state())

    def commit(theta, server, ws, work, ctx):
        del ctx  # the gap replaces the commit count as the measure of staleness
        count = server.count + 1
        # jnp.where, not `if`: momentum is a traced scalar in runs executed together.
        with_momentum = jnp.asarray(momentum) > 0
        mean_square = jax.tree.map(
            lambda r, v, g: ema * r + (1.0 - ema) * jnp.square(jnp.where(with_momentum, v, g)),
            server.mean_square,
            server.velocity,
            work.acc,
        )
        correction = 1.0 - jnp.asarray(ema, jnp.float32) ** count.astype(jnp.float32)
        penalties = jax.tree.map(
            lambda t, x0, r: 1.0 + jnp.abs(t - x0) / (lr * (jnp.sqrt(r / correction) + EPS)),
            theta,
            work.x0,
            mean_square,
        )
        g = jax.tree.map(jnp.divide, work.acc, penalties)
        velocity = jax.tree.map(lambda v, gl: momentum * v + gl, server.velocity, g)
        update = otu.tree_scale(-lr, velocity)
        new_theta = otu.tree_add(theta, update)
        weight, gap_max, frac = _stats(penalties)
        info = GapAwareInfo(_base.update_norm(update), weight, gap_max, frac)
        return new_theta, GapAwareState(mean_square, count, velocity), ws, info

    return _base.Rule(name="gap_aware", init=init, commit=commit)

"""DOWNPOUR: local SGD steps, then the accumulated displacement is added at the server.

Dean et al. 2012, "Large Scale Distributed Deep Networks" (as dist-keras ships
it). The worker starts from the central variable it pulled, takes ``window``
SGD steps (optionally with heavy-ball momentum), and commits the sum of its
steps; the server adds it unchanged, whatever its staleness.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base
from gemsim.types import PyTree


class LocalVelocity(NamedTuple):
    """A worker's local momentum buffer, kept across commits and plain pulls; a new worker
    process (a join or a restart) starts it at zero.

    Attributes:
      v: velocity like params; zeros at the start.
    """

    v: PyTree


def local_sgd(lr: float, momentum: float):
    """``init``/``local_step`` pair of local SGD from the pulled value, recording the displacement.

    With ``momentum > 0``: ``v <- momentum*v + g``; ``step = -lr*v`` (optax's
    ``trace`` form); the worker state is :class:`LocalVelocity`. Otherwise
    ``step = -lr*g`` and the worker holds no state. ``acc`` sums the steps
    explicitly (not as ``x - x0``, which would lose bits to cancellation).
    """

    def init_workers(params, n_workers):
        if momentum > 0:
            return _base.init_workers(n_workers, lambda: LocalVelocity(otu.tree_zeros_like(params)))
        _base.check_int("n_workers", n_workers, 1)
        return _base.empty_state()

    def local_step(x, acc, g, ws):
        if momentum > 0:
            ws = LocalVelocity(_base.tree_axpy(momentum, ws.v, g))
            step = otu.tree_scale(-lr, ws.v)
        else:
            step = otu.tree_scale(-lr, g)
        return otu.tree_add(x, step), otu.tree_add(acc, step), ws

    return init_workers, local_step


def displacement_rule(name: str, lr: float, window: int, momentum: float, divisor: int):
    """A rule whose commit adds ``acc / divisor`` (the accumulated local displacement)."""
    init_workers, local_step = local_sgd(lr, momentum)

    def init(params, n_workers):
        return _base.RuleState(_base.empty_state(), init_workers(params, n_workers))

    def commit(theta, server, ws, work, ctx):
        del ctx  # staleness-blind by design
        acc = work.acc
        update = acc if divisor == 1 else jax.tree.map(lambda a: a / divisor, acc)
        new_theta = jax.tree.map(jnp.add, theta, update)
        info = _base.CommitInfo(_base.update_norm(update), _base.unit_weight())
        return new_theta, server, ws, info

    # on_pull: the default (keep the velocity; a new process resets it to zeros).
    return _base.Rule(name=name, init=init, commit=commit, window=window, local_step=local_step)


def downpour(lr: float, window: int = 1, local_momentum: float = 0.0) -> _base.Rule:
    """DOWNPOUR: ``window`` local SGD steps per commit; the server adds their sum.

    Args:
      lr: local learning rate; > 0.
      window: local steps (mini-batches) per commit; integer >= 1.
      local_momentum: heavy-ball momentum of the local steps, in [0, 1); its
        velocity is kept per worker across commits.

    Returns:
      The rule; worker state :class:`LocalVelocity` (or none when
      ``local_momentum`` is 0), info :class:`~gemsim.rules.CommitInfo` with weight 1.

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("downpour: lr", lr)
    window = _base.check_int("downpour: window", window, 1)
    mom = _base.check_real(
        "downpour: local_momentum", local_momentum, low=0.0, high=1.0, high_open=True
    )
    return displacement_rule("downpour", lr, window, mom, 1)

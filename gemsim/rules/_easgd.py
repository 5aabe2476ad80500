"""Asynchronous elastic averaging SGD (EASGD).

Zhang, Choromanska & LeCun 2015, "Deep learning with Elastic Averaging SGD",
https://arxiv.org/abs/1412.6651. Each worker explores with its own local
variable ``x_w`` (plain SGD, ``window`` steps per commit); at a commit the
worker and the centre pull toward each other by the elastic difference::

    e     = alpha * (x_w - theta)
    x_w  <- x_w - e
    theta <- theta + e

The pulled snapshot is not used: the worker continues from its own ``x_w``. A new worker
process (a late join, a restart) starts its local variable at the centre it pulls; a plain
pull (a barrier) leaves it where it is.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base
from gemsim.types import PyTree


class EasgdWorkerState(NamedTuple):
    """One worker's local variable.

    Attributes:
      x: the worker's parameters, like params; the initial parameters at the start.
    """

    x: PyTree


def easgd(lr: float, alpha: float, window: int) -> _base.Rule:
    """Asynchronous EASGD.

    Args:
      lr: learning rate of the local SGD steps; > 0.
      alpha: moving rate of the elastic pull, in (0, 1] (``alpha = rho * lr``
        in the paper's notation).
      window: local steps between commits (the paper's ``tau``); integer >= 1.

    Returns:
      The rule; worker state :class:`EasgdWorkerState`, no server state, info
      :class:`~gemsim.rules.CommitInfo` with weight 1 and the norm of ``e``.

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("easgd: lr", lr)
    alpha = _base.check_real("easgd: alpha", alpha, low=0.0, high=1.0, low_open=True)
    window = _base.check_int("easgd: window", window, 1)

    def init(params, n_workers):
        row = lambda: EasgdWorkerState(x=params)
        return _base.RuleState(_base.empty_state(), _base.init_workers(n_workers, row))

    def start(snapshot, ws):
        del snapshot
        return ws.x

    def init_acc(x0):
        del x0
        return ()  # nothing to accumulate: the commit needs only the local variable

    def local_step(x, acc, g, ws):
        return _base.tree_axpy(-lr, g, x), acc, ws

    def commit(theta, server, ws, work, ctx):
        del ws, ctx  # elastic averaging ignores staleness
        e = jax.tree.map(lambda xw, c: alpha * (xw - c), work.x, theta)
        new_theta = jax.tree.map(jnp.add, theta, e)
        new_ws = EasgdWorkerState(x=otu.tree_sub(work.x, e))
        info = _base.CommitInfo(_base.update_norm(e), _base.unit_weight())
        return new_theta, server, new_ws, info

    # on_pull: the default (a new process starts x at the centre it pulled; else x stays).
    return _base.Rule(
        name="easgd",
        init=init,
        commit=commit,
        window=window,
        start=start,
        init_acc=init_acc,
        local_step=local_step,
    )

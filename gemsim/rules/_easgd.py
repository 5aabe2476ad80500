"""Asynchronous elastic averaging SGD (EASGD).

Zhang, Choromanska & LeCun 2015, "Deep learning with Elastic Averaging SGD" (NeurIPS),
https://arxiv.org/abs/1412.6651, Algorithm 1 (asynchronous EASGD, processing by worker i).
Each worker explores with its own variable ``x^i`` (plain SGD); every ``window`` steps (the
paper's tau) it and the centre ``x~`` pull toward each other by the elastic difference. The
worker's loop, ``t^i`` counting its steps::

    x <- x^i
    if tau divides t^i:
        x^i <- x^i - alpha * (x - x~)
        x~  <- x~ + alpha * (x - x~)
    x^i <- x^i - lr * g(x)
    t^i <- t^i + 1

The gradient of a step that follows an exchange is taken at ``x``, the variable *before* the
exchange (so that the worker computes it while the exchange travels), and applied to the
exchanged variable. gemsim follows that order: a commit is the exchange after ``window``
local steps; the worker state keeps the exchanged variable and the point before the exchange,
where the next local phase takes its first gradient. The pulled snapshot is not used. A new
worker process (a late join, a restart) starts its variable, and that point, at the centre it
pulls; a plain pull (a barrier) leaves both where they are.
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
      x: the worker's variable ``x^i``, like params; the initial parameters at the start.
      last: where the worker's next gradient is taken: its variable before its last
        exchange (the paper's ``x``), or ``x`` itself after a local step; like params.
    """

    x: PyTree
    last: PyTree


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
        row = lambda: EasgdWorkerState(x=params, last=params)
        return _base.RuleState(_base.empty_state(), _base.init_workers(n_workers, row))

    def start(snapshot, ws):
        del snapshot
        return ws.last  # the first gradient after an exchange: at the point before it

    def init_acc(x0):
        del x0
        return ()  # nothing to accumulate: the commit needs only the local variable

    def local_step(x, acc, g, ws):
        del x  # where g was taken; the step moves the worker's variable
        stepped = _base.tree_axpy(-lr, g, ws.x)
        return stepped, acc, EasgdWorkerState(stepped, stepped)

    def commit(theta, server, ws, work, ctx):
        del ctx  # elastic averaging ignores staleness
        e = jax.tree.map(lambda xw, c: alpha * (xw - c), ws.x, theta)
        new_theta = jax.tree.map(jnp.add, theta, e)
        new_ws = EasgdWorkerState(x=otu.tree_sub(ws.x, e), last=ws.x)
        info = _base.CommitInfo(_base.update_norm(e), _base.unit_weight())
        return new_theta, server, new_ws, info

    # on_pull: the default (a new process starts x and last at the centre it pulled; else
    # both stay).
    return _base.Rule(
        name="easgd",
        init=init,
        commit=commit,
        window=window,
        start=start,
        init_acc=init_acc,
        local_step=local_step,
    )

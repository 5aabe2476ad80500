"""Asynchronous EAMSGD: elastic averaging with Nesterov momentum on the workers.

Zhang, Choromanska & LeCun 2015, "Deep learning with Elastic Averaging SGD" (NeurIPS),
https://arxiv.org/abs/1412.6651, Algorithm 2. Each worker explores with its own variable
``x`` and velocity ``v`` (Nesterov momentum ``delta``, the paper's δ); every ``window``
local steps (the paper's τ) it and the centre pull toward each other, as in EASGD::

    repeat window:  v <- momentum * v - lr * g(x + momentum * v);  x <- x + v
    e     = alpha * (x - theta)
    x     <- x - e
    theta <- theta + e

The velocity is not touched by the elastic exchange. The gradient is taken at the
look-ahead point ``x + momentum * v``, so that is where the engine's local iterate sits;
``x`` and ``v`` themselves are the worker state. As in gemsim's ``easgd``, the first
gradient after an exchange is taken from the exchanged variable (the paper's pseudo-code
takes that one gradient before the exchange, so that it can overlap the communication).
A new worker process (a join, a restart) starts at the centre it pulls with zero velocity;
a plain pull (a barrier) keeps both.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base
from gemsim.types import PyTree


class EamsgdWorkerState(NamedTuple):
    """Attributes:
    x: the worker's variable, like params; the initial parameters at the start.
    v: its velocity, like params; zeros at the start.
    """

    x: PyTree
    v: PyTree


def eamsgd(lr: float, alpha: float, window: int = 10, momentum: float = 0.9) -> _base.Rule:
    """Asynchronous elastic averaging with Nesterov momentum on the workers.

    Args:
      lr: learning rate of the local steps; > 0.
      alpha: moving rate of the elastic exchange, in (0, 1] (``alpha = rho * lr`` in the
        paper's notation).
      window: local steps between exchanges (the paper's tau); integer >= 1.
      momentum: the workers' Nesterov momentum (the paper's delta), in [0, 1).

    Returns:
      The rule; worker state :class:`EamsgdWorkerState`, no server state, info
      :class:`~gemsim.rules.CommitInfo` with weight 1 and the norm of ``e``.

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("eamsgd: lr", lr)
    alpha = _base.check_real("eamsgd: alpha", alpha, low=0.0, high=1.0, low_open=True)
    window = _base.check_int("eamsgd: window", window, 1)
    momentum = _base.check_real("eamsgd: momentum", momentum, low=0.0, high=1.0, high_open=True)

    def init(params, n_workers):
        row = lambda: EamsgdWorkerState(x=params, v=otu.tree_zeros_like(params))
        return _base.RuleState(_base.empty_state(), _base.init_workers(n_workers, row))

    def lookahead(ws):
        return _base.tree_axpy(momentum, ws.v, ws.x)

    def start(snapshot, ws):
        del snapshot  # the worker continues from its own variable
        return lookahead(ws)

    def init_acc(x0):
        del x0
        return ()  # the commit needs only the worker state

    def local_step(y, acc, g, ws):
        del y  # the look-ahead point, where g was taken
        v = jax.tree.map(lambda vl, gl: momentum * vl - lr * gl, ws.v, g)
        new_ws = EamsgdWorkerState(otu.tree_add(ws.x, v), v)
        return lookahead(new_ws), acc, new_ws

    def commit(theta, server, ws, work, ctx):
        del ctx  # elastic averaging ignores staleness
        e = jax.tree.map(lambda xw, c: alpha * (xw - c), ws.x, theta)
        new_theta = jax.tree.map(jnp.add, theta, e)
        new_ws = EamsgdWorkerState(otu.tree_sub(ws.x, e), ws.v)
        info = _base.CommitInfo(_base.update_norm(e), _base.unit_weight())
        return new_theta, server, new_ws, info

    # on_pull: the default (a new process starts x at the centre it pulled and v at zero).
    return _base.Rule(
        name="eamsgd",
        init=init,
        commit=commit,
        window=window,
        start=start,
        init_acc=init_acc,
        local_step=local_step,
    )

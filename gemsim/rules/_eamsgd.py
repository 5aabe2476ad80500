"""Asynchronous EAMSGD: elastic averaging with Nesterov momentum on the workers.

Zhang, Choromanska & LeCun 2015, "Deep learning with Elastic Averaging SGD" (NeurIPS),
https://arxiv.org/abs/1412.6651, Algorithm 2 (asynchronous EAMSGD, processing by worker i).
Each worker explores with its own variable ``x^i`` and velocity ``v^i`` (Nesterov momentum,
the paper's delta); every ``window`` steps (the paper's tau) it and the centre ``x~`` pull
toward each other, as in EASGD. The worker's loop, ``t^i`` counting its steps::

    x <- x^i
    if tau divides t^i:
        x^i <- x^i - alpha * (x - x~)
        x~  <- x~ + alpha * (x - x~)
    v^i <- momentum * v^i - lr * g(x + momentum * v^i)
    x^i <- x^i + v^i
    t^i <- t^i + 1

The velocity is not touched by the exchange. The gradient is taken at the look-ahead point
``x + momentum * v^i``, so that is where the engine's local iterate sits; for the step that
follows an exchange, ``x`` is the variable *before* the exchange (the worker computes that
gradient while the exchange travels) and the step moves the exchanged variable. A commit is
the exchange after ``window`` local steps; the worker state keeps ``x^i``, ``v^i`` and the
point before the exchange. The momentum defaults to the paper's delta = 0.99 (its
experiments). A new worker process (a join, a restart) starts at the centre it pulls with
zero velocity; a plain pull (a barrier) keeps its state.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base
from gemsim.types import PyTree


class EamsgdWorkerState(NamedTuple):
    """Attributes:
    x: the worker's variable ``x^i``, like params; the initial parameters at the start.
    v: its velocity, like params; zeros at the start.
    last: the point whose look-ahead the next gradient is taken at: the variable before the
      last exchange (the paper's ``x``), or ``x`` itself after a local step; like params.
    """

    x: PyTree
    v: PyTree
    last: PyTree


def eamsgd(lr: float, alpha: float, window: int = 10, momentum: float = 0.99) -> _base.Rule:
    """Asynchronous elastic averaging with Nesterov momentum on the workers.

    Args:
      lr: learning rate of the local steps; > 0.
      alpha: moving rate of the elastic exchange, in (0, 1] (``alpha = rho * lr`` in the
        paper's notation).
      window: local steps between exchanges (the paper's tau); integer >= 1.
      momentum: the workers' Nesterov momentum (the paper's delta), in [0, 1); 0.99 by
        default, the paper's.

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
        row = lambda: EamsgdWorkerState(x=params, v=otu.tree_zeros_like(params), last=params)
        return _base.RuleState(_base.empty_state(), _base.init_workers(n_workers, row))

    def start(snapshot, ws):
        del snapshot  # the worker continues from its own variable
        return _base.tree_axpy(momentum, ws.v, ws.last)

    def init_acc(x0):
        del x0
        return ()  # the commit needs only the worker state

    def local_step(y, acc, g, ws):
        del y  # the look-ahead point, where g was taken
        v = jax.tree.map(lambda vl, gl: momentum * vl - lr * gl, ws.v, g)
        x = otu.tree_add(ws.x, v)
        return _base.tree_axpy(momentum, v, x), acc, EamsgdWorkerState(x, v, x)

    def commit(theta, server, ws, work, ctx):
        del ctx  # elastic averaging ignores staleness
        e = jax.tree.map(lambda xw, c: alpha * (xw - c), ws.x, theta)
        new_theta = jax.tree.map(jnp.add, theta, e)
        new_ws = EamsgdWorkerState(otu.tree_sub(ws.x, e), ws.v, ws.x)
        info = _base.CommitInfo(_base.update_norm(e), _base.unit_weight())
        return new_theta, server, new_ws, info

    # on_pull: the default (a new process starts x and last at the centre it pulled and v at
    # zero; a plain pull keeps all three).
    return _base.Rule(
        name="eamsgd",
        init=init,
        commit=commit,
        window=window,
        start=start,
        init_acc=init_acc,
        local_step=local_step,
    )

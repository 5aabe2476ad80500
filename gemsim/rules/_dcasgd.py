"""Delay-compensated ASGD (DC-ASGD).

Zheng et al. 2017, "Asynchronous Stochastic Gradient Descent with Delay
Compensation" (ICML), https://arxiv.org/abs/1609.08326, Algorithm 3 (the
parameter server). The server corrects a stale gradient with a cheap diagonal
approximation of the Hessian, ``lam * g * g``::

    theta <- theta - lr * (g + lam * g * g * (theta - x0))

where ``x0`` is the point the gradient was taken at (the paper's ``w_bak(m)``,
the model worker m pulled). The adaptive variant (DC-ASGD-a) uses a
per-parameter ``lam = lam0 / sqrt(MS + 1e-7)`` with ``MS`` a moving mean of
``g * g``; ``MS`` is updated with the current gradient *before* it is used, as
in the paper. The paper writes ``MeanSquare(t)`` without saying whose gradients
it averages; gemsim keeps one per worker (it lives in the worker process, and
starts anew when the process does).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base
from gemsim.types import PyTree

# Added to MS under the square root (the paper's epsilon).
MS_EPS = 1e-7


class DcasgdWorkerState(NamedTuple):
    """One worker's mean square of its gradients (adaptive variant only).

    Attributes:
      ms: ``decay * ms + (1 - decay) * g * g``, like params; zeros at the start.
    """

    ms: PyTree


def dcasgd(
    lr: float,
    lam: float = 0.04,
    adaptive: bool = False,
    decay: float = 0.95,
    lam0: float = 2.0,
) -> _base.Rule:
    """Delay-compensated ASGD, constant or adaptive ``lam``.

    Args:
      lr: learning rate; > 0.
      lam: compensation strength of the constant variant; >= 0.
      adaptive: use ``lam = lam0 / sqrt(MS + 1e-7)`` per parameter instead of ``lam``.
      decay: decay of the per-worker mean square ``MS``, in [0, 1).
      lam0: compensation strength of the adaptive variant; >= 0.

    Returns:
      The rule; worker state :class:`DcasgdWorkerState` when adaptive (else
      none), no server state, info :class:`~gemsim.rules.CommitInfo` with weight 1.

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("dcasgd: lr", lr)
    lam = _base.check_real("dcasgd: lam", lam, low=0.0)
    if not isinstance(adaptive, bool):
        raise ValueError(f"dcasgd: adaptive must be True or False, got {adaptive!r}")
    decay = _base.check_real("dcasgd: decay", decay, low=0.0, high=1.0, high_open=True)
    lam0 = _base.check_real("dcasgd: lam0", lam0, low=0.0)

    def init(params, n_workers):
        if adaptive:
            row = lambda: DcasgdWorkerState(ms=otu.tree_zeros_like(params))
            workers = _base.init_workers(n_workers, row)
        else:
            _base.check_int("n_workers", n_workers, 1)
            workers = _base.empty_state()
        return _base.RuleState(_base.empty_state(), workers)

    def commit(theta, server, ws, work, ctx):
        del ctx  # the delay enters through theta - x0
        g, x0 = work.acc, work.x0

        def compensated(g, t, x0, lam_):
            return -lr * (g + lam_ * g * g * (t - x0))

        if adaptive:
            ms = jax.tree.map(lambda ms, g: decay * ms + (1.0 - decay) * g * g, ws.ms, g)
            ws = DcasgdWorkerState(ms)
            adaptive_lam = lambda g, t, x0, ms: compensated(g, t, x0, lam0 / jnp.sqrt(ms + MS_EPS))
            update = jax.tree.map(adaptive_lam, g, theta, x0, ms)
        else:
            update = jax.tree.map(lambda g, t, x0: compensated(g, t, x0, lam), g, theta, x0)
        new_theta = jax.tree.map(jnp.add, theta, update)
        info = _base.CommitInfo(_base.update_norm(update), _base.unit_weight())
        return new_theta, server, ws, info

    # on_pull: the default (the mean square lives with the worker: a new process resets it).
    return _base.Rule(name="dcasgd", init=init, commit=commit)

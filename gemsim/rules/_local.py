"""Local SGD with an outer optimizer (DiLoCo-style), asynchronous or by rounds.

Douillard et al. 2023, "DiLoCo: Distributed Low-Communication Training of Language Models",
https://arxiv.org/abs/2311.08105; its asynchronous form as in Liu et al. 2024,
"Asynchronous Local-SGD Training for Language Modeling", https://arxiv.org/abs/2401.09135.
Each worker takes ``window`` steps of an inner optax optimizer from the version it pulled
and commits the pseudo-gradient ``delta = x_pulled - x_local``; the server feeds the
round's mean pseudo-gradient to an outer optax optimizer::

    x      <- x_pulled;  repeat window: u, s_in = inner.update(g(x), s_in, x); x += u
    delta  =  x_pulled - x
    u, s_out = outer.update(mean(delta over the round), s_out, theta);  theta += u

Under an asynchronous protocol every commit is its own round (the outer step is taken at each
commit). The default optimizers are DiLoCo's (its Table 5 hyperparameters): AdamW with weight
decay 0.1 inside, Nesterov SGD with learning rate 0.7 and momentum 0.9 outside; the default
inner learning rate, 1e-3, is gemsim's (DiLoCo's language models used 4e-4 with a warm-up and
a cosine schedule). The inner optimizer's state lives in the worker process: it is kept across
its commits and reset when a new process starts (a join or a restart).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
import optax.tree_utils as otu

from gemsim.rules import _base
from gemsim.types import PyTree


class LocalWorkerState(NamedTuple):
    """Attributes:
    inner: the inner optimizer's state, for this worker's parameters.
    """

    inner: PyTree


class LocalServerState(NamedTuple):
    """Attributes:
    outer: the outer optimizer's state.
    delta_sum: sum of this round's pseudo-gradients so far, like params.
    count: commits in this round so far; int32, shape ().
    """

    outer: PyTree
    delta_sum: PyTree
    count: jax.Array


def _checked(name: str, tx: object) -> optax.GradientTransformation:
    if not isinstance(tx, optax.GradientTransformation):
        raise ValueError(f"local: {name} must be an optax GradientTransformation, got {tx!r}")
    return tx


DEFAULT_INNER_LR, DEFAULT_INNER_WEIGHT_DECAY = 1e-3, 0.1
DEFAULT_OUTER_LR, DEFAULT_OUTER_MOMENTUM = 0.7, 0.9


def local(
    inner: optax.GradientTransformation | None = None,
    outer: optax.GradientTransformation | None = None,
    window: int = 8,
    lr: float | None = None,
) -> _base.Rule:
    """Local steps of ``inner`` on the workers, ``outer`` on the pseudo-gradients at the server.

    Args:
      inner: the workers' optimizer; None: ``optax.adamw(lr, weight_decay=0.1)`` (DiLoCo's
        inner optimizer; optax's own default weight decay is 1e-4).
      outer: the server's optimizer; None: ``optax.sgd(0.7, momentum=0.9, nesterov=True)``
        (DiLoCo's outer optimizer).
      window: inner steps per commit; integer >= 1.
      lr: the default inner optimizer's learning rate (> 0; None: 1e-3); only without
        ``inner``.

    Returns:
      The rule; worker state :class:`LocalWorkerState`, server state
      :class:`LocalServerState`, info :class:`~gemsim.rules.CommitInfo` (update norm 0 at
      commits that only accumulate a round).

    Raises:
      ValueError: ``inner``/``outer`` not optax transformations, ``window`` < 1, ``lr`` out
        of range or given with ``inner``.
    """
    if lr is not None:
        lr = _base.check_positive("local: lr", lr)
        if inner is not None:
            raise ValueError("local: lr is the default inner optimizer's; give lr or inner")
    if inner is None:
        rate = DEFAULT_INNER_LR if lr is None else lr
        inner = optax.adamw(rate, weight_decay=DEFAULT_INNER_WEIGHT_DECAY)
    if outer is None:
        outer = optax.sgd(DEFAULT_OUTER_LR, momentum=DEFAULT_OUTER_MOMENTUM, nesterov=True)
    inner, outer = _checked("inner", inner), _checked("outer", outer)
    window = _base.check_int("local: window", window, 1)

    def init(params, n_workers):
        server = LocalServerState(
            outer.init(params), otu.tree_zeros_like(params), jnp.zeros((), jnp.int32)
        )
        workers = _base.init_workers(n_workers, lambda: LocalWorkerState(inner.init(params)))
        return _base.RuleState(server, workers)

    def init_acc(x0):
        del x0
        return ()  # the commit needs only where the local steps ended

    def local_step(x, acc, g, ws):
        updates, state = inner.update(g, ws.inner, x)
        return optax.apply_updates(x, updates), acc, LocalWorkerState(state)

    def commit(theta, server, ws, work, ctx):
        delta_sum = jax.tree.map(lambda s, a, b: s + (a - b), server.delta_sum, work.x0, work.x)
        count = server.count + 1
        mean = otu.tree_scale(1.0 / count.astype(jnp.float32), delta_sum)
        updates, outer_state = outer.update(mean, server.outer, theta)
        last = ctx.round_end
        new_theta = otu.tree_where(last, optax.apply_updates(theta, updates), theta)
        new_server = LocalServerState(
            outer=otu.tree_where(last, outer_state, server.outer),
            delta_sum=otu.tree_where(last, otu.tree_zeros_like(delta_sum), delta_sum),
            count=jnp.where(last, jnp.zeros((), jnp.int32), count),
        )
        norm = jnp.where(last, _base.update_norm(updates), jnp.float32(0))
        return new_theta, new_server, ws, _base.CommitInfo(norm, _base.unit_weight())

    # on_pull: the default (the inner state survives a plain pull; a new process resets it).
    return _base.Rule(
        name="local",
        init=init,
        commit=commit,
        window=window,
        init_acc=init_acc,
        local_step=local_step,
        by_rounds=True,
    )

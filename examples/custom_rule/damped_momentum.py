"""A rule outside gemsim: worker-side momentum, commits damped by staleness.

Each worker keeps a velocity ``v <- mu * v + g`` over its own gradients (state that lives in
the worker process: a join or a restart starts it at zero) and the server applies
``theta <- theta - lr * v / (1 + tau)``: the older the velocity's gradient, the smaller its
step. Used from a scenario as ``optimizer: {rule: {import: "damped_momentum:damped"},
lr: 0.05, mu: 0.9}``; docs/rules.md explains each part.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim import rules


class Velocity(NamedTuple):
    v: dict  # like params; zeros for a new worker


def damped(lr: float, mu: float = 0.9) -> rules.Rule:
    if not lr > 0 or not 0 <= mu < 1:
        raise ValueError(f"damped: need lr > 0 and 0 <= mu < 1, got lr={lr!r}, mu={mu!r}")

    def init(params, n_workers):
        row = Velocity(otu.tree_zeros_like(params))
        workers = jax.tree.map(lambda a: jnp.stack([a] * n_workers), row)
        return rules.RuleState(server=(), workers=workers)

    def commit(theta, server, ws, work, ctx):
        v = jax.tree.map(lambda v, g: mu * v + g, ws.v, work.acc)
        scale = lr / (1.0 + ctx.staleness.astype(jnp.float32))
        update = jax.tree.map(lambda x: -scale * x, v)
        new_theta = jax.tree.map(jnp.add, theta, update)
        info = rules.CommitInfo(update_norm=otu.tree_norm(update), weight=scale / lr)
        return new_theta, server, Velocity(v), info

    # start, init_acc, local_step and on_pull keep their defaults: the gradient at the pulled
    # snapshot is the work, and a new worker process gets init's row (v = 0).
    return rules.Rule(name="damped", init=init, commit=commit)

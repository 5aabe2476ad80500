"""Staleness-weighted ASGD: the server adds ``weight(tau) * dtheta``.

With the default :class:`Inverse` weight ``1/(tau+1)`` this is the GEM paper's
"adaptive staleness" baseline (DynSGD as dist-keras ships it), ``tau`` the commit's
staleness (commits since the worker pulled; 0 for a fresh commit). The other
weights are FedAsync's staleness functions (Xie, Koyejo & Gupta 2019,
https://arxiv.org/abs/1903.03934). The weights are functions of their argument
only: this rule passes ``tau``, while ``fedasync`` passes its paper's ``t - tau``,
the staleness plus one (see ``gemsim.rules._fedasync``).
"""

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

from gemsim.rules import _base


def _tau(tau) -> jax.Array:
    return _base.as_float(tau)


@dataclasses.dataclass(frozen=True)
class Inverse:
    """``1 / (tau + 1)``."""

    def __call__(self, tau) -> jax.Array:
        return 1.0 / (_tau(tau) + 1.0)


@dataclasses.dataclass(frozen=True)
class Polynomial:
    """``(tau + 1) ** -a``.

    Attributes:
      a: decay exponent, a finite number >= 0.
    """

    a: float

    def __post_init__(self):
        _base.check_real("Polynomial: a", self.a, low=0.0)

    def __call__(self, tau) -> jax.Array:
        return (_tau(tau) + 1.0) ** -self.a


@dataclasses.dataclass(frozen=True)
class Hinge:
    """``1`` if ``tau <= b`` else ``1 / (a * (tau - b) + 1)``.

    Attributes:
      a: slope of the decay past ``b``, a finite number >= 0.
      b: staleness tolerated at full weight, a finite number >= 0.
    """

    a: float
    b: float

    def __post_init__(self):
        _base.check_real("Hinge: a", self.a, low=0.0)
        _base.check_real("Hinge: b", self.b, low=0.0)

    def __call__(self, tau) -> jax.Array:
        t = _tau(tau)
        return jnp.where(t <= self.b, jnp.float32(1), 1.0 / (self.a * (t - self.b) + 1.0))


@dataclasses.dataclass(frozen=True)
class ConstantWeight:
    """``1`` whatever the staleness (plain ASGD)."""

    def __call__(self, tau) -> jax.Array:
        return jnp.ones_like(_tau(tau))


StalenessWeight = Inverse | Polynomial | Hinge | ConstantWeight


def staleness(lr: float, weight: Callable[[jax.Array], jax.Array] = Inverse()) -> _base.Rule:  # noqa: B008
    """ASGD with each commit scaled by a function of its staleness.

    Args:
      lr: learning rate; > 0.
      weight: ``tau -> weight`` (float32 scalar), usually one of
        :class:`Inverse`, :class:`Polynomial`, :class:`Hinge`, :class:`ConstantWeight`;
        any jit-able callable is accepted.

    Returns:
      The rule; no state, info :class:`~gemsim.rules.CommitInfo` with the
      weight applied.

    Raises:
      ValueError: ``lr`` out of range or ``weight`` not callable.
    """
    lr = _base.check_positive("staleness: lr", lr)
    if not callable(weight):
        raise ValueError(
            "staleness: weight must be Inverse(), Polynomial(a), Hinge(a, b), ConstantWeight() "
            f"or a callable tau -> weight; got {weight!r}"
        )
    return scaled_sgd_rule("staleness", lambda tau: -lr * weight(tau), weight)


def scaled_sgd_rule(name: str, step_size, report_weight) -> _base.Rule:
    """A single-step rule whose commit adds ``step_size(tau) * g`` (``step_size`` < 0)."""

    def commit(theta, server, ws, work, ctx):
        tau = ctx.staleness
        scale = _base.as_float(step_size(tau))
        update = jax.tree.map(lambda g: scale * g, work.acc)
        new_theta = jax.tree.map(jnp.add, theta, update)
        info = _base.CommitInfo(_base.update_norm(update), _base.as_float(report_weight(tau)))
        return new_theta, server, ws, info

    return _base.Rule(name=name, init=_base.stateless, commit=commit)

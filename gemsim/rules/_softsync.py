"""Staleness-aware ASGD with the learning rate divided by the staleness.

Zhang, Gupta, Lian & Liu 2015, "Staleness-aware Async-SGD for Distributed Deep
Learning", https://arxiv.org/abs/1511.05950: a commit of staleness ``tau``
takes a step of size ``lr / max(tau, 1)``.
"""

import jax.numpy as jnp

from gemsim.rules import _base
from gemsim.rules._staleness import scaled_sgd_rule


def _weight(tau):
    return 1.0 / jnp.maximum(_base.as_float(tau), 1.0)


def softsync(lr: float) -> _base.Rule:
    """Step ``-(lr / max(tau, 1)) * g`` per commit.

    Args:
      lr: base learning rate; > 0.

    Returns:
      The rule; no state, info :class:`~gemsim.rules.CommitInfo` with weight
      ``1 / max(tau, 1)``.

    Raises:
      ValueError: ``lr`` out of range.
    """
    lr = _base.check_positive("softsync: lr", lr)
    return scaled_sgd_rule(
        "softsync", lambda tau: -lr / jnp.maximum(_base.as_float(tau), 1.0), _weight
    )

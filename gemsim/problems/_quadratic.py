"""The noisy quadratic problem: exact math, no data set.

loss(theta) = 0.5 * sum_i h_i theta_i^2, h_i = condition ** (i / (dim - 1)),
theta0 = ones. A mini-batch is a Gaussian noise vector z ~ N(0, noise^2 I)
drawn from (seed, worker, step); the mini-batch loss is
``0.5 * sum(h * theta**2) + z . theta``, so its gradient is ``h * theta + z``.

There is no finite training set, so an "epoch" is defined as one step:
``train_size == batch_size`` and ``steps_per_epoch == 1`` (a budget of E
epochs per worker is E steps per worker). ``batch_size`` does not scale the
noise: ``noise`` is already the per-mini-batch standard deviation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from gemsim.types import PyTree

from ._batch import Batch
from ._keys import KeyTag, derive_key
from ._specs import Quadratic
from ._streams import step_key

if TYPE_CHECKING:
    from ._problem import Problem

__all__ = ["quadratic_curvature"]


def quadratic_curvature(spec: Quadratic) -> np.ndarray:
    """The diagonal Hessian h (float32 ``[dim]``), from 1 up to ``spec.condition``."""
    if spec.dim == 1:
        return np.ones(1, np.float32)
    exponents = np.arange(spec.dim, dtype=np.float64) / (spec.dim - 1)
    return (spec.condition**exponents).astype(np.float32)


def build(spec: Quadratic, batch_size: int, seed: int) -> dict[str, Any]:
    """The fields of a quadratic :class:`Problem` but ``init_params``."""
    data = {
        "h": jnp.asarray(quadratic_curvature(spec)),
        "noise_key": derive_key(seed, KeyTag.NOISE),
        "dropout_key": derive_key(seed, KeyTag.DROPOUT),
    }
    return dict(
        train_size=batch_size,
        test_size=0,
        eval_size=0,
        n_params=spec.dim,
        input_shape=(spec.dim,),
        n_classes=0,
        data=data,
    )


def init(problem: Problem, key: jax.Array) -> PyTree:
    """theta0 = ones; the start is deterministic, so the key is unused."""
    del key
    return {"theta": jnp.ones(problem.model.dim, jnp.float32)}


def true_loss(h: jax.Array, params: PyTree) -> jax.Array:
    """0.5 * sum(h * theta^2): the noiseless objective."""
    theta = params["theta"]
    return 0.5 * jnp.sum(h * theta * theta)


def loss(problem: Problem, params: PyTree, batch: Batch, key: jax.Array) -> jax.Array:
    """The mini-batch loss, whose gradient is ``h * theta + z``."""
    del key  # the noise is part of the batch
    return true_loss(problem.data["h"], params) + jnp.dot(batch.x, params["theta"])


def batch(problem: Problem, worker: jax.Array, step: jax.Array) -> Batch:
    """The noise vector of (seed, worker, step); zeros when ``noise == 0``."""
    spec: Quadratic = problem.model
    if spec.noise > 0.0:
        key = step_key(problem.data["noise_key"], worker, step)
        z = spec.noise * jax.random.normal(key, (spec.dim,), jnp.float32)
    else:
        z = jnp.zeros(spec.dim, jnp.float32)
    labels = jnp.zeros((0,), jnp.int32)
    return Batch(z, labels, step_key(problem.data["dropout_key"], worker, step))


def evaluate(problem: Problem, params: PyTree) -> dict[str, jax.Array]:
    """The true loss as both train and test loss; accuracy is not defined (nan)."""
    value = true_loss(problem.data["h"], params).astype(jnp.float32)
    return {"train_loss": value, "test_loss": value, "test_accuracy": jnp.float32(jnp.nan)}

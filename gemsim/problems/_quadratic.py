"""The noisy quadratic problem: exact math, no data set.

loss(theta) = 0.5 * sum_i h_i theta_i^2, h_i = condition ** (i / (dim - 1)),
theta0 = ones. A mini-batch is a Gaussian noise vector z ~ N(0, noise^2 I)
drawn from (seed, worker, step); the mini-batch loss is
``0.5 * sum(h * theta**2) + z . theta``, so its gradient is ``h * theta + z``.

There is no finite training set, so an "epoch" is defined as one step:
``train_size == batch_size`` and ``steps_per_epoch == 1`` (a budget of E
epochs per worker is E steps per worker). ``batch_size`` does not scale the
noise: ``noise`` is already the per-mini-batch standard deviation.

Heterogeneous (``heterogeneity`` > 0): worker w's loss is centred at its own point c_w
(`worker_optima`), a mini-batch carries ``[z, c_w]`` and its loss is
``0.5 * sum(h * (theta - c_w)**2) + z . theta``. Asynchronous SGD with a small step settles
where the commit-rate-weighted sum of the workers' gradients vanishes, at the
commit-frequency-weighted mean of the c_w (h is shared); synchronous SGD, whose rounds
weigh every worker alike, at their plain mean (`stationary_point`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from gemsim.types import PyTree

from ._keys import KeyTag, derive_key, host_rng
from .models._specs import Quadratic
from .streams._batch import Batch
from .streams._streams import step_key

if TYPE_CHECKING:
    from ._problem import Problem

__all__ = ["quadratic_curvature", "stationary_point", "worker_optima"]


def worker_optima(spec: Quadratic, seed: int, n_workers: int) -> np.ndarray:
    """The workers' optima c_w, float32 ``[n_workers, dim]``: worker w's draws come from its
    own stream of (seed, w), so adding a worker changes no other's optimum."""
    rows = [
        host_rng(seed, KeyTag.CENTRES, w).normal(0.0, spec.heterogeneity, spec.dim)
        for w in range(n_workers)
    ]
    return np.asarray(rows, np.float32).reshape(n_workers, spec.dim)


def stationary_point(optima: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Where the weighted sum of the workers' gradients ``h * (theta - c_w)`` vanishes: the
    weighted mean of the optima (h is the same for every worker). ``weights``: each worker's
    share of the commits (plain asynchronous SGD with a small step), or None for the plain
    mean (synchronous SGD, Malenia)."""
    optima = np.asarray(optima, np.float64)
    w = np.ones(len(optima)) if weights is None else np.asarray(weights, np.float64)
    return (w[:, None] * optima).sum(axis=0) / w.sum()


def quadratic_curvature(spec: Quadratic) -> np.ndarray:
    """The diagonal Hessian h (float32 ``[dim]``), from 1 up to ``spec.condition``."""
    if spec.dim == 1:
        return np.ones(1, np.float32)
    exponents = np.arange(spec.dim, dtype=np.float64) / (spec.dim - 1)
    return (spec.condition**exponents).astype(np.float32)


def build(
    spec: Quadratic, batch_size: int, seed: int, n_workers: int | None, owners=None
) -> dict[str, Any]:
    """The fields of a quadratic :class:`Problem` but ``init_params`` (a heterogeneous one
    needs ``n_workers``, its optima's number; ``owners``: the workers `evaluate_workers`
    measures, where not all)."""
    data = {
        "h": jnp.asarray(quadratic_curvature(spec)),
        "noise_key": derive_key(seed, KeyTag.NOISE),
        "dropout_key": derive_key(seed, KeyTag.DROPOUT),
    }
    if spec.heterogeneity > 0:
        if n_workers is None:
            raise ValueError(
                "make_problem: a quadratic with heterogeneity > 0 needs n_workers (one optimum "
                "per worker)"
            )
        data["centres"] = jnp.asarray(worker_optima(spec, seed, n_workers))
        if owners is not None:
            data["eval_owners"] = jnp.asarray(owners, jnp.int32)
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
    """The mini-batch loss, whose gradient is ``h * theta + z`` (heterogeneous: ``h * (theta -
    c_w) + z``, the batch holding ``[z, c_w]``)."""
    del key  # the noise is part of the batch
    h, theta = problem.data["h"], params["theta"]
    if "centres" in problem.data:
        z, centre = batch.x[0], batch.x[1]
        return 0.5 * jnp.sum(h * (theta - centre) ** 2) + jnp.dot(z, theta)
    return true_loss(h, params) + jnp.dot(batch.x, theta)


def batch(problem: Problem, worker: jax.Array, step: jax.Array) -> Batch:
    """The noise vector of (seed, worker, step); zeros when ``noise == 0``."""
    spec: Quadratic = problem.model
    if spec.noise > 0.0:
        key = step_key(problem.data["noise_key"], worker, step)
        z = spec.noise * jax.random.normal(key, (spec.dim,), jnp.float32)
    else:
        z = jnp.zeros(spec.dim, jnp.float32)
    labels = jnp.zeros((0,), jnp.int32)
    if "centres" in problem.data:
        z = jnp.stack([z, problem.data["centres"][worker]])
    return Batch(z, labels, step_key(problem.data["dropout_key"], worker, step))


def evaluate(problem: Problem, params: PyTree) -> dict[str, jax.Array]:
    """The true loss as both train and test loss (heterogeneous: the mean of the workers'
    losses); accuracy is not defined (nan)."""
    if "centres" in problem.data:
        value = jnp.mean(worker_losses(problem, params)).astype(jnp.float32)
    else:
        value = true_loss(problem.data["h"], params).astype(jnp.float32)
    return {"train_loss": value, "test_loss": value, "test_accuracy": jnp.float32(jnp.nan)}


def evaluate_workers(problem: Problem, params: PyTree) -> dict[str, jax.Array]:
    """Each worker's own loss (a heterogeneous quadratic; accuracy nan), float32 ``[n]``;
    ``{}`` when every worker shares one optimum."""
    if "centres" not in problem.data:
        return {}
    losses = worker_losses(problem, params, problem.data.get("eval_owners")).astype(jnp.float32)
    return {"loss": losses, "accuracy": jnp.full(losses.shape, jnp.nan, jnp.float32)}


def worker_losses(problem: Problem, params: PyTree, owners=None) -> jax.Array:
    """Each worker's own loss at ``params`` (a heterogeneous quadratic), float32 ``[n]``, or
    the ``owners``' only."""
    h, centres = problem.data["h"], problem.data["centres"]
    if owners is not None:
        centres = centres[owners]
    return 0.5 * jnp.sum(h[None, :] * (params["theta"][None, :] - centres) ** 2, axis=1)

"""The tridiagonal worst-case quadratic of the theory papers' ASGD experiments, as a gemsim
user model (docs/problems.md's contract): ``f(x) = 0.5 x^T A x - b^T x`` with ``A`` the
tridiagonal matrix ``L/4 * (2 on the diagonal, -1 beside it)`` and ``b = -L/4 * e_1``
(Nesterov's worst case, as the Richtárik group's simulator builds it), started at
``x = sqrt(d) e_1``. Exact gradients: the loss ignores its batch, which is one dummy example.

Used by benchmarks/fixed_costs.py; nothing here imports gemsim.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np


class Tridiagonal(NamedTuple):
    init: object
    loss: object


def make_tridiagonal(dim: int = 64, smoothness: float = 1.0):
    """``(model, data)``: the model and one dummy example (the loss does not read it)."""
    scale = smoothness / 4.0
    start = np.zeros(dim, np.float32)
    start[0] = np.sqrt(dim)

    def init(key):
        return {"x": jnp.asarray(start)}

    def loss(params, x, y, key):
        p = params["x"]
        ap = 2.0 * p - jnp.pad(p[1:], (0, 1)) - jnp.pad(p[:-1], (1, 0))  # A / scale times p
        return scale * (0.5 * jnp.dot(p, ap) + p[0])

    one = np.zeros((1, 1), np.float32)
    label = np.zeros(1, np.int32)
    data = {"x_train": one, "y_train": label, "x_test": one, "y_test": label}
    return Tridiagonal(init, loss), data

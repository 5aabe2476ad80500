"""An Equinox perceptron with dropout, and the data it learns: the factory returns both.

Three interleaved spirals in the plane (a data set generated from a seed, so none is
stored): a small network needs a few hundred steps to separate them.
"""

import equinox as eqx
import jax
import numpy as np

from gemsim.problems import from_equinox


class Mlp(eqx.Module):
    layers: list
    dropout: eqx.nn.Dropout

    def __init__(self, width: int, dropout: float, *, key):
        keys = jax.random.split(key, 3)
        self.layers = [
            eqx.nn.Linear(2, width, key=keys[0]),
            eqx.nn.Linear(width, width, key=keys[1]),
            eqx.nn.Linear(width, 3, key=keys[2]),
        ]
        self.dropout = eqx.nn.Dropout(dropout)

    def __call__(self, x, *, key=None):
        h = jax.nn.relu(self.layers[0](x))
        h = self.dropout(jax.nn.relu(self.layers[1](h)), key=key)
        return self.layers[2](h)


def spirals(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points of three noisy spirals (float32 [n, 2]) and their arm (int32 [n])."""
    rng = np.random.default_rng(seed)
    arm = rng.integers(0, 3, n)
    radius = rng.uniform(0.1, 1.0, n)
    angle = 3.0 * radius + 2.0 * np.pi * arm / 3.0 + 0.15 * rng.standard_normal(n)
    x = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    return x.astype(np.float32), arm.astype(np.int32)


def make_spirals(width: int = 64, dropout: float = 0.1, n_train: int = 3000, seed: int = 0):
    model = from_equinox(lambda key: Mlp(width, dropout, key=key))
    x, y = spirals(n_train + 1000, seed)
    data = {
        "x_train": x[:n_train],
        "y_train": y[:n_train],
        "x_test": x[n_train:],
        "y_test": y[n_train:],
    }
    return model, data

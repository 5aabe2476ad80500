"""The Gaussian-mixture task of the public asynchronous local-SGD toy (the notebook of
`google-deepmind/asyncdiloco`, beside Liu, Douillard et al. 2024), as a gemsim model factory.

Data: ``classes x clusters_per_class`` Gaussian clusters in ``dim`` dimensions, each centred
on a random unit vector and spread ``noise`` per coordinate; the clusters are dealt to the
classes in blocks (clusters 0 .. clusters_per_class - 1 are class 0, and so on), every cluster
with the same number of points. The toy draws 128,000 points with 8 clusters for each of 4
classes in 512 dimensions, noise 0.5, and trains a one-hidden-layer ReLU network of 65,000
units; `make` defaults to fewer points and units, for a CPU. Everything comes from ``seed``.

A scenario names it as a model by import path (`model: {import: "toy_mixture:make", kwargs:
{...}}`: the module is found beside the scenario), which returns the model and its data. To
write the arrays for another tool (benchmarks/asyncdiloco_toy.py hands them to the authors'
notebook) and train on that file (`model: {import: "toy_mixture:make_model"}` with `dataset:
{name: arrays, path: toy_mixture.npz}`)::

    python scenarios/lm/toy_mixture.py toy_mixture.npz [--train 16384 --test 4096 --seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np


def mixture(n: int, classes: int, clusters_per_class: int, dim: int, noise: float, rng):
    """``(x float32 [n', dim], y int32 [n'])``: n' = n rounded down to whole clusters."""
    k = classes * clusters_per_class
    per_cluster = n // k
    centres = rng.standard_normal((k, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    x = centres.repeat(per_cluster, axis=0) + noise * rng.standard_normal((k * per_cluster, dim))
    y = np.arange(k).repeat(per_cluster) // clusters_per_class
    return x.astype(np.float32), y.astype(np.int32)


def arrays(n_train=16384, n_test=4096, classes=4, clusters_per_class=8, dim=512, noise=0.5,
           seed=0):  # fmt: skip
    """The training and test sets, drawn from one mixture (the same centres), shuffled."""
    rng = np.random.default_rng(seed)
    x, y = mixture(n_train + n_test, classes, clusters_per_class, dim, noise, rng)
    order = rng.permutation(len(y))
    x, y = x[order], y[order]
    cut = len(y) * n_train // (n_train + n_test)
    return {"x_train": x[:cut], "y_train": y[:cut], "x_test": x[cut:], "y_test": y[cut:]}


class Mlp:
    """A one-hidden-layer ReLU network (the toy's model, at a width of ``hidden``)."""

    def __init__(self, dim: int, hidden: int, classes: int):
        self.dim, self.hidden, self.classes = dim, hidden, classes

    def init(self, key):
        import jax

        k1, k2, k3, k4 = jax.random.split(key, 4)
        # PyTorch's default for nn.Linear, as the toy's model uses: weights and biases both
        # U(+-1/sqrt(fan_in)).
        b1, b2 = 1 / np.sqrt(self.dim), 1 / np.sqrt(self.hidden)
        return {
            "w1": jax.random.uniform(k1, (self.dim, self.hidden), minval=-b1, maxval=b1),
            "b1": jax.random.uniform(k2, (self.hidden,), minval=-b1, maxval=b1),
            "w2": jax.random.uniform(k3, (self.hidden, self.classes), minval=-b2, maxval=b2),
            "b2": jax.random.uniform(k4, (self.classes,), minval=-b2, maxval=b2),
        }

    def predict(self, params, x):
        import jax

        h = jax.nn.relu(x @ params["w1"] + params["b1"][None, :])
        return h @ params["w2"] + params["b2"][None, :]

    def loss(self, params, x, y, key):
        import jax
        import jax.numpy as jnp

        del key
        log_p = jax.nn.log_softmax(self.predict(params, x), axis=-1)
        return -jnp.mean(jnp.take_along_axis(log_p, y[:, None], axis=1))


def make(n_train=16384, n_test=4096, classes=4, clusters_per_class=8, dim=512, noise=0.5,
         hidden=256, seed=0):  # fmt: skip
    """``(model, data)`` for gemsim: the toy's network and its mixture data."""
    data = arrays(n_train, n_test, classes, clusters_per_class, dim, noise, seed)
    return Mlp(dim, hidden, classes), data


def make_model(dim=512, hidden=256, classes=4):
    """The network alone, for a scenario that reads the data from a file (`dataset: {name:
    arrays, path: toy_mixture.npz}`, written by this script)."""
    return Mlp(dim, hidden, classes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the .npz file to write (x_train, y_train, x_test, y_test)")
    parser.add_argument("--train", type=int, default=16384)
    parser.add_argument("--test", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    np.savez(args.out, **arrays(args.train, args.test, seed=args.seed))


if __name__ == "__main__":
    main()

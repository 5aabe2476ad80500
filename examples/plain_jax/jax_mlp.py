"""A model as plain JAX functions: a one-hidden-layer perceptron with dropout.

The factory returns any object with ``init`` and ``loss`` (here a NamedTuple); ``predict``
enables accuracy. Nothing here imports gemsim.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp


class Mlp(NamedTuple):
    init: object
    loss: object
    predict: object


def make_mlp(width: int = 64, dropout: float = 0.2, n_inputs: int = 64, n_classes: int = 10):
    """Inputs are flattened; ``n_inputs`` is 64 for the 8x8 digits."""

    def init(key):
        k1, k2 = jax.random.split(key)
        return {
            "w1": jax.random.normal(k1, (n_inputs, width), jnp.float32) / jnp.sqrt(n_inputs),
            "b1": jnp.zeros((width,), jnp.float32),
            "w2": jax.random.normal(k2, (width, n_classes), jnp.float32) / jnp.sqrt(width),
            "b2": jnp.zeros((n_classes,), jnp.float32),
        }

    def logits(params, x, key):
        h = jax.nn.relu(x.reshape(x.shape[0], -1) @ params["w1"] + params["b1"])
        if key is not None:  # training mode: inverted dropout
            keep = jax.random.bernoulli(key, 1.0 - dropout, h.shape)
            h = jnp.where(keep, h / (1.0 - dropout), 0.0)
        return h @ params["w2"] + params["b2"]

    def loss(params, x, y, key):
        log_p = jax.nn.log_softmax(logits(params, x, key))
        return -jnp.mean(jnp.take_along_axis(log_p, y[:, None], axis=1))

    return Mlp(init, loss, lambda params, x: logits(params, x, None))

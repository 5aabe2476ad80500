"""Small building blocks shared by the models: initialisers, dense layers, loss."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from gemsim.types import PyTree

__all__ = ["Layout", "Model", "cross_entropy", "dense", "dense_layout", "fan_in_uniform_init"]


class Model(NamedTuple):
    """A classifier as two pure functions over a dict pytree of parameters.

    ``apply(params, x, key)`` returns logits ``[B, classes]``; ``key`` is the
    dropout key in training mode and None in evaluation mode.
    """

    init: Callable[[jax.Array], PyTree]
    apply: Callable[[PyTree, jax.Array, jax.Array | None], jax.Array]


Layout = dict[str, dict[str, tuple[tuple[int, ...], int]]]
"""Layer name -> parameter name -> (shape, fan_in): what to initialise, in order."""


def fan_in_uniform_init(key: jax.Array, layout: Layout) -> dict[str, dict[str, jax.Array]]:
    """Draws every parameter from U(-1/sqrt(fan_in), 1/sqrt(fan_in)).

    This is PyTorch's default for Linear and Conv2d (its kaiming_uniform with
    a = sqrt(5) reduces to this bound for weights, and biases use the same
    bound). All values come from one uniform draw, cut in layout order: one
    random-number kernel instead of one per tensor compiles several times faster.
    """
    entries = [
        (layer, name, *spec) for layer, params in layout.items() for name, spec in params.items()
    ]
    total = sum(math.prod(shape) for _, _, shape, _ in entries)
    unit = jax.random.uniform(key, (total,), jnp.float32, -1.0, 1.0)
    params: dict[str, dict[str, jax.Array]] = {layer: {} for layer in layout}
    offset = 0
    for layer, name, shape, fan_in in entries:
        size = math.prod(shape)
        params[layer][name] = unit[offset : offset + size].reshape(shape) / math.sqrt(fan_in)
        offset += size
    return params


def dense_layout(n_in: int, n_out: int) -> dict[str, tuple[tuple[int, ...], int]]:
    """A dense layer's entry in a :data:`Layout`: ``w [n_in, n_out]`` and ``b [n_out]``."""
    return {"w": ((n_in, n_out), n_in), "b": ((n_out,), n_in)}


def dense(layer: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    """``x @ w + b`` for ``x [B, n_in]`` (broadcast spelled out: rank-promotion safe)."""
    return x @ layer["w"] + layer["b"][None, :]


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean negative log-likelihood of integer labels under log-softmax(logits)."""
    log_p = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(log_p, labels[:, None], axis=1))

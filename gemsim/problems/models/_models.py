"""Classifier models on flattened inputs, and the spec -> model dispatch."""

from __future__ import annotations

import math

import jax

from gemsim.types import PyTree

from ._cnn import cnn_model
from ._layers import Model, dense, dense_layout, fan_in_uniform_init
from ._resnet import resnet_model
from ._specs import Cnn, Logistic, Mlp, ModelSpec, Resnet

__all__ = ["build_model", "mlp_model"]


def _layer_names(n_layers: int) -> list[str]:
    # Zero-padded so that the pytree's (sorted) key order is the layer order.
    width = len(str(n_layers))
    return [f"fc{i + 1:0{width}d}" for i in range(n_layers)]


def mlp_model(hidden: tuple[int, ...], n_inputs: int, n_classes: int) -> Model:
    """A relu MLP ``n_inputs -> *hidden -> n_classes``; ``hidden=()`` is softmax regression."""
    sizes = (n_inputs, *hidden, n_classes)
    names = _layer_names(len(sizes) - 1)

    layers = zip(names, sizes[:-1], sizes[1:], strict=True)
    layout = {name: dense_layout(n_in, n_out) for name, n_in, n_out in layers}

    def init(key: jax.Array) -> PyTree:
        return fan_in_uniform_init(key, layout)

    def apply(params: PyTree, x: jax.Array, key: jax.Array | None) -> jax.Array:
        del key  # no stochastic layers
        h = x.reshape(x.shape[0], -1)
        for name in names[:-1]:
            h = jax.nn.relu(dense(params[name], h))
        return dense(params[names[-1]], h)

    return Model(init, apply)


def build_model(spec: ModelSpec, input_shape: tuple[int, ...], n_classes: int) -> Model:
    """The classifier a spec names, for inputs of ``input_shape`` (one example)."""
    n_inputs = math.prod(input_shape)
    match spec:
        case Cnn():
            return cnn_model(spec, input_shape, n_classes)
        case Mlp(hidden=hidden):
            return mlp_model(hidden, n_inputs, n_classes)
        case Logistic():
            return mlp_model((), n_inputs, n_classes)
        case Resnet():
            return resnet_model(spec, input_shape, n_classes)
    raise TypeError(f"{spec!r} is not a classifier spec; expected Cnn, Mlp, Logistic or Resnet")

"""A problem's sizes known without loading its data or building its model (no JAX here).

The timing model needs two numbers from the problem: steps per epoch (an epochs budget) and
the parameters' bytes (a network with a bandwidth). `gemsim trace` must not pay for loading a
data set or compiling a model to learn them, so they come from the specs: fixed sizes of the
bundled sets, the header of file-based ones, and parameter counts from the layer shapes. A
test checks each against the built problem.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._data_files import mnist_files
from ._idx import read_idx_shape
from ._specs import (
    CNN_CHANNELS,
    CNN_HIDDEN,
    CNN_KERNEL,
    Cnn,
    DatasetSpec,
    Digits,
    Logistic,
    Mlp,
    Mnist,
    Mnist5k,
    ModelSpec,
    Quadratic,
    Synthetic,
)

__all__ = ["DataShape", "data_shape", "param_count"]


@dataclass(frozen=True)
class DataShape:
    """Sizes of a data set: examples in each split, one example's shape, classes."""

    n_train: int
    n_test: int
    input_shape: tuple[int, ...]
    n_classes: int


# The fixed splits of the bundled sets (see _datasets.py): 400 / 100 MNIST images per class,
# and 20 % of each digits class held out.
_BUNDLED = {
    Mnist5k: DataShape(4000, 1000, (28, 28), 10),
    Digits: DataShape(1438, 359, (8, 8), 10),
}


def data_shape(spec: DatasetSpec) -> DataShape:
    """The sizes of the data set ``spec`` names (file-based sets: from the files' headers)."""
    if type(spec) in _BUNDLED:
        return _BUNDLED[type(spec)]
    if isinstance(spec, Synthetic):
        return DataShape(spec.n_train, spec.n_test, (spec.dim,), spec.classes)
    if isinstance(spec, Mnist):
        train, _, test, _ = (read_idx_shape(p) for p in mnist_files(spec))
        return DataShape(train[0], test[0], tuple(train[1:]), 10)
    raise TypeError(f"no known sizes for dataset spec {spec!r}")


def _dense(n_in: int, n_out: int) -> int:
    return n_in * n_out + n_out


def param_count(model: ModelSpec, data: DataShape | None) -> int:
    """Number of parameters of ``model`` on data of shape ``data`` (None for the quadratic)."""
    if isinstance(model, Quadratic):
        return model.dim
    assert data is not None, f"{model!r} needs a data set"
    n_inputs = math.prod(data.input_shape)
    if isinstance(model, Logistic):
        return _dense(n_inputs, data.n_classes)
    if isinstance(model, Mlp):
        sizes = (n_inputs, *model.hidden, data.n_classes)
        return sum(_dense(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    if isinstance(model, Cnn):
        k = CNN_KERNEL
        convs = zip(CNN_CHANNELS[:-1], CNN_CHANNELS[1:], strict=True)
        conv = sum(k * k * c_in * c_out + c_out for c_in, c_out in convs)
        sizes = (*CNN_HIDDEN, data.n_classes)
        return conv + sum(_dense(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    raise TypeError(f"no known parameter count for model spec {model!r}")

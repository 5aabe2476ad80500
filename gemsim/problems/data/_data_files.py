"""Where file-based data sets live on disk (no data is read here, and no JAX is imported):
what `gemsim trace` needs to know a data set's size without loading it."""

from __future__ import annotations

import os
from pathlib import Path

from ._specs import Cifar10, FashionMnist, Mnist

__all__ = [
    "CIFAR10_FILES",
    "CIFAR10_FOLDER",
    "FASHION_MNIST_SYSTEM_DIR",
    "MNIST_IDX_NAMES",
    "cifar10_dir",
    "fashion_mnist_files",
    "mnist_files",
    "resolve_mnist_dir",
]

MNIST_IDX_NAMES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
"""The four IDX files of MNIST, and of Fashion-MNIST, which uses the same names."""

FASHION_MNIST_SYSTEM_DIR = "/usr/share/datasets/fashion-mnist"
"""Where Debian's `dataset-fashion-mnist` package installs the files."""

CIFAR10_FOLDER = "cifar-10-batches-py"
"""The folder the python version of CIFAR-10 unpacks to."""

CIFAR10_FILES = (
    "batches.meta",
    *(f"data_batch_{i}" for i in range(1, 6)),
    "test_batch",
)


def resolve_mnist_dir(spec: Mnist) -> Path:
    """The directory of the IDX files: ``spec.data_dir``, else ``$GEMSIM_DATA``."""
    if spec.data_dir is not None:
        where, directory = "Mnist(data_dir=...)", spec.data_dir
    else:
        where, directory = "$GEMSIM_DATA", os.environ.get("GEMSIM_DATA", "")
    if not directory:
        raise ValueError(
            "dataset mnist needs the IDX files' directory: set Mnist(data_dir=...) (data_dir in "
            "the scenario) or the environment variable GEMSIM_DATA; neither is set. Fetch the "
            "files with `gemsim download mnist DIR` or gemsim.problems.download_mnist(DIR)."
        )
    path = Path(directory).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"dataset mnist: {where} = {directory!r} is not a directory")
    return path


def _idx_file(directory: Path, name: str, dataset: str) -> Path:
    for candidate in (directory / name, directory / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"dataset {dataset}: neither {name} nor {name}.gz is in {directory}; fetch the files "
        f"with `gemsim download {dataset} DIR`"
        + (" or gemsim.problems.download_mnist(DIR)" if dataset == "mnist" else "")
    )


def mnist_files(spec: Mnist) -> list[Path]:
    """The four IDX files (train images, train labels, test images, test labels)."""
    directory = resolve_mnist_dir(spec)
    return [_idx_file(directory, name, "mnist") for name in MNIST_IDX_NAMES]


def _fashion_candidates(spec: FashionMnist) -> list[tuple[str, Path]]:
    if spec.data_dir is not None:
        return [("data_dir", Path(spec.data_dir).expanduser())]
    found = []
    if os.environ.get("GEMSIM_DATA"):
        found.append(
            ("$GEMSIM_DATA/fashion-mnist", Path(os.environ["GEMSIM_DATA"]) / "fashion-mnist")
        )
    found.append(("the system folder", Path(FASHION_MNIST_SYSTEM_DIR)))
    return found


def fashion_mnist_files(spec: FashionMnist) -> list[Path]:
    """The four IDX files of Fashion-MNIST, from the first folder that holds all of them."""
    tried = []
    for where, directory in _fashion_candidates(spec):
        try:
            return [_idx_file(directory, name, "fashion-mnist") for name in MNIST_IDX_NAMES]
        except FileNotFoundError:
            tried.append(f"{where} {directory}")
    raise FileNotFoundError(
        f"dataset fashion-mnist: its four IDX files are not in {' nor '.join(tried)}; fetch "
        "them with `gemsim download fashion-mnist DIR` (then set data_dir: DIR), or install "
        "Debian's package: apt-get install dataset-fashion-mnist"
    )


def cifar10_dir(spec: Cifar10) -> Path:
    """The folder holding CIFAR-10's python batches (``data_dir`` itself or its
    ``cifar-10-batches-py``; else ``$GEMSIM_DATA/cifar-10-batches-py``)."""
    if spec.data_dir is not None:
        base = Path(spec.data_dir).expanduser()
        candidates = [base, base / CIFAR10_FOLDER]
    elif os.environ.get("GEMSIM_DATA"):
        candidates = [Path(os.environ["GEMSIM_DATA"]) / CIFAR10_FOLDER]
    else:
        raise ValueError(
            "dataset cifar10 needs the python batches' folder: set data_dir (in the scenario) "
            "or the environment variable GEMSIM_DATA; neither is set. Fetch them with "
            "`gemsim download cifar10 DIR`."
        )
    missing = {f: [n for n in CIFAR10_FILES if not (f / n).is_file()] for f in candidates}
    closest = min(candidates, key=lambda folder: len(missing[folder]))
    if not missing[closest]:
        return closest
    raise FileNotFoundError(
        f"dataset cifar10: {closest} lacks {', '.join(missing[closest])} (the python "
        "version's batches); fetch them with `gemsim download cifar10 DIR`"
    )

"""Where file-based data sets live on disk (no data is read here, and no JAX is imported):
what `gemsim trace` needs to know a data set's size without loading it."""

from __future__ import annotations

import os
from pathlib import Path

from ._specs import Mnist

__all__ = ["MNIST_IDX_NAMES", "mnist_files", "resolve_mnist_dir"]

MNIST_IDX_NAMES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
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
            "files with gemsim.problems.download_mnist(DIR)."
        )
    path = Path(directory).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"dataset mnist: {where} = {directory!r} is not a directory")
    return path


def _idx_file(directory: Path, name: str) -> Path:
    for candidate in (directory / name, directory / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"dataset mnist: neither {name} nor {name}.gz is in {directory}; fetch the files with "
        "gemsim.problems.download_mnist(DIR)"
    )


def mnist_files(spec: Mnist) -> list[Path]:
    """The four IDX files (train images, train labels, test images, test labels)."""
    directory = resolve_mnist_dir(spec)
    return [_idx_file(directory, name) for name in MNIST_IDX_NAMES]

"""CIFAR-10's python-pickle batches, read with numpy only and a restricted unpickler.

Each batch is a pickled dict (written by Python 2) with ``b"data"``, a uint8 array
``[N, 3072]`` (the red, green and blue 32x32 planes of each image in turn), and
``b"labels"``, N ints in [0, 10). ``batches.meta`` holds ``b"num_cases_per_batch"``
(10,000 in the published set), from which the sizes are known without reading a batch.

Pickle can run arbitrary code: the unpickler here only builds dicts, lists, strings, numbers
and numpy arrays, and refuses anything else.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from ._data_files import CIFAR10_FILES, cifar10_dir
from ._specs import Cifar10

__all__ = ["CIFAR10_MEAN", "CIFAR10_STD", "cifar10_sizes", "read_cifar10", "write_cifar_batch"]

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
"""Per-channel mean of the training images' pixels in [0, 1] (red, green, blue)."""
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
"""Per-channel standard deviation of the training images' pixels in [0, 1]."""

_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("_codecs", "encode"),
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def _load(path: Path) -> dict:
    try:
        with path.open("rb") as f:
            value = _Unpickler(f, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as exc:
        raise ValueError(f"{path}: not a CIFAR-10 python batch ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: not a CIFAR-10 python batch (holds {type(value).__name__})")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in value.items()}


def cifar10_sizes(spec: Cifar10) -> tuple[int, int]:
    """``(n_train, n_test)`` from ``batches.meta`` alone (five training batches, one test)."""
    meta = _load(cifar10_dir(spec) / "batches.meta")
    per_batch = meta.get("num_cases_per_batch")
    if not isinstance(per_batch, int) or per_batch < 1:
        raise ValueError(f"{cifar10_dir(spec) / 'batches.meta'}: no num_cases_per_batch")
    return 5 * per_batch, per_batch


def _batch(path: Path, expected: int) -> tuple[np.ndarray, np.ndarray]:
    entry = _load(path)
    data, labels = entry.get("data"), entry.get("labels")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
        raise ValueError(f"{path}: b'data' must be a uint8 array [N, 3072]")
    labels = np.asarray(labels)
    if data.shape != (expected, 3072) or labels.shape != (expected,):
        raise ValueError(
            f"{path}: expected {expected} images [N, 3072] and as many labels (batches.meta's "
            f"num_cases_per_batch), found data {data.shape} and labels {labels.shape}"
        )
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise ValueError(f"{path}: labels must be classes 0-9, found {int(labels.max())}")
    # Channel planes to NHWC.
    return data.reshape(expected, 3, 32, 32).transpose(0, 2, 3, 1), labels.astype(np.int32)


def _normalise(pixels: np.ndarray) -> np.ndarray:
    mean = np.asarray(CIFAR10_MEAN, np.float32)
    std = np.asarray(CIFAR10_STD, np.float32)
    return ((pixels.astype(np.float32) / np.float32(255.0) - mean) / std).astype(np.float32)


def read_cifar10(spec: Cifar10) -> tuple[np.ndarray, ...]:
    """``(x_train, y_train, x_test, y_test)``: float32 NHWC images normalised per channel
    with :data:`CIFAR10_MEAN` and :data:`CIFAR10_STD`, int32 labels."""
    folder = cifar10_dir(spec)
    _, per_batch = cifar10_sizes(spec)
    train = [_batch(folder / name, per_batch) for name in CIFAR10_FILES[1:6]]
    x_test, y_test = _batch(folder / "test_batch", per_batch)
    x_train = np.concatenate([x for x, _ in train])
    y_train = np.concatenate([y for _, y in train])
    return _normalise(x_train), y_train, _normalise(x_test), y_test


def write_cifar_batch(path: Path, images: np.ndarray, labels: np.ndarray) -> None:
    """Writes uint8 NHWC ``images [N, 32, 32, 3]`` and their labels as one python batch (the
    published format: channel planes, bytes keys); tests build small sets with it."""
    data = np.ascontiguousarray(np.asarray(images, np.uint8).transpose(0, 3, 1, 2)).reshape(
        len(images), 3072
    )
    entry = {b"data": data, b"labels": [int(v) for v in labels], b"batch_label": b"gemsim"}
    Path(path).write_bytes(pickle.dumps(entry, protocol=2))

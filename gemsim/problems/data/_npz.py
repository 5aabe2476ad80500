"""The ``arrays`` data set: a numpy ``.npz`` file, its sizes from the arrays' headers (no data
read, no JAX) and its arrays loaded and checked.

The checks (:func:`check_arrays`) are the same for a file and for the data a model factory
returns: every failure names the array, what is wrong and what is expected.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib import format as npy_format

from gemsim._checks import UserError
from gemsim._user_code import file_sha256

from ._specs import Arrays

__all__ = ["ARRAY_NAMES", "DataError", "check_arrays", "npz_headers", "read_arrays"]

ARRAY_NAMES = ("x_train", "y_train", "x_test", "y_test")


class DataError(UserError):
    """A data set's arrays or files break the problem contract (docs/problems.md)."""


def _arrays_path(spec: Arrays) -> Path:
    path = Path(spec.path).expanduser()
    if not path.is_file():
        raise DataError(
            f"arrays {spec.path}",
            "no such file (the path is relative to the scenario file's folder)",
        )
    if spec.sha256 is not None and file_sha256(path) != spec.sha256:
        raise DataError(
            f"arrays {spec.path}",
            f"the file changed since its sha256 was recorded ({spec.sha256[:12]}..., now "
            f"{file_sha256(path)[:12]}...): load the scenario again",
        )
    return path


def npz_headers(spec: Arrays) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shape and dtype of every array in the file, from the ``.npy`` headers alone."""
    path = _arrays_path(spec)
    headers = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                if not member.endswith(".npy"):
                    continue
                with archive.open(member) as f:
                    version = npy_format.read_magic(f)
                    read = (
                        npy_format.read_array_header_1_0
                        if version == (1, 0)
                        else npy_format.read_array_header_2_0
                    )
                    shape, _, dtype = read(f)
                headers[member[: -len(".npy")]] = (tuple(shape), np.dtype(dtype))
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise DataError(f"arrays {spec.path}", f"not a readable .npz file ({exc})") from None
    _require_names(f"arrays {spec.path}", headers)
    return headers


def _require_names(source: str, found: Mapping[str, Any]) -> None:
    missing = [name for name in ARRAY_NAMES if name not in found]
    if missing:
        raise DataError(
            source,
            f"missing array(s) {', '.join(missing)}; it holds {sorted(found) or 'nothing'} "
            f"(expected {', '.join(ARRAY_NAMES)}, optionally n_classes and groups)",
        )


def read_arrays(spec: Arrays) -> dict[str, np.ndarray]:
    """The file's arrays (checked with :func:`check_arrays`)."""
    path = _arrays_path(spec)
    try:
        with np.load(path, allow_pickle=False) as npz:
            found = {name: npz[name] for name in npz.files}
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise DataError(f"arrays {spec.path}", f"not a readable .npz file ({exc})") from None
    return check_arrays(found, f"arrays {spec.path}")


def _numeric(source: str, name: str, array: np.ndarray) -> None:
    if array.dtype.kind not in "biuf":
        raise DataError(
            source, f"{name} has dtype {array.dtype}; expected numbers (bool, int or float)"
        )


def _finite(source: str, name: str, array: np.ndarray) -> None:
    bad = ~np.isfinite(array)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise DataError(
            source,
            f"{name} holds {int(bad.sum())} NaN or infinite value(s) (the first at index "
            f"{first}); clean or drop those examples",
        )


def _n_classes(source: str, arrays: Mapping[str, Any], labels: dict[str, np.ndarray]) -> int:
    """``n_classes`` as given, else the largest training label + 1; every label in range."""
    given = arrays.get("n_classes")
    if given is not None:
        given = np.asarray(given)
        if given.shape != () or given.dtype.kind not in "iu" or int(given) < 1:
            raise DataError(source, f"n_classes must be an integer scalar >= 1, got {given!r}")
    n_classes = int(given) if given is not None else int(labels["y_train"].max()) + 1
    for name, y in labels.items():
        low, high = int(y.min()), int(y.max())
        if given is None and high >= n_classes:  # only y_test can exceed the inferred count
            raise DataError(
                source,
                f"{name} holds label {high}, but n_classes was inferred as {n_classes} from "
                f"the largest training label ({n_classes - 1}); if the test set has classes "
                "the training set lacks, give n_classes (an integer scalar array)",
            )
        if low < 0 or high >= n_classes:
            raise DataError(
                source,
                f"{name} label {low if low < 0 else high} is out of range: integer labels must "
                f"be classes in [0, {n_classes})" + (" (n_classes)" if given is not None else ""),
            )
    return n_classes


def _check_shapes(source: str, a: Mapping[str, np.ndarray]) -> None:
    """Numbers, at least one example, equal lengths per split, equal example shapes."""
    for name, array in a.items():
        _numeric(source, name, array)
        if array.ndim < 1 or array.shape[0] < 1:
            raise DataError(
                source, f"{name} must hold at least one example, got shape {array.shape}"
            )
    for split in ("train", "test"):
        nx, ny = len(a[f"x_{split}"]), len(a[f"y_{split}"])
        if nx != ny:
            raise DataError(
                source, f"x_{split} and y_{split} have different lengths ({nx} and {ny})"
            )
    for kind in ("x", "y"):
        train, test = a[f"{kind}_train"].shape[1:], a[f"{kind}_test"].shape[1:]
        if train != test:
            raise DataError(
                source,
                f"{kind}_train's examples have shape {train} but {kind}_test's have {test}",
            )


def check_arrays(arrays: Mapping[str, Any], source: str) -> dict[str, np.ndarray]:
    """Checks a data set's arrays and returns them as float32 inputs and int32 labels (or
    float32 targets), with ``n_classes`` (0 for float targets).

    Raises:
      DataError: a missing array, lengths or shapes that disagree, non-numeric or non-finite
        values, or labels out of range; the message names the array.
    """
    if not isinstance(arrays, Mapping):
        raise DataError(
            source, f"data must map {', '.join(ARRAY_NAMES)} to arrays, got {type(arrays).__name__}"
        )
    _require_names(source, arrays)
    a = {name: np.asarray(arrays[name]) for name in ARRAY_NAMES}
    _check_shapes(source, a)
    integer = [a[name].dtype.kind in "biu" for name in ("y_train", "y_test")]
    if integer[0] != integer[1]:
        raise DataError(
            source, "y_train and y_test must both be integer labels or both float targets"
        )
    out = {name: a[name].astype(np.float32) for name in ("x_train", "x_test")}
    for name in ("x_train", "x_test"):
        _finite(source, name, out[name])
    if integer[0]:
        labels = {name: a[name].astype(np.int64) for name in ("y_train", "y_test")}
        n_classes = _n_classes(source, arrays, labels)
        out.update({name: y.astype(np.int32) for name, y in labels.items()})
    else:
        out.update(y_train=a["y_train"].astype(np.float32), y_test=a["y_test"].astype(np.float32))
        for name in ("y_train", "y_test"):
            _finite(source, name, out[name])
        n_classes = 0
    out["n_classes"] = n_classes
    if "groups" in arrays:
        out["groups"] = _groups(source, np.asarray(arrays["groups"]), len(out["y_train"]))
    return out


def _groups(source: str, groups: np.ndarray, n_train: int) -> np.ndarray:
    """The optional ``groups`` array: one integer or string id per training example."""
    if groups.shape != (n_train,) or groups.dtype.kind not in "iuUS":
        raise DataError(
            source,
            f"groups must hold one integer or string id per training example ({n_train}), got "
            f"{groups.dtype} of shape {groups.shape}",
        )
    return groups

"""IDX reader/writer and the full-MNIST loader on small files the tests write."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from gemsim.problems import (
    MNIST_MEAN,
    MNIST_STD,
    Logistic,
    Mnist,
    make_problem,
    read_idx,
    write_idx,
)
from gemsim.problems.data._data_files import MNIST_IDX_NAMES
from gemsim.problems.data._datasets import load_mnist


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize(
    ("dtype", "shape"),
    [
        (np.uint8, (7, 28, 28)),
        (np.uint8, (7,)),
        (np.int8, (3, 2)),
        (np.int16, (4, 5)),
        (np.int32, (2, 3, 4)),
        (np.float32, (6,)),
        (np.float64, (2, 2)),
        (np.uint8, (0, 28, 28)),
    ],
)
def test_round_trip(tmp_path, suffix, dtype, shape):
    rng = np.random.default_rng(0)
    array = (rng.standard_normal(shape) * 100).astype(dtype)
    path = tmp_path / f"a-idx{len(shape)}-ubyte{suffix}"
    write_idx(path, array)
    back = read_idx(path)
    assert back.dtype == np.dtype(dtype) and back.shape == shape
    np.testing.assert_array_equal(back, array)
    assert path.read_bytes()[:2] == (b"\x1f\x8b" if suffix else b"\x00\x00")


def test_header_is_big_endian(tmp_path):
    path = tmp_path / "labels"
    write_idx(path, np.arange(3, dtype=np.int32))
    raw = path.read_bytes()
    assert raw[:4] == bytes([0, 0, 0x0C, 1])
    assert raw[4:8] == (3).to_bytes(4, "big")
    assert raw[8:12] == (0).to_bytes(4, "big") and raw[-4:] == (2).to_bytes(4, "big")


def _write_raw(path, payload: bytes):
    path.write_bytes(payload)
    return path


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b"\x00\x00", "shorter than the 4-byte magic"),
        (b"<htm" + b"l>" * 10, "magic starts with 3c68"),
        (bytes([0, 0, 0x07, 1]) + (1).to_bytes(4, "big") + b"\x00", "unknown IDX type byte 0x07"),
        (bytes([0, 0, 0x08, 3]) + (2).to_bytes(4, "big"), "truncated IDX header"),
        (bytes([0, 0, 0x08, 1]) + (5).to_bytes(4, "big") + b"\x00" * 4, "needs 5 bytes .* found 4"),
        (bytes([0, 0, 0x0C, 1]) + (1).to_bytes(4, "big") + b"\x00" * 9, "needs 4 bytes .* found 9"),
    ],
)
def test_malformed_files_name_the_file_and_the_problem(tmp_path, payload, match):
    path = _write_raw(tmp_path / "broken-idx", payload)
    with pytest.raises(ValueError, match=match) as info:
        read_idx(path)
    assert str(path) in str(info.value)


def test_corrupt_gzip(tmp_path):
    good = gzip.compress(bytes([0, 0, 8, 1, 0, 0, 0, 3, 1, 2, 3]))
    path = _write_raw(tmp_path / "x.gz", good[: len(good) // 2])
    with pytest.raises(ValueError, match="corrupt gzip data"):
        read_idx(path)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_idx(tmp_path / "nope")


def test_write_rejects_what_idx_cannot_store(tmp_path):
    with pytest.raises(ValueError, match="cannot store dtype int64"):
        write_idx(tmp_path / "x", np.zeros(3, np.int64))


def _mnist_dir(root, n_train=12, n_test=5, gz=False):
    rng = np.random.default_rng(1)
    arrays = [
        rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        rng.integers(0, 10, n_train, dtype=np.uint8),
        rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        rng.integers(0, 10, n_test, dtype=np.uint8),
    ]
    root.mkdir(exist_ok=True)
    for name, array in zip(MNIST_IDX_NAMES, arrays, strict=True):
        write_idx(root / (name + (".gz" if gz else "")), array)
    return arrays


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_loader(tmp_path, gz):
    arrays = _mnist_dir(tmp_path / "mnist", gz=gz)
    data = load_mnist(Mnist(data_dir=str(tmp_path / "mnist")))
    assert data.x_train.shape == (12, 28, 28) and data.x_train.dtype == np.float32
    assert data.y_train.dtype == np.int32 and data.x_test.shape == (5, 28, 28)
    expected = (arrays[0] / 255.0 - MNIST_MEAN) / MNIST_STD
    np.testing.assert_allclose(data.x_train, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(data.y_test, arrays[3])


def test_mnist_dir_from_environment(tmp_path, monkeypatch):
    _mnist_dir(tmp_path / "env")
    monkeypatch.setenv("GEMSIM_DATA", str(tmp_path / "env"))
    assert load_mnist(Mnist()).y_train.shape == (12,)


def test_mnist_without_any_directory(monkeypatch):
    monkeypatch.delenv("GEMSIM_DATA", raising=False)
    with pytest.raises(ValueError, match=r"data_dir.*GEMSIM_DATA.*download_mnist"):
        load_mnist(Mnist())


def test_mnist_missing_file(tmp_path):
    _mnist_dir(tmp_path / "m")
    (tmp_path / "m" / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match=r"t10k-labels-idx1-ubyte\.gz is in .*download"):
        load_mnist(Mnist(data_dir=str(tmp_path / "m")))


def test_mnist_inconsistent_files(tmp_path):
    _mnist_dir(tmp_path / "m")
    write_idx(tmp_path / "m" / "train-labels-idx1-ubyte", np.zeros(11, np.uint8))
    with pytest.raises(ValueError, match="train-labels-idx1-ubyte: expected 12 uint8 labels"):
        load_mnist(Mnist(data_dir=str(tmp_path / "m")))
    write_idx(tmp_path / "m" / "train-images-idx3-ubyte", np.zeros((12, 8, 8), np.uint8))
    with pytest.raises(ValueError, match=r"expected uint8 images of shape \[N, 28, 28\]"):
        load_mnist(Mnist(data_dir=str(tmp_path / "m")))


def test_mnist_directory_must_exist(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMSIM_DATA", str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError, match=r"\$GEMSIM_DATA = .*absent.* is not a directory"):
        load_mnist(Mnist())


def test_problem_on_mnist_files(tmp_path):
    arrays = _mnist_dir(tmp_path / "m", n_train=40, n_test=10, gz=True)
    problem = make_problem(Logistic(), Mnist(data_dir=str(tmp_path / "m")), batch_size=8, seed=0)
    assert (problem.train_size, problem.test_size, problem.steps_per_epoch) == (40, 10, 5)
    assert problem.n_params == 784 * 10 + 10
    batch = problem.batch(1, 2)
    assert batch.x.shape == (8, 28, 28) and set(np.asarray(batch.y)) <= set(arrays[1].tolist())
    assert set(problem.evaluate(problem.init_params)) == {
        "train_loss",
        "test_loss",
        "test_accuracy",
        *(f"test_accuracy_class_{k}" for k in range(10)),
    }

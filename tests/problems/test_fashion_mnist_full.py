"""The full Fashion-MNIST set where Debian's dataset-fashion-mnist package installed it: sizes
from the IDX headers, the normalisation constants, and a short CNN run from a scenario."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

import gemsim
from gemsim.problems import FashionMnist, data_shape, load_dataset
from gemsim.problems.data._data_files import FASHION_MNIST_SYSTEM_DIR

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(FASHION_MNIST_SYSTEM_DIR).is_dir(),
        reason=f"the full Fashion-MNIST set is not in {FASHION_MNIST_SYSTEM_DIR}: install "
        "Debian's package to run these tests (apt-get install dataset-fashion-mnist)",
    ),
]


def test_full_set_sizes_and_normalisation():
    shape = data_shape(FashionMnist())  # headers only
    assert (shape.n_train, shape.n_test, shape.input_shape, shape.n_classes) == (
        60_000, 10_000, (28, 28), 10,
    )  # fmt: skip
    data = load_dataset(FashionMnist(), seed=0)
    assert data.x_train.shape == (60_000, 28, 28)
    # FASHION_MEAN and FASHION_STD standardise the training pixels.
    assert abs(float(data.x_train.mean())) < 1e-3 and abs(float(data.x_train.std()) - 1) < 1e-3
    np.testing.assert_array_equal(np.bincount(data.y_train), [6000] * 10)


def test_cnn_trains_on_the_full_set(tmp_path):
    doc = {
        "name": "fashion",
        "seed": 0,
        "workers": {"count": 4, "compute": {"dist": "lognormal", "median": 0.1, "sigma": 0.25}},
        "budget": {"commits": 256},
        "problem": {"model": "cnn", "dataset": "fashion-mnist", "batch_size": 64},
        "optimizer": {"rule": "gem", "lr": 0.05, "momentum": 0.9},
        "eval": {"every": 128, "subset": 500},
        "engine": {"chunk": 128},
    }
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump(doc))
    out, rows = gemsim.run_file(path, out=tmp_path / "out", quiet=True)
    (row,) = rows
    assert row.status == "ok"
    assert row.test_accuracy > 0.5  # ten classes: chance is 0.1

"""User models by import path and user data as arrays: the contract, its checks, and exact
evaluation against numpy."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from user_modules import classification_arrays, regression_arrays, write_module

from gemsim.problems import (
    Arrays,
    DataError,
    Imported,
    ModelError,
    data_shape,
    imported_sizes,
    load_model,
    make_problem,
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def linear(folder):
    return write_module(folder)


def _npz(path, arrays):
    np.savez(path, **arrays)
    return Arrays(str(path))


def test_regression_problem_matches_numpy(folder, linear):
    spec = _npz(folder / "reg.npz", regression_arrays())
    p = make_problem(Imported(f"{linear}:make", {"dim": 3}, path=str(folder)), spec, 8, seed=1)
    assert (p.train_size, p.test_size, p.n_params, p.n_classes) == (80, 20, 4, 0)
    params = {"w": np.array([1.0, 2.0, 2.5], np.float32), "b": np.float32(0.25)}
    metrics = p.evaluate(params)
    a = regression_arrays()
    chosen = np.concatenate([np.ravel(p.data["eval"]["full"]), p.data["eval"]["rest"]])
    err = lambda x, y: 0.5 * np.mean((x @ params["w"] + params["b"] - y) ** 2)
    np.testing.assert_allclose(metrics["test_loss"], err(a["x_test"], a["y_test"]), rtol=1e-5)
    train = err(a["x_train"][chosen], a["y_train"][chosen])
    np.testing.assert_allclose(metrics["train_loss"], train, rtol=1e-5)
    assert np.isnan(metrics["test_accuracy"])  # float targets: no accuracy
    # Batches come from the arrays, by the streams' indices; init from the user's function.
    batch = p.batch(2, 5)
    assert batch.x.shape == (8, 3) and batch.y.dtype == np.float32
    rows = [np.flatnonzero((a["x_train"] == row).all(axis=1))[0] for row in np.asarray(batch.x)]
    np.testing.assert_array_equal(np.asarray(batch.y), a["y_train"][rows])
    expected_w = 0.1 * jax.random.normal(jax.random.key(0), (3,))
    assert p.init_params["w"].shape == expected_w.shape


def test_classifier_with_predict_and_eval_loss_measures_accuracy(folder, linear):
    arrays = classification_arrays()
    spec = _npz(folder / "cls.npz", arrays)
    p = make_problem(Imported(f"{linear}:softmax", path=str(folder)), spec, 16, seed=0)
    assert p.n_classes == 3
    w = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32)
    metrics = p.evaluate({"w": w})
    logits = arrays["x_test"] @ w
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    nll = -np.mean(log_p[np.arange(len(logits)), arrays["y_test"]])
    np.testing.assert_allclose(metrics["test_loss"], nll, rtol=1e-5)
    accuracy = np.mean(np.argmax(logits, axis=1) == arrays["y_test"])
    np.testing.assert_allclose(metrics["test_accuracy"], accuracy, rtol=1e-6)


def test_factory_data_and_header_sizes(folder, linear):
    spec = Imported(f"{linear}:make", {"dim": 3, "with_data": True}, path=str(folder))
    model, data = load_model(spec)
    assert set(data) == {"x_train", "y_train", "x_test", "y_test"}
    p = make_problem(spec, None, 10, seed=0)
    assert (p.train_size, p.test_size) == (80, 20)
    assert imported_sizes(spec, None, 10) == (80, 4)
    arrays = _npz(folder / "sizes.npz", classification_arrays())
    shape = data_shape(arrays)
    assert (shape.n_train, shape.n_test, shape.input_shape, shape.n_classes) == (90, 30, (4,), 3)


def test_a_built_in_model_trains_on_arrays(folder):
    from gemsim.problems import Logistic

    p = make_problem(Logistic(), _npz(folder / "b.npz", classification_arrays()), 16, seed=0)
    assert p.n_params == 4 * 3 + 3 and p.n_classes == 3


@pytest.mark.parametrize(
    ("target", "kwargs", "match"),
    [
        ("no_such_module_xyz:make", {}, "module 'no_such_module_xyz' not found"),
        ("{mod}:absent", {}, "has no attribute 'absent' .*it defines: .*make"),
        ("{mod}:NOT_CALLABLE", {}, "is int, not a callable"),
        ("{mod}:make", {"width": 3}, r"kwargs \{'width': 3\} do not fit make\(dim=3"),
        ("{mod}:raises", {}, "raised RuntimeError: the factory broke"),
        ("{mod}:no_loss", {}, "no callable loss"),
        ("{mod}:int_params", {}, r"parameter \['w'\] is int32"),
        ("{mod}:vector_loss", {}, "must return a float scalar"),
    ],
)
def test_bad_models_name_what_is_wrong(folder, linear, target, kwargs, match):
    spec = _npz(folder / "bad.npz", regression_arrays())
    model = Imported(target.format(mod=linear), kwargs, path=str(folder))
    with pytest.raises(ModelError, match=match):
        make_problem(model, spec, 8, seed=0)


def test_a_changed_module_is_refused(tmp_path):
    name = write_module(tmp_path)
    spec = Imported(f"{name}:make", path=str(tmp_path), sha256="0" * 64)
    with pytest.raises(ModelError, match="changed since its sha256 was recorded"):
        load_model(spec)


def _broken(**changes):
    arrays = classification_arrays()
    arrays.update(changes)
    return arrays


@pytest.mark.parametrize(
    ("arrays", "match"),
    [
        (_broken(y_train=np.zeros(89, np.int64)), "x_train and y_train have different lengths"),
        (_broken(x_test=np.zeros((30, 5), np.float32)), r"x_train's examples have shape \(4,\)"),
        (_broken(y_test=np.full(30, -1)), "label -1 is out of range"),
        (_broken(n_classes=np.int64(2)), r"label 2 is out of range.*\[0, 2\) \(n_classes\)"),
        (
            _broken(y_test=np.arange(30) % 5),
            r"y_test holds label 4, but n_classes was inferred as 3 from the largest training "
            r"label \(2\).*give n_classes",
        ),
        (_broken(x_train=np.where(np.eye(90, 4) > 0, np.nan, 1.0)), "x_train holds 4 NaN"),
        ({"x_train": np.zeros((3, 2))}, "missing array.*y_train, x_test, y_test"),
        (_broken(y_test=np.zeros(30, np.float32)), "both be integer labels or both float"),
        (_broken(x_train=np.array(["a"] * 90)), "dtype <U1; expected numbers"),
    ],
)
def test_bad_arrays_name_the_array(tmp_path, arrays, match):
    spec = _npz(tmp_path / "d.npz", arrays)
    from gemsim.problems import Logistic

    with pytest.raises(DataError, match=match):
        make_problem(Logistic(), spec, 8, seed=0)


def test_n_classes_is_inferred_from_the_training_labels(folder, linear):
    """Reading the labels (sizes, no model) and loading them agree on the count; the model's
    predict is never blamed for a test label the training labels do not reach."""
    arrays = _broken(y_test=np.full(30, 3))
    spec = _npz(folder / "above.npz", arrays)
    assert data_shape(spec).n_classes == 3
    with pytest.raises(DataError, match="y_test holds label 3") as raised:
        make_problem(Imported(f"{linear}:softmax", path=str(folder)), spec, 8, seed=0)
    assert "predict" not in str(raised.value)
    given = _npz(folder / "given.npz", {**arrays, "n_classes": np.int64(4)})
    p = make_problem(Imported(f"{linear}:softmax", {"n_classes": 4}, path=str(folder)), given, 8, 0)
    assert p.n_classes == 4


def test_missing_or_corrupt_npz(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        data_shape(Arrays(str(tmp_path / "absent.npz")))
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="not a readable .npz"):
        data_shape(Arrays(str(tmp_path / "junk.npz")))


def test_every_example_scenario_validates_and_records_its_module():
    import hashlib
    from pathlib import Path

    import gemsim

    examples = Path(__file__).resolve().parents[2] / "examples"
    # the examples of user models (examples/custom_rule is a rule on the built-in quadratic)
    files = [p for p in sorted(examples.glob("*/scenario.yaml")) if p.parent.name != "custom_rule"]
    assert len(files) == 4
    for path in files:
        model = gemsim.load_scenario(path).problem.model  # locating imports nothing
        module = Path(model.path) / (model.target.partition(":")[0] + ".py")
        assert model.path == str(path.parent.resolve())
        assert model.sha256 == hashlib.sha256(module.read_bytes()).hexdigest()

"""The models: shapes, parameter counts, initialisation, dropout, conv equivalence."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemsim.problems import Cnn, Digits, Logistic, Mlp, Synthetic, cnn_apply, cnn_init, make_problem
from gemsim.problems.models._cnn import channel_dropout

CNN_PARAMS = 260 + 5020 + 96300 + 60200 + 2010
ROOT = Path(__file__).resolve().parents[2]


def _load_conv_benchmark():
    spec = importlib.util.spec_from_file_location("bench_conv", ROOT / "benchmarks" / "conv.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cnn_shapes_and_parameter_count(cnn_problem):
    print(f"cnn parameters: {cnn_problem.n_params}")
    assert cnn_problem.n_params == CNN_PARAMS == 163_790
    assert cnn_problem.model_bytes == 4 * CNN_PARAMS
    shapes = jax.tree.map(lambda a: a.shape, cnn_problem.init_params)
    assert shapes == {
        "conv1": {"w": (5, 5, 1, 10), "b": (10,)},
        "conv2": {"w": (5, 5, 10, 20), "b": (20,)},
        "fc1": {"w": (320, 300), "b": (300,)},
        "fc2": {"w": (300, 200), "b": (200,)},
        "fc3": {"w": (200, 10), "b": (10,)},
    }
    assert all(a.dtype == jnp.float32 for a in jax.tree.leaves(cnn_problem.init_params))
    batch = cnn_problem.batch(0, 0)
    assert batch.x.shape == (64, 28, 28) and batch.y.shape == (64,) and batch.y.dtype == jnp.int32
    logits = cnn_apply(cnn_problem.init_params, batch.x, None)
    assert logits.shape == (64, 10)
    loss = cnn_problem.loss(cnn_problem.init_params, batch, batch.key)
    assert loss.shape == () and np.isfinite(loss) and abs(float(loss) - np.log(10)) < 0.3


def test_pytorch_like_initialisation():
    init = jax.jit(cnn_init)
    params = init(jax.random.key(0))
    for layer, fan_in in [("conv1", 25), ("conv2", 250), ("fc1", 320), ("fc2", 300), ("fc3", 200)]:
        bound = 1 / np.sqrt(fan_in)
        for leaf in params[layer].values():
            assert float(jnp.max(jnp.abs(leaf))) <= bound
        w = params[layer]["w"]
        assert float(jnp.std(w)) == pytest.approx(bound / np.sqrt(3), rel=0.15)
    other = init(jax.random.key(1))
    assert not np.array_equal(params["fc1"]["w"], other["fc1"]["w"])


def test_im2col_and_lax_convolutions_agree(cnn_problem):
    bench = _load_conv_benchmark()
    params, batch = cnn_problem.init_params, cnn_problem.batch(1, 3)
    losses, grads = [], []
    for ops in (bench.IM2COL, bench.LAX):
        value, grad = jax.jit(jax.value_and_grad(bench.make_loss(ops)))(
            params, batch.x, batch.y, batch.key
        )
        losses.append(value)
        grads.append(grad)
    np.testing.assert_allclose(losses[0], losses[1], atol=1e-5, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(grads[0]), jax.tree.leaves(grads[1]), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)
    # The model's own loss is the im2col one.
    np.testing.assert_allclose(
        cnn_problem.loss(params, batch, batch.key), losses[0], rtol=1e-6, atol=1e-6
    )


def test_dropout_is_per_channel_and_training_only(cnn_problem):
    x = jnp.ones((4, 8, 8, 20), jnp.float32)
    y = channel_dropout(x, jax.random.key(0), 0.5)
    per_channel = np.asarray(y).reshape(4, 64, 20)
    assert np.all(per_channel.min(axis=1) == per_channel.max(axis=1))  # whole channels
    assert set(np.unique(per_channel)) == {0.0, 2.0}  # survivors scaled by 1/(1-p)
    params, batch = cnn_problem.init_params, cnn_problem.batch(0, 0)
    k1, k2 = jax.random.split(jax.random.key(5))
    assert float(cnn_problem.loss(params, batch, k1)) != float(cnn_problem.loss(params, batch, k2))
    a = cnn_apply(params, batch.x, None)
    np.testing.assert_array_equal(a, cnn_apply(params, batch.x, None))


def test_mlp_and_logistic():
    data = Synthetic(n_train=100, n_test=20, dim=6, classes=3)
    mlp = make_problem(Mlp((5, 4)), data, 10, seed=0)
    assert mlp.n_params == (6 * 5 + 5) + (5 * 4 + 4) + (4 * 3 + 3)
    assert list(mlp.init_params) == ["fc1", "fc2", "fc3"]
    logistic = make_problem(Logistic(), Digits(), 16, seed=0)
    assert logistic.n_params == 64 * 10 + 10 and logistic.input_shape == (8, 8)
    batch = logistic.batch(0, 0)
    assert np.isfinite(logistic.loss(logistic.init_params, batch, batch.key))


def test_many_layers_keep_their_order():
    problem = make_problem(Mlp((3,) * 10), Synthetic(n_train=50, n_test=5, dim=2), 5, seed=0)
    names = list(problem.init_params)
    assert names == sorted(names) and names[0] == "fc01" and names[-1] == "fc11"


def test_cnn_rejects_other_input_shapes():
    with pytest.raises(ValueError, match=r"cnn needs 28x28 .* \(8, 8\).*mlp or logistic"):
        make_problem(Cnn(), Digits(), 16, seed=0)

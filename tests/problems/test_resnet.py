"""The BatchNorm-free ResNet: parameter counts (the paper's sizes, and the count `gemsim trace`
uses), its Fixup start, shapes on grey and colour images, and a loss that falls."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemsim.problems import Arrays, DataShape, Resnet, make_problem, param_count


@pytest.mark.parametrize(("depth", "count"), [(8, 74_841), (20, 268_407)])
def test_parameter_counts_of_the_cifar_resnets(depth, count):
    # He et al. report 0.27M parameters for ResNet-20 (their table 6, with BatchNorm's
    # 2 x 336 affine parameters, which Fixup's scalars replace).
    assert param_count(Resnet(depth), DataShape(50_000, 10_000, (32, 32, 3), 10)) == count


@pytest.mark.parametrize("depth", [0, 7, 9, 21])
def test_depth_must_be_six_m_plus_two(depth):
    with pytest.raises(ValueError, match="depth"):
        Resnet(depth)


@pytest.fixture(scope="module")
def colour(tmp_path_factory):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((96, 12, 12, 3)).astype(np.float32)
    x[..., 0] += np.where(rng.random(96) > 0.5, 1.0, -1.0)[:, None, None]
    y = (x[..., 0].mean(axis=(1, 2)) > 0).astype(np.int64)  # the red plane's brightness
    path = tmp_path_factory.mktemp("resnet") / "colour.npz"
    np.savez(path, x_train=x[:64], y_train=y[:64], x_test=x[64:], y_test=y[64:])
    return Arrays(str(path))


@pytest.fixture(scope="module")
def problem(colour):
    return make_problem(Resnet(depth=8, width=4), colour, batch_size=16, seed=0)


def test_fixup_start(problem):
    p = problem.init_params
    assert problem.n_params == sum(a.size for a in jax.tree.leaves(p))
    blocks = [name for name in p if name[0] == "s" and name[1].isdigit()]
    assert len(blocks) == 3  # depth 8: one block per stage
    assert all(not np.any(p[name]["w2"]) and float(p[name]["scale"][0]) == 1.0 for name in blocks)
    assert not np.any(p["head"]["w"])
    # A zero head gives uniform predictions: the loss starts at log(classes) exactly.
    assert float(problem.evaluate(p)["test_loss"]) == pytest.approx(math.log(2), abs=1e-6)
    stem = np.asarray(p["stem"]["w"])
    bound = math.sqrt(6.0 / (3 * 3 * 3))
    assert np.abs(stem).max() <= bound and np.abs(stem).max() > 0.8 * bound


def test_sgd_lowers_the_loss(problem):
    @jax.jit
    def step(params, s):
        batch = problem.batch(0, s)
        grads = jax.grad(problem.loss)(params, batch, batch.key)
        return jax.tree.map(lambda w, g: w - 0.1 * g, params, grads)

    params = problem.init_params
    for s in range(40):
        params = step(params, jnp.int32(s))
    before = float(problem.evaluate(problem.init_params)["train_loss"])
    after = problem.evaluate(params)
    assert float(after["train_loss"]) < 0.3 * before and float(after["test_accuracy"]) > 0.9


def test_grey_images_get_one_channel(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((20, 8, 8)).astype(np.float32)
    y = rng.integers(0, 3, 20)
    np.savez(tmp_path / "g.npz", x_train=x[:16], y_train=y[:16], x_test=x[16:], y_test=y[16:])
    p = make_problem(Resnet(8, width=2), Arrays(str(tmp_path / "g.npz")), 4, seed=0)
    assert p.init_params["stem"]["w"].shape == (3, 3, 1, 2)
    assert p.n_params == param_count(Resnet(8, width=2), DataShape(16, 4, (8, 8), 3))


@pytest.mark.parametrize(("size", "stride"), [(8, 1), (8, 2), (7, 2), (5, 1)])
def test_im2col_convolution_equals_lax_conv(size, stride):
    from gemsim.problems.models._resnet import conv_lax, conv_same

    kx, kk = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (2, size, size, 3))
    kernel = jax.random.normal(kk, (3, 3, 3, 5))
    np.testing.assert_allclose(
        conv_same(x, kernel, stride), conv_lax(x, kernel, stride), rtol=1e-5, atol=1e-5
    )

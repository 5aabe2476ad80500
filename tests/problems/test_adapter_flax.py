"""Flax NNX and Linen models through their adapters: a few hundred commits from the examples'
scenario files lower the loss, and a second run is bit-identical."""

from __future__ import annotations

import pytest

pytest.importorskip("flax", reason="Flax is an optional extra: pip install 'gemsim[flax]'")

from adapter_runs import assert_trains_and_repeats, train_twice  # noqa: E402

from gemsim.problems import ModelError, from_flax_linen, from_flax_nnx  # noqa: E402


@pytest.fixture(autouse=True)
def _strict_dtypes():
    yield  # Flax's own layers promote dtypes implicitly: the strict check is not ours to make


@pytest.mark.slow
def test_nnx_cnn_trains_and_repeats():
    small = {"problem.model.kwargs": {"channels": 4, "hidden": 32}}
    assert_trains_and_repeats(*train_twice("flax_nnx", **small))


@pytest.mark.slow
def test_linen_mlp_trains_and_repeats():
    assert_trains_and_repeats(*train_twice("flax_linen"))


def test_batch_norm_is_refused():
    from flax import linen, nnx

    class Nnx(nnx.Module):
        def __init__(self, rngs):
            self.norm = nnx.BatchNorm(4, rngs=rngs)

        def __call__(self, x):
            return self.norm(x)

    with pytest.raises(ModelError, match="BatchNorm statistics.*LayerNorm"):
        from_flax_nnx(lambda rngs: Nnx(rngs))

    class Linen(linen.Module):
        @linen.compact
        def __call__(self, x, train: bool):
            return linen.BatchNorm(use_running_average=not train)(x)

    with pytest.raises(ModelError, match=r"collections \['batch_stats'\]"):
        from_flax_linen(Linen(), (4,))

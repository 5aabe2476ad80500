"""An Equinox model (whose factory also returns its data) through its adapter: a few hundred
commits from the example's scenario file lower the loss, and a second run is bit-identical."""

from __future__ import annotations

import pytest

pytest.importorskip("equinox", reason="Equinox is an optional extra: pip install 'gemsim[equinox]'")

from adapter_runs import assert_trains_and_repeats, train_twice  # noqa: E402

from gemsim.problems import ModelError, from_equinox  # noqa: E402


@pytest.fixture(autouse=True)
def _strict_dtypes():
    yield  # Equinox's own layers promote dtypes implicitly: the strict check is not ours


@pytest.mark.slow
def test_equinox_mlp_trains_and_repeats():
    before, a, b = train_twice("equinox")
    assert_trains_and_repeats(before, a, b)
    assert a.manifest["final"]["test_accuracy"] > 0.8  # three spirals, chance is 1/3
    leaves = set(a.manifest.get("config", {}).get("problem", {}).get("model", {}))
    assert {"import", "kwargs", "sha256", "path"} <= leaves


def test_batch_norm_is_refused():
    import equinox as eqx

    with pytest.raises(ModelError, match="eqx.nn.BatchNorm"):
        from_equinox(lambda key: eqx.nn.BatchNorm(4, axis_name="batch"))

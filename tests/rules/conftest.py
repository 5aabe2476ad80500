"""Strict JAX numerics for the rule tests: accidental promotion or broadcasting fails loudly."""

import jax
import pytest


@pytest.fixture(autouse=True)
def strict_numerics():
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        yield

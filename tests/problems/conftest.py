"""Shared fixtures of the problems tests (built once per session: loading data costs ~1 s)."""

from __future__ import annotations

import jax
import pytest

from gemsim.problems import Cnn, Digits, Logistic, Mnist5k, Problem, make_problem


@pytest.fixture(autouse=True)
def _strict_dtypes():
    # Accidental dtype promotion or implicit rank broadcasting fails the problems
    # tests (Equinox's test practice), so the code also works for callers who
    # enable these checks; scoped to each test so other stages are unaffected.
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        yield


@pytest.fixture(scope="session")
def cnn_problem() -> Problem:
    return make_problem(Cnn(), Mnist5k(), batch_size=64, seed=0)


@pytest.fixture(scope="session")
def digits_problem() -> Problem:
    return make_problem(Logistic(), Digits(), batch_size=32, seed=0)

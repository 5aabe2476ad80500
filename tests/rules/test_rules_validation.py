"""Factories refuse bad hyperparameters at construction, naming parameter, value and range."""

import numpy as np
import pytest

from gemsim import rules

BAD = [
    (rules.gem, dict(lr=0.0), "lr"),
    (rules.gem, dict(lr=-1.0), "lr"),
    (rules.gem, dict(lr=float("nan")), "lr"),
    (rules.gem, dict(lr=0.1, momentum=1.0), "momentum"),
    (rules.gem, dict(lr=0.1, momentum=-0.1), "momentum"),
    (rules.gem, dict(lr=0.1, kappa=0.0), "kappa"),
    (rules.gem, dict(lr=0.1, pi_max=0.0), "pi_max"),
    (rules.gem, dict(lr=0.1, pi_max=-2.0), "pi_max"),
    (rules.gem, dict(lr=0.1, eps=0.0), "eps"),
    (rules.gem, dict(lr=0.1, eps_placement="middle"), "eps_placement"),
    (rules.gem, dict(lr=0.1, gradient_at="later"), "gradient_at"),
    (rules.gem, dict(lr=True), "lr"),
    (rules.gem_optax, dict(lr=0.1, pi_max=0), "pi_max"),
    (rules.downpour, dict(lr=0.1, window=0), "window"),
    (rules.downpour, dict(lr=0.1, window=2.5), "window"),
    (rules.downpour, dict(lr=0.1, local_momentum=1.0), "local_momentum"),
    (rules.agn, dict(lr=0.1, window=0), "window"),
    (rules.agn, dict(lr=-0.1, window=2), "lr"),
    (rules.staleness, dict(lr=0.1, weight="inverse"), "weight"),
    (rules.softsync, dict(lr=0.0), "lr"),
    (rules.easgd, dict(lr=0.1, alpha=0.0, window=1), "alpha"),
    (rules.easgd, dict(lr=0.1, alpha=1.5, window=1), "alpha"),
    (rules.easgd, dict(lr=0.1, alpha=0.5, window=0), "window"),
    (rules.dcasgd, dict(lr=0.1, lam=-1.0), "lam"),
    (rules.dcasgd, dict(lr=0.1, adaptive="yes"), "adaptive"),
    (rules.dcasgd, dict(lr=0.1, decay=1.0), "decay"),
    (rules.dcasgd, dict(lr=0.1, lam0=-1.0), "lam0"),
    (rules.sync, dict(lr=0.1, momentum=1.5), "momentum"),
    (rules.Polynomial, dict(a=-1.0), "a"),
    (rules.Hinge, dict(a=1.0, b=-1.0), "b"),
    (rules.Hinge, dict(a=float("inf"), b=1.0), "a"),
]


@pytest.mark.parametrize(("factory", "kwargs", "param"), BAD)
def test_bad_hyperparameter_raises_naming_it(factory, kwargs, param):
    with pytest.raises(ValueError, match=rf"\b{param} must be") as err:
        factory(**kwargs)
    bad_value = kwargs[param]
    assert repr(bad_value) in str(err.value)


@pytest.mark.parametrize(
    "rule",
    [
        rules.gem(0.1),
        rules.downpour(0.1),
        rules.agn(0.1, 2),
        rules.staleness(0.1),
        rules.softsync(0.1),
        rules.easgd(0.1, 0.5, 1),
        rules.dcasgd(0.1),
        rules.sync(0.1),
    ],
)
def test_init_refuses_a_bad_worker_count(rule):
    with pytest.raises(ValueError, match="n_workers must be an integer >= 1"):
        rule.init({"w": np.ones(2, np.float32)}, 0)


def test_enum_values_are_accepted_as_strings():
    a = rules.gem(0.1, eps_placement="inside", gradient_at="pulled")
    assert a.name == "gem" and a.window == 1
    with pytest.raises(ValueError, match=r"EpsPlacement.OUTSIDE \('outside'\)"):
        rules.gem(0.1, eps_placement="Outside")


def test_names_and_windows():
    assert [
        r.name
        for r in (
            rules.gem(0.1),
            rules.downpour(0.1),
            rules.agn(0.1, 3),
            rules.staleness(0.1),
            rules.softsync(0.1),
            rules.easgd(0.1, 0.5, 2),
            rules.dcasgd(0.1),
            rules.sync(0.1),
        )
    ] == ["gem", "downpour", "agn", "staleness", "softsync", "easgd", "dcasgd", "sync"]
    assert rules.downpour(0.1, window=5).window == 5
    assert rules.agn(0.1, 3).window == 3 and rules.easgd(0.1, 0.5, 2).window == 2

"""The field checks the cluster's frozen specs share: each names the field as
``Owner.field`` in its message (`_budget.py`, `_worker_spec.py`, `_cluster.py`)."""

from __future__ import annotations

from gemsim._checks import check_instance, check_int, check_nonnegative, check_positive

from ._distributions import DISTRIBUTION_TYPES


def real(owner: str, name: str, value: object, *, positive: bool) -> float:
    check = check_positive if positive else check_nonnegative
    return check(f"{owner}.{name}", value)


def integer(owner: str, name: str, value: object, *, minimum: int) -> int:
    return check_int(f"{owner}.{name}", value, minimum)


def distribution(owner: str, name: str, value: object, *, optional: bool) -> None:
    check_instance(f"{owner}.{name}", value, DISTRIBUTION_TYPES, optional=optional)


def set_field(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)

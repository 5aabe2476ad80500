"""A run's heterogeneity measures as summary values: what `manifest.json`'s `final` block holds
beside the final evaluation, and the columns `gemsim ls`, `gemsim show` and `load_summary`
make of them.

From the run's evaluations (each a virtual time and the evaluation's values, the final one
last): each class's final test accuracy, the final and best (largest over the evaluations)
worker accuracy summaries, the mean accuracy of the classes each worker group alone holds
(and of the other classes), and, for each target of `eval.targets`, the virtual time of the
first evaluation at or above it, overall and for each group's classes (None: never reached).
Pure functions of plain values; no other stage is imported.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence

WORKER_ACCURACY = ("worker_accuracy_worst", "worker_accuracy_p10", "worker_accuracy_mean")
"""The per-worker accuracy summaries that get a best value as well as a final one."""
WORKER_LOSS = ("worker_loss_worst", "worker_loss_p90", "worker_loss_mean")
BEST = "best_"
TIME_TO = "time_to_accuracy_"
OTHER_CLASSES = "other_classes"
"""The group of the classes no worker group holds (where some group holds classes)."""
BASE_FINAL = ("train_loss", "test_loss", "test_accuracy")

_CLASS = re.compile(r"test_accuracy_class_(\d+)$")

Evaluation = tuple[float, Mapping[str, float]]
"""One evaluation of the central variable: its virtual time and its values."""


def class_keys(names: Iterable[str]) -> list[str]:
    """The ``test_accuracy_class_<k>`` names among ``names``, by class (pandas-free twin of
    `class_accuracy_columns`, for manifests)."""
    found = [(int(m.group(1)), c) for c in names if (m := _CLASS.match(str(c)))]
    return [c for _, c in sorted(found)]


def classes_name(classes: Iterable[int]) -> str:
    """A group of classes as a key part: ``classes_0_1``."""
    return "classes_" + "_".join(str(k) for k in sorted(classes))


def target_name(target: float) -> str:
    """A target accuracy as a key part: ``0.8``, ``0.95``, ``1``."""
    return format(float(target), "g")


def class_groups(claimed: Sequence[Sequence[int]], n_classes: int) -> dict[str, tuple[int, ...]]:
    """Name -> classes: each worker group's claimed classes (`classes_0_1`), then the classes
    none of them holds (`other_classes`) where some remain; ``{}`` without claims."""
    groups: dict[str, tuple[int, ...]] = {}
    for classes in claimed:
        groups.setdefault(classes_name(classes), tuple(sorted(classes)))
    held = {k for classes in groups.values() for k in classes}
    rest = tuple(k for k in range(n_classes) if k not in held)
    if groups and rest:
        groups[OTHER_CLASSES] = rest
    return groups


def n_classes_of(values: Mapping[str, float]) -> int:
    """How many classes an evaluation reports (`test_accuracy_class_<k>`), 0 for none."""
    found = class_keys(values)
    return 1 + int(found[-1].rsplit("_", 1)[1]) if found else 0


def group_accuracy(values: Mapping[str, float], classes: Iterable[int]) -> float:
    """The mean of the classes' test accuracies in one evaluation (a class the test set lacks,
    NaN, left out); NaN when none has one."""
    found = [_float(values.get(f"test_accuracy_class_{k}")) for k in classes]
    found = [v for v in found if not math.isnan(v)]
    return sum(found) / len(found) if found else math.nan


def first_time_at(evaluations: Sequence[Evaluation], accuracy, target: float) -> float:
    """The virtual time of the first evaluation (in time order) whose ``accuracy(values)`` is
    at or above ``target``; NaN when none is."""
    for time, values in sorted(evaluations, key=lambda e: e[0]):
        if accuracy(values) >= target:  # False for NaN
            return float(time)
    return math.nan


def heterogeneity_metrics(
    evaluations: Sequence[Evaluation],
    final: Mapping[str, float],
    *,
    targets: Sequence[float] = (),
    groups: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, float]:
    """The `final` block's values beyond ``train_loss, test_loss, test_accuracy``.

    Args:
        evaluations: the run's evaluations (virtual time, values), the final one included.
        final: the final evaluation's values.
        targets: target test accuracies (`eval.targets`), each in (0, 1].
        groups: name -> classes (`class_groups`); None or empty where no group holds classes.

    Returns:
        ``test_accuracy_class_<k>`` (each class's final accuracy); ``best_test_accuracy``;
        ``test_accuracy_<group>`` (the group's classes' mean accuracy); ``worker_loss_*`` and
        ``worker_accuracy_*`` (final) with ``best_worker_accuracy_*`` (the largest over the
        evaluations), where workers were evaluated on their own data; and
        ``time_to_accuracy_<x>`` and ``time_to_accuracy_<x>_<group>`` (NaN: never reached)
        for each target, where the run measured that accuracy at all.
    """
    groups = dict(groups or {})
    out: dict[str, float] = {k: _float(final[k]) for k in class_keys(final)}
    for name, classes in groups.items():
        out[f"test_accuracy_{name}"] = group_accuracy(final, classes)
    for key in (*WORKER_ACCURACY, *WORKER_LOSS):
        if key in final:
            out[key] = _float(final[key])
    for key in ("test_accuracy", *WORKER_ACCURACY):
        if key in final:
            out[BEST + key] = _largest(_float(values.get(key)) for _, values in evaluations)
    series = {"": lambda v: _float(v.get("test_accuracy"))}
    for name, classes in groups.items():
        series[f"_{name}"] = lambda v, classes=classes: group_accuracy(v, classes)
    for target in targets:
        for suffix, accuracy in series.items():
            if all(math.isnan(accuracy(values)) for _, values in evaluations):
                continue  # never measured (no classifier): no such metric
            key = f"{TIME_TO}{target_name(target)}{suffix}"
            out[key] = first_time_at(evaluations, accuracy, float(target))
    return out


# --------------------------------------------------------------------------- columns


def summary_column(key: str) -> str:
    """The summary column of a `final` key: ``final_<key>``, but the keys that name their own
    aspect (``best_...``, ``time_to_accuracy_...``) keep their name."""
    return key if key.startswith((BEST, TIME_TO)) else f"final_{key}"


def final_key(column: str) -> str:
    """The `final` key of a summary column (`summary_column`'s inverse)."""
    return column.removeprefix("final_") if column.startswith("final_") else column


def extra_final_keys(manifests: Iterable[Mapping]) -> list[str]:
    """The `final` keys beyond the first three that any of ``manifests`` holds, in
    `summary_order`."""
    keys = {k for m in manifests for k in (m.get("final") or {}) if k not in BASE_FINAL}
    return summary_order(keys)


_TIME = re.compile(rf"{TIME_TO}([0-9.eE+-]+)(?:_(.*))?$")


def summary_order(keys: Iterable[str]) -> list[str]:
    """`final` keys in reading order: best test accuracy, per class, per group, the worker
    accuracies (final, best), the worker losses, then the times to each target (by target,
    overall first), then any other key by name."""
    fixed = [
        f"{BEST}test_accuracy",
        *(k for a in WORKER_ACCURACY for k in (a, BEST + a)),
        *WORKER_LOSS,
    ]

    def rank(key: str) -> tuple:
        if key in BASE_FINAL:
            return (0, BASE_FINAL.index(key))
        if m := _CLASS.match(key):
            return (2, int(m.group(1)))
        if key == f"{BEST}test_accuracy":
            return (1, 0)
        if key.startswith("test_accuracy_"):
            return (3, key == f"test_accuracy_{OTHER_CLASSES}", key)
        if key in fixed:
            return (4, fixed.index(key))
        if (m := _TIME.match(key)) and _is_number(m.group(1)):
            return (5, float(m.group(1)), m.group(2) is not None, m.group(2) == OTHER_CLASSES)
        return (6, key)

    return sorted(set(keys), key=lambda k: (rank(k), k))


def summary_values(manifest: Mapping) -> dict[str, float]:
    """A manifest's `final` values beyond the first three, by summary column (null: NaN)."""
    final = manifest.get("final") or {}
    keys = [k for k in summary_order(final) if k not in BASE_FINAL]
    return {summary_column(k): _float(final[k]) for k in keys}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _float(value) -> float:
    return math.nan if value is None else float(value)


def _largest(values: Iterable[float]) -> float:
    found = [v for v in values if not math.isnan(v)]
    return max(found) if found else math.nan

"""Local steps per worker: a rule's `window` fixed, per worker group, or dynamic (DyLU).

Liu, Douillard et al. 2024 ("Asynchronous Local-SGD Training for Language Modeling", arXiv
2401.09135, eq. 6) give worker w ``floor(v_w / max_u v_u * H)`` local steps, ``v_w`` its
speed in steps per second, so that every worker's commit takes about as long as the
fastest one's H steps. gemsim reads ``v_w`` from the timing model's input: the worker's
speed factor over its compute law's mean seconds per mini-batch. A worker gets at least one
step. `workers.groups[].window` gives a group its own count instead. A population's clients
take theirs from their speed factors, drawn in the timing model (`timing.client_windows`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated

from pydantic import Field, PositiveInt

from gemsim import timing

from ._block import Block

if TYPE_CHECKING:
    from ._scenario import Scenario


class DynamicWindow(Block):
    """`window: {dynamic: H}`: DyLU's local steps, H for the fastest worker."""

    dynamic: Annotated[int, Field(ge=1)]


Window = PositiveInt | DynamicWindow
"""A rule block's `window`: local steps per commit, or `{dynamic: H}`."""


def static_window(window: int | DynamicWindow) -> int:
    """The rule's own window: the fixed count, or H of a dynamic one (the fastest worker's)."""
    return window.dynamic if isinstance(window, DynamicWindow) else int(window)


def client_dynamic_window(scenario: Scenario) -> int | None:
    """A population's DyLU H (`window: {dynamic: H}`, each client's own local steps from
    its speed factor, `timing.client_windows`), else None."""
    optimizer = scenario.optimizer
    window = getattr(optimizer, "window", None) if optimizer is not None else None
    if scenario.clients is None or not isinstance(window, DynamicWindow):
        return None
    return window.dynamic


def worker_windows(
    scenario: Scenario, workers: tuple[timing.WorkerSpec, ...] | None = None
) -> tuple[int, ...] | None:
    """Each worker's local steps per commit where they differ by worker (group windows or a
    dynamic window), else None: every commit holds the rule's window.

    Raises:
        ValueError: naming the field, the value and what is allowed.
    """
    optimizer = scenario.optimizer
    window = getattr(optimizer, "window", None) if optimizer is not None else None
    grouped = [(i, g) for i, g in enumerate(scenario.workers.groups) if g.window is not None]
    dynamic = isinstance(window, DynamicWindow)
    if grouped and optimizer is not None and window is None:
        i, group = grouped[0]
        raise ValueError(
            f"workers.groups[{i}].window: {group.window!r} given, but rule "
            f"{getattr(optimizer, 'rule', '?')!r} takes one gradient a commit and has no "
            f"window; allowed: a group window with a rule that has one (local, fedbuff, "
            f"fedasync, fadas, ca2fl, mifa, downpour, easgd, eamsgd)"
        )
    if (grouped or dynamic) and getattr(optimizer, "rule", None) == "agn":
        field = f"workers.groups[{grouped[0][0]}].window" if grouped else "optimizer.window"
        raise ValueError(
            f"{field}: agn divides each commit by its rule's window, so workers with windows "
            f"of their own are not defined for it; allowed: one window for every worker (or "
            f"downpour, whose commits are not divided)"
        )
    if grouped and dynamic:
        raise ValueError(
            f"workers.groups[{grouped[0][0]}].window: a group window and optimizer.window "
            f"{{dynamic: {window.dynamic}}} both set each worker's local steps; allowed: one"
        )
    if not grouped and not dynamic:
        return None
    if scenario.clients is not None:  # (its slots have no groups) each client's own steps
        return None  # `client_dynamic_window`
    if dynamic:
        if workers is None:
            raise ValueError("a dynamic window needs the scenario's worker specs")
        rates = [_step_rate(w, ws) for w, ws in enumerate(workers)]
        return timing.dylu_windows(rates, window.dynamic)
    default = static_window(window) if window is not None else 1
    windows = [default] * scenario.workers.count
    start = 0
    for group in scenario.workers.groups:
        if group.window is not None:
            windows[start : start + group.count] = [group.window] * group.count
        start += group.count
    return tuple(windows)


def _step_rate(w: int, ws: timing.WorkerSpec) -> float:
    mean = ws.compute.mean()
    if not math.isfinite(mean):
        raise ValueError(
            f"optimizer.window: {{dynamic: H}} needs each worker's mean compute time, but "
            f"worker {w}'s law {ws.compute!r} has an infinite mean; allowed: laws of finite mean"
        )
    return ws.speed / mean

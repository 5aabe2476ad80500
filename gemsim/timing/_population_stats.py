"""Reports on a population's run, from its trace and its `ClientReport` alone (no gradient):
who took part, how fairly clients were chosen, and how stale the slow clients' work was.

Fairness of the selection counts ``x_c`` (tasks started per client, N clients):

- coefficient of variation ``std(x) / mean(x)`` (population standard deviation);
- Jain's index ``(sum x)^2 / (N sum x^2)``: 1 when every client is chosen equally often,
  ``1/N`` when one client takes everything (Jain, Chiu & Hawe 1984, DEC-TR-301);
- Pearson's chi-square ``sum (x_c - E_c)^2 / E_c`` against the counts a selection would give
  in expectation, ``E_c`` proportional to each client's exposure (its time up, e.g.
  `client_up_seconds`; equal without one) times its weight (`Selection.WEIGHTED`), with its
  degrees of freedom and an upper-tail p-value (Wilson-Hilferty's normal approximation to
  the chi-square law, good for the many degrees of freedom of a population). Where the
  expected counts are small (below 5 for some client: a large population over a short run)
  the chi-square law is not guaranteed to describe the statistic, and the p-value is the share of
  multinomial draws of the same selections with those shares whose statistic is at least as
  large (a Monte Carlo exact test, as R's ``chisq.test(simulate.p.value = TRUE)``; draws
  from a fixed seed, so a report is reproducible); ``p_method`` says which. It neglects
  that a client in a task cannot be chosen again meanwhile, which makes counts more even
  than independent draws: fine when K is small beside N. Round robin chooses nothing at
  random, so it has no chi-square.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gemsim.trace import CommitTrace

from ._outcome import TASK_COMMITTED, TASK_LOST, ClientReport, ClientTasks
from ._population import Population, Selection


def client_report(speeds: np.ndarray, tasks: ClientTasks, up_seconds: np.ndarray) -> ClientReport:
    """The per-client report of a population's tasks: each client's speed factor (one per
    client, `client_speeds`), its tasks started, completed and lost, the per-client sums
    of ``tasks`` (which come with them), and its time up (`client_up_seconds`)."""
    n = len(speeds)

    def per_client(mask: np.ndarray | None = None) -> np.ndarray:
        clients = tasks.client if mask is None else tasks.client[mask]
        return np.bincount(clients, minlength=n).astype(np.int64, copy=False)

    return ClientReport(
        speed=speeds,
        started=per_client(),
        completed=per_client(tasks.outcome == TASK_COMMITTED),
        lost=per_client(tasks.outcome == TASK_LOST),
        up_seconds=up_seconds,
        tasks=tasks,
    )


def participation(clients: ClientReport) -> dict[str, Any]:
    """Tasks started, completed and lost, in total and per client (plain Python values)."""
    started, completed, lost = clients.started, clients.completed, clients.lost
    n_started = int(started.sum())
    per_client = {}
    for name, values in (("started", started), ("completed", completed), ("lost", lost)):
        p50, p90 = np.percentile(values, [50, 90], method="inverted_cdf")
        per_client[name] = {
            "mean": float(values.mean()),
            "p50": int(p50),
            "p90": int(p90),
            "max": int(values.max()),
        }
    return {
        "clients": len(started),
        "clients_chosen": int((started > 0).sum()),
        "clients_committed": int((completed > 0).sum()),
        "tasks_started": n_started,
        "tasks_completed": int(completed.sum()),
        "tasks_lost": int(lost.sum()),
        "tasks_in_flight": int(n_started - completed.sum() - lost.sum()),
        "loss_rate": float(lost.sum() / n_started) if n_started else None,
        "per_client": per_client,
    }


def chi_square_p_value(statistic: float, dof: int) -> float | None:
    """``P(X > statistic)`` for X chi-square with ``dof`` degrees of freedom (Wilson-Hilferty:
    ``(X / k)^(1/3)`` is about normal with mean ``1 - 2/(9k)`` and variance ``2/(9k)``)."""
    if dof < 1:
        return None
    if math.isinf(statistic):
        return 0.0
    v = 2.0 / (9.0 * dof)
    z = ((statistic / dof) ** (1.0 / 3.0) - (1.0 - v)) / math.sqrt(v)
    return 0.5 * math.erfc(z / math.sqrt(2.0))


SMALL_EXPECTED = 5.0
"""Expected counts below which the chi-square law is not used for the p-value."""
MONTE_CARLO_VALUES = 20_000_000
"""Multinomial values drawn at most for a Monte Carlo p-value (its draws: this over N, from
200 to 2,000)."""
_MONTE_CARLO_SEED = 0x5E1EC7


def _statistic(x: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Pearson's statistic of each row of counts ``x`` against expected counts ``e`` > 0."""
    return np.sum(np.square(x - e) / e, axis=-1)


def monte_carlo_p_value(statistic: float, total: int, shares: np.ndarray) -> tuple[float, int]:
    """``(p, draws)``: the share (plus one, over draws plus one) of multinomial draws of
    ``total`` selections with probabilities ``shares`` whose chi-square is >= ``statistic``."""
    p = shares / shares.sum()
    e = total * p
    draws = int(np.clip(MONTE_CARLO_VALUES // max(len(p), 1), 200, 2000))
    rng = np.random.default_rng(_MONTE_CARLO_SEED)
    above, done = 0, 0
    while done < draws:  # in blocks: a block of draws x N counts at most
        block = min(draws - done, max(1, 2_000_000 // max(len(p), 1)))
        simulated = _statistic(rng.multinomial(total, p, size=block).astype(np.float64), e)
        above += int(np.sum(simulated >= statistic * (1 - 1e-12)))
        done += block
    return (above + 1) / (draws + 1), draws


def selection_fairness(
    counts: np.ndarray, expected: np.ndarray | None = None, *, chi_square: bool = True
) -> dict[str, Any]:
    """CV, Jain's index and (when ``chi_square``) Pearson's chi-square of per-client
    selection counts against shares proportional to ``expected`` (equal shares if None); see
    the module docstring. Statistics that are undefined (no selection) are None."""
    x = np.asarray(counts, dtype=np.float64)
    total = float(x.sum())
    out: dict[str, Any] = {
        "clients": len(x),
        "selections": int(total),
        "cv": None,
        "jain": None,
        "chi_square": None,
        "dof": None,
        "p_value": None,
        "p_method": None,
    }
    if not total:
        return out
    mean = x.mean()
    out["cv"] = float(x.std() / mean)
    out["jain"] = float(total**2 / (len(x) * float(np.square(x).sum())))
    if chi_square:
        shares = np.ones(len(x)) if expected is None else np.asarray(expected, dtype=np.float64)
        if shares.shape != x.shape or not np.all(np.isfinite(shares)) or np.any(shares < 0):
            raise ValueError(
                f"selection_fairness: expected must hold {len(x)} finite numbers >= 0, got "
                f"shape {shares.shape}"
            )
        e = total * shares / shares.sum()
        live = e > 0
        statistic = float(np.sum(np.square(x[live] - e[live]) / e[live]))
        if np.any(x[~live] > 0):  # chosen although it should never be
            statistic = math.inf
        dof = int(live.sum()) - 1
        out.update(chi_square=statistic, dof=dof)
        if dof >= 1 and math.isfinite(statistic) and e[live].min() < SMALL_EXPECTED:
            p, draws = monte_carlo_p_value(statistic, int(total), shares[live])
            out.update(p_value=p, p_method=f"monte carlo ({draws:,} multinomial draws)")
        else:
            p = chi_square_p_value(statistic, dof)
            out.update(p_value=p, p_method=None if p is None else "chi-square law")
    return out


def staleness_by_speed_decile(
    trace: CommitTrace, speeds: np.ndarray, clients: ClientReport | None = None
) -> list[dict[str, Any]]:
    """Commits and mean staleness of the clients in each tenth of the population's speed
    factors (decile 0: the slowest clients). ``speeds``: one per client (`ClientReport`).
    With ``clients`` (the run's `ClientReport`), each decile's tasks ``started`` and ``lost``
    too (a slow client's task is exposed to its going down for longer)."""
    if trace.client is None:
        raise ValueError("staleness_by_speed_decile needs a population's trace (a client column)")
    speeds = np.asarray(speeds, dtype=np.float64)
    edges = np.quantile(speeds, np.linspace(0.0, 1.0, 11))
    decile = np.clip(np.searchsorted(edges[1:-1], speeds, side="right"), 0, 9)
    of_commit = decile[trace.client]
    commits = np.bincount(of_commit, minlength=10)
    stale = np.bincount(of_commit, weights=trace.staleness, minlength=10)
    members = np.bincount(decile, minlength=10)
    rows = [
        {
            "decile": d,
            "speed_low": float(edges[d]),
            "speed_high": float(edges[d + 1]),
            "clients": int(members[d]),
            "commits": int(commits[d]),
            "staleness_mean": float(stale[d] / commits[d]) if commits[d] else None,
        }
        for d in range(10)
    ]
    if clients is not None:
        started = np.bincount(decile, weights=clients.started, minlength=10)
        lost = np.bincount(decile, weights=clients.lost, minlength=10)
        for d, row in enumerate(rows):
            row.update(started=int(started[d]), lost=int(lost[d]))
    return rows


def population_summary(
    trace: CommitTrace,
    clients: ClientReport,
    population: Population,
    *,
    exposure: np.ndarray | None = None,
) -> dict[str, Any]:
    """Participation, selection fairness and staleness by speed decile of a population's run
    (plain, JSON-serialisable values).

    Args:
        trace: the run's trace (with its client column).
        clients: the run's `ClientReport`.
        population: the run's `Population` (its selection rule and weights).
        exposure: each client's time up (`client_up_seconds`), for the chi-square's expected
            counts; None: equal (right when no client is ever down, or in the long run of
            clients that share one churn law).
    """
    expected = None if exposure is None else np.asarray(exposure, dtype=np.float64)
    if population.selection is Selection.WEIGHTED:
        weights = np.asarray(population.weights, dtype=np.float64)
        expected = weights if expected is None else expected * weights
    fairness = selection_fairness(
        clients.started, expected, chi_square=population.selection is not Selection.ROUND_ROBIN
    )
    return {
        "selection": population.selection.value,
        "participation": participation(clients),
        "fairness": fairness,
        "staleness_by_speed_decile": staleness_by_speed_decile(trace, clients.speed, clients),
    }

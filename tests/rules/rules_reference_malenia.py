"""Plain-numpy float32 reference of Malenia SGD, written from its paper's pseudocode.

Tyurin & Richtárik 2023 (NeurIPS), "Optimal Time Complexities of Parallel Stochastic
Optimization Methods Under a Fixed Computation Model", Algorithm "Malenia SGD" (server) with
its worker method. The server's loop, with ``(g, k')`` a gradient and the index of the point
it was computed at:

    for k = 0, 1, ...:
        "g_i^k = 0 and s_i = 0 for all i in [n]"
        "while (1/n sum_i 1/s_i)^{-1} < S/n":          (1/0 = inf: every worker contributes)
            "receive (g, k') from worker j"
            "if k' = k: g_j^k = g_j^k + g; s_j = s_j + 1"
            "send (x^k, k) to worker j"                (before the step below)
        "g^k = 1/n sum_i (1/s_i) g_i^k"
        "x^{k+1} = x^k - gamma g^k"

The server holds ``g_i^k`` and ``s_i`` for every worker (a restart of a worker process leaves
them alone) and computes ``g^k`` from them at the step. Same conventions as
``rules_reference``: ``ref_malenia(problem, order, fresh, n, **hyper)`` returns ``(versions,
infos)``; a pull other than at the worker's own commit receives ``(x^k, k)`` as the server
holds it right after commit ``pv - 1``.

The loop's test is evaluated from the counts after every received gradient, in the integer
reading gemsim's rule documents (:func:`loop_ends`), which equals the exact test wherever the
tests use it (``test_rules_malenia.py`` checks it against fractions). Nothing is shared with
``gemsim.rules``.
"""

import numpy as np
from rules_harness import np_grad
from rules_reference import _apply, _init, _norm, _zeros, pulls

F = np.float32


def fixed_point_one(n: int) -> int:
    """U = 2^K, K the largest with n U < 2^31."""
    k = 0
    while n * 2 ** (k + 1) < 2**31:
        k += 1
    return 2**k


def loop_ends(s: list[int], batch: int) -> bool:
    """The while loop's test fails: every s_i >= 1 and (1/n sum 1/s_i)^{-1} >= S/n, i.e.
    sum 1/s_i <= n^2/S, read as sum floor(U / s_i) <= floor(U n^2 / S) (at most n U)."""
    n = len(s)
    one = fixed_point_one(n)
    return min(s) > 0 and sum(one // si for si in s) <= min(one * n * n // batch, one * n)


def ref_malenia(problem, order, fresh, n, *, lr, batch=None):
    size = n if batch is None else batch
    theta, versions = _init(problem)
    k_server, stamps, index, infos = 0, [0], [0] * n, []
    g = [_zeros(theta) for _ in range(n)]  # g_i^k = 0
    s = [0] * n  # s_i = 0
    for k, ((w, pv), kind) in enumerate(zip(order, pulls(order, fresh), strict=True)):
        if kind != "own":  # a join, a restart or a plain pull received (x^k, k) of that moment
            index[w] = stamps[pv]
        delay = k_server - index[w]
        if delay == 0:  # k' = k: g_j^k = g_j^k + g; s_j = s_j + 1
            grad = np_grad(problem, versions[pv], w, k, 0)
            g[w] = [a + gl for a, gl in zip(g[w], grad, strict=True)]
            s[w] += 1
        index[w] = k_server  # send (x^k, k): the index before any step
        norm = 0.0
        if loop_ends(s, size):  # g^k = 1/n sum_i (1/s_i) g_i^k; x^{k+1} = x^k - gamma g^k
            mean = [
                sum(gi[j] / F(si) for gi, si in zip(g, s, strict=True)) for j in range(len(theta))
            ]
            upd = [F(-lr) * (m / F(n)) for m in mean]
            theta, norm = _apply(theta, upd), _norm(upd)
            k_server, g, s = k_server + 1, [_zeros(theta) for _ in range(n)], [0] * n
        stamps.append(k_server)
        versions.append(theta)
        infos.append(dict(update_norm=norm, weight=float(delay == 0), delay=float(delay)))
    return versions, infos

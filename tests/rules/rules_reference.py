"""Plain-numpy float32 implementations of every rule, written from the equations.

Each ``ref_*`` runs a whole trace and returns ``(versions, infos)``: the
central parameters after every commit (lists of leaves, version 0 first) and
one dict of expected diagnostics per commit. They share nothing with
``gemsim.rules`` except the gradient function of the harness.
"""

import numpy as np
from rules_harness import Problem, np_grad

F = np.float32


def _norm(update) -> float:
    return float(np.sqrt(sum(np.sum(u.astype(np.float64) ** 2) for u in update)))


def _copy(leaves):
    return [x.copy() for x in leaves]


def _zeros(leaves):
    return [np.zeros_like(x) for x in leaves]


def _init(problem: Problem):
    import jax  # only to read the leaves in tree order

    theta = [np.asarray(x, F) for x in jax.tree.leaves(problem.params)]
    return theta, [_copy(theta)]


def ref_gem(problem, order, n, *, lr, momentum, kappa, pi_max, eps, inside, pulled):
    theta, versions = _init(problem)
    m = [_zeros(theta) for _ in range(n)]
    s = [_copy(theta) for _ in range(n)]
    infos = []
    for k, (w, pv) in enumerate(order):
        x0 = s[w] if pulled else versions[pv]
        g = np_grad(problem, x0, w, k, 0)
        dth = [-lr * gl for gl in g]
        m[w] = [momentum * ml + dl for ml, dl in zip(m[w], dth, strict=True)]
        d = [t - sl for t, sl in zip(theta, s[w], strict=True)]
        den = [np.abs(dl + F(eps)) if inside else np.abs(dl) + F(eps) for dl in dth]
        pi = [
            np.clip((kappa * np.abs(ml) - np.abs(dd)) / de, 0, pi_max).astype(F)
            for ml, dd, de in zip(m[w], d, den, strict=True)
        ]
        upd = [p * dl for p, dl in zip(pi, dth, strict=True)]
        infos.append(_gem_info(pi, dth, m[w], d, upd, kappa, pi_max))
        s[w] = theta
        theta = [t + u for t, u in zip(theta, upd, strict=True)]
        versions.append(theta)
    return versions, infos


def _gem_info(pi, dth, m, d, upd, kappa, pi_max) -> dict:
    """GEM's diagnostics: the statistics of pi over the entries with dtheta != 0."""
    keep = [dl != 0 for dl in dth]
    kept = np.concatenate([p[k] for p, k in zip(pi, keep, strict=True)])
    n_all = sum(p.size for p in pi)
    proxy = 0.5 * sum(float(np.sum(ml.astype(np.float64) ** 2)) for ml in m)
    return dict(
        update_norm=_norm(upd),
        weight=float(kept.mean()),
        pi_median=float(np.median(kept)),
        frac_pi_zero=float(np.mean(kept == 0)),
        frac_pi_max=float(np.mean(kept == F(pi_max))),
        frac_dtheta_zero=1 - kept.size / n_all,
        proxy_energy=proxy,
        target_energy=kappa**2 * proxy,
        central_energy=0.5
        * sum(
            float(np.sum((dd + u).astype(np.float64) ** 2)) for dd, u in zip(d, upd, strict=True)
        ),
        pi_median_per_leaf=np.array(
            [np.median(p[k]) if k.any() else np.nan for p, k in zip(pi, keep, strict=True)]
        ),
    )


def _local_sgd(problem, x, w, k, lr, window, momentum, v):
    """window SGD steps from x; returns (x, accumulated steps, velocity)."""
    acc = _zeros(x)
    for i in range(window):
        g = np_grad(problem, x, w, k, i)
        if v is not None:
            v = [momentum * vl + gl for vl, gl in zip(v, g, strict=True)]
            step = [-lr * vl for vl in v]
        else:
            step = [-lr * gl for gl in g]
        x = [xl + sl for xl, sl in zip(x, step, strict=True)]
        acc = [a + sl for a, sl in zip(acc, step, strict=True)]
    return x, acc, v


def ref_downpour(problem, order, n, *, lr, window, local_momentum, divide=False):
    theta, versions = _init(problem)
    v = [_zeros(theta) if local_momentum > 0 else None for _ in range(n)]
    infos = []
    for k, (w, pv) in enumerate(order):
        _, acc, v[w] = _local_sgd(problem, versions[pv], w, k, lr, window, local_momentum, v[w])
        upd = [a / F(window) for a in acc] if divide else acc
        theta = [t + u for t, u in zip(theta, upd, strict=True)]
        versions.append(theta)
        infos.append(dict(update_norm=_norm(upd), weight=1.0))
    return versions, infos


def ref_agn(problem, order, n, *, lr, window):
    return ref_downpour(problem, order, n, lr=lr, window=window, local_momentum=0.0, divide=True)


def ref_scaled(problem, order, n, *, lr, weight):
    """staleness/softsync: theta += weight(tau) * (-lr * g) at the pulled snapshot."""
    del n
    theta, versions = _init(problem)
    infos = []
    for k, (w, pv) in enumerate(order):
        wt = F(weight(k - pv))
        g = np_grad(problem, versions[pv], w, k, 0)
        upd = [wt * (-lr * gl) for gl in g]
        theta = [t + u for t, u in zip(theta, upd, strict=True)]
        versions.append(theta)
        infos.append(dict(update_norm=_norm(upd), weight=float(wt)))
    return versions, infos


def ref_softsync(problem, order, n, *, lr, c, momentum):
    """n-softsync: c gradients per update, each divided by its staleness in server updates
    (timestamps), heavy-ball momentum on the server's steps."""
    theta, versions = _init(problem)
    v, total = _zeros(theta), _zeros(theta)
    stamp, pulled_at, count = 0, [0] * n, 0
    infos = []
    for k, (w, pv) in enumerate(order):
        wt = F(1.0 / max(stamp - pulled_at[w], 1))
        g = np_grad(problem, versions[pv], w, k, 0)
        total = [s + wt * gl for s, gl in zip(total, g, strict=True)]
        count += 1
        norm = 0.0
        if count == c:
            v = [F(momentum) * vl - F(lr / c) * s for vl, s in zip(v, total, strict=True)]
            theta = [t + vl for t, vl in zip(theta, v, strict=True)]
            norm, total, count, stamp = _norm(v), _zeros(theta), 0, stamp + 1
        pulled_at[w] = stamp
        versions.append(theta)
        infos.append(dict(update_norm=norm, weight=float(wt)))
    return versions, infos


def ref_easgd(problem, order, n, *, lr, alpha, window):
    theta, versions = _init(problem)
    xw = [_copy(theta) for _ in range(n)]
    infos = []
    for k, (w, _) in enumerate(order):
        x = xw[w]
        for i in range(window):
            g = np_grad(problem, x, w, k, i)
            x = [xl - lr * gl for xl, gl in zip(x, g, strict=True)]
        e = [alpha * (xl - t) for xl, t in zip(x, theta, strict=True)]
        xw[w] = [xl - el for xl, el in zip(x, e, strict=True)]
        theta = [t + el for t, el in zip(theta, e, strict=True)]
        versions.append(theta)
        infos.append(dict(update_norm=_norm(e), weight=1.0))
    return versions, infos


def ref_dcasgd(problem, order, n, *, lr, lam, adaptive, decay, lam0):
    theta, versions = _init(problem)
    ms = [_zeros(theta) for _ in range(n)]
    infos = []
    for k, (w, pv) in enumerate(order):
        x0 = versions[pv]
        g = np_grad(problem, x0, w, k, 0)
        if adaptive:
            ms[w] = [decay * a + (1 - decay) * gl * gl for a, gl in zip(ms[w], g, strict=True)]
            lams = [lam0 / np.sqrt(a + F(1e-7)) for a in ms[w]]
        else:
            lams = [F(lam)] * len(g)
        upd = [
            -lr * (gl + la * gl * gl * (t - x))
            for gl, la, t, x in zip(g, lams, theta, x0, strict=True)
        ]
        theta = [t + u for t, u in zip(theta, upd, strict=True)]
        versions.append(theta)
        infos.append(dict(update_norm=_norm(upd), weight=1.0))
    return versions, infos


def ref_sync(problem, order, n, *, lr, momentum):
    theta, versions = _init(problem)
    v = _zeros(theta)
    round_grads = []
    infos = []
    for k, (w, pv) in enumerate(order):
        round_grads.append(np_grad(problem, versions[pv], w, k, 0))
        norm = 0.0
        if len(round_grads) == n:
            mean = [np.mean(np.stack(gs), axis=0) for gs in zip(*round_grads, strict=True)]
            v = [momentum * vl + ml for vl, ml in zip(v, mean, strict=True)]
            upd = [-lr * vl for vl in v]
            theta = [t + u for t, u in zip(theta, upd, strict=True)]
            norm = _norm(upd)
            round_grads = []
        versions.append(theta)
        infos.append(dict(update_norm=norm, weight=1.0))
    return versions, infos

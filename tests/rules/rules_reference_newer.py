"""Plain-numpy float32 references of the newer rules, written from their papers' equations.

Each ``ref_*(problem, order, fresh, n, **hyper)`` runs a whole trace and returns
``(versions, infos)`` like ``rules_reference``. ``fresh[k]`` marks a commit whose worker
started a new life (a join or a restart) by pulling ``versions[pv]``: what lived in the
worker process starts anew from there. Rules whose delays count server updates keep
``stamps[v]``, the server's update count when version ``v`` was created: a worker that
pulled version ``pv`` (at its own commit or at any other pull) pulled timestamp
``stamps[pv]``.
"""

import numpy as np
from rules_harness import np_grad
from rules_reference import _copy, _init, _norm, _zeros

F = np.float32


def _sgd_steps(problem, x, w, k, lr, window, rho=0.0):
    """``window`` SGD steps from ``x`` (with the proximal pull ``rho (x - x_start)``)."""
    anchor = x
    for i in range(window):
        g = np_grad(problem, x, w, k, i)
        if rho:
            g = [gl + F(rho) * (xl - al) for gl, xl, al in zip(g, x, anchor, strict=True)]
        x = [xl - F(lr) * gl for xl, gl in zip(x, g, strict=True)]
    return x


def ref_delay_adaptive(problem, order, fresh, n, *, lr, tau_c=None):
    del fresh
    tc = float(n if tau_c is None else tau_c)
    theta, versions = _init(problem)
    infos = []
    for k, (w, pv) in enumerate(order):
        tau = k - pv
        factor = F(1.0 if tau <= tc else tc / tau)
        g = np_grad(problem, versions[pv], w, k, 0)
        upd = [F(-lr) * factor * gl for gl in g]
        theta = [t + u for t, u in zip(theta, upd, strict=True)]
        versions.append(theta)
        infos.append(dict(update_norm=_norm(upd), weight=float(factor)))
    return versions, infos


def ref_ringmaster(problem, order, fresh, n, *, lr, threshold=None):
    """Apply -lr g when the commit's staleness k - pulled_version is below the threshold."""
    del fresh
    limit = n if threshold is None else threshold
    theta, versions = _init(problem)
    infos = []
    for k, (w, pv) in enumerate(order):
        tau = k - pv
        keep = tau < limit
        norm = 0.0
        if keep:
            upd = [F(-lr) * gl for gl in np_grad(problem, versions[pv], w, k, 0)]
            theta = [t + u for t, u in zip(theta, upd, strict=True)]
            norm = _norm(upd)
        versions.append(theta)
        infos.append(dict(update_norm=norm, weight=float(keep), delay=float(tau)))
    return versions, infos


def ref_rennala(problem, order, fresh, n, *, lr, batch=None):
    del fresh
    size = n if batch is None else batch
    theta, versions = _init(problem)
    stamps, now, total, count, infos = [0], 0, _zeros(theta), 0, []
    for k, (w, pv) in enumerate(order):
        delay = now - stamps[pv]
        norm = 0.0
        if delay == 0:
            g = np_grad(problem, versions[pv], w, k, 0)
            total = [s + gl for s, gl in zip(total, g, strict=True)]
            count += 1
        if count == size:
            upd = [F(-lr) * (s / F(size)) for s in total]
            theta = [t + u for t, u in zip(theta, upd, strict=True)]
            norm, now, total, count = _norm(upd), now + 1, _zeros(theta), 0
        versions.append(theta)
        stamps.append(now)
        infos.append(dict(update_norm=norm, weight=float(delay == 0), delay=float(delay)))
    return versions, infos


def ref_fedbuff(problem, order, fresh, n, *, lr, window, buffer, server_lr):
    del fresh, n
    theta, versions = _init(problem)
    stamps, now, total, count, infos = [0], 0, _zeros(theta), 0, []
    for k, (w, pv) in enumerate(order):
        x0 = versions[pv]
        x = _sgd_steps(problem, x0, w, k, lr, window)
        delay = now - stamps[pv]
        weight = F(1.0 / np.sqrt(1.0 + delay))
        total = [s + weight * (xl - al) for s, xl, al in zip(total, x, x0, strict=True)]
        count += 1
        norm = 0.0
        if count == buffer:
            upd = [F(server_lr / buffer) * s for s in total]
            theta = [t + u for t, u in zip(theta, upd, strict=True)]
            norm, now, total, count = _norm(upd), now + 1, _zeros(theta), 0
        versions.append(theta)
        stamps.append(now)
        infos.append(dict(update_norm=norm, weight=float(weight), delay=float(delay)))
    return versions, infos


def ref_fedasync(problem, order, fresh, n, *, lr, alpha, rho, window, weight):
    del fresh, n
    theta, versions = _init(problem)
    infos = []
    for k, (w, pv) in enumerate(order):
        x = _sgd_steps(problem, versions[pv], w, k, lr, window, rho)
        s = F(weight(k - pv))
        a = F(alpha) * s
        new = [(F(1) - a) * t + a * xl for t, xl in zip(theta, x, strict=True)]
        norm = _norm([nt - t for nt, t in zip(new, theta, strict=True)])
        theta = new
        versions.append(theta)
        infos.append(dict(update_norm=norm, weight=float(s), mixing=float(a)))
    return versions, infos


def ref_server_momentum(problem, order, fresh, n, *, lr, momentum, implicit_correction):
    del fresh
    mu = max(0.0, momentum - (1 - 1 / n)) if implicit_correction else momentum
    theta, versions = _init(problem)
    v, infos = _zeros(theta), []
    for k, (w, pv) in enumerate(order):
        g = np_grad(problem, versions[pv], w, k, 0)
        v = [F(mu) * vl + gl for vl, gl in zip(v, g, strict=True)]
        upd = [F(-lr) * vl for vl in v]
        theta = [t + u for t, u in zip(theta, upd, strict=True)]
        versions.append(theta)
        infos.append(dict(update_norm=_norm(upd), weight=1.0))
    return versions, infos


def ref_gap_aware(problem, order, fresh, n, *, lr, momentum=0.0):
    del fresh, n
    theta, versions = _init(problem)
    c, v, infos = _zeros(theta), _zeros(theta), []
    for k, (w, pv) in enumerate(order):
        g = np_grad(problem, versions[pv], w, k, 0)
        c = [cl + (np.abs(gl) - cl) / F(k + 1) for cl, gl in zip(c, g, strict=True)]
        pen = []
        for t, x0, cl in zip(theta, versions[pv], c, strict=True):
            gap, bound = np.abs(t - x0), F(lr) * cl
            ratio = np.divide(gap, bound, out=np.zeros_like(gap), where=bound > 0)
            pen.append(np.maximum(ratio, F(1)))
        v = [F(momentum) * vl + gl / p for vl, gl, p in zip(v, g, pen, strict=True)]
        upd = [F(-lr) * vl for vl in v]
        theta = [t + u for t, u in zip(theta, upd, strict=True)]
        versions.append(theta)
        every = np.concatenate([p.ravel() for p in pen])
        infos.append(
            dict(
                update_norm=_norm(upd),
                weight=float(np.mean(1 / every)),
                gap_max=float(every.max()),
                frac_penalized=float(np.mean(every > 1)),
            )
        )
    return versions, infos


def ref_eamsgd(problem, order, fresh, n, *, lr, alpha, window, momentum):
    theta, versions = _init(problem)
    xs = [_copy(theta) for _ in range(n)]
    vs = [_zeros(theta) for _ in range(n)]
    infos = []
    d = F(momentum)
    for k, (w, pv) in enumerate(order):
        if fresh[k]:  # a new process starts at the centre it pulled, at rest
            xs[w], vs[w] = _copy(versions[pv]), _zeros(theta)
        x, v = xs[w], vs[w]
        for i in range(window):
            g = np_grad(problem, [xl + d * vl for xl, vl in zip(x, v, strict=True)], w, k, i)
            v = [d * vl - F(lr) * gl for vl, gl in zip(v, g, strict=True)]
            x = [xl + vl for xl, vl in zip(x, v, strict=True)]
        e = [F(alpha) * (xl - t) for xl, t in zip(x, theta, strict=True)]
        xs[w], vs[w] = [xl - el for xl, el in zip(x, e, strict=True)], v
        theta = [t + el for t, el in zip(theta, e, strict=True)]
        versions.append(theta)
        infos.append(dict(update_norm=_norm(e), weight=1.0))
    return versions, infos


def _adamw(lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=1e-4):
    """optax.adamw's defaults, from Loshchilov & Hutter's equations."""

    def init(x):
        return 0, _zeros(x), _zeros(x)

    def step(x, g, state):
        t, mu, nu = state
        t += 1
        mu = [F(1 - b1) * gl + F(b1) * m for gl, m in zip(g, mu, strict=True)]
        nu = [F(1 - b2) * gl * gl + F(b2) * s for gl, s in zip(g, nu, strict=True)]
        c1, c2 = F(1) - F(b1) ** t, F(1) - F(b2) ** t
        u = [
            (m / c1) / (np.sqrt(s / c2) + F(eps)) + F(weight_decay) * xl
            for m, s, xl in zip(mu, nu, x, strict=True)
        ]
        return [xl - F(lr) * ul for xl, ul in zip(x, u, strict=True)], (t, mu, nu)

    return init, step


def _momentum_sgd(lr, momentum):
    """optax.sgd with heavy-ball momentum: ``t <- g + mu t``; ``x <- x - lr t``."""

    def init(x):
        return _zeros(x)

    def step(x, g, trace):
        trace = [gl + F(momentum) * tl for gl, tl in zip(g, trace, strict=True)]
        return [xl - F(lr) * tl for xl, tl in zip(x, trace, strict=True)], trace

    return init, step


INNER = {"adamw": _adamw, "momentum_sgd": _momentum_sgd}


def ref_local(problem, order, fresh, n, *, inner, window, outer_lr, outer_momentum, round_end):
    """Inner optimizer ``inner = (name, kwargs)`` on the workers; the round's mean
    pseudo-gradient ``x_pulled - x`` through Nesterov SGD at the server."""
    init, step = INNER[inner[0]](**inner[1])
    theta, versions = _init(problem)
    states = [init(theta) for _ in range(n)]
    trace, total, count, infos = _zeros(theta), _zeros(theta), 0, []
    mu = F(outer_momentum)
    for k, (w, pv) in enumerate(order):
        if fresh[k]:  # the inner state lived in the worker process
            states[w] = init(theta)
        x0 = x = versions[pv]
        for i in range(window):
            x, states[w] = step(x, np_grad(problem, x, w, k, i), states[w])
        total = [s + (a - b) for s, a, b in zip(total, x0, x, strict=True)]
        count += 1
        norm = 0.0
        if round_end[k]:
            mean = [F(1 / count) * s for s in total]
            trace = [m + mu * t for m, t in zip(mean, trace, strict=True)]
            upd = [F(-outer_lr) * (m + mu * t) for m, t in zip(mean, trace, strict=True)]
            theta = [t + u for t, u in zip(theta, upd, strict=True)]
            norm, total, count = _norm(upd), _zeros(theta), 0
        versions.append(theta)
        infos.append(dict(update_norm=norm, weight=1.0))
    return versions, infos

"""Plain-numpy float32 references of the rules whose workers take local steps, written from
their papers' pseudocode (each cites the algorithm and the statements it follows).

Same conventions as ``rules_reference``: ``ref_*(problem, order, fresh, n, **hyper)`` returns
``(versions, infos)``; ``fresh[k]`` starts what lives in worker ``w``'s process anew from
``versions[pv]``. Local step ``i`` of commit ``k`` takes the harness's gradient ``(w, k, i)``.
"""

import numpy as np
from rules_harness import np_grad
from rules_reference import _apply, _copy, _init, _norm, _zeros

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


# --- DOWNPOUR: Dean et al. 2012 (NeurIPS), Section 4.1, as dist-keras ships it: the worker --
# fetches the parameters, takes `window` SGD steps (local heavy-ball momentum optional: its
# velocity lives in the worker process) and pushes the accumulated displacement, which the
# server adds. AGN: Hermans, Spanakis & Möckel 2017, the same commit divided by `window`.


def ref_downpour(problem, order, fresh, n, *, lr, window, local_momentum, divide=False):
    theta, versions = _init(problem)
    v = [_zeros(theta) for _ in range(n)]
    infos = []
    for k, (w, pv) in enumerate(order):
        if fresh[k]:
            v[w] = _zeros(theta)
        x, acc = versions[pv], _zeros(theta)
        for i in range(window):
            g = np_grad(problem, x, w, k, i)
            if local_momentum > 0:
                v[w] = [local_momentum * vl + gl for vl, gl in zip(v[w], g, strict=True)]
                step = [-lr * vl for vl in v[w]]
            else:
                step = [-lr * gl for gl in g]
            x = [xl + sl for xl, sl in zip(x, step, strict=True)]
            acc = [a + sl for a, sl in zip(acc, step, strict=True)]
        upd = [a / F(window) for a in acc] if divide else acc
        theta = _apply(theta, upd)
        versions.append(theta)
        infos.append(dict(update_norm=_norm(upd), weight=1.0))
    return versions, infos


def ref_agn(problem, order, fresh, n, *, lr, window):
    return ref_downpour(
        problem, order, fresh, n, lr=lr, window=window, local_momentum=0.0, divide=True
    )


# --- EASGD / EAMSGD: Zhang, Choromanska & LeCun 2015 (NeurIPS), Algorithms 1 and 2 --------
# (asynchronous, processing by worker i), the worker's loop:
#   "x <- x^i"
#   "if tau divides t^i: x^i <- x^i - alpha (x - x~);  x~ <- x~ + alpha (x - x~)"
#   Algorithm 1: "x^i <- x^i - eta g(x)"
#   Algorithm 2: "v^i <- delta v^i - eta g(x + delta v^i);  x^i <- x^i + v^i"
#   "t^i <- t^i + 1"
# A commit is the exchange at t^i = (c + 1) tau; the loop is cut there, so the gradient step of
# that iteration, at the x read before the exchange (`before[w]`), opens the next commit's
# local phase. A new process starts at t^i = 0 with x^i the centre it pulled (its exchange at
# t^i = 0 moves nothing).


def ref_eamsgd(problem, order, fresh, n, *, lr, alpha, window, momentum):
    theta, versions = _init(problem)
    xs = [_copy(theta) for _ in range(n)]
    vs = [_zeros(theta) for _ in range(n)]
    before = [_copy(theta) for _ in range(n)]
    d, infos = F(momentum), []
    for k, (w, pv) in enumerate(order):
        if fresh[k]:
            xs[w], vs[w], before[w] = _copy(versions[pv]), _zeros(theta), _copy(versions[pv])
        x = before[w]  # the iteration cut at the last exchange: "x <- x^i" was read before it
        for i in range(window):
            look = [xl + d * vl for xl, vl in zip(x, vs[w], strict=True)]
            g = np_grad(problem, look, w, k, i)
            vs[w] = [d * vl - F(lr) * gl for vl, gl in zip(vs[w], g, strict=True)]
            xs[w] = [xl + vl for xl, vl in zip(xs[w], vs[w], strict=True)]
            x = xs[w]  # the next iteration's "x <- x^i"
        e = [F(alpha) * (xl - t) for xl, t in zip(x, theta, strict=True)]  # tau divides t^i
        before[w] = x
        xs[w] = [xl - el for xl, el in zip(xs[w], e, strict=True)]
        theta = _apply(theta, e)
        versions.append(theta)
        infos.append(dict(update_norm=_norm(e), weight=1.0))
    return versions, infos


def ref_easgd(problem, order, fresh, n, *, lr, alpha, window):
    """Algorithm 1, which is Algorithm 2 with delta = 0."""
    return ref_eamsgd(problem, order, fresh, n, lr=lr, alpha=alpha, window=window, momentum=0.0)


# --- FedBuff: Nguyen et al. 2022 (AISTATS), Algorithm 1: a client trains `window` local SGD -
# steps from the model it downloaded and uploads its delta; the server adds it, scaled by
# 1 / sqrt(1 + staleness) (staleness: server model updates since the client's download), to
# the buffer, and after K = `buffer` uploads takes x <- x + eta_g / K * buffer.


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
            theta, norm = _apply(theta, upd), _norm(upd)
            now, total, count = now + 1, _zeros(theta), 0
        versions.append(theta)
        stamps.append(now)
        infos.append(dict(update_norm=norm, weight=float(weight), delay=float(delay)))
    return versions, infos


# --- FedAsync: Xie, Koyejo & Gupta 2019, Algorithm 1. Worker: receives (x_t, t), sets ------
# tau <- t and runs `window` steps on f + rho/2 |x - x_tau|^2. Updater, at epoch t in [T] (the
# t-th update, creating x_t): "alpha_t <- alpha * s(t - tau)";
# "x_t <- (1 - alpha_t) x_{t-1} + alpha_t x_new". Commit k creates version t = k + 1 from a
# worker that received version tau = pv: t - tau = k + 1 - pv (1 for the latest model).


def ref_fedasync(problem, order, fresh, n, *, lr, alpha, rho, window, weight):
    del fresh, n
    theta, versions = _init(problem)
    infos = []
    for k, (w, pv) in enumerate(order):
        x = _sgd_steps(problem, versions[pv], w, k, lr, window, rho)
        s = F(weight(k + 1 - pv))
        a = F(alpha) * s
        new = [(F(1) - a) * t + a * xl for t, xl in zip(theta, x, strict=True)]
        norm = _norm([nt - t for nt, t in zip(new, theta, strict=True)])
        theta = new
        versions.append(theta)
        infos.append(dict(update_norm=norm, weight=float(s), mixing=float(a)))
    return versions, infos


# --- DiLoCo: Douillard et al. 2023, Algorithm 1: each worker takes H inner steps of AdamW ---
# (Table 5: weight decay 0.1) from the global parameters; the outer gradient is the mean over
# the round's workers of theta_pulled - theta_local; an outer Nesterov step. Asynchronously
# (Liu et al. 2024) a commit is its own round.


def _adamw(lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.1):
    """AdamW, Loshchilov & Hutter 2019, Algorithm 2 (decoupled decay, scaled by lr as optax)."""

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
    """Heavy-ball SGD: ``t <- g + mu t``; ``x <- x - lr t``."""

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
            theta, norm, total, count = _apply(theta, upd), _norm(upd), _zeros(theta), 0
        versions.append(theta)
        infos.append(dict(update_norm=norm, weight=1.0))
    return versions, infos

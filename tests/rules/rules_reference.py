"""Plain-numpy float32 references of the rules whose workers send one gradient, written from
their papers' pseudocode (each cites the algorithm and the statements it follows).

Each ``ref_*(problem, order, fresh, n, **hyper)`` runs a whole trace and returns
``(versions, infos)``: the central parameters after every commit (lists of leaves, version 0
first) and one dict of expected diagnostics per commit. ``order[k] = (w, pv)``: commit ``k``
(it creates version ``k + 1``) is worker ``w``'s, computed from version ``pv``. ``fresh[k]``
marks a commit whose worker started a new process (a join or a restart) by pulling
``versions[pv]``: the papers have no restarts, and what lived in the worker process starts
anew there, as a worker that never committed. A pull other than at the worker's own last
commit (a join, a restart, a plain pull after a barrier) receives what the server holds
right after commit ``pv - 1`` (:func:`pulls`). The references share nothing with
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


def pulls(order, fresh) -> list[str]:
    """Per commit, how its worker got version ``pv``: ``"own"`` (the pull right after its own
    last commit), ``"fresh"`` (a new process) or ``"plain"`` (any other pull)."""
    last, kinds = {}, []
    for k, (w, pv) in enumerate(order):
        if fresh[k]:
            kinds.append("fresh")
        else:
            kinds.append("own" if last.get(w, -1) + 1 == pv and w in last else "plain")
        last[w] = k
    return kinds


def _apply(theta, upd):
    return [t + u for t, u in zip(theta, upd, strict=True)]


# --- GEM: Hermans & Louppe 2018 (arXiv 1805.08469), Algorithm 1 with the authors' code's ----
# defaults (gemsim's DESIGN, "GEM"): gradient_at post_commit is the authors' code, "pulled"
# the paper's Algorithm 1 (the gradient at the value pulled before the commit).


def ref_gem(problem, order, fresh, n, *, lr, momentum, kappa, pi_max, eps, inside, pulled):
    theta, versions = _init(problem)
    m = [_zeros(theta) for _ in range(n)]
    s = [_copy(theta) for _ in range(n)]
    infos = []
    for k, ((w, pv), kind) in enumerate(zip(order, pulls(order, fresh), strict=True)):
        if kind == "fresh":  # a new process: proxy at zero, s the value it pulled
            m[w] = _zeros(theta)
        if kind != "own":  # every pull sets s to the pulled value
            s[w] = versions[pv]
        x0 = s[w] if pulled else versions[pv]
        dth = [-lr * gl for gl in np_grad(problem, x0, w, k, 0)]
        m[w] = [momentum * ml + dl for ml, dl in zip(m[w], dth, strict=True)]  # m <- mu m + dtheta
        d = [t - sl for t, sl in zip(theta, s[w], strict=True)]  # d <- theta - s
        den = [np.abs(dl + F(eps)) if inside else np.abs(dl) + F(eps) for dl in dth]
        pi = [
            np.clip((kappa * np.abs(ml) - np.abs(dd)) / de, 0, pi_max).astype(F)
            for ml, dd, de in zip(m[w], d, den, strict=True)
        ]
        upd = [p * dl for p, dl in zip(pi, dth, strict=True)]  # theta <- theta + pi dtheta
        infos.append(_gem_info(pi, dth, m[w], d, upd, kappa, pi_max))
        s[w] = theta  # s <- theta before this commit
        theta = _apply(theta, upd)
        versions.append(theta)
    return versions, infos


def _gem_info(pi, dth, m, d, upd, kappa, pi_max) -> dict:
    """GEM's diagnostics: the statistics of pi over the entries with dtheta != 0, the proxy
    energy of the paper's eq. 25."""
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


# --- staleness-weighted SGD: the GEM paper's "adaptive staleness" baseline (DynSGD), -------
# theta <- theta - lr * weight(tau) * g, tau the commit's staleness k - pv.


def ref_scaled(problem, order, fresh, n, *, lr, weight):
    del fresh, n
    theta, versions = _init(problem)
    infos = []
    for k, (w, pv) in enumerate(order):
        wt = F(weight(k - pv))
        g = np_grad(problem, versions[pv], w, k, 0)
        upd = [wt * (-lr * gl) for gl in g]
        theta = _apply(theta, upd)
        versions.append(theta)
        infos.append(dict(update_norm=_norm(upd), weight=float(wt)))
    return versions, infos


# --- n-softsync: Zhang, Gupta, Lian & Liu 2016 (IJCAI), Section 3: the server collects c ----
# gradients, each with its staleness sigma_l = i - t_l (i the server's timestamp, t_l that of
# the weights gradient l was computed on), and steps with lr0 / sigma_l per gradient (sigma
# floored at 1, gemsim's reading for a gradient of the current weights); heavy-ball momentum
# on the server's steps is gemsim's option.


def ref_softsync(problem, order, fresh, n, *, lr, c, momentum):
    del fresh, n
    theta, versions = _init(problem)
    v, total = _zeros(theta), _zeros(theta)
    stamps, stamp, count, infos = [0], 0, 0, []
    for k, (w, pv) in enumerate(order):
        wt = F(1.0 / max(stamp - stamps[pv], 1))  # t_l: the timestamp of the weights pulled
        g = np_grad(problem, versions[pv], w, k, 0)
        total = [s + wt * gl for s, gl in zip(total, g, strict=True)]
        count += 1
        norm = 0.0
        if count == c:
            v = [F(momentum) * vl - F(lr / c) * s for vl, s in zip(v, total, strict=True)]
            theta = _apply(theta, v)
            norm, total, count, stamp = _norm(v), _zeros(theta), 0, stamp + 1
        stamps.append(stamp)
        versions.append(theta)
        infos.append(dict(update_norm=norm, weight=float(wt)))
    return versions, infos


# --- DC-ASGD: Zheng et al. 2017 (ICML), Algorithm 3 (parameter server): on a gradient g_m ---
# from worker m, w <- w - eta (g_m + lambda g_m * g_m * (w - w_bak(m))), w_bak(m) the model
# the worker pulled. DC-ASGD-a: lambda_t = lambda_0 / sqrt(MeanSquare(t) + eps), MeanSquare
# = m MeanSquare + (1 - m) g^2 updated before use; kept per worker (gemsim's reading).


def ref_dcasgd(problem, order, fresh, n, *, lr, lam, adaptive, decay, lam0):
    theta, versions = _init(problem)
    ms = [_zeros(theta) for _ in range(n)]
    infos = []
    for k, (w, pv) in enumerate(order):
        if fresh[k]:
            ms[w] = _zeros(theta)
        x0 = versions[pv]  # w_bak(m)
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
        theta = _apply(theta, upd)
        versions.append(theta)
        infos.append(dict(update_norm=_norm(upd), weight=1.0))
    return versions, infos


# --- sync: synchronous momentum SGD (optax.sgd's form), one step per barrier round with the -
# mean of the round's gradients; no paper (the proxy GEM targets).


def ref_sync(problem, order, fresh, n, *, lr, momentum, round_end):
    del fresh, n
    theta, versions = _init(problem)
    v, round_grads, infos = _zeros(theta), [], []
    for k, (w, pv) in enumerate(order):
        round_grads.append(np_grad(problem, versions[pv], w, k, 0))
        norm = 0.0
        if round_end[k]:
            mean = [np.mean(np.stack(gs), axis=0) for gs in zip(*round_grads, strict=True)]
            v = [momentum * vl + ml for vl, ml in zip(v, mean, strict=True)]
            upd = [-lr * vl for vl in v]
            theta, norm, round_grads = _apply(theta, upd), _norm(upd), []
        versions.append(theta)
        infos.append(dict(update_norm=norm, weight=1.0))
    return versions, infos


# --- Delay-adaptive ASGD: Mishchenko, Bach, Even & Woodworth 2022 (NeurIPS), the -----------
# delay-adaptive stepsize: eta_k = gamma while tau_k <= tau_C, gamma tau_C / tau_k beyond
# (their min(gamma, 1 / (4 L tau_k)) with gamma = 1 / (4 L tau_C)); every gradient is applied,
# so tau_k counts iterations (commits).


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
        theta = _apply(theta, upd)
        versions.append(theta)
        infos.append(dict(update_norm=_norm(upd), weight=float(factor)))
    return versions, infos


# --- Ringmaster ASGD: Maranjyan, Tyurin & Richtárik 2025 (ICML), Algorithm 4 "Ringmaster ----
# ASGD (without calculation stops)". The server's k counts applied gradients; a gradient
# arrives from worker i computed at x^{k - delta}:
#   "if delta^k < R: x^{k+1} = x^k - gamma g; send x^{k+1} to worker i; k = k + 1"
#   "else: ignore the gradient; send x^k to worker i"
# so a worker holds the index of the point it received, and a discard does not move k.


def ref_ringmaster(problem, order, fresh, n, *, lr, threshold=None):
    limit = n if threshold is None else threshold
    theta, versions = _init(problem)
    k_applied, stamps, index, infos = 0, [0], [0] * n, []
    for k, ((w, pv), kind) in enumerate(zip(order, pulls(order, fresh), strict=True)):
        if kind != "own":  # a pull after commit pv - 1 received (x^{k}, k) of that moment
            index[w] = stamps[pv]
        delta = k_applied - index[w]
        norm = 0.0
        if delta < limit:
            upd = [F(-lr) * gl for gl in np_grad(problem, versions[pv], w, k, 0)]
            theta, norm, k_applied = _apply(theta, upd), _norm(upd), k_applied + 1
        index[w] = k_applied  # the worker receives x^{k+1} (applied) or x^k (ignored)
        stamps.append(k_applied)
        versions.append(theta)
        infos.append(dict(update_norm=norm, weight=float(delta < limit), delay=float(delta)))
    return versions, infos


# --- Rennala SGD: Tyurin & Richtárik 2023 (NeurIPS), Algorithm "Rennala SGD" (server):
#   for k = 0, 1, ...: g^k = 0; s = 1
#       while s <= S: receive (g, k') from a worker
#                     "if k' = k: g^k = g^k + (1/S) g; s = s + 1"
#                     "send (x^k, k) to the worker"        (before the step below)
#       x^{k+1} = x^k - gamma g^k


def ref_rennala(problem, order, fresh, n, *, lr, batch=None):
    size = n if batch is None else batch
    theta, versions = _init(problem)
    k_server, stamps, index, infos = 0, [0], [0] * n, []
    g_k, s = _zeros(theta), 1
    for k, ((w, pv), kind) in enumerate(zip(order, pulls(order, fresh), strict=True)):
        if kind != "own":
            index[w] = stamps[pv]
        delay = k_server - index[w]
        if delay == 0:  # k' = k
            g = np_grad(problem, versions[pv], w, k, 0)
            g_k = [a + F(1 / size) * gl for a, gl in zip(g_k, g, strict=True)]
            s += 1
        index[w] = k_server  # send (x^k, k): the index before any step
        norm = 0.0
        if s > size:  # the while loop ends: x^{k+1} = x^k - gamma g^k
            upd = [F(-lr) * a for a in g_k]
            theta, norm = _apply(theta, upd), _norm(upd)
            k_server, g_k, s = k_server + 1, _zeros(theta), 1
        stamps.append(k_server)
        versions.append(theta)
        infos.append(dict(update_norm=norm, weight=float(delay == 0), delay=float(delay)))
    return versions, infos


# --- Server momentum: Mitliagkas, Zhang, Hadjis & Ré 2016, Section 3 (implicit momentum ---
# 1 - 1/n): heavy-ball at the server, v <- mu_e v + g; theta <- theta - lr v, with
# mu_e = max(0, momentum - (1 - 1/n)) under the correction.


def ref_server_momentum(problem, order, fresh, n, *, lr, momentum, implicit_correction):
    del fresh
    mu = max(0.0, momentum - (1 - 1 / n)) if implicit_correction else momentum
    theta, versions = _init(problem)
    v, infos = _zeros(theta), []
    for k, (w, pv) in enumerate(order):
        g = np_grad(problem, versions[pv], w, k, 0)
        v = [F(mu) * vl + gl for vl, gl in zip(v, g, strict=True)]
        upd = [F(-lr) * vl for vl in v]
        theta = _apply(theta, upd)
        versions.append(theta)
        infos.append(dict(update_norm=_norm(upd), weight=1.0))
    return versions, infos


# --- Gap-Aware: Barkai, Hakimi & Schuster 2020 (ICLR), the penalty G = 1 + gap / C with -----
# C = lr (sqrt(r / (1 - gamma^t)) + eps) as the authors' group's GapAware class computes it:
#   update_running_avg(): r <- gamma r + (1 - gamma) u^2, u the momentum buffer (momentum > 0,
#     before the optimizer's step adds this gradient) or the gradient (momentum 0)
#   inc_step_count(); apply_on_stashed(): penalty = 1 + |theta - theta_stashed| / C; g /= penalty
#   torch.optim.SGD step: v <- mu v + g; theta <- theta - lr v


def ref_gap_aware(problem, order, fresh, n, *, lr, momentum=0.0, ema=0.999, eps=1e-8):
    del fresh, n
    theta, versions = _init(problem)
    r, v, infos = _zeros(theta), _zeros(theta), []
    for k, (w, pv) in enumerate(order):
        g = np_grad(problem, versions[pv], w, k, 0)
        u = v if momentum > 0 else g
        r = [F(ema) * rl + F(1 - ema) * ul * ul for rl, ul in zip(r, u, strict=True)]
        correction = F(1) - F(ema) ** (k + 1)  # t = k + 1 commits, this one included
        c = [F(lr) * (np.sqrt(rl / correction) + F(eps)) for rl in r]
        pen = [F(1) + np.abs(t - x0) / cl for t, x0, cl in zip(theta, versions[pv], c, strict=True)]
        v = [F(momentum) * vl + gl / p for vl, gl, p in zip(v, g, pen, strict=True)]
        upd = [F(-lr) * vl for vl in v]
        theta = _apply(theta, upd)
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

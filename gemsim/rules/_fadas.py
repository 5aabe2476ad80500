"""FADAS: buffered asynchronous aggregation with a server AMSGrad step and a delay-adaptive
learning rate.

Wang, Wang, Lu & Chen 2024, "FADAS: Towards Federated Adaptive Asynchronous Optimization"
(ICML), https://arxiv.org/abs/2407.18365, Algorithm 1 and its delay-adaptive learning rate.
Each client takes ``window`` (the paper's K) SGD steps at ``lr`` (eta_l) from the model it
received and sends its displacement; the server buffers ``buffer`` (M) of them, and when the
buffer is full takes one AMSGrad step on their mean, the pseudo-gradient::

    x <- x_pulled;  repeat K: x <- x - eta_l * g(x);   Delta_i = x - x_pulled
    buffer:  s <- s + Delta_i;  tau_max <- max(tau_max, tau_i)
    after M commits:
        Delta = s / M
        m <- beta1 m + (1 - beta1) Delta;   v <- beta2 v + (1 - beta2) Delta^2
        v_hat <- max(v_hat, v)
        eta_t = eta if tau_max <= tau_c else min(eta, 1 / tau_max)
        x <- x + eta_t * m / (sqrt(v_hat) + eps);   s <- 0;  tau_max <- 0;  t <- t + 1

with ``server_lr`` the paper's global learning rate eta and m, v, v_hat starting at zero. No
displacement is damped by its staleness (unlike FedBuff's ``1 / sqrt(1 + tau)``): the
delays act only through eta_t, and only where ``tau_c`` is given (None: the constant eta of
FADAS without delay adaptation). ``tau_i`` counts global rounds (buffer flushes) between the
client's download and the flush, as the paper's delays do (``gemsim.rules._timestamps``):
the buffer is flushed right after its last commit, so a commit's delay is its delay at the
flush, and tau_max is the largest delay among the round's M updates.

``authors_code=True`` follows the authors' public code (yujiaw98/FADAS: the ``fedams``
server optimizer and its delay-adaptive training script) where it differs from the
pseudocode: Adam's bias corrections, ``x <- x + eta_t / (1 - beta1^t) * m / (sqrt(v_hat)
/ sqrt(1 - beta2^t) + eps)`` at round t = 1, 2, ..., and ``eta_t = eta / tau_max`` beyond
the threshold (the pseudocode's ``1 / tau_max`` has no eta: with eta < 1 it shortens a step
only past a delay of 1 / eta rounds).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim.rules import _base, _timestamps
from gemsim.rules._timestamps import PulledAt
from gemsim.types import PyTree


class FadasState(NamedTuple):
    """Attributes:
    timestamp: global rounds (buffer flushes) so far, t - 1 during round t; int32, shape ().
    delta_sum: the buffer: the sum of the displacements since the last flush, like params.
    count: displacements in the buffer; int32, shape ().
    delay_max: the largest delay among them (tau_max so far); int32, shape ().
    m: AMSGrad's first moment, like params.
    v: its second moment, like params.
    v_hat: the running maximum of ``v``, like params.
    """

    timestamp: jax.Array
    delta_sum: PyTree
    count: jax.Array
    delay_max: jax.Array
    m: PyTree
    v: PyTree
    v_hat: PyTree


class FadasInfo(NamedTuple):
    """Diagnostics of one commit.

    Attributes:
      update_norm: L2 norm of the change to the central parameters (0 but at flushes).
      weight: 1: no displacement is damped by its staleness; float32, ().
      delay: the commit's delay in global rounds; float32, ().
      server_lr_t: eta_t, the global learning rate of the flush (0 but at flushes);
        float32, ().
    """

    update_norm: jax.Array
    weight: jax.Array
    delay: jax.Array
    server_lr_t: jax.Array


def _check_decay(name: str, value: object) -> float:
    return _base.check_real(name, value, low=0.0, high=1.0, high_open=True)


def fadas(
    lr: float,
    server_lr: float,
    window: int = 8,
    buffer: int = 5,
    beta1: float = 0.9,
    beta2: float = 0.99,
    eps: float = 1e-8,
    tau_c: int | None = None,
    *,
    authors_code: bool = False,
) -> _base.Rule:
    """Local SGD on the clients; the server takes an AMSGrad step on each full buffer.

    Args:
      lr: learning rate of the clients' local SGD steps (the paper's eta_l); > 0.
      server_lr: the global learning rate (eta); > 0.
      window: local steps per commit (K); integer >= 1.
      buffer: displacements per global round (M; the authors' code's default 5);
        integer >= 1.
      beta1: AMSGrad's first-moment decay; in [0, 1) (the authors' code: 0.9).
      beta2: its second-moment decay; in [0, 1) (the authors' code: 0.99).
      eps: added to ``sqrt(v_hat)``; > 0 (the authors' code: 1e-8).
      tau_c: the delay threshold in global rounds; integer >= 0. None: no delay adaptation
        (eta_t = eta); the authors' delay-adaptive runs use 1.
      authors_code: the authors' code's bias corrections and ``eta / tau_max`` (the module
        docstring); False: the pseudocode.

    Returns:
      The rule; server state :class:`FadasState`, worker state
      :class:`~gemsim.rules.PulledAt`, info :class:`FadasInfo`.

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("fadas: lr", lr)
    server_lr = _base.check_positive("fadas: server_lr", server_lr)
    window = _base.check_int("fadas: window", window, 1)
    buffer = _base.check_int("fadas: buffer", buffer, 1)
    beta1 = _check_decay("fadas: beta1", beta1)
    beta2 = _check_decay("fadas: beta2", beta2)
    eps = _base.check_positive("fadas: eps", eps)
    if tau_c is not None:
        tau_c = _base.check_int("fadas: tau_c", tau_c, 0)
    authors_code = _base.check_bool("fadas: authors_code", authors_code)

    def init(params, n_workers):
        zero, zeros = _timestamps.zero_stamp(), otu.tree_zeros_like(params)
        server = FadasState(zero, zeros, zero, zero, zeros, zeros, zeros)
        return _base.RuleState(server, _timestamps.init_pulled(n_workers))

    def init_acc(x0):
        del x0
        return ()  # the commit needs only where the local steps started and ended

    def local_step(x, acc, g, ws):
        return _base.tree_axpy(-lr, g, x), acc, ws

    def step_size(delay_max):
        """eta_t of the round whose largest delay is ``delay_max``."""
        if tau_c is None:
            return jnp.asarray(server_lr, jnp.float32)
        tau = jnp.maximum(_base.as_float(delay_max), 1.0)  # > tau_c >= 0, so >= 1 where used
        beyond = server_lr / tau if authors_code else jnp.minimum(server_lr, 1.0 / tau)
        return jnp.where(delay_max > tau_c, beyond, server_lr).astype(jnp.float32)

    def amsgrad(server, delta_sum):
        # 1 - beta in float32 whether beta is a constant or traced (runs executed together):
        # Python would round 1 - 0.9 from float64, a float32 subtraction rounds otherwise.
        b1, b2 = jnp.asarray(beta1, jnp.float32), jnp.asarray(beta2, jnp.float32)
        delta = jax.tree.map(lambda s: s / buffer, delta_sum)
        m = jax.tree.map(lambda m, d: b1 * m + (1.0 - b1) * d, server.m, delta)
        v = jax.tree.map(lambda v, d: b2 * v + (1.0 - b2) * (d * d), server.v, delta)
        v_hat = jax.tree.map(jnp.maximum, server.v_hat, v)
        return m, v, v_hat

    def direction(m, v_hat, t):
        if not authors_code:
            return jax.tree.map(lambda m, vh: m / (jnp.sqrt(vh) + eps), m, v_hat)
        t = _base.as_float(t)
        first = 1.0 - jnp.power(beta1, t)
        root = jnp.sqrt(1.0 - jnp.power(beta2, t))
        return jax.tree.map(lambda m, vh: (m / first) / (jnp.sqrt(vh) / root + eps), m, v_hat)

    def commit(theta, server, ws, work, ctx):
        tau = _timestamps.delay(server, ws)
        delta_sum = jax.tree.map(lambda s, x, x0: s + (x - x0), server.delta_sum, work.x, work.x0)
        count = server.count + 1
        delay_max = jnp.maximum(server.delay_max, tau)
        flush = count >= buffer
        m, v, v_hat = amsgrad(server, delta_sum)
        # Zero but at flushes: a run-time value, so that XLA does not fold a constant eta
        # into the division (a constant's runs alone would round otherwise than traced).
        eta_t = jnp.where(flush, step_size(delay_max), 0.0)
        update = otu.tree_scale(eta_t, direction(m, v_hat, server.timestamp + 1))
        # eta_t * direction rounded on its own, then added: see rules.stored.
        moved = jax.tree.map(jnp.add, theta, _base.stored(update, ctx.commit))
        zero = jnp.zeros((), jnp.int32)
        new_server = FadasState(
            timestamp=server.timestamp + flush.astype(jnp.int32),
            delta_sum=otu.tree_where(flush, otu.tree_zeros_like(delta_sum), delta_sum),
            count=jnp.where(flush, zero, count),
            delay_max=jnp.where(flush, zero, delay_max),
            m=otu.tree_where(flush, m, server.m),
            v=otu.tree_where(flush, v, server.v),
            v_hat=otu.tree_where(flush, v_hat, server.v_hat),
        )
        none = jnp.float32(0)
        info = FadasInfo(
            update_norm=jnp.where(flush, _base.update_norm(update), none),
            weight=_base.unit_weight(),
            delay=_base.as_float(tau),
            server_lr_t=eta_t,
        )
        new_theta = otu.tree_where(flush, moved, theta)
        return new_theta, new_server, PulledAt(new_server.timestamp), info

    return _base.Rule(
        name="fadas",
        init=init,
        commit=commit,
        window=window,
        init_acc=init_acc,
        local_step=local_step,
        on_pull=_timestamps.pull_timestamp,
    )

"""Server timestamps for rules whose delays count server updates rather than commits.

A rule that discards or buffers commits (``ringmaster``, ``rennala``, ``fedbuff``) moves the
central variable less often than workers commit, and its paper counts a gradient's delay in
those updates: a discarded or buffered commit does not age the gradients still in flight. The
server keeps ``timestamp`` (updates applied so far) in its state; each worker records the
timestamp of the parameters it received: at its own commit (it pulls right after) and, through
``on_pull``, at any other pull (a join, a restart, a barrier); ``rennala``'s worker whose
gradient completes a batch records the timestamp before that step, as its paper's server sends
it. The delay of a commit is ``server.timestamp - ws.pulled_at``. ``softsync`` keeps the same
bookkeeping.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from gemsim.rules import _base


class PulledAt(NamedTuple):
    """A worker's record of what it pulled.

    Attributes:
      pulled_at: the server timestamp of the parameters the worker pulled; int32, shape ().
    """

    pulled_at: jax.Array


class DelayInfo(NamedTuple):
    """Diagnostics of one commit for the timestamped rules.

    Attributes:
      update_norm: L2 norm of the change applied to the central parameters (0 at commits
        that are buffered or discarded), float32, ().
      weight: the weight given to the commit (0 when discarded), float32, ().
      delay: the delay the rule judged the commit by, float32, (): server updates (applied
        gradients, steps, buffer flushes) between the worker's pull and this commit.
    """

    update_norm: jax.Array
    weight: jax.Array
    delay: jax.Array


def zero_stamp() -> jax.Array:
    return jnp.zeros((), jnp.int32)


def init_pulled(n_workers: int) -> PulledAt:
    """Every worker pulled the initial parameters, timestamp 0."""
    return _base.init_workers(n_workers, lambda: PulledAt(zero_stamp()))


def delay(server, ws: PulledAt) -> jax.Array:
    """Server updates since the worker pulled; int32, shape ()."""
    return server.timestamp - ws.pulled_at


def pull_timestamp(ws: PulledAt, theta, server, fresh) -> PulledAt:
    """The ``on_pull`` of a timestamped rule: any pull records the server's timestamp."""
    del ws, theta, fresh
    return PulledAt(server.timestamp)

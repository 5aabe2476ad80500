"""Counting XLA compilations in a test (tests/ is on the path through tests/conftest.py)."""

import contextlib

import jax

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


@contextlib.contextmanager
def count_compiles():
    """Counts XLA backend compilations inside the block (``counter[0]``)."""
    counter = [0]

    def listener(event, duration, **kwargs):
        del duration, kwargs
        if event == BACKEND_COMPILE:
            counter[0] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield counter
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)

"""Rules with worker or server state on the process backend: a run with a late join and a
scheduled restart replays to the same bits, worker state, server timestamps and pull hooks
included (on Ray: test_real_ray.py, which has a Ray instance for its module)."""

from __future__ import annotations

import numpy as np
import pytest
from real_helpers import (
    STATEFUL_RULES,
    assert_join_and_restart_replay_bit_exactly,
    join_and_restart_scenario,
)

from gemsim.app import run

pytestmark = [pytest.mark.slow, pytest.mark.bitexact]


@pytest.mark.parametrize("name", list(STATEFUL_RULES))
def test_process_run_with_join_and_restart_replays_bit_exactly(name):
    scenario = join_and_restart_scenario(STATEFUL_RULES[name])
    assert_join_and_restart_replay_bit_exactly(run(scenario, backend="process"), scenario)


def test_workers_with_their_own_data_replay_bit_exactly():
    """A real worker reads its own shard (a Dirichlet partition of digits, two slow workers
    alone holding two classes): the replay of the recorded trace gives the same bits."""
    from gemsim.config import Scenario

    scenario = Scenario.model_validate(
        {
            "name": "real-partition",
            "seed": 2,
            "workers": {
                "count": 4,
                "compute": {"dist": "exponential", "mean": 0.02},
                "groups": [{"count": 2, "speed": 0.5, "data": {"classes": [0, 1]}}],
                "emulate_latency": True,
            },
            "budget": {"commits": 120},
            "problem": {
                "model": {"name": "mlp", "hidden": [16]},
                "dataset": "digits",
                "batch_size": 16,
                "partition": {"name": "dirichlet", "alpha": 0.5, "min_size": 20},
            },
            "optimizer": {"rule": "gem", "lr": 0.05},
        }
    )
    real = run(scenario, backend="process")
    assert real.status.value == "ok" and len(real.trace) == 120
    replay = run(scenario, trace=real.trace)
    assert real.params.keys() == replay.params.keys()
    for key, value in real.params.items():
        np.testing.assert_array_equal(replay.params[key], value, err_msg=key)
    # The final evaluation on each worker's own data, and what each worker holds, alike.
    final = replay.worker_evals[replay.worker_evals["commit"] == 119].reset_index(drop=True)
    assert real.worker_evals["commit"].tolist() == [119] * 4
    np.testing.assert_allclose(real.worker_evals["loss"], final["loss"], rtol=1e-6)
    np.testing.assert_array_equal(real.worker_summary, replay.worker_summary)

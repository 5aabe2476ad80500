"""gemsim: a discrete-event simulator of staleness in asynchronous SGD.

The Python API mirrors the command line::

    import gemsim
    scenario = gemsim.load_scenario("scenarios/quickstart.yaml", overrides=["workers.count=8"])
    trace = gemsim.simulate_timing(scenario)      # CommitTrace, no gradients
    result = gemsim.run(scenario)                 # RunResult: params, trace, metrics, manifest
    frame = gemsim.load_results("results/quickstart")   # one tidy DataFrame over a sweep
"""

__version__ = "0.1.0"

from gemsim.results import load_results as load_results
from gemsim.scenario import load_scenario as load_scenario
from gemsim.scenario import simulate_timing as simulate_timing
from gemsim.scenario.run import RunResult as RunResult
from gemsim.scenario.run import run as run
from gemsim.scenario.run import run_file as run_file

__all__ = [
    "RunResult",
    "__version__",
    "load_results",
    "load_scenario",
    "run",
    "run_file",
    "simulate_timing",
]

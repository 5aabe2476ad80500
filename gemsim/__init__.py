"""gemsim: a discrete-event simulator of staleness in asynchronous SGD.

The Python API mirrors the command line::

    import gemsim
    scenario = gemsim.load_scenario("scenarios/quickstart.yaml", overrides=["workers.count=8"])
    trace = gemsim.simulate_timing(scenario)      # CommitTrace, no gradients
    result = gemsim.run(scenario)                 # RunResult: params, trace, metrics, manifest
    frame = gemsim.load_results("results/quickstart")   # one tidy DataFrame over a sweep
    frame = gemsim.run_sweep("scenarios/quickstart.yaml", jobs=2)   # run a sweep, then load it

Every name is imported on first use (PEP 562), so ``import gemsim`` loads none of JAX,
pandas or matplotlib; each stage loads what it needs when it is called.
"""

from gemsim._lazy import lazy_exports

__version__ = "0.2.0"

__getattr__, __dir__, _names = lazy_exports(
    __name__,
    {
        "gemsim.config": ["load_scenario"],
        "gemsim.app": ["run", "run_file", "run_sweep", "simulate_timing"],
        "gemsim.results": ["RunResult", "load_results"],
    },
)
__all__ = ["__version__", *_names]

"""The notebooks run top to bottom on reduced settings, and are committed without outputs.

Each notebook is executed with nbclient in a temporary folder laid out like the repository
(``notebooks/`` as the working directory, ``scenarios/`` linked to the real one), so its
results land in the temporary ``results/`` and nothing is written into the checkout.
``GEMSIM_NOTEBOOK_QUICK=1`` in the kernel's environment makes each notebook's first
(parameters) cell shrink budgets, worker counts and the model.

Where the time goes: every run a notebook starts compiles its own engine programs (each sweep
point has its own rule or worker count), and compiling dominates: 02 starts 17 runs. A
kernel keeps about one core busy (XLA compiles on one thread), so the simulated notebooks run
two at a time, started when the module's first notebook test needs one, each once per
session whichever test processes run this module; 04 starts real worker processes and
validates their timing, so it runs alone.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
Config = pytest.importorskip("traitlets.config").Config  # installed with nbclient

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
ALL = sorted(path.name for path in NOTEBOOKS.glob("*.ipynb"))
# The longest cell (02's first figure, four runs) takes about a minute here with another
# kernel beside it; this allows a machine 3x slower and loaded, with margin.
CELL_TIMEOUT_S = 300
# A kernel answers its first request 2-5 s after launch here; nbclient's default of 60 s
# was once exceeded on a loaded CI machine, so the start gets the cells' margin too.
STARTUP_TIMEOUT_S = 300
# The simulated notebooks, the longest first.
POOLED = [
    "02_paper_figures.ipynb", "06_heterogeneous_data.ipynb", "01_quickstart.ipynb",
    "07_language_models.ipynb", "08_async_local_sgd.ipynb", "05_bring_your_own.ipynb",
    "03_latency_sweeps.ipynb",
]  # fmt: skip
AT_ONCE = 2


def _execute(name: str, root: Path):
    work = root / "notebooks"
    work.mkdir()
    (root / "scenarios").symlink_to(REPO / "scenarios", target_is_directory=True)
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    # Unix sockets in the notebook's own folder: over TCP, kernels started by several test
    # processes at once can be handed the same free port between choosing and binding it.
    sockets = Config({"KernelManager": {"transport": "ipc", "ip": str(root / "kernel")}})
    client = nbclient.NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        startup_timeout=STARTUP_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(work)}},
        config=sockets,
    )
    # The kernel gets its own environment: the notebooks run in threads of this process.
    client.execute(env={**os.environ, "GEMSIM_NOTEBOOK_QUICK": "1"})
    return notebook


def _errors(notebook) -> list[str]:
    return [
        f"{output.get('ename')}: {output.get('evalue')}"
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]


@pytest.fixture(scope="module")
def pooled(request, tmp_path_factory, computed_once):
    """The selected simulated notebooks, executing AT_ONCE at a time: name -> future of
    (executed notebook, root). Each is executed once per session: where pytest-xdist gives
    this module's tests to several processes, each starts the pool, and a notebook another
    process has taken is waited for and read back (`computed_once`)."""
    selected = {
        item.callspec.params["name"]
        for item in request.session.items
        if item.module is request.module and item.originalname == "test_notebook_runs"
    }

    def execute(name: str):
        root = tmp_path_factory.mktemp(Path(name).stem)
        return _execute(name, root), root

    pool = ThreadPoolExecutor(max_workers=AT_ONCE)
    started: dict[str, Future] = {}
    for name in POOLED:
        if name in selected:
            key = f"notebook-{Path(name).stem}"
            started[name] = pool.submit(computed_once, key, lambda name=name: execute(name))
    yield started
    pool.shutdown(wait=True)  # each cell is bounded by CELL_TIMEOUT_S


def _executed(name: str, pooled, tmp_path: Path):
    if name in pooled:
        return pooled[name].result()
    return _execute(name, tmp_path), tmp_path


@pytest.mark.parametrize("name", ALL)
def test_notebook_is_committed_without_outputs(name):
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code, f"{name} has no code cell"
    dirty = [i for i, cell in enumerate(code) if cell.outputs or cell.execution_count]
    assert not dirty, f"{name}: code cells {dirty} hold outputs; strip them before committing"


def _check_quick(root: Path) -> None:
    assert (root / "results" / "notebooks").is_dir()  # its runs landed in the temp tree


def _check_paper(root: Path) -> None:
    quick = root / "results" / "paper-quick"
    assert sorted(p.name for p in quick.iterdir()) == [
        "fig1", "fig2", "fig3", "fig4", "fig5", "fig6", "fig8",
    ]  # fmt: skip


def _check_sim_vs_real(root: Path) -> None:
    out = root / "results" / "notebooks" / "sim_vs_real"
    assert (out / "validation.json").is_file() and (out / "calibrated.yaml").is_file()


def _check_language_models(root: Path) -> None:
    out = root / "results" / "lm-quick" / "shakespeare"  # apart from the full runs' folder
    runs = [path for path in out.iterdir() if (path / "manifest.json").is_file()]
    assert len(runs) == 4  # 2 and 4 workers x GEM and DOWNPOUR


def _check_async_local(root: Path) -> None:
    quick = root / "results" / "lm-quick"  # apart from the full runs' folders
    for name in ("async_local", "async_local_toy"):  # each: sync and async x 2 outer optimizers
        runs = [path for path in (quick / name).iterdir() if (path / "manifest.json").is_file()]
        assert len(runs) == 4, name


CHECKS = {
    "01_quickstart.ipynb": _check_quick,
    "02_paper_figures.ipynb": _check_paper,
    "03_latency_sweeps.ipynb": _check_quick,
    # Starts real worker processes from the kernel and validates their run.
    "04_sim_vs_real.ipynb": _check_sim_vs_real,
    "05_bring_your_own.ipynb": _check_quick,
    "06_heterogeneous_data.ipynb": _check_quick,
    "07_language_models.ipynb": _check_language_models,
    "08_async_local_sgd.ipynb": _check_async_local,
}
SLOW = {"02_paper_figures.ipynb", "04_sim_vs_real.ipynb"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else []) for n in CHECKS]
)
def test_notebook_runs(name, pooled, tmp_path):
    notebook, root = _executed(name, pooled, tmp_path)
    assert not _errors(notebook)
    CHECKS[name](root)

"""The notebooks run top to bottom on reduced settings, and are committed without outputs.

Each notebook is executed with nbclient in a temporary folder laid out like the repository
(``notebooks/`` as the working directory, ``scenarios/`` linked to the real one), so its
results land in the temporary ``results/`` and nothing is written into the checkout.
``GEMSIM_NOTEBOOK_QUICK=1`` makes each notebook's first (parameters) cell shrink budgets,
worker counts and the model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
ALL = sorted(path.name for path in NOTEBOOKS.glob("*.ipynb"))
CELL_TIMEOUT_S = 300


def _execute(name: str, root: Path, monkeypatch: pytest.MonkeyPatch):
    work = root / "notebooks"
    work.mkdir()
    (root / "scenarios").symlink_to(REPO / "scenarios", target_is_directory=True)
    monkeypatch.setenv("GEMSIM_NOTEBOOK_QUICK", "1")
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(work)}},
    )
    client.execute()
    return notebook


def _errors(notebook) -> list[str]:
    return [
        f"{output.get('ename')}: {output.get('evalue')}"
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]


@pytest.mark.parametrize("name", ALL)
def test_notebook_is_committed_without_outputs(name):
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code, f"{name} has no code cell"
    dirty = [i for i, cell in enumerate(code) if cell.outputs or cell.execution_count]
    assert not dirty, f"{name}: code cells {dirty} hold outputs; strip them before committing"


@pytest.mark.parametrize(
    "name", ["01_quickstart.ipynb", "03_latency_sweeps.ipynb", "05_bring_your_own.ipynb"]
)
def test_notebook_runs(name, tmp_path, monkeypatch):
    notebook = _execute(name, tmp_path, monkeypatch)
    assert not _errors(notebook)
    assert (tmp_path / "results" / "notebooks").is_dir()  # its runs landed in the temp tree


@pytest.mark.slow
def test_paper_figures_notebook_runs(tmp_path, monkeypatch):
    notebook = _execute("02_paper_figures.ipynb", tmp_path, monkeypatch)
    assert not _errors(notebook)
    quick = tmp_path / "results" / "paper-quick"
    assert sorted(p.name for p in quick.iterdir()) == [
        "fig1", "fig2", "fig3", "fig4", "fig5", "fig6", "fig8",
    ]  # fmt: skip


@pytest.mark.slow
def test_sim_vs_real_notebook_runs(tmp_path, monkeypatch):
    """Starts real worker processes from the kernel (spawn) and validates their run."""
    notebook = _execute("04_sim_vs_real.ipynb", tmp_path, monkeypatch)
    assert not _errors(notebook)
    out = tmp_path / "results" / "notebooks" / "sim_vs_real"
    assert (out / "validation.json").is_file() and (out / "calibrated.yaml").is_file()

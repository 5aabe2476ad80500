"""`engine: {many_runs}` through `gemsim run`: runs of a sweep that share every shape execute
together, and each run's folder holds what it would hold had it run alone (same run id,
trace and parameters), after `--resume` too; a rule that cannot take its floats traced, or a
run whose preparation fails, is handled run by run."""

import warnings

import jax
import pytest
import yaml

import gemsim
from gemsim import config
from gemsim.app.execute import _many_runs
from gemsim.app.sweep import _many_runs_plan
from gemsim.results import read_manifest

SWEEP = {
    "name": "together",
    "seed": 3,
    "workers": {"count": 4, "compute": {"dist": "exponential", "mean": 0.1}},
    "budget": {"commits": 120},
    "problem": {"model": {"name": "quadratic", "dim": 8, "condition": 10.0, "noise": 0.1}},
    "optimizer": {"rule": "gem", "lr": 0.05, "momentum": 0.9},
    "eval": {"every": 40},
    "sweep": {"optimizer.lr": [0.02, 0.05]},
    "repeats": 3,
}
HASHES = ("trace_sha256", "params_sha256", "status", "n_commits", "final")


def write(tmp_path, doc, name="s.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def manifests(out, rows):
    return {r.run_id: read_manifest(out / r.run_id) for r in rows}


@pytest.fixture(scope="module")
def one_by_one(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("off")
    path = write(tmp, SWEEP)
    out, rows = gemsim.run_file(
        path, out=tmp / "off", quiet=True, overrides=["engine.many_runs=off"]
    )
    return manifests(out, rows)


@pytest.mark.bitexact
def test_runs_together_write_the_folders_of_one_by_one(tmp_path, one_by_one):
    out, rows = gemsim.run_file(write(tmp_path, SWEEP), out=tmp_path / "auto", quiet=True)
    together = manifests(out, rows)
    assert together.keys() == one_by_one.keys()  # many_runs is not part of a run's identity
    for run_id, m in together.items():
        for key in HASHES:
            assert m[key] == one_by_one[run_id][key], key
        assert m["executor"] == "ManyRunsExecutor"
        placed = m["provenance"]["placement"]["many_runs"]
        assert placed["runs"] == 6 and placed["lifted"] == ["lr"]
        assert one_by_one[run_id]["executor"] == "SequentialExecutor"


def test_resume_runs_what_is_left_at_the_unit_size_of_the_sweep(tmp_path, one_by_one):
    path = write(tmp_path, SWEEP)
    out, rows = gemsim.run_file(path, out=tmp_path / "r", quiet=True)
    gone = [rows[1].run_id, rows[4].run_id]
    for run_id in gone:
        for f in (out / run_id).iterdir():
            f.unlink()
        (out / run_id).rmdir()
    _, again = gemsim.run_file(path, out=out, quiet=True, resume=True)
    assert sorted(r.run_id for r in again if not r.skipped) == sorted(gone)
    for run_id in gone:
        m = read_manifest(out / run_id)
        assert m["provenance"]["placement"]["many_runs"]["runs"] == 6  # padded: two left of six
        for key in HASHES:
            assert m[key] == one_by_one[run_id][key], key


def test_a_float_that_shapes_a_rule_puts_runs_of_equal_values_together(tmp_path):
    """DOWNPOUR's local momentum decides whether a worker keeps a velocity: it cannot be
    traced, so only runs of equal values execute together, with the results of one by one."""
    doc = {
        **SWEEP,
        "optimizer": {"rule": "downpour", "lr": 0.05, "window": 2},
        "sweep": {"optimizer.local_momentum": [0.3, 0.6]},
        "repeats": 2,
    }
    path = write(tmp_path, doc)
    out_a, rows_a = gemsim.run_file(path, out=tmp_path / "a", quiet=True)
    out_b, rows_b = gemsim.run_file(
        path, out=tmp_path / "b", quiet=True, overrides=["engine.many_runs=off"]
    )
    a, b = manifests(out_a, rows_a), manifests(out_b, rows_b)
    for run_id, m in a.items():
        assert "not traced" in m["provenance"]["placement"]["many_runs_note"]
        assert m["provenance"]["placement"]["many_runs"]["lifted"] == []
        for key in HASHES:
            assert m[key] == b[run_id][key], key


def test_a_run_that_fails_to_prepare_fails_alone(tmp_path, monkeypatch):
    prepare = _many_runs._prepare

    def broken(who, hyper, lifted, traces):
        if who.expanded.repeat == 1:
            raise OSError("disk gone")
        return prepare(who, hyper, lifted, traces)

    monkeypatch.setattr(_many_runs, "_prepare", broken)
    # Three repeats of one rule in one program (auto runs so short a group one by one).
    doc = {**SWEEP, "sweep": {}, "engine": {"many_runs": 3}}
    path = write(tmp_path, doc)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gemsim.run_sweep(path, out=tmp_path / "o", quiet=True)
    assert any("1 of 3 runs failed" in str(w.message) for w in caught)
    _, rows = gemsim.run_file(path, out=tmp_path / "o", quiet=True, resume=True)
    statuses = [read_manifest(tmp_path / "o" / r.run_id)["status"] for r in rows]
    assert statuses == ["ok", "failed", "ok"] and "disk gone" in rows[1].error
    monkeypatch.undo()
    _, rows = gemsim.run_file(path, out=tmp_path / "o", quiet=True, resume=True)
    assert [r.skipped for r in rows] == [True, False, True]  # the failed run, and it alone
    assert [r.status for r in rows] == ["ok", "ok", "ok"]


@pytest.mark.parametrize(
    ("problem", "expected"),
    [
        ({"model": {"name": "quadratic", "dim": 100}}, 64),
        ({"model": "logistic", "dataset": "mnist-5k", "batch_size": 64}, 64),
        ({"model": "cnn", "dataset": "mnist-5k", "batch_size": 64}, 1),
    ],
)
def test_auto_puts_small_models_together_and_not_the_cnn_on_a_cpu(problem, expected):
    """64 repeats of 2,000 commits (128,000 in all): past `AUTO_MATMUL_COMMITS`."""
    doc = {**SWEEP, "problem": problem, "sweep": {}, "budget": {"commits": 2000}}
    scenario = config.parse_scenario(doc, "test")
    size, why = _many_runs_plan.unit_size(scenario, 64)
    assert size == expected, why
    assert "auto" in why


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU's rule")
def test_auto_runs_short_repeats_of_one_rule_one_by_one_and_a_sweep_together():
    """Logistic regression, batch 64: 3 repeats of 120 commits compile one program one by one,
    and a larger one together that would not pay; a learning-rate sweep compiles one per rate
    one by one, so it stays together."""
    problem = {"model": "logistic", "dataset": "mnist-5k", "batch_size": 64}
    scenario = config.parse_scenario({**SWEEP, "problem": problem, "sweep": {}}, "test")
    size, why = _many_runs_plan.unit_size(scenario, 3)
    assert size == 1 and "one rule and 360 commits" in why
    runs = config.expand(config.parse_scenario({**SWEEP, "problem": problem}, "test"), "test")
    group = [r.scenario for r in runs]
    assert _many_runs_plan.unit_size(group[0], len(group), group)[0] == len(group)


def test_auto_runs_a_rule_that_reads_every_clients_row_one_by_one():
    """FedCompass's sum over every client's row runs only at a group's close (a `lax.cond`);
    executed together, both branches would run at every commit. A sweep of its `server_lr`
    (which `auto` would otherwise put together) runs one by one; `many_runs: 2` still may."""
    doc = {
        "name": "compass",
        "seed": 0,
        "workers": {"compute": {"dist": "lognormal", "median": 0.1, "sigma": 0.3}},
        "clients": {"population": 50, "concurrency": 4},
        "budget": {"commits": 40},
        "problem": {"model": {"name": "quadratic", "dim": 8}},
        "optimizer": {"rule": "fedcompass", "lr": 0.05, "window": 4},
        "sweep": {"optimizer.server_lr": [0.9, 9.0]},
    }
    runs = config.expand(config.parse_scenario(doc, "test"), "test")
    group = [r.scenario for r in runs]
    size, why = _many_runs_plan.unit_size(group[0], len(group), group)
    assert size == 1 and "reads every client's row" in why
    forced = config.parse_scenario({**doc, "engine": {"many_runs": 2}}, "test")
    assert _many_runs_plan.unit_size(forced, 2)[0] == 2


def test_unit_sizes_are_as_equal_as_they_can_be():
    scenario = config.parse_scenario({**SWEEP, "engine": {"many_runs": 4}}, "test")
    assert _many_runs_plan.unit_size(scenario, 10)[0] == 4  # three units: 4, 4 and 2 padded
    assert _many_runs_plan.unit_size(scenario, 9)[0] == 3
    off = config.parse_scenario({**SWEEP, "engine": {"many_runs": "off"}}, "test")
    assert not _many_runs_plan._may_join(off)


def test_the_0_2_names_still_read_with_a_warning():
    """`batch_runs` and `executor: batched` (0.2) are `many_runs` and `wavefront`, for one
    release, and the run's identity is the same."""
    new = config.parse_scenario({**SWEEP, "engine": {"many_runs": 4}}, "test")
    with pytest.warns(DeprecationWarning, match="engine.many_runs"):
        old = config.parse_scenario({**SWEEP, "engine": {"batch_runs": 4}}, "test")
    assert old == new and config.config_hash(old) == config.config_hash(new)
    with pytest.warns(DeprecationWarning, match="wavefront"):
        old = config.parse_scenario({**SWEEP, "engine": {"executor": "batched"}}, "test")
    assert old.engine.executor == "wavefront"
    with pytest.warns(DeprecationWarning, match="parse_scenario"):
        assert config.validate({**SWEEP}, "test") == config.parse_scenario({**SWEEP}, "test")


def test_units_in_job_processes_give_the_runs_of_one_by_one(tmp_path, one_by_one):
    """`--jobs 2`: units of three (the sweep's six runs), one per job process."""
    doc = {**SWEEP, "engine": {"many_runs": 3}}
    out, rows = gemsim.run_file(write(tmp_path, doc), out=tmp_path / "j", quiet=True, jobs=2)
    got = manifests(out, rows)
    assert got.keys() == one_by_one.keys()
    pids = set()
    for run_id, m in got.items():
        for key in HASHES:
            assert m[key] == one_by_one[run_id][key], key
        assert m["provenance"]["placement"]["many_runs"]["runs"] == 3
        pids.add(m["provenance"]["placement"]["pid"])
    assert len(pids) == 2

"""Text scenarios that cannot run are refused before any run starts: exit code 2, the field,
file or byte offset named, no traceback and no results folder; and a good one writes its
corpus's digest and vocabulary into the manifest."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gemsim.cli import app
from gemsim.results import read_manifest

runner = CliRunner()
MODEL = {"name": "transformer", "layers": 1, "d_model": 16, "heads": 2, "context": 8}


def scenario(folder: Path, problem: dict, **more) -> Path:
    doc = {
        "name": "text",
        "seed": 0,
        "workers": {"count": 2, "compute": {"dist": "constant", "value": 1.0}},
        "budget": {"commits": 4},
        "problem": {"batch_size": 2, **problem},
        "optimizer": {"rule": "downpour", "lr": 0.1},
        "eval": {"every": 4, "subset": 4},
        **more,
    }
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def refused(path: Path, tmp_path: Path, *needles: str) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in result.output, result.output
    assert not out.exists()


def text_file(tmp_path: Path, content: bytes, name: str = "corpus.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


@pytest.mark.parametrize(
    "model,dataset,needles",
    [
        ({**MODEL, "heads": 3}, "shakespeare", ["problem.model", "heads", "3", "d_model 16"]),
        ({**MODEL, "d_model": 18, "heads": 2, "positions": "rotary"}, "shakespeare",
         ["problem.model", "positions", "even head width"]),
        (MODEL, "digits", ["transformer", "needs a text `dataset`"]),
        ("mlp", "shakespeare", ["dataset 'shakespeare' is text", "needs model 'transformer'"]),
        (MODEL, {"name": "shakespeare", "vocab": "words"}, ["problem.dataset", "vocab"]),
    ],
)  # fmt: skip
def test_a_bad_model_or_pairing_is_refused_by_field(tmp_path, model, dataset, needles):
    path = scenario(tmp_path, {"model": model, "dataset": dataset})
    refused(path, tmp_path, *needles)


def test_a_text_that_cannot_serve_is_refused_by_file(tmp_path):
    missing = {"name": "text", "path": "nowhere.txt"}
    refused(scenario(tmp_path, {"model": MODEL, "dataset": missing}), tmp_path, "nowhere.txt")
    bad = text_file(tmp_path, b"abcabcabc " * 10 + b"\xc3\x28 rest")
    dataset = {"name": "text", "path": bad.name}
    refused(
        scenario(tmp_path, {"model": MODEL, "dataset": dataset}),
        tmp_path,
        "corpus.txt",
        "not UTF-8",
        "byte offset 100",
        "vocab: bytes",
    )
    short = text_file(tmp_path, b"ab" * 6, "short.txt")
    dataset = {"name": "text", "path": short.name}
    refused(scenario(tmp_path, {"model": MODEL, "dataset": dataset}), tmp_path, "context + 1 = 9")
    unknown = text_file(tmp_path, b"abab abab " * 9 + b"zzzzzzzzzz", "unknown.txt")
    dataset = {"name": "text", "path": unknown.name}
    refused(
        scenario(tmp_path, {"model": MODEL, "dataset": dataset}),
        tmp_path,
        "unknown.txt",
        "characters the training text lacks",
        "'z'",
    )


def test_a_population_of_more_clients_than_roles_is_refused(tmp_path):
    clients = {"population": 7, "concurrency": 2}
    problem = {
        "model": MODEL,
        "dataset": {"name": "shakespeare", "min_chars": 30000},
        "partition": "groups",
    }
    path = scenario(tmp_path, problem, clients=clients)
    data = yaml.safe_load(path.read_text())
    del data["workers"]["count"]
    path.write_text(yaml.safe_dump(data))
    refused(path, tmp_path, "problem.partition", "groups", "7")


def test_a_good_text_run_records_its_corpus(tmp_path):
    content = ("It is a truth universally acknowledged.\n" * 20).encode()
    corpus = text_file(tmp_path, content)
    path = scenario(tmp_path, {"model": MODEL, "dataset": {"name": "text", "path": corpus.name}})
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    (run,) = [p for p in out.iterdir() if (p / "manifest.json").is_file()]
    manifest = read_manifest(run)
    note = manifest["provenance"]["corpus"]
    assert note["vocab"] == "".join(sorted(set(content.decode())))
    assert note["vocab_size"] == len(note["vocab"]) and note["source"] == str(corpus)
    assert note["train_chars"] + note["test_chars"] == len(content)
    assert manifest["config"]["problem"]["dataset"]["sha256"] == note["sha256"]  # one digest
    assert manifest["final"]["test_loss"] > 0

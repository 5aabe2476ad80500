"""Fashion-MNIST and CIFAR-10 loaders on small files the tests write, their sizes from headers
alone, the restricted unpickler, and `gemsim download` against local mirrors."""

from __future__ import annotations

import gzip
import hashlib
import io
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gemsim.cli import app
from gemsim.problems import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    DATASET_SOURCES,
    FASHION_MEAN,
    FASHION_STD,
    Cifar10,
    DataSource,
    FashionMnist,
    data_shape,
    download_dataset,
    load_dataset,
    write_cifar_batch,
    write_idx,
)
from gemsim.problems.data import _download as download_module
from gemsim.problems.data._data_files import FASHION_MNIST_SYSTEM_DIR, MNIST_IDX_NAMES

RNG = np.random.default_rng(0)


def _idx_set(folder: Path, n_train: int = 12, n_test: int = 5, gz: bool = True) -> list:
    folder.mkdir(parents=True, exist_ok=True)
    arrays = [
        RNG.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        RNG.integers(0, 10, n_train, dtype=np.uint8),
        RNG.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        RNG.integers(0, 10, n_test, dtype=np.uint8),
    ]
    for name, array in zip(MNIST_IDX_NAMES, arrays, strict=True):
        write_idx(folder / (name + (".gz" if gz else "")), array)
    return arrays


def test_fashion_mnist_from_data_dir_and_from_gemsim_data(tmp_path, monkeypatch):
    arrays = _idx_set(tmp_path / "fm")
    data = load_dataset(FashionMnist(str(tmp_path / "fm")), seed=0)
    expected = (arrays[0].astype(np.float32) / 255 - FASHION_MEAN) / FASHION_STD
    np.testing.assert_allclose(data.x_train, expected, rtol=1e-6)
    np.testing.assert_array_equal(data.y_test, arrays[3])
    assert data.y_train.dtype == np.int32 and data.n_classes == 10
    shape = data_shape(FashionMnist(str(tmp_path / "fm")))
    assert (shape.n_train, shape.n_test, shape.input_shape) == (12, 5, (28, 28))
    # With no data_dir: $GEMSIM_DATA/fashion-mnist comes before the system folder.
    _idx_set(tmp_path / "root" / "fashion-mnist", n_train=7, gz=False)
    monkeypatch.setenv("GEMSIM_DATA", str(tmp_path / "root"))
    assert data_shape(FashionMnist()).n_train == 7


def test_fashion_mnist_missing_files_say_how_to_get_them(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="gemsim download fashion-mnist.*apt-get"):
        data_shape(FashionMnist(str(tmp_path / "empty")))


def _cifar_set(folder: Path, per_batch: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Five training batches and a test batch of random images, and batches.meta."""
    folder.mkdir(parents=True)
    images = RNG.integers(0, 256, (6 * per_batch, 32, 32, 3), dtype=np.uint8)
    labels = RNG.integers(0, 10, 6 * per_batch)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for i, name in enumerate(names):
        part = slice(i * per_batch, (i + 1) * per_batch)
        write_cifar_batch(folder / name, images[part], labels[part])
    meta = {b"num_cases_per_batch": per_batch, b"label_names": [b"x"] * 10, b"num_vis": 3072}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    return images, labels


def test_cifar10_layout_normalisation_and_sizes(tmp_path):
    images, labels = _cifar_set(tmp_path / "cifar-10-batches-py")
    spec = Cifar10(str(tmp_path))  # the parent of cifar-10-batches-py works too
    data = load_dataset(spec, seed=0)
    assert data.x_train.shape == (20, 32, 32, 3) and data.x_test.shape == (4, 32, 32, 3)
    mean, std = np.asarray(CIFAR10_MEAN, np.float32), np.asarray(CIFAR10_STD, np.float32)
    np.testing.assert_allclose(data.x_train, (images[:20] / 255 - mean) / std, rtol=1e-5)
    np.testing.assert_array_equal(data.y_test, labels[20:])
    # The file stores channel planes: pixel (r, c) of channel ch at ch * 1024 + r * 32 + c.
    raw = pickle.loads((tmp_path / "cifar-10-batches-py" / "data_batch_1").read_bytes())
    assert raw[b"data"][1, 2 * 1024 + 5 * 32 + 7] == images[1, 5, 7, 2]
    shape = data_shape(spec)
    assert (shape.n_train, shape.n_test, shape.input_shape, shape.n_classes) == (
        20, 4, (32, 32, 3), 10,
    )  # fmt: skip


def test_cifar10_batches_must_agree_with_the_meta(tmp_path):
    folder = tmp_path / "c"
    _cifar_set(folder)
    write_cifar_batch(folder / "data_batch_3", np.zeros((3, 32, 32, 3), np.uint8), [0, 1, 2])
    with pytest.raises(ValueError, match="data_batch_3: expected 4 images"):
        load_dataset(Cifar10(str(folder)), seed=0)
    (folder / "test_batch").unlink()
    with pytest.raises(FileNotFoundError, match="lacks test_batch.*gemsim download cifar10"):
        data_shape(Cifar10(str(folder)))


class _Exploit:
    def __reduce__(self):
        return (print, ("pwned",))


def test_cifar10_unpickler_refuses_code(tmp_path):
    folder = tmp_path / "c"
    _cifar_set(folder)
    (folder / "batches.meta").write_bytes(pickle.dumps(_Exploit(), protocol=2))
    with pytest.raises(ValueError, match="refusing to load .*print"):
        data_shape(Cifar10(str(folder)))


def _gz(data: bytes, level: int) -> bytes:
    return gzip.compress(data, compresslevel=level, mtime=0)


def test_download_verifies_content_whatever_the_gzip_wrapping(tmp_path):
    content = {"a.gz": b"first file", "b.gz": b"second file"}
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for name, data in content.items():
        (mirror / name).write_bytes(_gz(data, 1))
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in content.items()}
    source = DataSource(digests, (mirror.as_uri() + "/",), content_digest=True)
    dest = download_dataset("x", tmp_path / "out", source=source)
    assert gzip.decompress((dest / "b.gz").read_bytes()) == b"second file"
    (dest / "a.gz").write_bytes(_gz(b"first file", 9))  # recompressed: still the same data
    download_dataset("x", dest, source=source, fetch=lambda url: pytest.fail(f"fetched {url}"))
    (mirror / "a.gz").write_bytes(_gz(b"tampered", 1))
    with pytest.raises(RuntimeError, match="content sha256 .* does not match"):
        download_dataset("x", tmp_path / "out2", source=source)


def _tar(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_download_unpacks_cifar_and_refuses_unsafe_archives(tmp_path):
    _cifar_set(tmp_path / "src" / "cifar-10-batches-py")
    folder = tmp_path / "src" / "cifar-10-batches-py"
    archive = _tar({f"cifar-10-batches-py/{p.name}": p.read_bytes() for p in folder.iterdir()})
    source = DataSource({"c.tgz": hashlib.sha256(archive).hexdigest()}, ("m/",), unpack=True)
    dest = download_dataset("cifar10", tmp_path / "out", source=source, fetch=lambda url: archive)
    assert data_shape(Cifar10(str(dest))).n_train == 20
    assert not list(dest.glob(".*"))  # no temporary folder left
    evil = _tar({"../evil": b"x"})
    source = DataSource({"c.tgz": hashlib.sha256(evil).hexdigest()}, ("m/",), unpack=True)
    with pytest.raises(RuntimeError, match="cannot unpack the archive safely"):
        download_dataset("cifar10", tmp_path / "out3", source=source, fetch=lambda url: evil)
    assert not (tmp_path / "evil").exists()


def test_cli_download_without_network_exits_2(tmp_path, monkeypatch):
    def offline(url):
        raise OSError("no network")

    monkeypatch.setattr(download_module, "_urlopen", offline)
    result = CliRunner().invoke(app, ["download", "fashion-mnist", str(tmp_path / "fm")])
    assert result.exit_code == 2
    assert (
        "no network" in result.output and "apt-get install dataset-fashion-mnist" in result.output
    )
    bad = CliRunner().invoke(app, ["download", "imagenet", str(tmp_path)])
    assert bad.exit_code == 2 and "imagenet" in bad.output


@pytest.mark.skipif(
    not Path(FASHION_MNIST_SYSTEM_DIR).is_dir(),
    reason="Debian's dataset-fashion-mnist is not installed",
)
def test_published_fashion_mnist_digests_match_the_debian_copy(tmp_path):
    mirror = Path(FASHION_MNIST_SYSTEM_DIR).as_uri() + "/"
    source = DATASET_SOURCES["fashion-mnist"]._replace(mirrors=(mirror,))
    dest = download_dataset("fashion-mnist", tmp_path, source=source)
    assert sorted(p.name for p in dest.iterdir()) == sorted(source.files)

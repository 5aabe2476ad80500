"""download_mnist's verification logic, against local file:// mirrors and fake fetchers."""

from __future__ import annotations

import hashlib

import pytest

from gemsim.problems import MNIST_FILES, MNIST_MIRRORS, download_dataset, download_mnist


def _mirror(root, files: dict[str, bytes]) -> str:
    root.mkdir()
    for name, content in files.items():
        (root / name).write_bytes(content)
    return root.as_uri() + "/"


def _digests(files: dict[str, bytes]) -> dict[str, str]:
    return {name: hashlib.sha256(content).hexdigest() for name, content in files.items()}


def test_constants_are_complete():
    assert set(MNIST_FILES) == {
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
    }
    assert all(len(d) == 64 and int(d, 16) >= 0 for d in MNIST_FILES.values())
    assert all(m.startswith("https://") and m.endswith("/") for m in MNIST_MIRRORS)


def test_downloads_and_verifies_from_a_file_url(tmp_path):
    files = {"a.gz": b"first", "b.gz": b"second"}
    mirror = _mirror(tmp_path / "mirror", files)
    dest = download_mnist(tmp_path / "out", mirrors=(mirror,), files=_digests(files))
    assert {p.name for p in dest.iterdir()} == set(files)
    assert (dest / "b.gz").read_bytes() == b"second"


def test_bad_digest_everywhere_raises_and_writes_nothing(tmp_path):
    files = {"a.gz": b"tampered"}
    mirror = _mirror(tmp_path / "mirror", files)
    expected = {"a.gz": hashlib.sha256(b"original").hexdigest()}
    with pytest.raises(RuntimeError, match=r"a\.gz.*sha256 [0-9a-f]{64} does not match") as info:
        download_mnist(tmp_path / "out", mirrors=(mirror,), files=expected)
    assert expected["a.gz"] in str(info.value)
    assert not (tmp_path / "out").exists()  # not even the folder


def test_falls_back_to_the_next_mirror(tmp_path):
    good = {"a.gz": b"payload"}
    bad_mirror = _mirror(tmp_path / "bad", {"a.gz": b"corrupted"})
    missing_mirror = (tmp_path / "missing").as_uri() + "/"
    good_mirror = _mirror(tmp_path / "good", good)
    dest = download_mnist(
        tmp_path / "out", mirrors=(missing_mirror, bad_mirror, good_mirror), files=_digests(good)
    )
    assert (dest / "a.gz").read_bytes() == b"payload"


def test_keeps_verified_files_and_replaces_wrong_ones(tmp_path):
    files = {"a.gz": b"A", "b.gz": b"B"}
    fetched = []

    def fetch(url: str) -> bytes:
        fetched.append(url)
        return files[url.rsplit("/", 1)[1]]

    out = tmp_path / "out"
    out.mkdir()
    (out / "a.gz").write_bytes(b"A")  # already good
    (out / "b.gz").write_bytes(b"half")  # an earlier broken download
    download_mnist(out, mirrors=("https://example.invalid/",), files=_digests(files), fetch=fetch)
    assert fetched == ["https://example.invalid/b.gz"]
    assert (out / "b.gz").read_bytes() == b"B"


def test_network_errors_are_reported_per_mirror(tmp_path):
    def offline(url: str) -> bytes:
        raise OSError(f"offline: {url}")

    with pytest.raises(RuntimeError, match=r"(?s)https://one/a\.gz: offline.*https://two/a\.gz"):
        download_mnist(
            tmp_path,
            mirrors=("https://one/", "https://two/"),
            files={"a.gz": "0" * 64},
            fetch=offline,
        )


def test_an_offline_download_leaves_no_folder_and_the_first_verified_file_makes_it(tmp_path):
    def offline(url: str) -> bytes:
        raise OSError(f"offline: {url}")

    dest = tmp_path / "data" / "mnist"
    with pytest.raises(RuntimeError, match="could not download"):
        download_dataset("mnist", dest, fetch=offline)
    assert not (tmp_path / "data").exists()  # `gemsim download` offline leaves nothing

    files = {"a.gz": b"A", "b.gz": b"B"}

    def half_online(url: str) -> bytes:
        name = url.rsplit("/", 1)[1]
        if name == "b.gz":
            raise OSError("connection reset")
        return files[name]

    with pytest.raises(RuntimeError, match=r"b\.gz"):
        download_mnist(dest, mirrors=("https://m/",), files=_digests(files), fetch=half_online)
    assert [p.name for p in dest.iterdir()] == ["a.gz"]  # verified, whole, no temporary file
    assert (dest / "a.gz").read_bytes() == b"A"

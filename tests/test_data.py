"""real.training.data: IDX and CIFAR readers, lookup, checksummed download, synthetic sets, shard()."""
from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import pickle
import socket
import struct
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from real.training import data
from real.training.data import DataError, load_dataset, read_idx, shard

FASHION = Path("/usr/share/datasets/fashion-mnist")
IDX_STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
             "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
N_TRAIN, N_TEST = 12, 5


# --- helpers that write small dataset files -----------------------------------

def idx_bytes(array: np.ndarray) -> bytes:
    """IDX encoding of a uint8 array: 0, 0, type 0x08, ndim, big-endian sizes, data."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def fake_mnist_arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"train-images-idx3-ubyte": rng.integers(0, 256, (N_TRAIN, 28, 28), dtype=np.uint8),
            "train-labels-idx1-ubyte": rng.integers(0, 10, N_TRAIN, dtype=np.uint8),
            "t10k-images-idx3-ubyte": rng.integers(0, 256, (N_TEST, 28, 28), dtype=np.uint8),
            "t10k-labels-idx1-ubyte": rng.integers(0, 10, N_TEST, dtype=np.uint8)}


def write_fake_mnist(folder: Path, gz: bool) -> dict[str, np.ndarray]:
    folder.mkdir(parents=True, exist_ok=True)
    arrays = fake_mnist_arrays()
    for stem, array in arrays.items():
        raw = idx_bytes(array)
        if gz:
            (folder / f"{stem}.gz").write_bytes(gzip.compress(raw))
        else:
            (folder / stem).write_bytes(raw)
    return arrays


def write_fake_cifar(folder: Path, per_batch: int = 3) -> dict[str, tuple[np.ndarray, list[int]]]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    batches = {}
    for name in ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4",
                 "data_batch_5", "test_batch"):
        pixels = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, per_batch)]
        with open(folder / name, "wb") as f:
            pickle.dump({b"data": pixels, b"labels": labels, b"batch_label": name.encode()}, f,
                        protocol=2)
        batches[name] = (pixels, labels)
    return batches


def md5_of(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


@pytest.fixture
def http_folder(tmp_path):
    """A folder served by http.server on 127.0.0.1 (port 0); yields (folder, base URL)."""
    served = tmp_path / "served"
    served.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(served)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join()


# --- IDX ---------------------------------------------------------------------

@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_round_trips(tmp_path, gz):
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / ("a.gz" if gz else "a")
    path.write_bytes(gzip.compress(idx_bytes(array)) if gz else idx_bytes(array))
    np.testing.assert_array_equal(read_idx(path), array)


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("layout", ["flat", "named", "torchvision"])
def test_load_mnist_from_data_dir(tmp_path, gz, layout):
    folder = {"flat": tmp_path, "named": tmp_path / "mnist",
              "torchvision": tmp_path / "MNIST" / "raw"}[layout]
    arrays = write_fake_mnist(folder, gz)
    ds = load_dataset("mnist", tmp_path, cache_dir=tmp_path / "cache")
    assert ds.source == str(folder)
    assert ds.train_x.shape == (N_TRAIN, 1, 28, 28) and ds.test_x.shape == (N_TEST, 1, 28, 28)
    assert ds.train_x.dtype == np.float32 and ds.train_y.dtype == np.int64
    assert ds.input_shape == (1, 28, 28) and ds.num_classes == 10
    expected = (arrays["train-images-idx3-ubyte"] / 255 - 0.1307) / 0.3081
    np.testing.assert_allclose(ds.train_x[:, 0], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ds.test_y, arrays["t10k-labels-idx1-ubyte"])


@pytest.mark.parametrize("gz", [False, True])
def test_truncated_idx_is_refused_naming_the_file(tmp_path, gz):
    write_fake_mnist(tmp_path, gz=False)
    path = tmp_path / "train-images-idx3-ubyte"
    raw = path.read_bytes()[:-100]
    path.unlink()
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(raw))
    else:
        path.write_bytes(raw)
    with pytest.raises(DataError, match="truncated") as info:
        load_dataset("mnist", tmp_path, cache_dir=tmp_path / "cache")
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_cut_gzip_stream_is_refused(tmp_path):
    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(idx_bytes(np.zeros((50, 28, 28), np.uint8)))[:-40])
    with pytest.raises(DataError, match="gzip"):
        read_idx(path)


@pytest.mark.parametrize("header", [b"\x01\x00\x08\x03", b"\x00\x00\x42\x03", b"\x00\x00"])
def test_bad_magic_number_is_refused(tmp_path, header):
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(header + bytes(100))
    with pytest.raises(DataError, match="magic number") as info:
        read_idx(path)
    assert str(path) in str(info.value)


def test_images_and_labels_that_do_not_match_are_refused(tmp_path):
    write_fake_mnist(tmp_path, gz=False)
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros(N_TEST + 1, np.uint8)))
    with pytest.raises(DataError, match="do not belong together"):
        load_dataset("mnist", tmp_path, cache_dir=tmp_path / "cache")


# --- CIFAR-10 ----------------------------------------------------------------

@pytest.mark.parametrize("subfolder", ["", "cifar-10-batches-py", "cifar10/cifar-10-batches-py"])
def test_cifar_batches_are_read(tmp_path, subfolder):
    batches = write_fake_cifar(tmp_path / subfolder)
    ds = load_dataset("cifar10", tmp_path, cache_dir=tmp_path / "cache")
    assert ds.train_x.shape == (15, 3, 32, 32) and ds.test_x.shape == (3, 3, 32, 32)
    assert ds.input_shape == (3, 32, 32)
    pixels, labels = batches["data_batch_2"]
    # A row is 1024 red, 1024 green, 1024 blue values: channel-first (3, 32, 32).
    green = (pixels[0, 1024:2048].reshape(32, 32) / 255 - 0.4822) / 0.2435
    np.testing.assert_allclose(ds.train_x[3, 1], green, rtol=1e-5, atol=1e-5)
    assert ds.train_y[3:6].tolist() == labels
    assert ds.test_y.tolist() == batches["test_batch"][1]


def test_corrupt_cifar_batch_is_refused(tmp_path):
    write_fake_cifar(tmp_path)
    path = tmp_path / "data_batch_3"
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(DataError, match="data_batch_3"):
        load_dataset("cifar10", tmp_path, cache_dir=tmp_path / "cache")


def test_cifar_pickle_naming_other_code_is_not_run(tmp_path):
    write_fake_cifar(tmp_path)
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    (tmp_path / "test_batch").write_bytes(pickle.dumps(Payload()))
    with pytest.raises(DataError, match="test_batch"):
        load_dataset("cifar10", tmp_path, cache_dir=tmp_path / "cache")
    assert not marker.exists()


# --- lookup and messages ------------------------------------------------------

def test_missing_dataset_message_names_where_it_looked(tmp_path):
    data_dir, cache = tmp_path / "here", tmp_path / "cache"
    data_dir.mkdir()
    with pytest.raises(DataError) as info:
        load_dataset("mnist", data_dir, cache_dir=cache)
    message = str(info.value)
    assert message.startswith("mnist not found; looked in:")
    assert str(data_dir) in message and str(cache) in message
    assert "--download" in message and "--data-dir" in message and "\n" not in message


def test_missing_fashion_mnist_suggests_the_debian_package(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "DEBIAN_FASHION_MNIST_DIR", tmp_path / "debian")
    with pytest.raises(DataError, match="apt-get install dataset-fashion-mnist") as info:
        load_dataset("fashion-mnist", cache_dir=tmp_path / "cache")
    assert str(tmp_path / "debian") in str(info.value)


def test_data_dir_that_does_not_exist_is_refused(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_dataset("mnist", tmp_path / "nope", cache_dir=tmp_path)


def test_cache_dir_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PSGD_DATA_CACHE", str(tmp_path / "env-cache"))
    write_fake_mnist(tmp_path / "env-cache" / "mnist", gz=True)
    assert load_dataset("mnist").source == str(tmp_path / "env-cache" / "mnist")


def test_unknown_dataset_lists_the_valid_ones():
    with pytest.raises(DataError, match="synthetic-cifar10"):
        load_dataset("imagenet")


@pytest.mark.skipif(not FASHION.is_dir(), reason="apt-get install dataset-fashion-mnist")
def test_real_fashion_mnist_from_debian(tmp_path):
    ds = load_dataset("fashion-mnist", cache_dir=tmp_path / "empty-cache")
    assert ds.source == str(FASHION)
    assert (len(ds.train_x), len(ds.train_y), len(ds.test_x), len(ds.test_y)) == \
        (60000, 60000, 10000, 10000)
    assert ds.input_shape == (1, 28, 28)
    assert np.bincount(ds.train_y).tolist() == [6000] * 10
    # Normalised with the training set's own mean and std.
    assert abs(float(ds.train_x.mean())) < 0.01 and abs(float(ds.train_x.std()) - 1) < 0.01


# --- subsets -----------------------------------------------------------------

def test_subsets_are_deterministic_per_seed(tmp_path):
    write_fake_mnist(tmp_path, gz=True)
    load = functools.partial(load_dataset, "mnist", tmp_path, cache_dir=tmp_path / "cache",
                             train_size=4, test_size=2)
    a, b, c = load(seed=3), load(seed=3), load(seed=4)
    assert a.train_x.shape == (4, 1, 28, 28) and a.test_x.shape == (2, 1, 28, 28)
    np.testing.assert_array_equal(a.train_x, b.train_x)
    assert not np.array_equal(a.train_x, c.train_x)
    # The test subset does not depend on the training subset.
    np.testing.assert_array_equal(load(seed=3, train_size=None).test_x, a.test_x)


@pytest.mark.parametrize("size", [0, -1, 2.5, True, "3"])
def test_bad_subset_sizes_are_refused(size):
    with pytest.raises(DataError, match="train_size"):
        load_dataset("synthetic", train_size=size)


def test_subset_larger_than_the_dataset_is_refused(tmp_path):
    write_fake_mnist(tmp_path, gz=False)
    with pytest.raises(DataError, match="fewer than the 13"):
        load_dataset("mnist", tmp_path, cache_dir=tmp_path / "cache", train_size=N_TRAIN + 1)


# --- download ----------------------------------------------------------------

def serve_fake_mnist(served: Path) -> dict[str, str]:
    """Gzipped fake MNIST files in ``served``; returns their md5 table."""
    arrays = fake_mnist_arrays()
    checksums = {}
    for stem, array in arrays.items():
        path = served / f"{stem}.gz"
        path.write_bytes(gzip.compress(idx_bytes(array)))
        checksums[path.name] = md5_of(path)
    return checksums


def test_download_from_a_mirror_checks_md5_and_fills_the_cache(tmp_path, http_folder):
    served, url = http_folder
    checksums = serve_fake_mnist(served)
    cache = tmp_path / "cache"
    ds = load_dataset("mnist", download=True, cache_dir=cache, checksums=checksums,
                      mirrors=["http://127.0.0.1:9/unused-first-mirror/", url])
    assert ds.source == str(cache / "mnist") and ds.train_x.shape == (N_TRAIN, 1, 28, 28)
    assert sorted(p.name for p in files_under(cache)) == sorted(checksums)
    # The next run finds the cached files without a network.
    assert load_dataset("mnist", cache_dir=cache).source == str(cache / "mnist")


def test_wrong_checksum_is_refused_and_nothing_is_kept(tmp_path, http_folder):
    served, url = http_folder
    checksums = serve_fake_mnist(served)
    checksums["train-images-idx3-ubyte.gz"] = "0" * 32
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match="md5") as info:
        load_dataset("mnist", download=True, cache_dir=cache, mirrors=[url], checksums=checksums)
    assert "nothing was kept" in str(info.value) and "\n" not in str(info.value)
    assert files_under(cache) == []


def test_cifar_download_extracts_the_verified_archive(tmp_path, http_folder):
    served, url = http_folder
    write_fake_cifar(tmp_path / "src" / "cifar-10-batches-py")
    archive = served / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "src" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    cache = tmp_path / "cache"
    ds = load_dataset("cifar10", download=True, cache_dir=cache, mirrors=[url],
                      checksums={archive.name: md5_of(archive)})
    assert ds.source == str(cache / "cifar10" / "cifar-10-batches-py")
    assert ds.train_x.shape == (15, 3, 32, 32)
    assert not (cache / "cifar10" / archive.name).exists()


def test_offline_download_says_so_in_one_line(tmp_path):
    with socket.socket() as sock:  # a port that nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match="offline") as info:
        load_dataset("mnist", download=True, cache_dir=cache, mirrors=[f"http://127.0.0.1:{port}/"])
    assert "\n" not in str(info.value)
    assert files_under(cache) == []


# --- synthetic ---------------------------------------------------------------

@pytest.mark.parametrize("name, shape", [("synthetic", (1, 28, 28)),
                                         ("synthetic-cifar10", (3, 32, 32))])
def test_synthetic_is_deterministic_per_seed(name, shape):
    a = load_dataset(name, train_size=64, test_size=16, seed=5)
    b = load_dataset(name, train_size=64, test_size=16, seed=5)
    c = load_dataset(name, train_size=64, test_size=16, seed=6)
    assert a.input_shape == shape and a.source == "synthetic"
    assert a.train_x.dtype == np.float32 and a.train_y.dtype == np.int64
    np.testing.assert_array_equal(a.train_x, b.train_x)
    np.testing.assert_array_equal(a.test_y, b.test_y)
    assert not np.array_equal(a.train_x, c.train_x)


def test_synthetic_default_sizes_and_prefix_property():
    full = load_dataset("synthetic")
    assert (len(full.train_y), len(full.test_y)) == (60000, 10000)
    small = load_dataset("synthetic", train_size=100, test_size=10)
    np.testing.assert_array_equal(small.train_x, full.train_x[:100])
    np.testing.assert_array_equal(small.test_y, full.test_y[:10])


def test_synthetic_labels_are_learnable():
    """A nearest-class-mean classifier fitted on the training set beats chance by far."""
    ds = load_dataset("synthetic", train_size=2000, test_size=500, seed=0)
    train = ds.train_x.reshape(len(ds.train_x), -1)
    means = np.stack([train[ds.train_y == k].mean(axis=0) for k in range(10)])
    test = ds.test_x.reshape(len(ds.test_x), -1)
    predicted = np.argmin(((test[:, None, :] - means[None]) ** 2).sum(axis=2), axis=1)
    assert (predicted == ds.test_y).mean() > 0.9
    assert np.bincount(ds.train_y, minlength=10).min() > 150  # every class present


# --- shard -------------------------------------------------------------------

@given(n=st.integers(0, 10_000), world_size=st.integers(1, 64))
def test_shards_cover_every_sample_once(n, world_size):
    parts = [shard(n, rank, world_size) for rank in range(world_size)]
    assert parts[0].start == 0 and parts[-1].stop == n
    for left, right in zip(parts, parts[1:]):
        assert left.stop == right.start
    sizes = [p.stop - p.start for p in parts]
    assert max(sizes) - min(sizes) <= 1


def test_shard_matches_the_sheets_formula():
    assert shard(10, 1, 3) == slice(3, 6)
    assert list(range(10)[shard(10, 2, 3)]) == [6, 7, 8, 9]


@pytest.mark.parametrize("rank, world_size", [(-1, 2), (2, 2), (0, 0)])
def test_shard_refuses_bad_ranks(rank, world_size):
    with pytest.raises(ValueError):
        shard(10, rank, world_size)

"""Datasets for the real runs: MNIST, Fashion-MNIST, CIFAR-10 and two synthetic stand-ins.

The exercise sheets train on MNIST (seeds 000, 001, 003), Fashion-MNIST (the
same IDX format, packaged by Debian as ``dataset-fashion-mnist``) and CIFAR-10
(seed 002).  Timing runs need only the right shapes, so ``synthetic``
(1x28x28) and ``synthetic-cifar10`` (3x32x32) are generated from a seed: noisy
copies of ten fixed random patterns, labelled by pattern, so a short run's
loss still falls and a broken training loop shows.

Where the files are looked for, in order (the first folder that holds all of
a dataset's files wins):

1. ``data_dir`` (``--data-dir``), which must exist if given;
2. the cache: ``cache_dir``, else ``$PSGD_DATA_CACHE``, else ``~/.cache/psgd-sim``;
3. for Fashion-MNIST, Debian's ``/usr/share/datasets/fashion-mnist``.

In each, the files may lie in the folder itself, in ``<folder>/<name>/``, in
torchvision's ``<folder>/MNIST/raw/`` (``FashionMNIST/raw``) or, for CIFAR-10,
in the extracted ``cifar-10-batches-py/``.  With ``download=True`` missing
files are fetched into ``<cache>/<name>/`` from the datasets' usual mirrors;
each file is checked against its known md5 before it is given its real name,
so a cache never holds a half-downloaded or wrong file.

Every file is checked before it is used (IDX magic number, dimensions, length
against the header; CIFAR batch layout), and anything wrong raises
``DataError`` whose message is one line: what is wrong and what to do.

This module only reads and returns arrays; sharding a dataset among ranks is
``shard()``, and printing progress is left to the caller except for the
download bar, which shows only when stderr is a terminal.

Imports: numpy, real.training.download.
"""
from __future__ import annotations

import codecs
import gzip
import math
import os
import pickle
import shutil
import struct
import tarfile
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, Sequence

import numpy as np

from real.training.download import FetchError, fetch, join_url

DATASETS = ("mnist", "fashion-mnist", "cifar10", "synthetic", "synthetic-cifar10")
NUM_CLASSES = 10
CACHE_ENV = "PSGD_DATA_CACHE"
DEBIAN_FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")

_IDX_STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
              "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
_CIFAR_BATCHES = ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4",
                  "data_batch_5", "test_batch")
_CIFAR_FOLDER = "cifar-10-batches-py"
_CIFAR_TAR = "cifar-10-python.tar.gz"
_CIFAR_IMAGE_SHAPE = (3, 32, 32)

# IDX type codes (third byte of the magic number) and the numpy dtypes they
# stand for; multi-byte values are big-endian.
_IDX_DTYPES = MappingProxyType({0x08: np.dtype(">u1"), 0x09: np.dtype(">i1"),
                                0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
                                0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")})


@dataclass(frozen=True)
class _Source:
    """How one real dataset is stored, fetched and normalised."""

    name: str
    files: tuple[str, ...]             # file names (without .gz) that must all be present
    mirrors: tuple[str, ...]           # base URLs, tried in order
    checksums: Mapping[str, str]       # downloaded file name -> md5
    mean: tuple[float, ...]            # per channel, of the training images scaled to [0, 1]
    std: tuple[float, ...]
    install_hint: str                  # one clause telling how to get it without --download
    torchvision_folder: str = ""       # torchvision's <root>/<folder>/raw layout


# Mean and std are the published figures for the full training sets (checked
# against the files); fixed constants keep every rank, subset and shard on the
# same scale, where statistics recomputed from a subset would differ per run.
_SOURCES = MappingProxyType({
    "mnist": _Source(
        name="mnist", files=_IDX_STEMS,
        mirrors=("https://ossci-datasets.s3.amazonaws.com/mnist/",
                 "https://storage.googleapis.com/cvdf-datasets/mnist/"),
        checksums=MappingProxyType({
            "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
            "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
            "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
            "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c"}),
        mean=(0.1307,), std=(0.3081,),
        install_hint="copy its four IDX files into a folder",
        torchvision_folder="MNIST"),
    "fashion-mnist": _Source(
        name="fashion-mnist", files=_IDX_STEMS,
        mirrors=("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",),
        checksums=MappingProxyType({
            "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
            "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
            "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
            "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310"}),
        mean=(0.2860,), std=(0.3530,),
        install_hint="install it: apt-get install dataset-fashion-mnist",
        torchvision_folder="FashionMNIST"),
    "cifar10": _Source(
        name="cifar10", files=_CIFAR_BATCHES,
        mirrors=("https://www.cs.toronto.edu/~kriz/",),
        checksums=MappingProxyType({_CIFAR_TAR: "c58f30108f718f92721af3b95e74349a"}),
        mean=(0.4914, 0.4822, 0.4465), std=(0.2470, 0.2435, 0.2616),
        install_hint=f"extract {_CIFAR_TAR} into a folder"),
})


class DataError(Exception):
    """A dataset that cannot be found, fetched or read; str() is one line saying what to do."""


@dataclass(frozen=True, eq=False)
class Dataset:
    """Normalised float32 images (N, C, H, W) and int64 labels, as read from ``source``."""

    name: str
    train_x: np.ndarray = field(repr=False)
    train_y: np.ndarray = field(repr=False)
    test_x: np.ndarray = field(repr=False)
    test_y: np.ndarray = field(repr=False)
    source: str  # the folder the files were read from, or "synthetic"

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return tuple(int(d) for d in self.train_x.shape[1:])

    @property
    def num_classes(self) -> int:
        return NUM_CLASSES

    @property
    def train_size(self) -> int:
        return int(self.train_x.shape[0])

    @property
    def test_size(self) -> int:
        return int(self.test_x.shape[0])


def shard(n_samples: int, rank: int, world_size: int) -> slice:
    """The contiguous 1/P of ``range(n_samples)`` that ``rank`` trains on.

    start = rank*N//P, stop = (rank+1)*N//P: shards are disjoint, cover every
    sample, and differ in size by at most one.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
    if n_samples < 0:
        raise ValueError(f"n_samples must be >= 0, got {n_samples}")
    return slice(rank * n_samples // world_size, (rank + 1) * n_samples // world_size)


def default_cache_dir() -> Path:
    """``$PSGD_DATA_CACHE`` if set, else ``~/.cache/psgd-sim``."""
    from_env = os.environ.get(CACHE_ENV)
    return Path(from_env).expanduser() if from_env else Path.home() / ".cache" / "psgd-sim"


def load_dataset(name: str, data_dir: str | os.PathLike | None = None, *,
                 download: bool = False, cache_dir: str | os.PathLike | None = None,
                 mirrors: Sequence[str] | None = None,
                 checksums: Mapping[str, str] | None = None,
                 train_size: int | None = None, test_size: int | None = None,
                 seed: int = 0) -> Dataset:
    """Find (or download), check and normalise dataset ``name``.

    ``train_size`` / ``test_size`` keep the first n samples after a permutation
    seeded with ``seed`` (for quick runs); ``seed`` also seeds the synthetic
    sets.  ``mirrors`` (base URLs) and ``checksums`` (file name -> md5) replace
    the built-in ones, so a test can serve files from a local server.
    """
    if name not in DATASETS:
        raise DataError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}")
    for label, size in (("train_size", train_size), ("test_size", test_size)):
        _check_size(label, size)
    if name.startswith("synthetic"):
        return synthetic_dataset(name, train_size=train_size, test_size=test_size, seed=seed)

    source = _SOURCES[name]
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    roots = _search_roots(source, data_dir, cache)
    folder = _find_folder(source, roots)
    if folder is None:
        if not download:
            raise DataError(_not_found_message(source, roots))
        folder = _download(source, cache / name, mirrors or source.mirrors,
                           {**source.checksums, **(checksums or {})})
    train_u8, train_y, test_u8, test_y = _read_folder(source, folder)
    # Separate streams: the test subset must not depend on whether train_size is given.
    train_rng, test_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    train_u8, train_y = _subset(train_u8, train_y, train_size, train_rng, f"{name} train")
    test_u8, test_y = _subset(test_u8, test_y, test_size, test_rng, f"{name} test")
    return Dataset(name=name, source=str(folder),
                   train_x=_normalise(train_u8, source.mean, source.std), train_y=train_y,
                   test_x=_normalise(test_u8, source.mean, source.std), test_y=test_y)


# --- synthetic ---------------------------------------------------------------

_SYNTHETIC_SHAPES = MappingProxyType({"synthetic": ((1, 28, 28), 60000, 10000),
                                      "synthetic-cifar10": ((3, 32, 32), 50000, 10000)})
_SYNTHETIC_SIGNAL = 0.3   # class pattern amplitude against unit pixel noise
_SYNTHETIC_BLOCK_PX = 4   # patterns are constant on 4x4 blocks, so pooling CNNs can see them


def sample_shape(name: str) -> tuple[tuple[int, int, int], int, int]:
    """(channels, height, width) of one sample, and the full training and test set sizes."""
    if name in _SYNTHETIC_SHAPES:
        return _SYNTHETIC_SHAPES[name]
    if name == "cifar10":
        return _CIFAR_IMAGE_SHAPE, 50000, 10000
    return (1, 28, 28), 60000, 10000


def synthetic_dataset(name: str = "synthetic", *, train_size: int | None = None,
                      test_size: int | None = None, seed: int = 0) -> Dataset:
    """Noisy images of ten fixed random patterns; the label says which pattern.

    x = (s * pattern[y] + noise) / sqrt(1 + s^2), noise ~ N(0, 1) per pixel, so
    pixels have about unit variance like the normalised real sets.  A random
    linear function of white noise would be learnable by the linear model but
    not by the pooling CNNs; blocky patterns are learnable by every model
    here within one epoch, yet not at once (s = 0.3).  The patterns, the
    training set and the test set come from independent streams of ``seed``,
    so the test set does not change with ``train_size`` and a smaller
    training set is a prefix of a larger one.
    """
    shape, default_train, default_test = _SYNTHETIC_SHAPES[name]
    channels, height, width = shape
    pattern_seed, train_seed, test_seed = np.random.SeedSequence(seed).spawn(3)
    coarse = np.random.default_rng(pattern_seed).standard_normal(
        (NUM_CLASSES, channels, -(-height // _SYNTHETIC_BLOCK_PX), -(-width // _SYNTHETIC_BLOCK_PX)),
        dtype=np.float32)
    block = np.ones((1, 1, _SYNTHETIC_BLOCK_PX, _SYNTHETIC_BLOCK_PX), dtype=np.float32)
    patterns = np.kron(coarse, block)[:, :, :height, :width]
    train_x, train_y = _synthetic_split(train_seed, train_size or default_train, patterns)
    test_x, test_y = _synthetic_split(test_seed, test_size or default_test, patterns)
    return Dataset(name=name, train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y,
                   source="synthetic")


def _synthetic_split(seed: np.random.SeedSequence, n_samples: int,
                     patterns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    label_seed, noise_seed = seed.spawn(2)
    labels = np.random.default_rng(label_seed).integers(0, NUM_CLASSES, n_samples)
    x = np.random.default_rng(noise_seed).standard_normal((n_samples, *patterns.shape[1:]),
                                                          dtype=np.float32)
    signal = np.float32(_SYNTHETIC_SIGNAL)
    # In chunks: patterns[labels] for all samples at once would be a second
    # full-size temporary (600 MB for the CIFAR shape) and ~8x slower.
    for start in range(0, n_samples, 1024):
        x[start:start + 1024] += signal * patterns[labels[start:start + 1024]]
    x *= np.float32(1 / math.sqrt(1 + _SYNTHETIC_SIGNAL ** 2))
    return x, labels.astype(np.int64)


# --- finding the files -------------------------------------------------------

def _search_roots(source: _Source, data_dir, cache: Path) -> list[Path]:
    roots = []
    if data_dir is not None:
        data_dir = Path(data_dir).expanduser()
        if not data_dir.is_dir():
            raise DataError(f"--data-dir {data_dir} does not exist; pass a folder that holds "
                            f"the {source.name} files, or leave it out to use the cache {cache}")
        roots.append(data_dir)
    roots.append(cache)
    if source.name == "fashion-mnist":
        roots.append(DEBIAN_FASHION_MNIST_DIR)
    return roots


def _candidate_folders(source: _Source, root: Path) -> list[Path]:
    folders = [root, root / source.name]
    if source.torchvision_folder:
        folders.append(root / source.torchvision_folder / "raw")
    if source.name == "cifar10":
        folders += [root / _CIFAR_FOLDER, root / source.name / _CIFAR_FOLDER]
    return folders


def _find_folder(source: _Source, roots: Sequence[Path]) -> Path | None:
    for root in roots:
        for folder in _candidate_folders(source, root):
            if all(_find_file(folder, stem) is not None for stem in source.files):
                return folder
    return None


def _find_file(folder: Path, stem: str) -> Path | None:
    """``folder/stem`` or ``folder/stem.gz``, whichever exists (plain first)."""
    for path in (folder / stem, folder / f"{stem}.gz"):
        if path.is_file():
            return path
    return None


def _not_found_message(source: _Source, roots: Sequence[Path]) -> str:
    looked = ", ".join(str(root) for root in roots)
    subfolders = ", ".join(str(folder.relative_to(roots[0]))
                           for folder in _candidate_folders(source, roots[0])[1:])
    return (f"{source.name} not found; looked in: {looked} (also in their {subfolders} subfolders). "
            f"Download it with --download, or {source.install_hint}, or pass --data-dir DIR")


# --- reading -----------------------------------------------------------------

def _read_folder(source: _Source, folder: Path):
    if source.name == "cifar10":
        return read_cifar10(folder)
    files = [_find_file(folder, stem) for stem in source.files]
    train_x, train_y, test_x, test_y = (read_idx(path) for path in files)
    _check_images_labels(files[0], train_x, files[1], train_y, image_hw=(28, 28))
    _check_images_labels(files[2], test_x, files[3], test_y, image_hw=(28, 28))
    # IDX images have no channel axis; the models expect (N, 1, 28, 28).
    return train_x[:, None], train_y.astype(np.int64), test_x[:, None], test_y.astype(np.int64)


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """One IDX file (gzipped or not) as a read-only array; refuses anything malformed.

    Header: two zero bytes, a type code, the number of dimensions d, then d
    big-endian uint32 sizes; the data that follows must be exactly as long as
    the sizes say, so a truncated download is caught here, not mid-training.
    """
    path = Path(path)
    raw = _read_maybe_gzip(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES or raw[3] == 0:
        raise DataError(f"{path} is not an IDX file (bad magic number {raw[:4].hex() or 'none'}); "
                        "delete it and download it again")
    dtype, ndim = _IDX_DTYPES[raw[2]], raw[3]
    header_bytes = 4 + 4 * ndim
    if len(raw) < header_bytes:
        raise DataError(f"{path} is truncated inside its IDX header; delete it and download it again")
    dims = struct.unpack(f">{ndim}I", raw[4:header_bytes])
    expected_bytes = header_bytes + math.prod(dims) * dtype.itemsize
    if len(raw) != expected_bytes:
        raise DataError(f"{path} is truncated or corrupt: its header {dims} needs {expected_bytes} "
                        f"bytes, it has {len(raw)}; delete it and download it again")
    return np.frombuffer(raw, dtype=dtype, offset=header_bytes).reshape(dims)


def _read_maybe_gzip(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
        # Look at the content, not the suffix: some mirrors serve gzip without .gz.
        return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise DataError(f"{path} is a truncated or corrupt gzip file ({error}); "
                        "delete it and download it again") from None
    except OSError as error:
        raise DataError(f"cannot read {path}: {error.strerror or error}") from None


def _check_images_labels(images_path: Path, images: np.ndarray, labels_path: Path,
                         labels: np.ndarray, image_hw: tuple[int, int]) -> None:
    if images.ndim != 3 or images.shape[1:] != image_hw or images.dtype != np.uint8:
        raise DataError(f"{images_path} holds {images.dtype} images of shape {images.shape[1:]}, "
                        f"expected uint8 {image_hw}; is it the right file?")
    if labels.ndim != 1 or len(labels) != len(images):
        raise DataError(f"{labels_path} holds {labels.shape} labels for {len(images)} images in "
                        f"{images_path.name}; the two files do not belong together")
    _check_labels(labels_path, labels)


def _check_labels(path: Path, labels: np.ndarray) -> None:
    if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise DataError(f"{path} has labels outside 0..{NUM_CLASSES - 1}; is it the right file?")


def read_cifar10(folder: str | os.PathLike):
    """CIFAR-10's python batches in ``folder``: (train_x, train_y, test_x, test_y), uint8 images."""
    folder = Path(folder)
    train = [read_cifar_batch(folder / batch) for batch in _CIFAR_BATCHES[:-1]]
    test_x, test_y = read_cifar_batch(folder / _CIFAR_BATCHES[-1])
    return (np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train]),
            test_x, test_y)


def read_cifar_batch(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 batch: a pickled dict with b'data' (N, 3072) uint8 and b'labels' (N ints)."""
    path = Path(path)
    try:
        with open(path, "rb") as file:
            batch = _BatchUnpickler(file, encoding="bytes").load()
    except OSError as error:
        raise DataError(f"cannot read {path}: {error.strerror or error}") from None
    except Exception as error:  # a corrupt pickle can fail in many ways, all mean the same
        raise DataError(f"{path} is not a readable CIFAR-10 batch ({type(error).__name__}: "
                        f"{error}); delete it and extract {_CIFAR_TAR} again") from None
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise DataError(f"{path} is not a CIFAR-10 batch (no b'data'/b'labels'); "
                        f"extract {_CIFAR_TAR} again")
    data, labels = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"])
    n_features = math.prod(_CIFAR_IMAGE_SHAPE)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != n_features \
            or labels.shape != (data.shape[0],) or labels.dtype.kind not in "iu":
        raise DataError(f"{path} holds data {data.dtype}{data.shape} and labels {labels.shape}, "
                        f"expected uint8 (N, {n_features}) and N integer labels; "
                        f"extract {_CIFAR_TAR} again")
    _check_labels(path, labels)
    return data.reshape((-1, *_CIFAR_IMAGE_SHAPE)), labels.astype(np.int64)


class _BatchUnpickler(pickle.Unpickler):
    """Unpickles only what a CIFAR batch holds: dicts, lists, bytes and numpy arrays.

    A batch file is data; a pickle naming any other callable is refused rather
    than run, so a tampered download cannot execute code.
    """

    _ALLOWED = MappingProxyType({
        ("numpy.core.multiarray", "_reconstruct"): np.ndarray((0,)).__reduce__()[0],
        ("numpy._core.multiarray", "_reconstruct"): np.ndarray((0,)).__reduce__()[0],
        ("numpy.core.multiarray", "scalar"): np.int64(0).__reduce__()[0],
        ("numpy._core.multiarray", "scalar"): np.int64(0).__reduce__()[0],
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): codecs.encode,  # how protocol 2 pickles bytes
    })

    def find_class(self, module: str, name: str):
        try:
            return self._ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}") from None


def _subset(x: np.ndarray, y: np.ndarray, size: int | None, rng: np.random.Generator,
            what: str) -> tuple[np.ndarray, np.ndarray]:
    if size is None:
        return x, y
    if size > len(x):
        raise DataError(f"{what} set has {len(x)} samples, fewer than the {size} asked for; "
                        f"ask for at most {len(x)}")
    keep = rng.permutation(len(x))[:size]
    return x[keep], y[keep]


def _normalise(images_u8: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """uint8 (N, C, H, W) -> float32 (x/255 - mean)/std per channel, done in place on one copy."""
    x = images_u8.astype(np.float32)
    x *= np.float32(1 / 255)
    x -= np.asarray(mean, dtype=np.float32).reshape(1, -1, 1, 1)
    x /= np.asarray(std, dtype=np.float32).reshape(1, -1, 1, 1)
    return x


def _check_size(label: str, size) -> None:
    if size is None:
        return
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise DataError(f"{label} must be a whole number >= 1, got {size!r}")


# --- downloading -------------------------------------------------------------

def _download(source: _Source, target: Path, mirrors: Sequence[str],
              checksums: Mapping[str, str]) -> Path:
    """Fetch ``source`` into ``target``; returns the folder to read from."""
    created = not target.exists()
    try:
        target.mkdir(parents=True, exist_ok=True)
        if source.name == "cifar10":
            return _download_cifar10(target, mirrors, checksums[_CIFAR_TAR])
        for stem in source.files:
            if _find_file(target, stem) is None:
                name = f"{stem}.gz"
                _fetch_or_fail([join_url(base, name) for base in mirrors], target / name,
                              checksums[name], source.name)
        return target
    except OSError as error:
        raise DataError(f"cannot write to the cache {target}: {error.strerror or error}; "
                        f"pass --data-dir DIR or set {CACHE_ENV}") from None
    finally:
        # Leave no empty folder behind when nothing could be fetched.
        if created and target.is_dir() and not any(target.iterdir()):
            target.rmdir()


def _download_cifar10(target: Path, mirrors: Sequence[str], md5: str) -> Path:
    tar_path = target / _CIFAR_TAR
    _fetch_or_fail([join_url(base, _CIFAR_TAR) for base in mirrors], tar_path, md5, "cifar10")
    with tempfile.TemporaryDirectory(dir=target, prefix=".extract-") as scratch:
        try:
            with tarfile.open(tar_path) as archive:
                # filter="data" refuses absolute paths, links out of the folder, devices.
                archive.extractall(scratch, filter="data")
        except (tarfile.TarError, EOFError, zlib.error) as error:
            tar_path.unlink(missing_ok=True)
            raise DataError(f"{tar_path} is not a readable archive ({error}); "
                            "download it again") from None
        extracted = Path(scratch) / _CIFAR_FOLDER
        if not extracted.is_dir():
            raise DataError(f"{tar_path} has no {_CIFAR_FOLDER}/ folder; is it the right file?")
        shutil.rmtree(target / _CIFAR_FOLDER, ignore_errors=True)  # a partial earlier copy
        os.replace(extracted, target / _CIFAR_FOLDER)
    tar_path.unlink()  # the extracted batches are what is read; the archive only takes space
    return target / _CIFAR_FOLDER


def _fetch_or_fail(urls: Sequence[str], dest: Path, md5: str, dataset: str) -> None:
    try:
        fetch(urls, dest, md5, dataset)
    except FetchError as error:
        raise DataError(str(error)) from None

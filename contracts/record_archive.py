"""A validation's run records packed in one file, so that a shipped folder can be compared again.

A validation's ``OUT/runs`` holds one directory per run (``contracts.record``) beside the
sweeps' logs, tables and figures; ``.gitignore`` keeps every ``runs/`` out of the repository.
``OUT/records.tar.xz`` keeps what a comparison reads of it, every ``record.json`` and
``iterations.csv`` under ``runs/`` (about a tenth of the directory, xz-compressed), so a
folder under ``docs/results`` without its ``runs/`` can still be compared again:
``unpacked`` gives the records of either form.

The archive is reproducible: the same records give the same bytes (names sorted, times,
owners and modes fixed), so writing it again changes nothing in git.

Imports: the standard library, contracts.files, contracts.record.
"""
from __future__ import annotations

import io
import lzma
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from contracts.files import atomic_write_bytes
from contracts.record import ITER_FILE, RECORD_FILE, find_runs

ARCHIVE = "records.tar.xz"
RUNS = "runs"
KEPT = (RECORD_FILE, ITER_FILE)


class ArchiveError(ValueError):
    """A records archive that cannot be read, or a folder with no records at all."""


def pack(folder: Path) -> Path:
    """Write ``folder/records.tar.xz`` from ``folder/runs``: each run's record and rows,
    paths relative to ``folder``; the archive's path. Raises ArchiveError where there are
    no run records."""
    folder = Path(folder)
    runs = find_runs(folder / RUNS)
    if not runs:
        raise ArchiveError(f"{folder / RUNS} holds no run records")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in runs:
            for name in KEPT:
                f = d / name
                if not f.is_file():
                    continue
                data = f.read_bytes()
                info = tarfile.TarInfo(f.relative_to(folder).as_posix())
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                tar.addfile(info, io.BytesIO(data))
    out = folder / ARCHIVE
    atomic_write_bytes(out, lzma.compress(raw.getvalue(), preset=6))
    return out


@contextmanager
def unpacked(folder: Path) -> Iterator[Path]:
    """The run records of a validation folder as a ``runs`` directory: ``folder/runs``
    where it is there, else ``folder/records.tar.xz`` unpacked into a temporary directory
    removed afterwards. ArchiveError (naming the file) where neither is there or the
    archive is not one this module wrote."""
    folder = Path(folder)
    if (folder / RUNS).is_dir():
        yield folder / RUNS
        return
    archive = folder / ARCHIVE
    if not archive.is_file():
        raise ArchiveError(f"{folder} has neither {RUNS}/ nor {ARCHIVE}: its run records are "
                           "not there")
    with tempfile.TemporaryDirectory(prefix="records-") as tmp:
        try:
            with tarfile.open(archive, mode="r:xz") as tar:
                bad = [m.name for m in tar.getmembers()
                       if not m.isfile() or Path(m.name).parts[0] != RUNS
                       or ".." in Path(m.name).parts or Path(m.name).name not in KEPT]
                if bad:
                    raise ArchiveError(f"{archive} holds {bad[0]!r}: not a records archive "
                                       f"(only {RUNS}/.../{' and '.join(KEPT)})")
                tar.extractall(tmp, filter="data")
        except (tarfile.TarError, lzma.LZMAError, EOFError, OSError) as e:
            raise ArchiveError(f"{archive} cannot be read: {e}") from None
        yield Path(tmp) / RUNS

"""contracts.record_archive: a validation's records packed into one reproducible file and
read back as a runs directory (no simulation)."""
from __future__ import annotations

import io
import lzma
import tarfile

import pytest

from contracts import record_archive as archive


def runs_of(folder):
    """Two runs' record and rows, and a log the archive leaves out."""
    for i in range(2):
        run = folder / "runs" / "cnn-x1" / "20mbit" / f"ddp-P2-r{i}"
        run.mkdir(parents=True)
        (run / "record.json").write_text(f'{{"run_id": "ddp-P2-r{i}"}}')
        (run / "iterations.csv").write_text(f"rank,iteration\n0,{i}\n")
    (folder / "runs" / "cnn-x1" / "20mbit" / "ddp-P2-r0.log").write_text("log\n")


def test_the_archive_holds_each_runs_record_and_rows_and_is_the_same_bytes_again(tmp_path):
    runs_of(tmp_path)
    first = archive.pack(tmp_path).read_bytes()
    (tmp_path / "runs" / "cnn-x1" / "20mbit" / "ddp-P2-r1" / "record.json").touch()
    assert archive.pack(tmp_path).read_bytes() == first        # a later mtime changes nothing
    with archive.unpacked(tmp_path) as runs:                   # runs/ there: read in place
        assert runs == tmp_path / "runs"
    (tmp_path / "runs").rename(tmp_path / "gone")
    with archive.unpacked(tmp_path) as runs:
        got = sorted(p.relative_to(runs).as_posix() for p in runs.rglob("*") if p.is_file())
        assert got == [f"cnn-x1/20mbit/ddp-P2-r{i}/{f}" for i in range(2)
                       for f in ("iterations.csv", "record.json")]
        assert (runs / "cnn-x1/20mbit/ddp-P2-r1/iterations.csv").read_text() == \
            (tmp_path / "gone/cnn-x1/20mbit/ddp-P2-r1/iterations.csv").read_text()
    assert not runs.exists()                                   # the temporary copy is gone


def test_a_folder_without_records_or_with_a_foreign_archive_is_one_clear_error(tmp_path):
    with pytest.raises(archive.ArchiveError, match="neither runs/ nor records.tar.xz"):
        with archive.unpacked(tmp_path):
            pass
    (tmp_path / "runs").mkdir()
    with pytest.raises(archive.ArchiveError, match="holds no run records"):
        archive.pack(tmp_path)
    (tmp_path / "runs").rmdir()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("runs/../../record.json")
        tar.addfile(info, io.BytesIO(b""))
    (tmp_path / "records.tar.xz").write_bytes(lzma.compress(raw.getvalue()))
    with pytest.raises(archive.ArchiveError, match="not a records archive"):
        with archive.unpacked(tmp_path):
            pass
    (tmp_path / "records.tar.xz").write_bytes(b"not xz")
    with pytest.raises(archive.ArchiveError, match="cannot be read"):
        with archive.unpacked(tmp_path):
            pass

"""Every command that writes refuses a path of the wrong kind or an unwritable one, in one
line with exit code 2, before any work; an error of the file system while it works is one
line too (issue 40, item 8).

Three paths per output: a file where a folder is written (or a folder where a file is),
a place where nothing can be made (``/proc``: root's ``access()`` says yes there, the file
system says no), and, for every folder a command reads, a file in its place.
"""
from __future__ import annotations

import importlib
import os

import pytest

from tests.refusal import refused

pytestmark = pytest.mark.timeout(60)

# (module, arguments that reach the path, the flag, what it is: folder | file | input)
OUTPUTS = [
    ("simulator.predict", ["--workers", "2"], "--out", "folder"),
    ("simulator.predict", ["--workers", "2"], "--trace", "file"),
    ("simulator.compare", ["RUNS"], "--out", "folder"),
    ("simulator.compare", [], "runs", "input"),
    ("simulator.pool", ["RUNS"], "--out", "folder"),
    ("simulator.pool", [], "folders", "input"),
    ("pipelines.replay", ["--workers", "2"], "--out", "folder"),
    ("pipelines.validate", ["--workers", "2"], "--out", "folder"),
    ("pipelines.validate_accuracy", ["--workers", "2"], "--out", "folder"),
    ("pipelines.validate_cluster", ["--workers", "2"], "--out", "folder"),
    ("pipelines.validate_cluster", ["--workers", "2"], "--figure", "file.png"),
    ("simulator.measured_schedule", ["--like", "RUNS", "RUNS"], "--out", "file"),
    ("real.launch.train", ["--dry-run"], "--out", "folder"),
    ("real.launch.train", ["--dry-run"], "--progress-file", "file"),
    ("real.launch.train", ["--dry-run"], "--data-dir", "input"),
    ("real.launch.sweep", ["--workers", "1"], "--out", "folder"),
    ("real.replay", ["--schedule", "RUNS"], "--out", "folder"),
    ("calibrate.__main__", ["--quick"], "--out", "file.json"),
    ("calibrate.__main__", ["--quick"], "--workdir", "folder"),
    ("calibrate.__main__", ["--quick"], "--runs", "input"),
    ("calibrate.fit", [], "--out", "file.json"),
    ("calibrate.fit", [], "--workdir", "input"),
    ("calibrate.probe", ["--part", "compute"], "--workdir", "folder"),
    ("calibrate.link", [], "--out", "file.toml"),
    ("calibrate.link", [], "--workdir", "folder"),
    ("calibrate.workload", ["--model", "linear"], "--out", "file.toml"),
]


def cases():
    for module, argv, flag, kind in OUTPUTS:
        suffix = kind.partition(".")[2]
        if kind == "input":
            yield module, argv, flag, "a file where a folder is read", "FILE"
            continue
        wrong = "FILE" if kind == "folder" else "FOLDER"
        yield module, argv, flag, f"a {wrong.lower()} where a {kind} is written", wrong
        yield module, argv, flag, "a place nothing can be made", f"/proc/nope{'.' + suffix if suffix else ''}"


@pytest.mark.parametrize("module, argv, flag, case, path", list(cases()),
                         ids=[f"{m}-{f}-{c.split(' where')[0].replace(' ', '_')}"
                              for m, _, f, c, _ in cases()])
def test_a_wrong_or_unwritable_path_is_refused_before_any_work(module, argv, flag, case, path,
                                                               tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    afile, afolder = tmp_path / "afile", tmp_path / "afolder"
    afile.write_text("x\n")
    afolder.mkdir()
    path = {"FILE": str(afile), "FOLDER": str(afolder)}.get(path, path)
    argv = [str(runs) if a == "RUNS" else a for a in argv]
    argv = argv + [path] if not flag.startswith("--") else [flag, path] + argv   # judged first
    before = sorted(os.listdir(tmp_path))
    main = importlib.import_module(module).main
    named = flag if flag.startswith("--") else path
    refused(main, argv, named, capsys)
    assert sorted(os.listdir(tmp_path)) == before       # nothing made
    assert afile.read_text() == "x\n" and not os.listdir(afolder)


def test_an_error_while_writing_is_one_line(tmp_path, capsys, monkeypatch):
    """The file system fails after the checks (here: every rename of a finished file
    fails, as on a full disk): one line, exit code 1, no traceback, nothing half-written."""
    from simulator import predict

    def full(*_a, **_k):
        raise OSError(28, "No space left on device", str(tmp_path / "out" / "predictions.csv"))
    monkeypatch.setattr(os, "replace", full)
    capsys.readouterr()
    code = predict.main(["--workers", "2", "--schemes", "psgd", "--hosts", "1", "--no-plot",
                         "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 1 and "Traceback" not in err, err
    assert len(lines) == 1 and "No space left on device" in lines[0], err
    assert not [p for p in (tmp_path / "out").rglob("*") if not p.name.startswith(".")]

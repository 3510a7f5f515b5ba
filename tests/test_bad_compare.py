"""simulator.compare: bad flags and bad records, one line each; a dropped record is named.

A folder whose every record is unusable is a usage error (one line, exit 2,
the first reason); a folder with some usable records is compared, and each
record left out is named on stderr with its reason, never dropped silently.
"""
from __future__ import annotations

import json

import pytest

from simulator import compare
from contracts import record
from tests.refusal import refused

pytestmark = pytest.mark.timeout(60)


def good_record(runs, run_id="psgd-P2-r0", **change):
    rec = record.RunRecord(
        run_id=run_id,
        config={"algorithm": "psgd", "model": "cnn", "batch_size": 32, "epochs": 1,
                "average_every": 0, "repeat": 0},
        environment={"workers": 2, "ranks": 2, "cores": 2, "threads_per_rank": 1},
        timings={"train_wall_s": 1.5, "epoch_s": [1.5]},
        results={"train_samples": 512, "test_accuracy": 0.5, "final_loss": 1.0},
        comm={"bytes_sent_per_rank": [0, 0]}, resources={})
    for key, value in change.items():
        section, field = key.split("__")
        getattr(rec, section)[field] = value
    return record.write(rec, runs)


def test_flags(tmp_path, capsys):
    good_record(tmp_path / "runs")
    (tmp_path / "f").write_text("x")
    runs = tmp_path / "runs"
    for argv, named in [
        ([tmp_path / "none"], "does not exist"),
        ([tmp_path / "f"], "not a folder"),
        ([runs, "--out", tmp_path / "f"], "--out"),
        ([runs, "--out", tmp_path / "f" / "sub"], "--out"),
        ([runs, "--profile", tmp_path / "none.json"], "--profile"),
        ([runs, "--profile", tmp_path], "--profile"),
        ([runs, "--link", tmp_path / "none.toml"], "--link"),
        ([runs, "--seed", "nan"], "--seed"),
        ([runs, "--seed", "-1"], "--seed"),
        ([runs, "--bogus"], "--bogus"),
        ([], "runs"),
    ]:
        refused(compare.main, argv, named, capsys)


def test_bad_link_and_profile_files(tmp_path, capsys):
    runs = tmp_path / "runs"
    good_record(runs)
    link = tmp_path / "link.toml"
    link.write_text("[cluster]\nhosts = 2\ncores_per_host = 2\n[link]\nbandwidth='1gbit'\n"
                    "latency='1us'\n")
    refused(compare.main, [runs, "--link", link], "shaped_bandwidth", capsys)
    link.write_bytes(b"\x00\xff\xfe")
    refused(compare.main, [runs, "--link", link], str(link), capsys)
    prof = tmp_path / "p.json"
    prof.write_text('{"schema_version": 1, "cores": NaN}')
    refused(compare.main, [runs, "--profile", prof], "cores", capsys)


def test_empty_folder(tmp_path, capsys):
    refused(compare.main, [tmp_path], "no completed run records", capsys)


BROKEN = {
    "truncated json": lambda d: (d / "record.json").write_text(
        (d / "record.json").read_text()[:40]),
    "a list": lambda d: (d / "record.json").write_text("[1, 2, 3]"),
    "config a list": lambda d: _edit(d, lambda r: r.__setitem__("config", [1])),
    "infinite wall time": lambda d: (d / "record.json").write_text(
        (d / "record.json").read_text().replace('"train_wall_s": 1.5', '"train_wall_s": Infinity')),
    "NaN accuracy": lambda d: (d / "record.json").write_text(
        (d / "record.json").read_text().replace('"test_accuracy": 0.5', '"test_accuracy": NaN')),
    "zero wall time": lambda d: _edit(d, lambda r: r["timings"].__setitem__("train_wall_s", 0)),
    "no train_samples": lambda d: _edit(d, lambda r: r["results"].pop("train_samples")),
    "batch_size 0": lambda d: _edit(d, lambda r: r["config"].__setitem__("batch_size", 0)),
    "unknown scheme": lambda d: _edit(d, lambda r: r["config"].__setitem__("algorithm", "x")),
    "workers a string": lambda d: _edit(d, lambda r: r["environment"].__setitem__("workers",
                                                                                  "two")),
    "status unknown": lambda d: _edit(d, lambda r: r.__setitem__("status", "done")),
    "binary": lambda d: (d / "record.json").write_bytes(b"\x89PNG\x00\xff"),
}


def _edit(run_dir, change):
    rec = json.loads((run_dir / "record.json").read_text())
    change(rec)
    (run_dir / "record.json").write_text(json.dumps(rec))


@pytest.mark.parametrize("breakage", list(BROKEN))
def test_a_folder_of_only_broken_records_is_refused(breakage, tmp_path, capsys):
    d = good_record(tmp_path)
    BROKEN[breakage](d)
    line = refused(compare.main, [tmp_path, "--out", tmp_path / "o"], "psgd-P2-r0", capsys)
    assert "no usable run records" in line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("breakage", list(BROKEN))
def test_a_broken_record_beside_good_ones_is_named(breakage, tmp_path, capsys):
    good_record(tmp_path, "psgd-P2-r1")
    good_record(tmp_path, "psgd-P2-r2")
    d = good_record(tmp_path, "psgd-P2-r0")
    BROKEN[breakage](d)
    code = compare.main([str(tmp_path), "--out", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert code == 0, err
    skipped = [ln for ln in err.splitlines() if "skipped" in ln]
    assert len(skipped) == 1 and "psgd-P2-r0" in skipped[0], err
    assert "Traceback" not in err
    rows = (tmp_path / "o" / "compare.csv").read_text().splitlines()
    assert rows[1].split(",")[2] == "2"          # runs: the two good records

"""benchmarks.repredict and benchmarks.repredict_accuracy: the before/after tables and usage errors
(no simulation)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from benchmarks import repredict


def points(predicted):
    """Two cluster points of ddp and one of psgd, measured 10 s, held out but the last."""
    return pd.DataFrame({"folder": ["cluster-1", "cluster-2", "cluster-1"],
                         "scheme": ["ddp", "ddp", "psgd"], "workers": [4, 4, 4],
                         "bandwidth_bits_per_s": [1e8, 1e8, 1e8], "measured_s": [10.0] * 3,
                         "predicted_s": predicted, "held_out": [True, True, False]})


def test_the_table_keeps_the_schemes_that_moved_with_all_their_held_out_points():
    table = repredict.moved(points([8.0, 12.0, 5.0]), points([8.0, 14.0, 5.0]))
    assert list(table.index) == [("cluster", "ddp")]
    row = table.loc[("cluster", "ddp")]
    assert row["points"] == 2
    assert row["mean before"] == pytest.approx(0.0) and row["mean after"] == pytest.approx(0.1)
    assert row["median |e| before"] == pytest.approx(0.2)
    assert row["median |e| after"] == pytest.approx(0.3)


def test_the_bias_is_the_mean_signed_held_out_error_over_the_folders():
    table = repredict.bias(points([8.0, 14.0, 5.0]))
    assert list(table.index) == ["ddp-100mbit"] and list(table.columns) == [4]
    assert table.loc["ddp-100mbit", 4] == pytest.approx(0.1)   # (-20% + 40%) / 2; psgd not held out
    one_host = repredict.bias(points([8.0, 14.0, 5.0]).assign(bandwidth_bits_per_s=float("nan")))
    assert list(one_host.index) == ["ddp"]


def phantom_without(tmp_path, *missing):
    """A copy of phantom-4's folder (no figures) less the files named."""
    import shutil
    folder = tmp_path / "phantom-4"
    shutil.copytree("docs/results/phantom-4", folder, ignore=shutil.ignore_patterns("*.png"))
    for name in missing:
        (folder / name).unlink()
    return str(folder)


@pytest.mark.parametrize("argv, named", [
    (["docs/results/validation-1", "--train-size", "x=0"], "--train-size"),
    (["docs/results", "--train-size", "cluster-3=3072"], "no compare.csv"),
    (lambda tmp: [phantom_without(tmp, "records.tar.xz")], "its run records are not there"),
    (lambda tmp: [phantom_without(tmp, "profile.json")], "no profile.json")])
def test_bad_input_is_one_line_and_exit_code_2(argv, named, tmp_path, capsys):
    argv = argv(tmp_path) if callable(argv) else argv
    assert repredict.main(argv + ["--out", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err and named in err
    assert not (tmp_path / "x.csv").exists()


def test_accuracy_check_table_gives_each_commits_error_against_the_measured_time():
    from benchmarks import repredict_accuracy as ra
    row = {"folder": ["a"], "scheme": ["ddp"], "workers": [8], "measured_s": [20.0],
           "shipped_s": [16.0], "compute_s": [8.0], "comm_s": [6.0], "wait_s": [2.0]}
    before = pd.DataFrame({**row, "predicted_s": [15.0]})
    after = pd.DataFrame({**row, "predicted_s": [19.0]})
    t = ra.against(before, after).iloc[0]
    assert t["shipped"] == pytest.approx(-0.2) and t["before"] == pytest.approx(-0.25)
    assert t["after"] == pytest.approx(-0.05)
    assert t["comm+wait share after"] == pytest.approx(8 / 19)


def test_accuracy_check_seeds_come_from_the_folders_report():
    from benchmarks import repredict_accuracy as ra
    assert ra.seeds_of(Path("docs/results/accuracy-cluster8")) == [1, 2]
    assert ra.seeds_of(Path("docs/results/accuracy-cluster8-seed3")) == [3]


def test_accuracy_check_refuses_a_folder_without_its_table(tmp_path, capsys):
    from benchmarks import repredict_accuracy as ra
    assert ra.main(["docs/results/cluster-1", "--profile", "docs/results/cluster-1/profile.json",
                    "--out", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "accuracy_validation.csv" in err
    assert not (tmp_path / "x.csv").exists()


def test_accuracy_check_cluster_has_the_links_cpu_on_the_machines_shared_cores():
    """As simulator.compare gives a real-compute record of the emulated cluster: the
    calibrated CPU a message on the machine's cores, the shapers' buckets."""
    from benchmarks import repredict_accuracy as ra
    from contracts.cluster import load_cluster
    link_toml = Path("docs/results/accuracy-cluster8/link.toml")
    plain = load_cluster(link_toml)
    got = ra.with_shared_cpu(ra.with_buckets(plain, link_toml)).link
    assert plain.link.cpu_shared_cores == 0 and got.cpu_shared_cores == plain.cores_per_host == 2
    assert got.cpu_s_per_message == plain.link.cpu_s_per_message > 0
    assert got.burst_bytes == pytest.approx(50000 * 0.956, rel=1e-3)


def test_the_pool_gives_each_schemes_held_out_median_and_worst_over_the_folders():
    """Held-out rows of two folders pooled: ddp's three points (-2%, +4%, +20%), psgd's one
    held-in point left out; the goal's two parts judged apart."""
    df = pd.DataFrame({"folder": ["phantom-1", "phantom-1", "phantom-2", "phantom-2"],
                       "scheme": ["ddp", "ddp", "ddp", "psgd"], "workers": [8, 8, 6, 2],
                       "measured_s": [10.0] * 4, "predicted_s": [9.8, 10.4, 12.0, 5.0],
                       "held_out": [True, True, True, False]})
    table = repredict.pooled(df, goal_median=0.05, goal_worst=0.12).set_index("scheme")
    assert list(table.index) == ["ddp", "all"]
    ddp = table.loc["ddp"]
    assert ddp["held-out median"] == pytest.approx(0.04) and ddp["worst"] == pytest.approx(0.2)
    assert ddp["points"] == 3 and ddp["validations"] == "phantom-1, -2"
    assert ddp["goal met"] == "median, not worst"
    assert repredict.pooled(df, 0.05, 0.25).loc[0, "goal met"] == "yes"
    assert repredict.pooled(df, 0.01, 0.25).loc[0, "goal met"] == "worst, not median"
    assert "| ddp | 4.0% | 20.0% | 3 | phantom-1, -2 | median, not worst |" in \
        repredict.markdown_pool(repredict.pooled(df, 0.05, 0.12))


def test_the_pools_folders_are_named_with_their_stem_once_and_runs_as_ranges():
    names = [f"phantom-{i}" for i in (10, 2, 1, 3, 6)]
    assert repredict.folder_list(names) == "phantom-1 to -3, -6, -10"
    assert repredict.folder_list(["cluster-1", "phantom-2"]) == "cluster-1, phantom-2"
    assert repredict.folder_list(["v"]) == "v"

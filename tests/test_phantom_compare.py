"""Phantom records predicted: the compute a phantom run sleeps (``workload.slept``) and
``simulator.compare`` on records of the emulated cluster whose compute slept."""
from __future__ import annotations

import hashlib

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from simulator import compare
from contracts import record
from contracts.checks import ConfigError
from contracts.workload import load_workload, slept, workload_from_dict
from simulator.testing import make_profile

WORKLOAD = """
schema_version = 1
[model]
name = "tiny"
[measured]
device = "Tesla V100 SXM2"
batch_size = 32
step = "10ms"
lines = [{ threads = 1, intercept = "2ms", per_sample = "0.25ms" }]
[[layers]]
name = "fc2"
forward = "1ms"
backward = "2ms"
tensors = [{ name = "fc2.weight", params = 1000, dtype = "float32" }]
[[layers]]
name = "fc1"
forward = "2ms"
backward = "4ms"
tensors = [{ name = "fc1.weight", params = 3000, dtype = "float32" }]
"""


def test_slept_is_the_sum_of_the_layers_and_the_update_times_the_scale(tmp_path):
    f = tmp_path / "w.toml"
    f.write_text(WORKLOAD)
    w = load_workload(f)
    s = slept(w, 10.0, "tiny-x10")
    # layers 9 ms, update what the 10 ms step leaves: 1 ms; all times 10
    assert s.step_s == pytest.approx(0.100) and s.update_s == pytest.approx(0.010)
    assert [lay.backward_s for lay in s.layers] == pytest.approx([0.020, 0.040])
    assert s.backward_s == pytest.approx(0.060) and s.forward_s == pytest.approx(0.030)
    assert s.device == "cpu" and s.spread_cv == 0 and s.name == "tiny-x10"
    line, = s.lines                    # the step line through the slept step at batch 32
    assert line.intercept_s + 32 * line.s_per_sample == pytest.approx(0.100)
    assert line.intercept_s / line.s_per_sample == pytest.approx(2 / 0.25)
    assert s.tensors == w.tensors and "V100" in s.provenance["phantom"]
    assert slept(workload_from_dict({**_raw(), "measured": {"device": "cpu", "batch_size": 4,
                                                            "step": "1s", "update": "5ms"}}),
                 1.0).update_s == pytest.approx(0.005)


def _raw():
    import tomllib
    return tomllib.loads(WORKLOAD)


def phantom_record(runs, workload_file, p=2, steps=12, scale=10.0, wall_s=None,
                   algorithm="psgd", bits_per_s=100e6):
    """A psgd phantom record (one average at the end; or ``algorithm``'s) on an emulated
    cluster of p + 1 hosts at 100 Mbit/s (or ``bits_per_s``); its wall time ``steps``
    slept steps unless given."""
    sha = hashlib.sha256(workload_file.read_bytes()).hexdigest()
    step = 0.100 * scale / 10
    wall = wall_s if wall_s is not None else steps * step
    rec = record.RunRecord(
        run_id=f"{algorithm}-P{p}-r0",
        config={"algorithm": algorithm, "model": "cnn", "batch_size": 32, "epochs": 1,
                "average_every": 0, "repeat": 0},
        environment={"workers": p, "ranks": p, "cores": 2, "threads_per_rank": 1,
                     "cluster": {"namespaces": [f"h{i}" for i in range(p + 1)],
                                 "bandwidth_bits_per_s": bits_per_s}},
        timings={"train_wall_s": wall, "epoch_s": [wall]},
        results={"train_samples": steps * 32 * p, "test_accuracy": None, "final_loss": None},
        comm={"bytes_sent_per_rank": [0] * p}, resources={},
        compute={"mode": "phantom", "time_scale": scale,
                 "workload": {"file": str(workload_file), "sha256": sha, "name": "tiny"}})
    record.write(rec, runs)


def test_compare_predicts_a_phantom_record_from_the_workload_it_slept(tmp_path):
    f = tmp_path / "w.toml"
    f.write_text(WORKLOAD)
    phantom_record(tmp_path / "runs", f)
    prof = make_profile(cores=2, model="cnn")
    assert compare.compare(tmp_path / "runs", prof).empty            # left out by default
    df = compare.compare(tmp_path / "runs", prof, keep=("phantom",))
    row = df.iloc[0]
    assert row["model"].startswith("tiny-phantom-") and row["model"].endswith("-x10")
    # each worker's 12 steps of 0.1 s slept, on hosts of their own (no core shared)
    assert row["predicted_compute_s"] == pytest.approx(12 * 0.100, rel=1e-6)
    assert row["predicted_s"] == pytest.approx(row["measured_s"], rel=0.02)


def test_a_phantom_record_whose_file_is_gone_is_found_by_its_digest(tmp_path):
    f = tmp_path / "w.toml"
    f.write_text(WORKLOAD)
    phantom_record(tmp_path / "runs", f)
    moved = tmp_path / "kept" / "renamed.toml"
    moved.parent.mkdir()
    f.rename(moved)
    prof = make_profile(cores=2, model="cnn")
    with pytest.raises(ConfigError, match="gone or changed; give it with --workloads"):
        compare.compare(tmp_path / "runs", prof, keep=("phantom",))
    df = compare.compare(tmp_path / "runs", prof, keep=("phantom",),
                         workloads=[tmp_path / "kept"])
    assert len(df) == 1 and df.iloc[0]["workload"] == str(moved)


def test_validate_phantom_reports_what_its_folder_holds(tmp_path, capsys):
    """``--skip-runs`` on a campaign's folder: every phantom record predicted on its cluster
    with the calibrated link, P above --calibrate-workers held out; a folder without runs
    is one line, exit 2. The records are packed into ``records.tar.xz``, and the folder
    without its ``runs/``, as shipped, is compared again from it by ``benchmarks.repredict``:
    the same predictions, held out alike, the same error table."""
    import shutil
    from pathlib import Path

    from pipelines import validate_phantom
    from contracts import profile as profiles
    out = tmp_path / "v"
    (out / "workloads").mkdir(parents=True)
    f = out / "workloads" / "w.toml"
    f.write_text(WORKLOAD)
    docs = Path(__file__).resolve().parents[1] / "docs" / "results" / "cluster-1" / "link.toml"
    shutil.copy(docs, out / "link.toml")
    profiles.save(make_profile(cores=2, model="cnn"), tmp_path / "profile.json")
    argv = ["--out", str(out), "--skip-runs", "--profile", str(tmp_path / "profile.json"),
            "--calibrate-workers", "2"]
    assert validate_phantom.main(argv) == 2
    assert "its run records are not there" in capsys.readouterr().err
    for p in (2, 4):
        phantom_record(out / "runs" / "tiny-x10" / "100mbit", f, p=p)
    assert validate_phantom.main(argv) == 0
    table = (out / "table.md").read_text()
    assert "| psgd | 2 | 100 |" in table and "| psgd | 4 | 100 |" in table
    rows = {int(r.split("|")[2]): r for r in table.splitlines() if r.startswith("| psgd |")}
    assert rows[2].rstrip().endswith("| - |") and rows[4].rstrip().endswith("| P |")
    assert "| without per-message CPU |" in table and "| without loop's Python |" in table
    assert "| without held-in runs' latency |" in table
    assert (out / "errors.csv").exists() and (out / "breakdown-tiny-phantom-"
                                             f"{hashlib.sha256(f.read_bytes()).hexdigest()[:8]}"
                                             "-x10.png").exists()

    from benchmarks import repredict
    shutil.rmtree(out / "runs")                         # shipped: the archive, no runs/
    shutil.copy(tmp_path / "profile.json", out / "profile.json")
    capsys.readouterr()
    assert repredict.main([str(out), "--pool", "--out", str(tmp_path / "new.csv")]) == 0
    new = pd.read_csv(tmp_path / "new.csv").set_index("workers")
    assert new["predicted_s"].to_list() == pytest.approx(new["shipped_s"].to_list(), rel=1e-12)
    assert new["held_out"].to_dict() == {2: False, 4: True}
    printed = capsys.readouterr().out
    note, errors = table.split("\n\n")[1:3]
    assert note.startswith("gloo's allreduce latency a ring step: the profile's one-host probe")
    assert f"{note}\n{errors}" in printed        # table.md's note and error table
    held = abs(new.loc[4, "predicted_s"] / new.loc[4, "measured_s"] - 1)   # --pool: P = 4 alone
    assert f"| psgd | {100 * held:.1f}% | {100 * held:.1f}% | 1 | v | " in printed


@pytest.mark.parametrize("extra, named", [
    (["--bandwidths", "20mbit,1gbit", "--calibrate-at", "100mbit"], "--calibrate-at"),
    (["--workloads", "missing.toml@10"], "missing.toml is not a file"),
    (["--workloads", "resnet"], "neither a workload file"),
    (["--workloads", "cnn@-1"], "--workloads"),
    (["--steps", "8", "--warmup-steps", "7"], "--warmup-steps 7 leaves fewer than 2"),
])
def test_validate_phantom_refuses_bad_flags_in_one_line(tmp_path, capsys, extra, named):
    from pipelines import validate_phantom
    assert validate_phantom.main(["--out", str(tmp_path / "v"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert named in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_sleeping_polls_add_half_the_poll_to_every_step_of_an_mpi_collective():
    """A rank waiting in sleeping polls (real.launch.dist.wait backed off to PSGD_WAIT_SLEEP_S)
    sees a step end poll_s / 2 late on average, and MPICH advances the collective only in
    its polls: MPI's per-step cost rises by poll_s / 2, gloo's (its own threads) does not."""
    prof = make_profile(cores=2, model="cnn", collective_alpha_s={"allreduce": 3e-5})
    rec = {"environment": {"sleeping_waits": {"PSGD_WAIT_SLEEP_S": "0.001"}}}
    polled = compare.polled_profile(prof, rec)
    for before, after in zip(prof.transports, polled.transports):
        for op in ("allreduce", "gather"):
            added = after.step_extra_s(op) - before.step_extra_s(op)
            assert added == pytest.approx(5e-4 if before.backend == "mpi" else 0.0)
        assert after.poll_s == (1e-3 if before.backend == "mpi" else 0.0)   # model.comm.polls
    assert compare.polled_profile(prof, {"environment": {}}) is prof
    with pytest.raises(ConfigError, match="sleeping_waits.PSGD_WAIT_SLEEP_S"):
        compare.polled_profile(prof, {"environment": {"sleeping_waits":
                                                      {"PSGD_WAIT_SLEEP_S": "soon"}}})


def test_a_server_scheme_whose_slept_model_has_no_measured_update_is_said(tmp_path):
    """ps_sync on a workload whose model the profile never timed at the server: the report
    says its update falls to the parameter line; timed (the profile's, or a server
    probe's rows), or no server scheme, nothing is said."""
    import dataclasses

    import pandas as pd

    from contracts import profile as profiles
    from pipelines.validate_phantom import unprobed_servers
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "w.toml").write_text(WORKLOAD)
    bare = tmp_path / "bare.json"
    profiles.save(make_profile(model="tiny"), bare)
    ps, psgd = pd.DataFrame({"scheme": ["ps_sync"]}), pd.DataFrame({"scheme": ["psgd"]})
    assert unprobed_servers(tmp_path, bare, (), ps) == ["tiny"]
    assert unprobed_servers(tmp_path, bare, (), psgd) == []
    rows = ({"model": "tiny", "params": 4000, "rep": 0, "idle_s": 0.0, "update_s": 1e-4},)
    assert unprobed_servers(tmp_path, bare, rows, ps) == []
    timed = tmp_path / "timed.json"
    prof = make_profile(model="tiny")
    profiles.save(dataclasses.replace(prof, models=tuple(
        dataclasses.replace(m, server_update_s=1e-4) for m in prof.models)), timed)
    assert unprobed_servers(tmp_path, timed, (), ps) == []


def test_a_server_probe_given_once_is_kept_in_the_folder(tmp_path):
    """--server-probe's table is copied into OUT; a later comparison of OUT without the
    flag takes it, rows given explicitly win, and a folder without one has none."""
    from pipelines.validate_phantom import SERVER_UPDATE, kept_server_rows, server_probe_rows
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / SERVER_UPDATE).write_text("model,params,rep,update_s\ntiny,4000,0,0.0001\n"
                                       "tiny,4000,1,0.0002\n")
    out = tmp_path / "out"
    out.mkdir()
    assert kept_server_rows(out) == ()
    (out / SERVER_UPDATE).write_text((probe / SERVER_UPDATE).read_text())
    kept = kept_server_rows(out)
    assert kept == server_probe_rows(probe) and [r["update_s"] for r in kept] == [1e-4, 2e-4]
    given = ({"model": "other", "params": 1, "rep": 0, "update_s": 1e-3},)
    assert kept_server_rows(out, given) == given


def campaign_folder(tmp_path):
    """(OUT with the shipped cluster-1 link in it, a saved profile's path): what a planned
    campaign reads before it runs anything."""
    import shutil
    from pathlib import Path

    from contracts import profile as profiles
    out = tmp_path / "v"
    out.mkdir()
    docs = Path(__file__).resolve().parents[1] / "docs" / "results" / "cluster-1" / "link.toml"
    shutil.copy(docs, out / "link.toml")
    profiles.save(make_profile(cores=2, model="cnn"), tmp_path / "profile.json")
    return out, tmp_path / "profile.json"


def test_the_campaign_estimate_counts_the_runs_it_would_make(tmp_path, capsys):
    """``--dry-run``: every scheme not stopped, at every P and rate, ``--repeats`` runs of
    the predicted steps plus the runs' start-up (a cost a rank: the parameter server's
    rank counts); a scheme stopped in ``stops.json`` drops out from its P on; a
    given profile and link mean no calibration; nothing is written."""
    from contracts import profile as profiles
    from pipelines import validate_phantom as vp
    out, _ = campaign_folder(tmp_path)
    f = tmp_path / "w.toml"
    f.write_text(WORKLOAD)
    argv = ["--out", str(out), "--workloads", str(f), "--bandwidths", "20mbit,1gbit",
            "--calibrate-at", "1gbit", "--schemes", "psgd,ps_sync", "--workers", "2,4",
            "--repeats", "3", "--profile", str(tmp_path / "profile.json")]
    args = vp.build_parser().parse_args(argv)
    loads = vp.planned_workloads(args, out)
    vp.Stops(out / "stops.json").stop(loads[0], "20mbit", "ps_sync", 4, "testbed-bound")
    from contracts.cluster import load_link_calibration
    runs = vp.planned_runs(args, out, loads, profiles.load(tmp_path / "profile.json"),
                           load_link_calibration(out / "link.toml"))
    assert [(r["rate"], r["workers"], r["scheme"]) for r in runs] == [
        ("1gbit", 2, "psgd"), ("1gbit", 2, "ps_sync"), ("1gbit", 4, "psgd"),
        ("1gbit", 4, "ps_sync"), ("20mbit", 2, "psgd"), ("20mbit", 2, "ps_sync"),
        ("20mbit", 4, "psgd")]
    assert {r["runs"] for r in runs} == {3}
    r = runs[3]                                    # ps_sync at P = 4: five ranks
    steps = vp.predicted_run_s("ps_sync", 4, loads[0], "1gbit", args.steps,
                               profiles.load(tmp_path / "profile.json"),
                               load_link_calibration(out / "link.toml"))
    assert r["run_s"] == pytest.approx(5 * vp.RUN_S_PER_RANK + steps)
    before = sorted(p.name for p in out.iterdir())
    assert vp.main([*argv, "--dry-run"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("21 runs, about ") and "calibration" not in said
    assert sorted(p.name for p in out.iterdir()) == before
    assert vp.calibration_s(vp.build_parser().parse_args(argv[:-2]), out) > 0


def test_the_latency_workload_runs_only_where_it_is_held_in(tmp_path, capsys):
    """``--latency-workload``: a small model beside the large one, swept only at the
    calibrated rate, P up to ``--calibrate-workers`` and the schemes whose gloo latency
    the held-in runs fit; not added where it is one of ``--workloads``, where no such
    scheme runs, or with ``none``; a bad one is a usage error."""
    from contracts import profile as profiles
    from contracts.cluster import load_link_calibration
    from pipelines import validate_phantom as vp
    out, _ = campaign_folder(tmp_path)
    big, small = tmp_path / "big.toml", tmp_path / "small.toml"
    big.write_text(WORKLOAD)
    small.write_text(WORKLOAD)
    argv = ["--out", str(out), "--workloads", str(big), "--bandwidths", "20mbit,1gbit",
            "--calibrate-at", "1gbit", "--workers", "2,3,4", "--calibrate-workers", "3",
            "--profile", str(tmp_path / "profile.json"), "--latency-workload", str(small)]

    def planned(*more):
        args = vp.build_parser().parse_args([*argv, *more])
        loads = vp.planned_workloads(args, out)
        return [(r["workload"], r["rate"], r["workers"], r["scheme"]) for r in vp.planned_runs(
            args, out, loads, profiles.load(tmp_path / "profile.json"),
            load_link_calibration(out / "link.toml"))]
    runs = planned("--schemes", "psgd,allreduce,gather_scatter")
    assert [r for r in runs if r[0].startswith("small")] == [
        ("small-x1", "1gbit", p, s) for p in (2, 3) for s in ("allreduce", "gather_scatter")]
    assert len([r for r in runs if r[0].startswith("big")]) == 18
    assert not [r for r in planned("--schemes", "psgd,ddp") if r[0].startswith("small")]
    assert not [r for r in planned("--schemes", "allreduce", "--latency-workload", "none")
                if r[0].startswith("small")]
    assert {r[0] for r in planned("--schemes", "allreduce", "--workloads",
                                  f"{big},{small}")} == {"big-x1", "small-x1"}
    with pytest.raises(SystemExit) as e:
        vp.build_parser().parse_args([*argv, "--latency-workload", "cnn,mlp"])
    assert e.value.code == 2
    assert vp.main([*argv, "--schemes", "allreduce", "--latency-workload",
                    str(tmp_path / "gone.toml"), "--dry-run"]) == 2
    assert "--latency-workload: " in capsys.readouterr().err


def test_the_link_calibrations_raw_rows_stay_beside_its_toml(tmp_path, monkeypatch):
    """The campaign's ``calibrate.link`` keeps its probe rows in ``OUT/link`` (its
    ``--workdir``), so a later fit can be made again from the folder; a resumed piece,
    whose ``link.toml`` exists, calibrates nothing and leaves them as they were."""
    import contextlib
    import shutil
    from pathlib import Path

    from pipelines import validate_cluster as vc
    from pipelines import validate_phantom as vp
    out = tmp_path / "v"
    out.mkdir()
    docs = Path(__file__).resolve().parents[1] / "docs" / "results" / "cluster-1" / "link.toml"
    calls = []

    def fake_run(argv, log, timeout_s, prog=""):
        calls.append(argv[2])
        if argv[2] == "calibrate.link":
            workdir = Path(argv[argv.index("--workdir") + 1])
            workdir.mkdir(parents=True, exist_ok=True)
            (workdir / "link_pingpong.csv").write_text("backend,bytes,rep,time_s,cpu_s\n")
            shutil.copy(docs, argv[argv.index("--out") + 1])

    monkeypatch.setattr(vc, "_run", fake_run)
    monkeypatch.setattr(vc, "cluster_up", lambda *a, **k: contextlib.nullcontext())
    args = vp.build_parser().parse_args(["--out", str(out), "--bandwidths", "200mbit,1gbit",
                                         "--calibrate-at", "200mbit", "--workers", "2-2"])
    for _ in range(2):
        vp.run_at("200mbit", args, out, [], vp.Stops(out / "stops.json"), None, 0.0)
    assert calls.count("calibrate.link") == 1
    assert (out / "link" / "link_pingpong.csv").is_file() and (out / "link.toml").is_file()


def test_a_campaigns_runs_say_their_warm_up_to_real_train(tmp_path, monkeypatch):
    """``--warmup-steps K`` reaches every run (``real.train --warmup-steps K``, kept in its
    record's config, where ``simulator.compare.steady_epoch_s`` reads it); the runs' size
    is still ``--steps`` a worker."""
    from pathlib import Path

    from pipelines import validate_cluster as vc
    from pipelines import validate_phantom as vp
    calls = []
    monkeypatch.setattr(vc, "_run", lambda argv, *a, **k: calls.append(argv))
    wl = tmp_path / "w.toml"
    wl.write_text(WORKLOAD)
    args = vp.build_parser().parse_args(["--out", str(tmp_path / "v"), "--steps", "24",
                                         "--warmup-steps", "16"])
    vp.sweep_point(args, tmp_path / "v", vp.Phantom(str(wl), Path(wl), 1.0), "50mbit", 4,
                   ["gather_scatter"])
    argv = calls[0]
    after = argv[argv.index("--") + 1:]
    assert after[after.index("--warmup-steps") + 1] == "16"
    batch = vp.batch_of(vp.Phantom(str(wl), Path(wl), 1.0))
    assert argv[argv.index("--train-size") + 1] == str(24 * batch * 4)


def _held_in_setup(tmp_path):
    """(runs folder, profile, link, workloads) for the held-in fits: the tiny workload and
    cluster-1's link (calibrated at 100 Mbit/s)."""
    import shutil
    from pathlib import Path

    from contracts.cluster import load_link_calibration
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "w.toml").write_text(WORKLOAD)
    docs = Path(__file__).resolve().parents[1] / "docs" / "results" / "cluster-1" / "link.toml"
    shutil.copy(docs, tmp_path / "link.toml")
    return (tmp_path / "runs", make_profile(cores=2, model="cnn"),
            load_link_calibration(tmp_path / "link.toml"), [tmp_path / "workloads"])


def test_the_held_in_allreduce_runs_give_gloos_latency_a_ring_step(tmp_path):
    """``pipelines.held_in.held_in_steps``: the latency a ring step at which the
    model's epoch of the held-in allreduce run (P = 2 at the calibrated 100 Mbit/s) is its
    measured one; a run held out by P or by its rate, or another scheme, takes no part;
    without such a run, None (the profile's probe stands)."""
    from pipelines.held_in import held_in_steps, with_step_s
    runs, prof, link, workloads = _held_in_setup(tmp_path)
    f = workloads[0] / "w.toml"
    phantom_record(runs / "a", f, p=2, algorithm="psgd")
    assert held_in_steps(runs, prof, link, 2, workloads)["allreduce"] is None
    phantom_record(runs / "b", f, p=2, algorithm="allreduce", wall_s=1.5)
    step_s = held_in_steps(runs, prof, link, 2, workloads)["allreduce"]
    assert step_s > 0
    fitted = compare.compare(runs / "b", with_step_s(prof, step_s), link=link,
                             workloads=workloads, keep=("phantom",))
    assert fitted.iloc[0]["predicted_s"] == pytest.approx(fitted.iloc[0]["measured_s"], rel=1e-6)
    phantom_record(runs / "c", f, p=4, algorithm="allreduce", wall_s=9.0)     # held out: P
    phantom_record(runs / "d", f, p=2, algorithm="allreduce", wall_s=9.0, bits_per_s=1e9)
    assert held_in_steps(runs, prof, link, 2, workloads)["allreduce"] == pytest.approx(step_s)
    gloo = next(t for t in with_step_s(prof, step_s).transports if t.backend == "gloo")
    assert gloo.step_extra_s("allreduce") == pytest.approx(step_s)


def test_the_held_in_gather_scatter_runs_give_gathers_and_scatters_latency(tmp_path):
    """The held-in gather_scatter run fits gloo's gather and scatter latency a step, which
    then prices that run at its measured epoch; it moves no allreduce, and an allreduce
    run moves neither of them (``with_held_in_steps``: each scheme's own collectives)."""
    from pipelines.held_in import held_in_steps, with_held_in_steps
    runs, prof, link, workloads = _held_in_setup(tmp_path)
    f = workloads[0] / "w.toml"
    phantom_record(runs / "g", f, p=2, algorithm="gather_scatter", wall_s=1.5)
    assert held_in_steps(runs, prof, link, 2, workloads)["allreduce"] is None
    step_s = held_in_steps(runs, prof, link, 2, workloads)["gather_scatter"]
    assert step_s > 0
    fitted, notes = with_held_in_steps(runs, prof, link, 2, workloads)
    gloo = next(t for t in fitted.transports if t.backend == "gloo")
    before = next(t for t in prof.transports if t.backend == "gloo")
    assert gloo.step_extra_s("gather") == gloo.step_extra_s("scatter") == pytest.approx(step_s)
    assert gloo.step_extra_s("allreduce") == before.step_extra_s("allreduce")
    assert "no held-in allreduce run resolves it" in notes[0]
    assert f"{step_s * 1e6:.0f} µs from the held-in gather_scatter runs" in notes[1]
    again = compare.compare(runs / "g", fitted, link=link, workloads=workloads,
                            keep=("phantom",))
    assert again.iloc[0]["predicted_s"] == pytest.approx(again.iloc[0]["measured_s"], rel=1e-6)
    phantom_record(runs / "a", f, p=2, algorithm="allreduce", wall_s=1.5)
    assert held_in_steps(runs, prof, link, 2, workloads)["gather_scatter"] == pytest.approx(step_s)


def test_a_held_in_run_the_latency_barely_moves_fits_nothing(tmp_path):
    """A held-in run whose epoch 1 ms a step moves by under ``RESOLVING_SHARE`` (two calls
    a step in an epoch of hours) takes no part: no fit, the probe stands, where its own
    miss would otherwise be read as a latency of seconds a step."""
    from pipelines.held_in import RESOLVING_SHARE, held_in_steps
    runs, prof, link, workloads = _held_in_setup(tmp_path)
    f = workloads[0] / "w.toml"
    phantom_record(runs / "g", f, p=2, algorithm="gather_scatter", wall_s=2.4 / RESOLVING_SHARE)
    assert held_in_steps(runs, prof, link, 2, workloads)["gather_scatter"] is None
    phantom_record(tmp_path / "short" / "g", f, p=2, algorithm="gather_scatter", wall_s=1.5)
    assert held_in_steps(tmp_path / "short", prof, link, 2, workloads)["gather_scatter"] > 0


@settings(max_examples=60, deadline=None)
@given(step_s=st.floats(0.0, 2e-3),
       points=st.lists(st.tuples(st.floats(0.5, 100.0), st.floats(1.0, 1e4)), min_size=1,
                       max_size=6))
def test_the_relative_fit_recovers_a_latency_every_point_agrees_on(step_s, points):
    """``relative_fit``: where every held-in point's line meets its measurement at one
    latency, that latency is the fit, whatever the points' sizes and slopes."""
    from pipelines.held_in import relative_fit
    at_0 = [p for p, _ in points]
    slope = [s for _, s in points]
    measured = [p + s * step_s for p, s in points]
    assert relative_fit(measured, at_0, slope) == pytest.approx(step_s, rel=1e-6, abs=1e-12)


def test_the_relative_fit_follows_the_point_whose_epoch_the_latency_moves():
    """A large model's point, its epoch 2% latency, misses by 1.5% in its bytes; a small
    model's, its epoch half latency, is exact at 500 us. The fit stays near 500 us (the
    former mean over points: half-way to the large model's 0), and a point that asks
    for less than none gives 0."""
    from pipelines.held_in import relative_fit
    large = (16.27, 16.27 * 1.015, 656.0)           # measured, predicted at 0, s per s
    small = (2.0, 1.0, 2000.0)                      # exact at 0.5 ms
    fitted = relative_fit([large[0], small[0]], [large[1], small[1]], [large[2], small[2]])
    assert 0.45e-3 < fitted < 0.5e-3
    assert relative_fit([large[0]], [large[1]], [large[2]]) == 0.0

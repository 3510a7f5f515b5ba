"""A run's identity: the digest of the settings that change its result (issue 40, item 1).

The digest changes with every result-changing flag of real.train and with nothing else;
a sweep reuses a point's record only when the digest matches, refuses a folder of other
settings in one line, and with --resume runs the point anew and says why.
"""
from __future__ import annotations

import json

import pytest

from real.launch import sweep as real_sweep
from real.launch import train
from real.records.identity import record_settings, run_settings
from contracts import record

BASE = ["--algorithm", "psgd", "--model", "linear", "--dataset", "synthetic",
        "--train-size", "512"]
# One changed value per result setting of real.train's flags (workers and cluster: below).
CHANGES = {"algorithm": ["--algorithm", "allreduce"], "model": ["--model", "mlp"],
           "dataset": ["--dataset", "mnist"], "train_size": ["--train-size", "256"],
           "test_size": ["--test-size", "64"], "epochs": ["--epochs", "2"],
           "batch_size": ["--batch-size", "32"], "global_batch": ["--global-batch", "128"],
           "lr": ["--lr", "0.1"], "momentum": ["--momentum", "0.9"],
           "lr_decay": ["--lr-decay", "0.01"], "average_every": ["--average-every", "5"],
           "mpi_allreduce": ["--mpi-allreduce", "ring"], "device": ["--device", "cuda"],
           "backend": ["--backend", "gloo"], "threads": ["--threads", "2"],
           "seed": ["--seed", "7"], "eval_every": ["--eval-every", "10"],
           "target_accuracy": ["--target-accuracy", "0.8"],
           "warmup_steps": ["--warmup-steps", "16"]}
# Flags that name, time out, log, or only set other flags: never part of the identity.
# Phantom compute (real.phantom): judged in test_phantom_settings_change_the_digest.
PHANTOM = {"compute", "workload", "time_scale"}
NEUTRAL = {"out": ["--out", "elsewhere"], "run_id": ["--run-id", "x"],
           "repeat": ["--repeat", "3"], "timeout": ["--timeout", "30"],
           "log_every": ["--log-every", "5"], "progress_file": ["--progress-file", "p.txt"],
           "data_dir": ["--data-dir", "."], "download": ["--download"],
           "preset": [], "dry_run": [], "workers": [], "help": []}


def digest(*flags: str, workers: int = 2, cluster=None) -> str:
    return record.config_digest(run_settings(train.parse_args(BASE + list(flags)), workers,
                                             cluster))


def test_every_flag_of_real_train_is_either_a_result_setting_or_neutral():
    dests = {a.dest for a in train.build_parser()._actions}
    assert dests == set(CHANGES) | set(NEUTRAL) | PHANTOM, \
        "classify the new flag in RESULT_SETTINGS"
    assert set(record.RESULT_SETTINGS) == set(CHANGES) | {"workers", "cluster", "compute",
                                                          "workload_sha256", "time_scale"}


WORKLOAD = ('[model]\nname = "linear"\n[measured]\ndevice = "cpu"\nbatch_size = 64\n'
            'step = "{step}"\n[[layers]]\nname = "fc"\nforward = "1ms"\nbackward = "2ms"\n'
            'tensors = [{{ name = "fc.weight", params = 7840 }}, {{ name = "fc.bias", '
            'params = 10 }}]\n')


def test_phantom_settings_change_the_digest(tmp_path):
    """The compute mode, the workload's content (not its path) and the time scale."""
    files = {}
    for name, step in (("a", "4ms"), ("same", "4ms"), ("other", "5ms")):
        files[name] = tmp_path / f"{name}.toml"
        files[name].write_text(WORKLOAD.format(step=step))

    def phantom(name, *more):
        return digest("--compute", "phantom", "--workload", str(files[name]), *more)
    assert phantom("a") != digest()
    assert phantom("same") == phantom("a")
    assert phantom("other") != phantom("a")
    assert phantom("a", "--time-scale", "10") != phantom("a")
    assert phantom("a", "--time-scale", "1") == phantom("a")


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_each_result_setting_changes_the_digest(name):
    assert digest(*CHANGES[name]) != digest()


@pytest.mark.parametrize("name", sorted(n for n, flags in NEUTRAL.items() if flags))
def test_other_flags_leave_the_digest_alone(name):
    assert digest(*NEUTRAL[name]) == digest()


def test_workers_and_the_emulated_clusters_link_change_the_digest():
    link = {"namespaces": ["a", "b"], "bandwidth_bits_per_s": 10**8, "ranks_per_host": 1,
            "addresses": ["10.0.0.1", "10.0.0.2"]}
    assert digest(workers=3) != digest()
    assert digest(cluster=link) != digest()
    assert digest(cluster=link | {"bandwidth_bits_per_s": 2 * 10**8}) != digest(cluster=link)
    assert digest(cluster=link | {"ranks_per_host": 2}) != digest(cluster=link)
    assert digest(cluster=link | {"addresses": ["10.1.0.1", "10.1.0.2"]}) == digest(cluster=link)


def test_a_default_given_explicitly_is_the_default():
    assert digest("--lr", "0.05", "--seed", "1", "--epochs", "1") == digest()


def test_an_older_record_without_identity_gets_its_settings_from_its_config():
    args = train.parse_args(BASE)
    rec = {"config": vars(args) | {"dataset": None, "model": "linear"},
           "environment": {"workers": 2}}
    rec["config"]["dataset"] = None       # left to the model: linear's own is mnist
    assert record_settings(rec)["dataset"] == "mnist"
    assert record_settings({"config": vars(args), "environment": {"workers": 2}}) == \
        run_settings(args, 2)


def sweep(capsys, out, size: str, *more: str):
    """real.sweep's main in this process (its points still run as subprocesses): (exit code,
    stdout, stderr). The command as a user types it: test_sweep's test_sweep_p1_p2_table_and_plots."""
    capsys.readouterr()
    try:
        code = real_sweep.main(["--algorithm", "serial", "--workers", "1", "--model", "linear",
                                "--dataset", "synthetic", "--train-size", size, "--test-size",
                                "64", "--out", str(out), *more])
    except SystemExit as e:
        code = e.code
    return (code, *capsys.readouterr())


@pytest.mark.slow
def test_a_sweep_never_passes_off_a_run_of_other_settings_as_new(tmp_path, capsys):
    out = tmp_path / "sweep"
    code, stdout, stderr = sweep(capsys, out, "256")
    assert code == 0, stderr
    assert "Threads" in stdout.splitlines()[0]               # the table states them
    rec_path = out / "serial-P1-r0" / "record.json"
    before = rec_path.read_bytes()
    code, _, stderr = sweep(capsys, out, "256")    # the same settings: reused, said so
    assert code == 0 and "reused 1 run(s)" in stderr
    assert rec_path.read_bytes() == before
    code, _, stderr = sweep(capsys, out, "2048")   # other settings: refused before any work
    assert code == 2 and len(stderr.strip().splitlines()) == 1, stderr
    assert "train_size 256 -> 2048" in stderr
    assert "--resume" in stderr and "--fresh" in stderr
    assert rec_path.read_bytes() == before
    code, _, stderr = sweep(capsys, out, "2048", "--resume")      # run anew, and says why
    assert code == 0, stderr
    assert "serial-P1-r0: run anew (settings differ: train_size 256 -> 2048)" in stderr
    rec = json.loads(rec_path.read_text())
    assert rec["identity"]["settings"]["train_size"] == 2048
    assert rec["results"]["train_samples"] == 2048

"""simulator.predict refuses bad input in one line: numbers, names, paths, profiles, clusters.

Each case is a flag (or a file) as a user could get it wrong; the answer is
exit code 2, one line naming the flag or the field, no traceback, in seconds.
"""
from __future__ import annotations

import json

import pytest

from simulator import predict
from contracts.profile import load_default, save, to_dict
from tests.refusal import refused

pytestmark = pytest.mark.timeout(60)

BAD = [
    (["--batch-size", "99999999999"], "--batch-size"),
    (["--batch-size", "0"], "--batch-size"),
    (["--batch-size", "1.5"], "--batch-size"),
    (["--batch-size", "nan"], "--batch-size"),
    (["--heterogeneity", "inf"], "--heterogeneity"),
    (["--heterogeneity", "nan"], "--heterogeneity"),
    (["--heterogeneity", "-0.1"], "--heterogeneity"),
    (["--epochs", "inf"], "--epochs"),
    (["--epochs", "nan"], "--epochs"),
    (["--epochs", "0"], "--epochs"),
    (["--epochs", "-1"], "--epochs"),
    (["--epochs", "1e9"], "worker-iterations"),
    (["--iterations", "0"], "--iterations"),
    (["--iterations", "10000000000"], "--iterations"),
    (["--iterations", "100000000", "--workers", "64"], "worker-iterations"),
    (["--workers", "65536"], "simulations"),
    (["--workers", "0"], "--workers"),
    (["--workers", ""], "--workers"),
    (["--dataset-size", "0"], "--dataset-size"),
    (["--dataset-size", "-5"], "--dataset-size"),
    (["--dataset-size", "nan"], "--dataset-size"),
    (["--dataset", "imagenet"], "--dataset"),
    (["--schemes", ""], "--schemes"),
    (["--schemes", ","], "--schemes"),
    (["--schemes", "psgd,,nope"], "nope"),
    (["--algorithm", "ring"], "--allreduce-algorithm ring"),   # real.train's old name: a scheme
    (["--stragglers", "10", "--workers", "4"], "--stragglers"),
    (["--stragglers", "-1"], "--stragglers"),
    (["--straggler-slowdown", "0"], "--straggler-slowdown"),
    (["--straggler-slowdown", "inf"], "--straggler-slowdown"),
    (["--straggler-slowdown", "nan"], "--straggler-slowdown"),
    (["--straggler-slowdown", "0.5"], "--straggler-slowdown"),
    (["--horovod-groups", "-1"], "--horovod-groups"),
    (["--horovod-groups", "two"], "--horovod-groups"),
    (["--threads", "0"], "--threads"),
    (["--threads", "100000"], "--threads"),
    (["--cores-per-host", "0"], "--cores-per-host"),
    (["--cores-per-host", "nan"], "--cores-per-host"),
    (["--hosts", "-1"], "--hosts"),
    (["--hosts", "1.5"], "--hosts"),
    (["--hosts", "1000000"], "--hosts"),
    (["--ranks-per-host", "-1"], "--ranks-per-host"),
    (["--bandwidth", "nan", "--hosts", "2"], "bandwidth"),
    (["--bandwidth", "0gbit", "--hosts", "2"], "bandwidth"),
    (["--bandwidth", "1e999gbit", "--hosts", "2"], "bandwidth"),
    (["--latency", "inf", "--hosts", "2"], "latency"),
    (["--latency", "1e999s", "--hosts", "2"], "latency"),
    (["--avg-every", "-1"], "--avg-every"),
    (["--exchange-every", "-1"], "--exchange-every"),
    (["--bucket-mb", "nan"], "--bucket-mb"),
    (["--bucket-mb", "0"], "--bucket-mb"),
    (["--bucket-mb", "inf"], "--bucket-mb"),
    (["--seed", "-1"], "--seed"),
    (["--seed", "1e3"], "--seed"),
    (["--seed", str(2**70)], "--seed"),
    (["--model", ""], "model"),
    (["--format", "xml"], "--format"),
    (["--engine", "warp"], "--engine"),
    (["--bogus-flag"], "--bogus-flag"),
]


@pytest.mark.parametrize("argv,named", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_flags(argv, named, tmp_path, capsys):
    refused(predict.main, argv + ["--no-plot", "--out", tmp_path / "out"], named, capsys)


def test_out_that_is_a_file_or_under_one(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    for out in (tmp_path / "f", tmp_path / "f" / "sub"):
        refused(predict.main, ["--workers", "2", "--out", out], "--out", capsys)
    refused(predict.main, ["--workers", "2", "--no-plot", "--out", tmp_path / "o",
                           "--trace", tmp_path], "--trace", capsys)
    assert (tmp_path / "f").read_text() == "x"


def _profile_file(tmp_path, change) -> str:
    raw = json.loads(json.dumps(to_dict(load_default())))
    change(raw)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(raw))
    return str(path)


def _set(path: str, value):
    def change(raw):
        *where, last = path.split("/")
        d = raw
        for key in where:
            d = d[int(key)] if isinstance(d, list) else d[key]
        d[int(last) if isinstance(d, list) else last] = value
    return change


PROFILES = [
    (_set("cores", float("nan")), "cores"),
    (_set("wake_wait_s", float("nan")), "wake_wait_s"),
    (_set("scheduler_quantum_s", float("inf")), "scheduler_quantum_s"),
    (_set("models/0/steps/0/step_s_per_sample", float("nan")), "step_s_per_sample"),
    (_set("models/0/steps/0/step_intercept_s", float("inf")), "step_intercept_s"),
    (_set("models/0/steps/0/threads", 0), "threads"),
    (_set("models/0/param_count", 0), "param_count"),
    (_set("models/0/layer_param_counts", ["a"]), "layer_param_counts"),
    (_set("transports/0/alpha_s", float("-inf")), "alpha_s"),
    (_set("transports/0/beta_s_per_byte", "fast"), "beta_s_per_byte"),
    (_set("sharing_slowdown", {"2": float("nan")}), "sharing_slowdown"),
    (_set("sharing_slowdown", {"2": 0}), "sharing_slowdown"),
    (_set("cores", 0), "cores"),
    (_set("balance_delays_s", [0.1, float("nan")]), "balance_delays_s"),
    (_set("models", []), "models"),
]


@pytest.mark.parametrize("change,named", PROFILES, ids=[n for _, n in PROFILES])
def test_bad_profiles_are_refused_whole(change, named, tmp_path, capsys):
    path = _profile_file(tmp_path, change)
    line = refused(predict.main, ["--workers", "2", "--no-plot", "--out", tmp_path / "o",
                                  "--profile", path], named, capsys)
    assert path in line


@pytest.mark.parametrize("content,named", [
    (b"\x89PNG\r\n\x1a\n\x00\xff\xfe", "not a text"),
    (b"", "not valid JSON"),
    (b'{"schema_version": 1, "cores"', "not valid JSON"),
    (b"[1, 2]", "JSON object"),
])
def test_profiles_that_are_not_json_objects(content, named, tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_bytes(content)
    line = refused(predict.main, ["--workers", "2", "--no-plot", "--out", tmp_path / "o",
                                  "--profile", path], named, capsys)
    assert str(path) in line


def test_profile_that_is_a_folder(tmp_path, capsys):
    refused(predict.main, ["--workers", "2", "--no-plot", "--profile", tmp_path], "--profile",
            capsys)


CLUSTERS = [
    ("[cluster]\nhosts = 1000000000\ncores_per_host = 4\n[link]\nbandwidth='1gbit'\n"
     "latency='1us'\n", "hosts"),
    ("[cluster]\nhosts = 2\ncores_per_host = nan\n[link]\nbandwidth='1gbit'\nlatency='1us'\n",
     "cores_per_host"),
    ("[cluster]\nhosts = 2\ncores_per_host = 4\n[link]\nbandwidth=nan\nlatency='1us'\n",
     "bandwidth"),
    ("[cluster]\nhosts = 2\ncores_per_host = 4\n[link]\nbandwidth='1gbit'\nlatency=inf\n",
     "latency"),
    ("[cluster]\nhosts = 2\ncores_per_host = 4\nplacement = 'spread'\n[link]\n"
     "bandwidth='1gbit'\nlatency='1us'\n", "placement"),
    ("[cluster]\nhosts = 2\ncores_per_host = 4\nshared_cores = 'yes'\n[link]\n"
     "bandwidth='1gbit'\nlatency='1us'\n", "shared_cores"),
    ("[cluster]\nhosts = 2\ncores_per_host = 4\nhostz = 3\n[link]\nbandwidth='1gbit'\n"
     "latency='1us'\n", "hostz"),
    ("[cluster]\nhosts = 2\ncores_per_host = 4\n[link]\nbandwith='1gbit'\nlatency='1us'\n",
     "bandwith"),
]


@pytest.mark.parametrize("body,named", CLUSTERS, ids=[n for _, n in CLUSTERS])
def test_bad_cluster_files(body, named, tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text(body)
    refused(predict.main, ["--workers", "2", "--no-plot", "--out", tmp_path / "o",
                           "--cluster", path], named, capsys)


def test_binary_and_missing_cluster_files(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_bytes(b"\xff\xfe\x00binary")
    refused(predict.main, ["--workers", "2", "--no-plot", "--cluster", path], str(path), capsys)
    refused(predict.main, ["--workers", "2", "--no-plot", "--cluster", tmp_path / "none.toml"],
            "--cluster", capsys)


def test_nothing_is_written_before_a_refusal(tmp_path, capsys):
    out = tmp_path / "o"
    refused(predict.main, ["--workers", "2", "--epochs", "nan", "--out", out], "--epochs", capsys)
    assert not out.exists()
    save(load_default(), tmp_path / "p.json")
    before = (tmp_path / "p.json").read_bytes()
    refused(predict.main, ["--workers", "2", "--stragglers", "9", "--out", out,
                           "--profile", tmp_path / "p.json"], "--stragglers", capsys)
    assert (tmp_path / "p.json").read_bytes() == before and not out.exists()

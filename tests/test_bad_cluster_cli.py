"""python -m real.cluster: bad hosts, rates, bursts, subnets and prefixes are refused in one line,
before anything is created (no namespace, no state file); so is a check of a cluster that is not up.
"""
from __future__ import annotations

import pytest

from real.cluster import __main__ as cluster_cli
from real.cluster import state
from tests.refusal import refused

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def no_state(tmp_path, monkeypatch):
    """State files here, not in /run: no real cluster is read or touched."""
    monkeypatch.setattr(state, "STATE_DIR", tmp_path)


BAD = [
    ([], "command"),
    (["bogus"], "bogus"),
    (["up", "--hosts", "0"], "--hosts"),
    (["up", "--hosts", "1"], "--hosts"),
    (["up", "--hosts", "-1"], "--hosts"),
    (["up", "--hosts", "1.5"], "--hosts"),
    (["up", "--hosts", "100000"], "--hosts"),
    (["up", "--hosts", "300"], "--subnet"),                 # a /24 holds 254
    (["up", "--bandwidth", "fast"], "--bandwidth"),
    (["up", "--bandwidth", "0mbit"], "--bandwidth"),
    (["up", "--bandwidth", "nan"], "--bandwidth"),
    (["up", "--bandwidth", "1e999gbit"], "--bandwidth"),
    (["up", "--burst", "big"], "--burst"),
    (["up", "--burst", "1b"], "--burst"),
    (["up", "--burst", "100gb"], "--burst"),
    (["up", "--subnet", "bogus"], "--subnet"),
    (["up", "--subnet", "8.8.8.0/24"], "--subnet"),
    (["up", "--subnet", "fd00::/64"], "--subnet"),
    (["up", "--subnet", "10.77.0.1/24"], "--subnet"),
    (["up", "--subnet", "10.0.0.0/30", "--hosts", "5"], "--subnet"),
    (["up", "--prefix", "UPPER"], "--prefix"),
    (["up", "--prefix", "../x"], "--prefix"),
    (["up", "--prefix", "a" * 20], "--prefix"),
    (["down", "--prefix", "bad prefix"], "--prefix"),
    (["status", "--prefix", ""], "--prefix"),
    (["check", "--seconds", "nan"], "--seconds"),
    (["check", "--seconds", "0"], "--seconds"),
    (["check", "--src", "-1"], "--src"),
    (["check"], "no cluster up"),
    (["up", "--bogus"], "--bogus"),
]


@pytest.mark.parametrize("argv,named", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input(argv, named, tmp_path, capsys):
    refused(cluster_cli.main, argv, named, capsys)
    assert not list(tmp_path.iterdir())             # no state file, no launcher script


def test_check_between_hosts_the_cluster_lacks(tmp_path, capsys):
    c = state.Cluster(prefix="psgd", namespaces=("psgd-h0", "psgd-h1"),
                      addresses=("10.77.0.1", "10.77.0.2"), interface="psgd0",
                      subnet="10.77.0.0/24", bridge_namespace="psgd-br", bridge="br0",
                      bandwidth_bits_per_s=10**8, burst_bytes=16384,
                      hydra_launcher=str(tmp_path / "l"))
    import json
    state.state_path("psgd").write_text(json.dumps(c.to_json()))
    refused(cluster_cli.main, ["check", "--dst", "5"], "--dst", capsys)
    refused(cluster_cli.main, ["check", "--src", "1", "--dst", "1"], "--dst", capsys)
    state.state_path("psgd").write_text("{damaged")
    refused(cluster_cli.main, ["check"], "cannot be read", capsys)

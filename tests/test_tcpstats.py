"""real.records.tcpstats: the kernel's TCP counters read, differenced and kept once per host."""
from __future__ import annotations

from real.records import tcpstats

NETSTAT = ("TcpExt: SyncookiesSent TCPLossProbes TCPTimeouts\n"
           "TcpExt: 0 {probes} {timeouts}\n"
           "IpExt: InNoRoutes\nIpExt: 0\n")
SNMP = ("Ip: Forwarding\nIp: 1\n"
        "Tcp: RtoMin RetransSegs OutSegs\nTcp: 200 {retrans} {out}\n")


def write(folder, probes, timeouts, retrans, out):
    folder.mkdir(exist_ok=True)
    (folder / "netstat").write_text(NETSTAT.format(probes=probes, timeouts=timeouts))
    (folder / "snmp").write_text(SNMP.format(retrans=retrans, out=out))
    return tcpstats.counters(folder)


def test_counters_named_and_differenced(tmp_path):
    a = write(tmp_path / "a", 5, 1, 10, 1000)
    b = write(tmp_path / "b", 7, 4, 25, 3000)
    assert a == {"timeouts": 1, "loss_probes": 5, "retrans_segs": 10, "out_segs": 1000}
    assert tcpstats.delta(a, b) == {"timeouts": 3, "loss_probes": 2, "retrans_segs": 15,
                                    "out_segs": 2000}
    assert tcpstats.delta(None, b) is None


def test_missing_or_partial_tables_give_none(tmp_path):
    assert tcpstats.counters(tmp_path / "absent") is None
    (tmp_path / "netstat").write_text("TcpExt: TCPTimeouts\nTcpExt: 3\n")
    (tmp_path / "snmp").write_text(SNMP.format(retrans=1, out=2))
    assert tcpstats.counters(tmp_path) is None          # no TCPLossProbes: not trusted


def test_this_kernel_exposes_them():
    now = tcpstats.counters()
    assert now is not None and all(v >= 0 for v in now.values())


def test_one_entry_per_host_with_its_ranks():
    t = {"timeouts": 2, "loss_probes": 0, "retrans_segs": 9, "out_segs": 100}
    ranks = [{"host": "vm/h0", "tcp": t}, {"host": "vm/h1", "tcp": {**t, "timeouts": 0}},
             {"host": "vm/h0", "tcp": t}, {"host": "vm/h2", "tcp": None}]
    hosts = tcpstats.per_host(ranks)
    assert [(h["host"], h["ranks"], h["timeouts"]) for h in hosts] == [
        ("vm/h0", [0, 2], 2), ("vm/h1", [1], 0)]


def test_the_congestion_control_is_read_where_the_kernel_says_it(tmp_path):
    (tmp_path / "tcp_congestion_control").write_text("cubic\n")
    assert tcpstats.congestion_control(tmp_path) == "cubic"
    assert tcpstats.congestion_control(tmp_path / "absent") is None

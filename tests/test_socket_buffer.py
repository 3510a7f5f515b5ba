"""The first bytes of a message cross before its receive is posted (``Link.socket_buffer_bytes``).

Closed forms on an idle link of bandwidth B and latency L, a message of n bytes
sent at 0, its receive posted at D (after the eager part has crossed), buffer S:
the receiver has it all at ``D + L + (n - S) / B`` if n > S, else as soon as it
is posted; with S = 0 at ``D + L + n / B`` (rendezvous).
"""
from __future__ import annotations

import pytest
import simpy

from contracts.cluster import Cluster, Link
from contracts.profile import Transport
from contracts.units import parse_bytes
from contracts.workload import Workload
from simulator.engine import simulate
from simulator.model.comm import MessageComm
from simulator.model.config import SchemeConfig
from simulator.model.network import Routes
from simulator.model.recorder import Recorder
from simulator.testing import make_profile

B, L = 1e8, 50e-6


@pytest.mark.parametrize("n,buffer", [(4e6, 1e6), (4e6, 0.0), (1e6, 4e6)])
def test_a_late_receive_finds_the_first_bytes_there(n, buffer):
    post_s = 1.0                                      # well after the eager part crossed
    env = simpy.Environment()
    routes = Routes((0, 1), Link(B, L, buffer), Transport("mpi", 1e-6, 1e-10))
    comm = MessageComm(env, routes, routes.shm, Recorder((0, 1)))
    times = {}

    def receiver():
        yield env.timeout(post_s)
        yield comm.recv(1, 0, "t")
        times["received"] = env.now
    comm.isend(0, 1, n, "t")
    env.process(receiver())
    env.run()
    expected = post_s + (L + (n - buffer) / B if n > buffer else 0.0)
    assert times["received"] == pytest.approx(expected)


def test_parameter_server_gradients_cross_while_it_still_sends_weights():
    """ps_sync at P = 2, one rank per host: the first worker's gradient crosses the
    server's inbound link while the server still sends w to the second, whatever the
    socket buffer: between hosts a push moves whole (MPICH's ofi netmod hands it to
    libfabric, whose tcp provider saves it unexpected; ``model.schemes.ps.take_pushes``),
    so a step is three messages' time on the link and the server's copy of the last push,
    with no buffer as with one (a rendezvous gather without one would take four). (After
    the last step the server answers the last pushes: two more sends of w, once.)"""
    n = 4e6
    prof = make_profile(cores=1, layer_param_counts=(int(n / 4),), step_intercept_s=0.0,
                        step_s_per_sample=1e-9)
    work = Workload(model="toy", iterations=4, batch_per_worker=1)

    def step_s(buffer):
        cluster = Cluster(hosts=3, cores_per_host=1, link=Link(B, 0.0, buffer))
        return (simulate(SchemeConfig("ps_sync", fidelity="message", engine="des"), 2, work,
                         cluster, prof).time_s - 2 * n / B) / 4
    copy_s = n * prof.transports[0].beta_s_per_byte
    for buffer in (0.0, 2 * n):
        assert step_s(buffer) == pytest.approx(3 * n / B + copy_s, rel=0.01)


def test_sizes_need_a_unit():
    assert parse_bytes("4MiB") == 4 * 2**20 and parse_bytes("64kB") == 64e3
    with pytest.raises(ValueError, match="no unit"):
        parse_bytes("4096")

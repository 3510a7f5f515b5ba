"""real.launch.launchers: what mpirun, torchrun and srun tell a rank; a run under Slurm's variables."""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from real.launch import launchers as ln
from real.launch.dist import free_port
from contracts import record
from tests.conftest import MPIRUN, ROOT, py, run_cmd

SRUN_TASK = {"SLURM_JOB_ID": "4711", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "8",
             "SLURM_STEP_NUM_TASKS": "8", "SLURM_STEP_NODELIST": "node[01-04]",
             "SLURM_STEP_TASKS_PER_NODE": "2(x4)", "SLURM_JOB_NODELIST": "node[01-04]"}


@pytest.mark.parametrize("procid, node, localid", [(0, 0, 0), (3, 1, 1), (6, 3, 0), (7, 3, 1)])
def test_slurm_variables_map_to_the_right_ranks(procid, node, localid):
    env = SRUN_TASK | {"SLURM_PROCID": str(procid), "SLURM_NODEID": str(node),
                       "SLURM_LOCALID": str(localid)}
    launch = ln.env_launch(env)
    assert (launch.kind, launch.launcher) == ("env", "srun")
    assert (launch.rank, launch.world_size, launch.local_rank, launch.local_size) == \
        (procid, 8, localid, 2)
    assert launch.master_addr == "node01"
    assert launch.master_port == ln.SLURM_PORT_BASE + 4711 % ln.SLURM_PORT_SPAN
    assert ln.launched_world_size(env) == 8


def test_slurm_rendezvous_from_the_job_script_wins():
    env = SRUN_TASK | {"SLURM_PROCID": "2", "SLURM_NODEID": "1", "SLURM_LOCALID": "0",
                       "MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "29511"}
    launch = ln.env_launch(env)
    assert (launch.master_addr, launch.master_port) == ("10.0.0.9", 29511)


def test_uneven_tasks_per_node():
    env = SRUN_TASK | {"SLURM_NTASKS": "7", "SLURM_STEP_NUM_TASKS": "7",
                       "SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "SLURM_PROCID": "6",
                       "SLURM_NODEID": "3", "SLURM_LOCALID": "0"}
    assert ln.env_launch(env).local_size == 1


def test_a_batch_script_without_srun_is_one_process():
    env = {"SLURM_JOB_ID": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "8",
           "SLURM_JOB_NODELIST": "node[01-04]"}
    assert ln.env_launch(env).kind == "single"
    assert ln.launched_world_size(env) is None
    assert ln.allocation_tasks(env) == 8


def test_torchrun_and_hydra_are_told_apart_from_srun():
    torchrun = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                "MASTER_ADDR": "h0", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"}
    launch = ln.env_launch(torchrun | SRUN_TASK | {"SLURM_PROCID": "0"})
    assert (launch.launcher, launch.rank, launch.world_size, launch.local_size) == \
        ("torchrun", 1, 4, 2)
    assert ln.launcher_name({"PMI_RANK": "0", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0"}) == "mpirun"
    assert ln.launcher_name({"PMI_RANK": "0", "PMI_SIZE": "2"} | SRUN_TASK
                            | {"SLURM_PROCID": "0"}) == "srun"      # srun --mpi=pmi2
    assert ln.under_mpi({"PMI_RANK": "0"}) and not ln.under_mpi(SRUN_TASK)


@pytest.mark.parametrize("text, hosts", [
    ("node[01-03,07],gpu5", ["node01", "node02", "node03", "node07", "gpu5"]),
    ("a,b", ["a", "b"]),
    ("rack[1-2]-n[8-9]", ["rack1-n8", "rack1-n9", "rack2-n8", "rack2-n9"]),
    ("c[098-101]", ["c098", "c099", "c100", "c101"]),
])
def test_hostlists_expand_like_scontrol(text, hosts):
    assert ln.expand_hostlist(text) == hosts


@pytest.mark.parametrize("env, says", [
    ({"SLURM_PROCID": "8"}, "SLURM_PROCID=8 is outside 0..7"),
    ({"SLURM_PROCID": "x"}, "not a whole number"),
    ({"SLURM_PROCID": "0", "SLURM_STEP_TASKS_PER_NODE": "1(x4)"}, "do not match"),
    ({"SLURM_PROCID": "0", "SLURM_STEP_NODELIST": "node[01-"}, "cannot read"),
])
def test_bad_slurm_variables_say_which(env, says):
    with pytest.raises(ln.LaunchError, match=says.replace("(", r"\(").replace(")", r"\)")):
        ln.env_launch(SRUN_TASK | {"SLURM_NODEID": "0", "SLURM_LOCALID": "0"} | env)


def test_hosts_group_ranks_in_order():
    assert ln.hosts_of(["a", "b", "a", "c"]) == [{"host": "a", "ranks": [0, 2]},
                                                {"host": "b", "ranks": [1]},
                                                {"host": "c", "ranks": [3]}]


def _slurm_task(rank: int, ntasks: int, port: int) -> dict:
    return {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(rank),
            "SLURM_NTASKS": str(ntasks), "SLURM_NODEID": "0", "SLURM_LOCALID": str(rank),
            "SLURM_STEP_NODELIST": "localhost", "SLURM_STEP_TASKS_PER_NODE": str(ntasks),
            "MASTER_PORT": str(port)}


@pytest.mark.slow
def test_two_tasks_under_slurm_variables_train_and_record_the_launcher(tmp_path):
    """What srun -n 2 starts, started by hand: two tasks meet at the node list's first host."""
    port = free_port()
    argv = [sys.executable, "-m", "real.train", "--algorithm", "allreduce", "--model", "mlp",
            "--dataset", "synthetic", "--train-size", "256", "--test-size", "64",
            "--batch-size", "32", "--threads", "1", "--out", str(tmp_path), "--run-id", "slurm"]
    import os
    base = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen(argv, cwd=ROOT, env=base | _slurm_task(r, 2, port),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    env = record.read(tmp_path / "slurm")["environment"]
    assert env["launcher"] == "srun" and env["ranks"] == 2 and env["ranks_per_host"] == 2
    assert env["hosts"] == [{"host": socket.gethostname(), "ranks": [0, 1]}]


def test_train_refuses_more_workers_than_the_slurm_tasks(tmp_path):
    r = py("real.train", "--algorithm", "allreduce", "--workers", "4", "--dataset", "synthetic",
           "--out", str(tmp_path), env=_slurm_task(0, 2, 29999))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--workers 4 does not match the 2 ranks launched" in r.stderr
    assert not any(tmp_path.iterdir())


def test_bad_slurm_variables_are_a_usage_error(tmp_path):
    r = run_cmd([sys.executable, "-m", "real.train", "--dataset", "synthetic", "--out",
                 str(tmp_path)], env=_slurm_task(0, 2, 29999) | {"SLURM_STEP_NODELIST": "n[1-"})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "host list" in r.stderr and "Traceback" not in r.stderr


def test_pmi_finalize_is_said_on_hydras_socket_and_acknowledged():
    from real.launch.dist import finalize_pmi
    ours, hydra = socket.socketpair()
    with ours, hydra:
        hydra.sendall(b"cmd=finalize_ack\n")         # answered before asked: read after write
        assert finalize_pmi({"PMI_FD": str(ours.fileno())})
        assert hydra.recv(64) == b"cmd=finalize\n"


def test_pmi_finalize_without_hydra_or_without_an_answer_is_false(monkeypatch):
    from real.launch import dist
    assert not dist.finalize_pmi({})                  # Slurm, Open MPI, torchrun: no PMI_FD
    monkeypatch.setattr(dist, "PMI_ACK_WAIT_S", 0.05)
    ours, hydra = socket.socketpair()
    with ours, hydra:
        assert not dist.finalize_pmi({"PMI_FD": str(ours.fileno())})


LEAVES_EARLY = """
import os, sys, time
from mpi4py import MPI
from real.launch.dist import finalize_mpi
rank = MPI.COMM_WORLD.Get_rank()
finalize_mpi()
if rank == 1:
    time.sleep(1.0)            # still working when rank 0 has left by os._exit
    print("rank 1 finished", flush=True)
os._exit(0)
"""


@pytest.mark.slow
def test_a_rank_leaving_by_os_exit_does_not_end_its_peers_under_mpirun():
    """MPICH says PMI finalize from an exit handler that os._exit skips: without
    finalize_pmi, hydra SIGKILLs rank 1 as soon as rank 0's PMI socket closes."""
    r = run_cmd([MPIRUN, "-n", "2", sys.executable, "-c", LEAVES_EARLY], cwd=ROOT)
    assert r.returncode == 0 and "rank 1 finished" in r.stdout, r.stdout + r.stderr

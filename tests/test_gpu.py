"""GPUs: --device cuda and --backend nccl, refused in one line where they cannot run.

The runs on a GPU are skipped where torch sees no CUDA device (this project's CPU
build); the refusals are checked everywhere.
"""
from __future__ import annotations

import pytest
import torch

from contracts import record
from tests.conftest import mpi, py, run_cmd

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device (CPU build of torch)")


def refused(r, says: str, out) -> None:
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists() or not any(out.iterdir()), "a record was written"


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal where there is no GPU")
def test_device_cuda_without_cuda_is_refused(tiny, tmp_path):
    refused(py("real.train", "--device", "cuda", *tiny), "--device cuda: no CUDA device here",
            tmp_path / "runs")


@pytest.mark.parametrize("argv, says", [
    (["--algorithm", "allreduce", "--backend", "nccl"], "--backend nccl runs on GPUs only"),
    (["--algorithm", "serial", "--backend", "nccl"], "--backend nccl runs on GPUs only"),
])
def test_nccl_on_cpu_is_refused(tiny, tmp_path, argv, says):
    refused(py("real.train", *argv, *tiny), says, tmp_path / "runs")


@pytest.mark.slow
def test_nccl_on_cpu_under_mpirun_is_refused_once(tiny, tmp_path):
    refused(mpi(2, "real.train", "--algorithm", "ddp", "--backend", "nccl", *tiny),
            "--backend nccl runs on GPUs only", tmp_path / "runs")


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal where there is no GPU")
def test_calibration_on_a_missing_gpu_is_refused(tmp_path):
    r = py("calibrate.probe", "--part", "compute", "--device", "cuda", "--workdir", str(tmp_path))
    refused(r, "--device cuda: no CUDA device here", tmp_path)


@needs_cuda
def test_serial_on_the_gpu_records_the_device(tiny, tmp_path):
    r = py("real.train", "--algorithm", "serial", "--device", "cuda", *tiny)
    assert r.returncode == 0, r.stderr
    rec = record.read(record.find_runs(tmp_path / "runs")[0])
    dev = rec["environment"]["device"]
    assert dev["type"] == "cuda" and dev["name"] and dev["cuda_runtime"]
    assert rec["results"]["test_accuracy"] >= 0


@needs_cuda
@pytest.mark.slow
@pytest.mark.parametrize("alg", ["allreduce", "ddp", "gather_scatter"])
def test_torch_distributed_schemes_on_nccl(tiny, tmp_path, alg):
    import sys
    r = run_cmd([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1",
                 "-m", "real.train", "--algorithm", alg, "--device", "cuda", *tiny])
    assert r.returncode == 0, r.stderr[-2000:]
    rec = record.read(record.find_runs(tmp_path / "runs")[0])
    assert rec["comm"]["backend"] == "nccl" and rec["environment"]["device"]["nccl"]


@needs_cuda
@pytest.mark.slow
def test_mpi_scheme_computes_on_the_gpu(tiny, tmp_path):
    r = mpi(1, "real.train", "--algorithm", "mpi_allreduce", "--device", "cuda", *tiny)
    assert r.returncode == 0, r.stderr[-2000:]
    assert record.read(record.find_runs(tmp_path / "runs")[0])["environment"]["device"]["type"] \
        == "cuda"


@needs_cuda
def test_compute_probe_on_the_gpu(tmp_path):
    r = py("calibrate.probe", "--part", "compute", "--device", "cuda", "--quick", "--models",
           "cnn", "--batches", "16,32", "--workdir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    import pandas as pd
    rows = pd.read_csv(tmp_path / "compute_steps.csv")
    assert set(rows["device"]) == {"cuda"} and set(rows["threads"]) == {1}

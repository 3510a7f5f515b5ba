"""Where a rank computes (``--device cpu|cuda``) and which torch.distributed backend it uses.

* ``cpu`` (the default): every scheme; torch.distributed on gloo.
* ``cuda``: one GPU per rank, ``cuda:<local rank>`` (``real.launch.launchers``: ranks on a
  host take its GPUs in turn). The training shard lives on the GPU; the MPI schemes
  (psgd, async_avg, mpi_allreduce, ps_*) copy weights or gradients to host memory
  for each message (MPI here is not CUDA-aware); gather_scatter, allreduce and ddp
  use NCCL (``--backend auto`` or ``nccl``), or gloo where gloo has the CUDA
  collective (allreduce, ddp). hogwild shares one model in CPU memory between
  processes: CPU only.

``device_problem`` says, in one line, why a request cannot run here (no CUDA, NCCL
on CPU, NCCL for an MPI scheme, more ranks than GPUs for NCCL); ``describe`` is
what the record keeps about the device: name, driver, CUDA and NCCL versions.

Imports: torch, real.schemes.
"""
from __future__ import annotations

import shutil
import subprocess

from real import schemes



def device_of(args) -> str:
    return getattr(args, "device", None) or "cpu"


def backend_of(args) -> str:
    """The torch.distributed backend: ``--backend``, or nccl on GPUs and gloo on CPU."""
    backend = getattr(args, "backend", None) or "auto"
    if backend == "auto":
        return "nccl" if device_of(args) == "cuda" and \
            schemes.SCHEMES[args.algorithm].talks == "torch" else "gloo"
    return backend


def device_problem(args, launch) -> str | None:
    """Why this device and backend cannot run here, or None."""
    import torch
    device, backend, alg = device_of(args), getattr(args, "backend", None) or "auto", args.algorithm
    if backend == "nccl" and device != "cuda":
        return "--backend nccl runs on GPUs only: add --device cuda, or keep gloo on CPU"
    if backend == "nccl" and alg not in schemes.TORCH_DISTRIBUTED:
        return (f"--backend nccl is for {', '.join(schemes.TORCH_DISTRIBUTED)}; "
                f"{alg} talks through {'MPI' if alg in schemes.RANK_BASED else 'no network'}")
    if device != "cuda":
        return None
    if not torch.cuda.is_available():
        why = ("this torch is a CPU build" if torch.version.cuda is None
               else "no GPU is visible (CUDA_VISIBLE_DEVICES, driver)")
        return f"--device cuda: no CUDA device here ({why}); run on CPU with --device cpu"
    if schemes.SCHEMES[alg].own_processes:
        return f"{alg} shares one model in CPU memory between processes: use --device cpu"
    scheme = schemes.SCHEMES[alg]
    if backend_of(args) == "gloo" and scheme.talks == "torch" and not scheme.gloo_on_cuda:
        return f"{alg} on GPUs needs --backend nccl (gloo cannot gather or scatter CUDA tensors)"
    gpus = torch.cuda.device_count()
    if backend_of(args) == "nccl" and launch.local_size > gpus:
        return (f"--backend nccl: {launch.local_size} ranks on this host but {gpus} GPU(s); "
                "NCCL needs a GPU of its own per rank")
    return None


def select_device(args, launch):
    """The torch device of this rank (and make it current: NCCL and CUDA kernels use it)."""
    import torch
    if device_of(args) != "cuda":
        return torch.device("cpu")
    index = launch.local_rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def synchronizer(device):
    """A function that waits for the device's queued work (CUDA runs asynchronously), or None."""
    if device.type != "cuda":
        return None
    import torch
    return lambda: torch.cuda.synchronize(device)


def describe(device) -> dict:
    """What the record says about where the ranks computed."""
    import torch
    if device.type != "cuda":
        return {"type": "cpu"}
    import torch.distributed as dist
    props = torch.cuda.get_device_properties(device)
    nccl = torch.cuda.nccl.version() if dist.is_nccl_available() else None
    return {"type": "cuda", "name": props.name, "memory_bytes": int(props.total_memory),
            "capability": f"{props.major}.{props.minor}", "count": torch.cuda.device_count(),
            "driver": _driver_version(), "cuda_runtime": torch.version.cuda,
            "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl}


def _driver_version() -> str | None:
    """The NVIDIA driver's version (nvidia-smi), else CUDA's driver API version."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10, check=False)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.splitlines()[0].strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        import torch
        v = torch._C._cuda_getDriverVersion()      # e.g. 12040 for CUDA 12.4
        return f"CUDA driver API {v // 1000}.{v % 1000 // 10}"
    except (AttributeError, RuntimeError):
        return None

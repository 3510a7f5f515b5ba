"""Predict NVIDIA's DeepLearningExamples ResNet-50 scaling tables and set them against the
published throughput.

    python -m benchmarks.dle.check --out docs/dle

The tables (``TABLES``): ResNet-50 v1.5 trained on one DGX by the examples' own scripts,
images per second at 1 to 8 (16 on a DGX-2) GPUs of one server, the batch per GPU fixed:

* PyTorch (``PyTorch/Classification/ConvNets/resnet50v1.5/README.md``, commit
  291f0d02e815, pytorch-21.03 NGC container): DGX A100 80GB (TF32, mixed precision),
  DGX-1 16GB and 32GB (FP32, mixed precision); DDP over NCCL, gradients in fp32 (native
  AMP keeps fp32 master weights); the input through PyTorch's DataLoader (the benchmark
  command's ``configs.yml`` at the tables' commit 7bdfc81d: ``data_backend: pytorch``, 16
  workers a GPU on a DGX A100 and 8 on a DGX-1, unpinned: ``LOADER_WORKERS``);
* MXNet (``MxNet/Classification/RN50v1.5/README.md``, commit 134510b4b7ff, mxnet-20.12
  NGC container): DGX A100 80GB, DGX-1 16GB, DGX-2; Horovod over NCCL, gradients in fp16
  with ``--dtype float16`` (``net.cast('float16')``: the parameters, so their gradients, are
  fp16; ``multi_precision`` keeps the fp32 copy in the optimizer), in fp32 otherwise.

Scaling efficiency = throughput on P GPUs / (P x throughput on one). Every point is
predicted from public inputs with the mechanisms on, nothing fitted to the published
efficiency: the tensors of ResNet-50 in gradient-ready order and their FLOPs per layer
(``benchmarks/dle/resnet50-cpu.toml``, ``python -m calibrate.workload`` on
``benchmarks.horovod.models:resnet50``), one GPU's published throughput in that
precision as the step (backward 2/3 of it, split by FLOPs), the server's preset
(``dgx-a100``, ``dgx1-v100``, ``dgx2``: NCCL's costs from its source, and compute 18.9%
slower while NCCL runs beside it), DDP's buckets (1 MiB first, 25 MiB after, the last one
exposed) or Horovod's 64 MiB fusion buffers and its cycle of 0.1 ms (the MXNet ``runner``
sets ``HOROVOD_CYCLE_TIME=0.1``).

The PyTorch runs' input pipeline (``simulator.model.hardware.input_pipeline``): each GPU's
``LOADER_WORKERS`` decode its batches on the server's ``cpu_cores``, unpinned, each image at
the CPU time it takes with that many processes busy at once: the curve measured by
``benchmarks.dle.input_probe`` on the lent machine's host (``INPUT_PROBE``: 16 cores of an
Intel Xeon, Emerald Rapids, Pillow 13.0.0 with libjpeg-turbo 3.2.0; 3.50 ms an image alone,
3.9-4.2 ms with 4 to 16 at once), held at 16 beyond. The published servers' CPUs (AMD EPYC
7742, Zen 2, 2019; Xeon E5-2698 v4, Broadwell, 2016) ran the pytorch-21.03 container's
older Pillow: no source publishes their cost an image, and an older core is slower, so the
measured curve is a floor there, and a floor only binds where it is longer than the step:
applied as measured, it moves no point (the output says by how much it stays under each
step, and what time an image would set the published step). MXNet's runs decode with DALI
(``data.py`` at 134510b4b7ff: ``--data-backend`` default ``dali-gpu``): not applied; its GPU
part is each GPU's own and sits in the one-GPU step, and the output says what time an image
its CPU threads (``DALI_THREADS``) would need to set each V100 point (``dali_lines``).

DDP's own calls (``simulator.model.hardware.ddp_calls``: each buffer broadcast before each
forward at the presets' measured 18.4 us, each gradient into its bucket and back at 6.64 us,
4.00 ms a step for ResNet-50's 159 buffers and 161 tensors) lengthen the PyTorch step at more than one GPU only: the examples wrap the model in
DDP only then (``ConvNets/main.py``: ``executor.distributed`` if ``args.distributed``,
``WORLD_SIZE > 1``), so their one-GPU step, the model's step, has none.

The optimizer's step (``simulator.model.hardware.optimizer_step``): the PyTorch benchmark
command accumulates gradients up to ``optimizer_batch_size`` (``configs.yml`` at 7bdfc81d:
2048 images, 896 for the DGX-1's FP32 runs; ``main.py``: ``batch_size_multiplier =
optimizer_batch_size / (world_size x batch_size)``), so the one-GPU runs step the optimizer
every 8th iteration (12 of the ``--prof 100``) and the eight-GPU runs every iteration. The
step is ``torch.optim.SGD`` per tensor and ``zero_grad`` (707 calls for ResNet-50); under
amp ``GradScaler.step`` first reads ``found_inf.item()``, which drains the GPU, so the calls
go out one by one on an idle GPU at the host's time a call (the preset's ``host_call``: 7.74
us measured on the lent H200 machine's host, a floor for the tables' older hosts and torch);
without amp they queue behind the backward and cost their kernels' bytes at the GPU's memory
bandwidth (the preset's ``memory_bandwidth``, datasheets): ``optimizer_step.sgd_step_s``,
the function ``simulator.predict`` charges. The one-GPU step the model takes is the published rate
with the update's share taken out (the examples average per-iteration rates).

Writes ``dle.csv`` and ``dle.md`` (the table of points and differences) into ``--out``.
"""
from __future__ import annotations

import json
import sys
from functools import lru_cache
from dataclasses import dataclass, replace
from pathlib import Path

import cli
from contracts.files import atomic_write_text
from contracts.profile import load_default
from contracts.workload import ModelWorkload, Workload, load_workload
from simulator.describe import growing
from contracts.cluster import load_preset
from simulator.engine import steady_iteration_s
from simulator.engine.machine import machine
from simulator.engine.run import make_plan, resolve_scheme
from simulator.model.config import SchemeConfig
from simulator.model.hardware.input_pipeline import busy_processes, image_s, input_step_s
from simulator.model.hardware.optimizer_step import (mean_rate_step_s, sgd_ops_bytes,
                                                     sgd_step_s, step_without_update_s,
                                                     update_share, zero_ops_bytes)

PROG = "python -m benchmarks.dle.check"

HERE = Path(__file__).resolve().parent
PYTORCH = ("NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md "
           "(commit 291f0d02e815), 'Training performance results', pytorch-21.03 NGC container")
MXNET = ("NVIDIA DeepLearningExamples, MxNet/Classification/RN50v1.5/README.md (commit "
         "134510b4b7ff), 'Training performance results', mxnet-20.12-py3 NGC container")


@dataclass(frozen=True)
class Table:
    framework: str           # PyTorch (ddp) or MXNet (horovod)
    system: str
    preset: str
    device: str
    precision: str
    batch: int               # per GPU
    throughput: dict         # GPUs -> images per second
    source: str


# The batch a GPU is the benchmark command's (``launch.py`` takes ``configs.yml``'s
# ``models.resnet50.<platform>.<precision>`` at the tables' commit 7bdfc81d): 256 everywhere
# but the DGX-1's FP32 runs, ``RN50_DGX1V: FP32: batch_size: 112`` (the 16 GB V100's memory
# at fp32; the DGX1V-16G and -32G platforms take the same anchor).
TABLES = (
    Table("PyTorch", "DGX A100 80GB", "dgx-a100", "A100 SXM4", "tf32", 256,
          {1: 938, 8: 7248}, PYTORCH + ", NVIDIA DGX A100 (8x A100 80GB), TF32"),
    Table("PyTorch", "DGX A100 80GB", "dgx-a100", "A100 SXM4", "amp", 256,
          {1: 2470, 8: 16621}, PYTORCH + ", NVIDIA DGX A100 (8x A100 80GB), mixed precision"),
    Table("PyTorch", "DGX-1 16GB", "dgx1-v100", "Tesla V100 SXM2", "fp32", 112,
          {1: 367, 8: 2855}, PYTORCH + ", NVIDIA DGX-1 16GB (8x V100 16GB), FP32"),
    Table("PyTorch", "DGX-1 16GB", "dgx1-v100", "Tesla V100 SXM2", "amp", 256,
          {1: 1200, 8: 8322}, PYTORCH + ", NVIDIA DGX-1 16GB (8x V100 16GB), mixed precision"),
    Table("PyTorch", "DGX-1 32GB", "dgx1-v100", "Tesla V100 SXM2", "fp32", 112,
          {1: 356, 8: 2766}, PYTORCH + ", NVIDIA DGX-1 32GB (8x V100 32GB), FP32"),
    Table("PyTorch", "DGX-1 32GB", "dgx1-v100", "Tesla V100 SXM2", "amp", 256,
          {1: 1156, 8: 8056}, PYTORCH + ", NVIDIA DGX-1 32GB (8x V100 32GB), mixed precision"),
    Table("MXNet", "DGX A100 80GB", "dgx-a100", "A100 SXM4", "tf32", 256,
          {1: 1022, 2: 2032, 4: 4035, 8: 8001}, MXNET + ", NVIDIA DGX A100 (8x A100 80GB), TF32, -b 256"),
    Table("MXNet", "DGX A100 80GB", "dgx-a100", "A100 SXM4", "amp", 256,
          {1: 2180, 2: 4332, 4: 8587, 8: 16925},
          MXNET + ", NVIDIA DGX A100 (8x A100 80GB), mixed precision, -b 256"),
    Table("MXNet", "DGX-1 16GB", "dgx1-v100", "Tesla V100 SXM2", "fp32", 96,
          {1: 384, 2: 763, 4: 1513, 8: 3005}, MXNET + ", NVIDIA DGX-1 (8x V100 16GB), FP32, -b 96"),
    Table("MXNet", "DGX-1 16GB", "dgx1-v100", "Tesla V100 SXM2", "amp", 192,
          {1: 1376, 2: 2768, 4: 5357, 8: 10723},
          MXNET + ", NVIDIA DGX-1 (8x V100 16GB), mixed precision, -b 192"),
    Table("MXNet", "DGX-2", "dgx2", "Tesla V100 SXM2", "fp32", 128,
          {1: 417, 2: 821, 4: 1623, 8: 3223, 16: 6338},
          MXNET + ", NVIDIA DGX-2 (16x V100 32GB), FP32, -b 128"),
    Table("MXNet", "DGX-2", "dgx2", "Tesla V100 SXM2", "amp", 256,
          {1: 1492, 2: 2935, 4: 5726, 8: 11368, 16: 21484},
          MXNET + ", NVIDIA DGX-2 (16x V100 32GB), mixed precision, -b 256"),
)
ITERATIONS = 4                           # a run of 4 and one of 8: steady_iteration_s
# The MXNet runs' Horovod background cycle: the README's ``runner`` sets
# HOROVOD_CYCLE_TIME=0.1 (milliseconds) before it starts horovodrun, for every precision and
# GPU count (MxNet/Classification/RN50v1.5/runner at 134510b4b7ff); Horovod reads it as its
# cycle in ms (horovod/common/operations.cc, v0.21.0: SetCycleTimeMs(strtof(HOROVOD_CYCLE_TIME))).
MXNET_CYCLE_S = 0.1e-3


# DataLoader workers a GPU when the PyTorch tables were measured: configs.yml at 7bdfc81d
# (2021-04-20, the README's tables, pytorch-21.03): ``workers: 16`` for DGXA100, 8 for DGX1V,
# no GPU affinity (``gpu_affinity``, and ``workers: 10`` on DGXA100, came with 0fadac23,
# 2021-11-22, the tables unchanged), so every process and worker could run on any core.
LOADER_WORKERS = {"DGX A100 80GB": 16, "DGX-1 16GB": 8, "DGX-1 32GB": 8}
# The input pipeline's CPU time an image against loader processes busy at once, measured on
# the lent GPU machine's host (16 cores of an Intel Xeon, family 6 model 207, Emerald Rapids;
# Pillow 13.0.0, libjpeg-turbo 3.2.0; 2026-11-27 16:02 UTC; the command and machine in the
# .txt beside it): ``bash benchmarks/dle/input_probe_device.sh``.
INPUT_PROBE = HERE.parent / "gpu" / "results" / "h200-host-2026-11-27-input.json"


# The optimizer's batch of the PyTorch benchmark command (``configs.yml`` at 7bdfc81d:
# ``resnet_params_2k: optimizer_batch_size: 2048`` for DGXA100 TF32 and AMP and DGX1V AMP,
# ``resnet_params_896: 896`` for DGX1V FP32) and its iterations (the README's ``--prof 100``).
OPTIMIZER_BATCH = {("DGX A100 80GB", "tf32"): 2048, ("DGX A100 80GB", "amp"): 2048,
                   ("DGX-1 16GB", "fp32"): 896, ("DGX-1 16GB", "amp"): 2048,
                   ("DGX-1 32GB", "fp32"): 896, ("DGX-1 32GB", "amp"): 2048}
PROF_ITERATIONS = 100
# The update's GPU and host costs are the preset's (``[device] memory_bandwidth``: the
# datasheets' A100 80GB SXM 2,039 GB/s and V100 SXM2 900 GB/s; ``host_call``: 7.74 us a call
# measured on the lent H200 machine's host, ``benchmarks/gpu/results/h200-2026-11-27-step.json``,
# a floor for the tables' hosts and torch 1.9), as ``simulator.predict`` reads them.


@lru_cache(maxsize=1)
def resnet50() -> ModelWorkload:
    """ResNet-50 v1.5's workload file, read once."""
    return load_workload(HERE / "resnet50-cpu.toml")


def weight_decayed(name: str) -> bool:
    """Whether the example's SGD decays a tensor: ``get_sgd_optimizer`` exempts names with
    "bn" (``bn_weight_decay`` off). In the example's ResNet the stem's and the blocks'
    BatchNorms are ``bn1``.. ``bn3`` and the shortcut's ``downsample.1``; this workload file
    names them ``stem.1``, ``stages.N.bnK`` and ``stages.N.down.1``."""
    return not (".bn" in name or name.startswith("stem.1."))


def update_tensors() -> list[tuple[int, bool]]:
    """(elements, weight-decayed) of each of ResNet-50's parameter tensors, in its order."""
    return [(x.params, weight_decayed(x.name)) for layer in resnet50().layers
            for x in layer.tensors]


def update_calls_bytes(t: Table) -> tuple[list[int], list[int]]:
    """Bytes of each call of the example's SGD step, then of its ``zero_grad``."""
    tensors = update_tensors()
    return (sgd_ops_bytes([n for n, d in tensors if d], [n for n, d in tensors if not d]),
            zero_ops_bytes([n for n, _ in tensors]))


def update_s(t: Table) -> float:
    """What one optimizer step adds to an iteration (``optimizer_step.sgd_step_s``, as
    ``simulator.predict`` charges it) on the preset's device: under amp the gradients'
    unscale queued, then the calls one by one from an idle GPU; without amp every call
    queued behind the backward."""
    device = load_preset(t.preset).device
    return sgd_step_s(update_tensors(), t.precision, device.memory_bytes_per_s,
                      device.host_call_s)


def share_of_updates(t: Table, gpus: int) -> float:
    """The share of the benchmark's iterations that step the optimizer at ``gpus`` GPUs."""
    every = int(OPTIMIZER_BATCH[(t.system, t.precision)] / (gpus * t.batch))
    return update_share(PROF_ITERATIONS, every)


def update_lines() -> list[str]:
    lines = ["| system | precision | calls | one update | share of iterations, 1 / 8 GPUs "
             "| added at 8 GPUs |", "|---|---|---:|---:|---:|---:|"]
    for t in (t for t in TABLES if t.framework == "PyTorch"):
        sgd, zero = update_calls_bytes(t)
        c, f1, f8 = update_s(t), share_of_updates(t, 1), share_of_updates(t, 8)
        lines.append(f"| {t.system} | {t.precision} | {len(sgd) + len(zero)} | "
                     f"{1e3 * c:.2f} ms | {f1:.2f} / {f8:.2f} | {1e3 * c * (f8 - f1):.2f} ms |")
    return lines


# DALI's CPU threads a GPU in the MXNet runs: ``dali.py`` at 134510b4b7ff, ``--dali-threads``
# default 4 (the README's help text says 3; the runner passes none). With ``--data-backend
# dali-gpu`` the decoder is "mixed" (nvJPEG): for images under ``hybrid_huffman_threshold``
# pixels (DALI's default 1,000,000; ImageNet's mean is about 181,000) the Huffman decoding
# runs on these threads, the rest (IDCT, crop, resize, normalize) on the training GPU.
DALI_THREADS = 4


def dali_ms_per_image(t: Table, gpus: int) -> float:
    """The CPU time an image of DALI's CPU stage that would set the published step at
    ``gpus`` GPUs (``ms_per_image_setting`` with ``DALI_THREADS`` threads a GPU)."""
    return ms_per_image_setting(t, gpus, DALI_THREADS)


def ms_per_image_setting(t: Table, gpus: int, processes: int) -> float:
    """The CPU time an image that would set the published step at ``gpus`` GPUs when each
    GPU's ``processes`` prepare its batch on their share of the server's cores:
    step = batch x time / (processes x min(1, cpu_cores / (gpus x processes)))."""
    step_s = t.batch * gpus / t.throughput[gpus]
    return 1e3 * step_s * processes * worker_cores(t, gpus, processes) / t.batch


def dali_lines() -> list[str]:
    """For the MXNet runs on V100 servers (no hardware JPEG decoder): the time an image of
    DALI's CPU stage that keeps the one-GPU run bound by its GPU (at most), and the time
    that would set each published multi-GPU step. A constant cost sets a point only where
    the second is below the first."""
    lines = ["| system | precision | threads a GPU | one GPU stays GPU-bound at most | "
             "sets the published step at 2 / 4 / 8 (/ 16) GPUs |", "|---|---|---:|---:|---|"]
    for t in TABLES:
        if t.framework != "MXNet" or t.device != "Tesla V100 SXM2":
            continue
        need = " / ".join(f"{dali_ms_per_image(t, g):.2f}" for g in t.throughput if g > 1)
        lines.append(f"| {t.system} | {t.precision} | {DALI_THREADS} | "
                     f"{dali_ms_per_image(t, 1):.2f} ms | {need} ms |")
    return lines


# Horovod's grouped allreduces, read against the MXNet runs: the runner sets
# MXNET_HOROVOD_NUM_GROUPS=16 (MxNet/Classification/RN50v1.5/runner at 8c42220b, the 20.12
# tables' commit, and 134510b4b7ff), while fit.py builds ``hvd.DistributedTrainer(params,
# optimizer, optimizer_params)`` with no ``num_groups`` (0: each gradient alone, Horovod
# 0.21's ``_allreduce_grads``); HOROVOD_GROUPED_ALLREDUCES, which turns groups on in NVIDIA's
# Horovod branch (951813a0), is set only from the 22.10 runner (1bd98ac3). What reads the
# variable in NGC's MXNet 20.12 is not published, so the check keeps 0 and prints both
# readings beside it; 1 group is every gradient after the backward (nothing overlapped).
GROUPINGS = (0, 16, 1)


def grouping_lines(points: list[dict] | None = None, groups: int = 0) -> list[str]:
    """Each MXNet point's predicted efficiency with its gradients in 0 (each alone), 16 and
    1 grouped allreduces: how far the allreduces' schedule can move a point. ``points``:
    the check's rows, predicted with ``groups``, taken as they are rather than again."""
    pred = {(t.system, t.precision, g): predict(t, groups=g)
            for t in TABLES if t.framework == "MXNet" for g in GROUPINGS
            if points is None or g != groups}
    for r in points or []:
        if r["framework"] == "MXNet" and groups in GROUPINGS:
            pred.setdefault((r["system"], r["precision"], groups), {})[r["gpus"]] = (
                r["predicted"], r["predicted_iteration_s"])
    head = " | ".join(f"{g} groups" if g != 1 else "1 group" for g in GROUPINGS)
    lines = [f"| system | precision | GPUs | published | {head} |",
             "|---|---|---:|---:|" + "---:|" * len(GROUPINGS)]
    for t in TABLES:
        if t.framework != "MXNet":
            continue
        for p, ips in t.throughput.items():
            if p == 1:
                continue
            cells = " | ".join(f"{pred[t.system, t.precision, g][p][0]:.1f}%"
                               for g in GROUPINGS)
            lines.append(f"| {t.system} | {t.precision} | {p} | "
                         f"{100 * ips / (p * t.throughput[1]):.1f}% | {cells} |")
    return lines


def input_curve() -> tuple[float, tuple[tuple[int, float], ...]]:
    """The probe's seconds an image with one loader process, and (processes at once,
    seconds an image) above one: each the median over its windows."""
    levels = json.loads(INPUT_PROBE.read_text())["levels"]
    one = next(lv["s_per_image"] for lv in levels if lv["processes"] == 1)
    return one, tuple((lv["processes"], lv["s_per_image"]) for lv in levels
                      if lv["processes"] > 1)


def worker_cores(t: Table, gpus: int, processes: int | None = None) -> float:
    """Cores a DataLoader worker (or each of ``processes`` a GPU) has when ``gpus`` GPUs'
    workers share the server's ``cpu_cores`` (the preset's physical cores; hyperthreads and
    the training processes left out) unpinned: one each while they fit, fewer after."""
    n = LOADER_WORKERS[t.system] if processes is None else processes
    return min(1.0, load_preset(t.preset).cpu_cores / (gpus * n))


def input_ms_per_image(t: Table, gpus: int) -> float:
    """The CPU time an image would take on one core for the input pipeline to set the
    published step at ``gpus`` GPUs: each GPU's workers (``LOADER_WORKERS``) prepare its
    batch on ``worker_cores`` each, so step = batch x time / (workers x cores a worker)."""
    return ms_per_image_setting(t, gpus, LOADER_WORKERS[t.system])


def input_lines() -> list[str]:
    """The PyTorch tables' input pipeline as applied (``input_curve``, the workers' share of
    the cores), against the step without it, and the time an image that would set the
    published eight-GPU step (``input_ms_per_image``)."""
    one, at = input_curve()
    busy_s = (tuple(float(n) for n, _ in at), tuple(x for _, x in at))
    lines = ["| system | precision | workers a GPU | busy processes, 1 / 8 GPUs | time an "
             "image (measured) | input floor, 1 / 8 GPUs | model step without it, 1 / 8 GPUs "
             "| time an image that sets the published 8-GPU step |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for t in TABLES:
        if t.framework != "PyTorch":
            continue
        cores, w = load_preset(t.preset).cpu_cores, LOADER_WORKERS[t.system]
        busy = [busy_processes(w, g, cores) for g in (1, 8)]
        floor = [input_step_s(t.batch, one, *busy_s, w, g, cores) for g in (1, 8)]
        step = [iteration_s(t, g, input_pipeline=False) for g in (1, 8)]
        need = input_ms_per_image(t, 8)
        lines.append(f"| {t.system} | {t.precision} | {w} | {busy[0]:.0f} / {busy[1]:.0f} | "
                     f"{1e3 * image_s(one, *busy_s, busy[0]):.2f} / "
                     f"{1e3 * image_s(one, *busy_s, busy[1]):.2f} ms | "
                     f"{1e3 * floor[0]:.0f} / {1e3 * floor[1]:.0f} ms | "
                     f"{1e3 * step[0]:.0f} / {1e3 * step[1]:.0f} ms | {need:.2f} ms "
                     f"(x{need / (1e3 * image_s(one, *busy_s, busy[1])):.2f}) |")
    return lines


def updates(t: Table) -> bool:
    return t.framework == "PyTorch"


def workload(t: Table, input_pipeline: bool = True, update: bool = True) -> ModelWorkload:
    """ResNet-50's tensors, buffers and FLOPs per layer at one GPU's published throughput
    (a PyTorch run's with the optimizer's share taken out unless ``update`` is off: the
    step the model computes has no update); a PyTorch run's loader workers and the measured
    time an image (``input_curve``) unless ``input_pipeline`` is off."""
    cpu = resnet50()
    layers = tuple(replace(layer, forward_s=0.0, backward_s=0.0) for layer in cpu.layers)
    step_s = t.batch / t.throughput[1]
    if update and updates(t):
        step_s = step_without_update_s(step_s, update_s(t), share_of_updates(t, 1))
    return ModelWorkload(
        name="resnet50", layers=layers, device=t.device, batch_size=t.batch, step_s=step_s,
        backward_s=step_s * 2 / 3, forward_s=step_s / 3, flops_per_sample=cpu.flops_per_sample,
        input_shape=cpu.input_shape, precision=t.precision, buffers=cpu.buffers,
        provenance={"source": "numbers", "throughput": f"{t.throughput[1]} images/s on one GPU: "
                    + t.source, "tensors": "benchmarks/dle/resnet50-cpu.toml"},
        **(_input(t) if input_pipeline and t.framework == "PyTorch" else {}))


def _input(t: Table) -> dict:
    one, at = input_curve()
    return {"input_s_per_sample": one, "input_workers": LOADER_WORKERS[t.system],
            "input_at": at}


def scheme(t: Table, groups: int = 0) -> SchemeConfig:
    """DDP for PyTorch; Horovod for MXNet, with ``groups`` grouped allreduces (0: each
    gradient on its own, Horovod's ``DistributedTrainer`` default as ``fit.py`` builds it)."""
    if t.framework == "PyTorch":
        return SchemeConfig("ddp", backend="nccl", algorithm="auto")
    return SchemeConfig("horovod", backend="nccl", algorithm="auto",
                        compression="fp16" if t.precision == "amp" else "none",
                        cycle_s=MXNET_CYCLE_S, horovod_groups=groups)


def predict(t: Table, ddp_calls: bool = True, input_pipeline: bool = True,
            update: bool = True, groups: int = 0) -> dict[int, tuple[float, float]]:
    """GPUs -> (predicted efficiency %, predicted seconds per iteration). An iteration once
    the run is under way (``steady_iteration_s``), as the published throughputs leave out
    DDP's construction and Horovod's first broadcast; ``ddp_calls=False``: without DDP's
    calls (the model before they were modelled); ``input_pipeline=False``: without the input
    pipeline; ``update=False``: without the optimizer's step (``update_s``); ``groups``:
    the MXNet runs' grouped allreduces (``scheme``)."""
    times = {p: iteration_s(t, p, ddp_calls, input_pipeline, update, groups)
             for p in t.throughput}
    return {p: (100 * times[1] / times[p], times[p]) for p in t.throughput}


def iteration_s(t: Table, gpus: int, ddp_calls: bool = True,
                input_pipeline: bool = True, update: bool = True, groups: int = 0) -> float:
    """The predicted seconds of an iteration at ``gpus`` GPUs, as the examples report it;
    one GPU runs without DDP, as the examples do. A PyTorch run's optimizer step follows
    the gradients' allreduce in the share of iterations that step (``mean_rate_step_s``)."""
    preset = load_preset(t.preset)
    if gpus == 1 or not ddp_calls:
        preset = preset.without_ddp_calls()
    cluster = growing(preset)
    profile = machine(load_default(), "embedded", cluster.at(1),
                      [(workload(t, input_pipeline, update), "resnet50")]).profile
    step = steady_iteration_s(scheme(t, groups), gpus, work(t), cluster.at(gpus), profile)
    if not (update and updates(t)):
        return step
    return mean_rate_step_s(step, update_s(t), share_of_updates(t, gpus))


def work(t: Table) -> Workload:
    return Workload(model="resnet50", batch_per_worker=t.batch, iterations=ITERATIONS)


def plan(t: Table, gpus: int):
    """What the model sends at ``gpus`` GPUs: its run plan (gradients' bytes, buckets)."""
    profile = machine(load_default(), "embedded", growing(load_preset(t.preset)).at(1),
                      [(workload(t), "resnet50")]).profile
    spec, cfg = resolve_scheme(scheme(t))
    return make_plan(spec, cfg, gpus, work(t), profile)


def rows(ddp_calls: bool = True, input_pipeline: bool = True,
         update: bool = True, groups: int = 0) -> list[dict]:
    out = []
    for t in TABLES:
        pred = predict(t, ddp_calls, input_pipeline, update, groups)
        for p, ips in t.throughput.items():
            if p == 1:
                continue
            published = 100 * ips / (p * t.throughput[1])
            iteration = t.batch * p / ips
            out.append({"framework": t.framework, "system": t.system, "precision": t.precision,
                        "batch": t.batch, "gpus": p, "published": published,
                        "predicted": pred[p][0], "iteration_s": iteration,
                        "predicted_iteration_s": pred[p][1]})
    return out


def markdown(points: list[dict]) -> str:
    lines = ["| framework | system | precision | batch | GPUs | published | predicted | "
             "difference (points) | time per iteration published | predicted | error |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in points:
        err = r["predicted_iteration_s"] / r["iteration_s"] - 1
        lines.append(f"| {r['framework']} | {r['system']} | {r['precision']} | {r['batch']} | "
                     f"{r['gpus']} | {r['published']:.1f}% | {r['predicted']:.1f}% | "
                     f"{r['predicted'] - r['published']:+.1f} | "
                     f"{r['iteration_s'] * 1e3:.1f} ms | {r['predicted_iteration_s'] * 1e3:.1f} ms "
                     f"| {err:+.1%} |")
    within = sum(abs(r["predicted"] - r["published"]) <= 3 for r in points)
    return (f"{within} of {len(points)} points within 3 points of the published scaling "
            "efficiency\n\n" + "\n".join(lines))


def build_parser() -> cli.Parser:
    ap = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="docs/dle", help="folder for dle.csv and dle.md")
    ap.add_argument("--without-input", action="store_true",
                    help="leave the PyTorch runs' input pipeline out (the check before it "
                         "was applied), to compare")
    ap.add_argument("--without-update", action="store_true",
                    help="leave the PyTorch runs' optimizer step out (the check before it "
                         "was applied), to compare")
    ap.add_argument("--without-ddp-calls", action="store_true",
                    help="leave DDP's per-tensor calls out (the model before they were "
                         "modelled), to compare")
    ap.add_argument("--horovod-groups", type=cli.nonnegative_int, default=0, metavar="N",
                    help="the MXNet runs with N grouped allreduces (the runner sets "
                         "MXNET_HOROVOD_NUM_GROUPS=16; fit.py passes no num_groups), to "
                         "compare; 0: each gradient on its own")
    return ap


def run(args) -> int:
    points = rows(not args.without_ddp_calls, not args.without_input, not args.without_update,
                  args.horovod_groups)
    csv = ["framework,system,precision,batch,gpus,published_pct,predicted_pct,"
           "published_iteration_s,predicted_iteration_s"]
    csv += [f"{r['framework']},{r['system']},{r['precision']},{r['batch']},{r['gpus']},"
            f"{r['published']:.2f},{r['predicted']:.2f},{r['iteration_s']:.5f},"
            f"{r['predicted_iteration_s']:.5f}" for r in points]
    out = Path(args.out)
    atomic_write_text(out / "dle.csv", "\n".join(csv) + "\n")
    from benchmarks.dle import published                      # (it reads TABLES)
    text = markdown(points) + "\n\n" + published.markdown()
    atomic_write_text(out / "dle.md", text + "\n")
    print(text)
    print("\nPyTorch's input pipeline at the tables' settings (applied"
          + (", here left out" if args.without_input else "") + f"; measured: {INPUT_PROBE.name}"
          "):\n" + "\n".join(input_lines()))
    print("\nMXNet's DALI CPU stage, the time an image that would bind (not applied: no "
          "published cost):\n" + "\n".join(dali_lines()))
    print("\nMXNet's allreduces in Horovod's groups (the check takes 0; not a fit: how far "
          "the allreduces' schedule moves each point):\n"
          + "\n".join(grouping_lines(points, args.horovod_groups)))
    print("\nPyTorch's optimizer step, once an optimizer batch (applied"
          + (", here left out" if args.without_update else "") + "):\n"
          + "\n".join(update_lines()))
    print(f"\nwrote {out / 'dle.csv'}, {out / 'dle.md'}", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())

"""Time what a data-parallel step costs beyond its compute, on one GPU and its host's CPUs.

    python -m benchmarks.gpu.step_probe --out "$OUT"        # about 3 minutes

Three measurements, each for a mechanism of issue 41 that the published tables name but do
not price (docs/results/gpu-published.md):

* ``ddp``: ResNet-50 v1.5's step (``benchmarks.horovod.models``, batch 256, channels-last as
  NVIDIA's DeepLearningExamples trains it, synthetic data) in fp32, tf32 and amp, plain and
  wrapped in ``DistributedDataParallel`` on a one-rank NCCL group (25 MiB buckets), as DDP's
  defaults (each gradient copied into its bucket and back, the buffers broadcast before each
  forward), with ``gradient_as_bucket_view`` (no copies back) and with
  ``broadcast_buffers=False`` (no buffers' broadcast): what DDP's calls cost a step that
  moves nothing, and each part of them (``simulator.model.hardware.ddp_calls``: 161 copies
  back, 159 buffers, 161 copies in for ResNet-50). The examples' one-GPU runs have no
  DDP, their 8-GPU runs do; the PyTorch mixed-precision points miss by 13-16 points where the
  MXNet ones (Horovod) miss by 2-3. fp32 runs with TF32 off, tf32 and amp with it on.
* ``launch``: the host's time per call of back-to-back small operations, as nccl-tests times
  its smallest sizes: a one-element CUDA kernel, and NCCL's ``all_reduce`` of 8 bytes on the
  one-rank group (its enqueue path); both the host's enqueue rate and the time per call to
  the last one's end. Also the GPU time of one-rank ``all_reduce`` from 8 bytes to 64 MiB.
* ``input``: the CPU's time per image of the input pipeline of DeepLearningExamples' PyTorch
  benchmarks (``data_backend: pytorch``: PIL decodes a JPEG, RandomResizedCrop to 224, flip;
  here a 500x375 JPEG of about 90 KB), on one process and on one process per core: the
  published rates need at most 6.48 ms a worker per image alone and 7.70 ms with every GPU's
  16 workers busy on a DGX A100 (x1.19), and one cost of 4.8-5.0 ms on a DGX-1 whose 40 cores
  its 64 workers share at 8 GPUs, if the pipeline bounds them (``benchmarks.dle.check``,
  docs/results/gpu-published.md).

Each step measurement: 5 warm-up steps, then 20 timed with CUDA events; medians. Everything
goes to ``OUT/step_probe.json`` with the device, CPU, torch, CUDA and NCCL versions; a summary
is printed. A part that fails is recorded under ``errors`` and the others still run. Needs
torch with CUDA (and Pillow for ``input``); downloads nothing. Not used by the project's
tests or predictions.
"""
from __future__ import annotations

import io
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import cli
from benchmarks.gpu.interference_probe import timed_steps

PROG = "python -m benchmarks.gpu.step_probe"

BATCH, WARMUP, TIMED = 256, 5, 20
BUCKET_MB = 25
CALLS = 2000                            # back-to-back calls per launch measurement
IMAGES = 64                             # distinct JPEGs; each process decodes ROUNDS of them
ROUNDS = 3
PARTS = ("ddp", "launch", "input")
PRECISIONS = ("fp32", "tf32", "amp")
# DDP's arguments in each variant (None: no DDP): its defaults; no copies back (the gradients
# are the buckets); no broadcast of the buffers before each forward
VARIANTS = {"plain": None, "ddp": {}, "ddp_views": {"gradient_as_bucket_view": True},
            "ddp_no_buffers": {"broadcast_buffers": False}}


def group():
    """A one-rank NCCL process group on a loopback rendezvous."""
    import torch.distributed as dist
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29534")
        dist.init_process_group("nccl", rank=0, world_size=1)
    return dist


def ddp(precision: str) -> dict:
    """Median step plain, under DDP and under DDP with bucket views, and the wall-clock per
    step of each; ``shares`` of the step each DDP adds."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from benchmarks.horovod.models import resnet50
    torch.backends.cuda.matmul.allow_tf32 = precision != "fp32"
    torch.backends.cudnn.allow_tf32 = precision != "fp32"
    torch.backends.cudnn.benchmark = True
    x = torch.randn(BATCH, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (BATCH,), device="cuda")
    out = {}
    for name, kwargs in VARIANTS.items():
        torch.manual_seed(0)
        model = resnet50().cuda().to(memory_format=torch.channels_last)
        if kwargs is not None:
            group()
            model = DistributedDataParallel(model, device_ids=[0], bucket_cap_mb=BUCKET_MB,
                                            **kwargs)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.875)
        scaler = torch.amp.GradScaler("cuda", enabled=precision == "amp")
        timed_steps(model, opt, scaler, precision, x, y, WARMUP)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        steps = timed_steps(model, opt, scaler, precision, x, y, TIMED)
        out[name] = {"step_s": statistics.median(steps),
                     "wall_s_per_step": (time.perf_counter() - t0) / TIMED}
        del model, opt
        torch.cuda.empty_cache()
    return shares(out)


def shares(out: dict) -> dict:
    """``out`` with the share of the plain step each DDP variant adds (``ddp_over_plain``:
    DDP's defaults; ``views_over_plain``: with bucket views) and the part of DDP's that the
    copies between gradients and buckets make (``copies_over_plain``: the difference); in
    seconds, what DDP adds (``ddp_added_s``), the copies back (``copies_back_s``: one call a
    tensor) and the buffers' broadcast (``buffers_s``: ``ddp_buffer`` times the buffers;
    ``ddp_added_s - buffers_s`` is ``ddp_gradient`` times the tensors,
    ``simulator.model.hardware.ddp_calls``)."""
    plain = out["plain"]["step_s"]
    out["ddp_over_plain"] = out["ddp"]["step_s"] / plain - 1
    out["views_over_plain"] = out["ddp_views"]["step_s"] / plain - 1
    out["copies_over_plain"] = out["ddp_over_plain"] - out["views_over_plain"]
    out["ddp_added_s"] = out["ddp"]["step_s"] - plain
    out["copies_back_s"] = out["ddp"]["step_s"] - out["ddp_views"]["step_s"]
    if "ddp_no_buffers" in out:
        out["buffers_s"] = out["ddp"]["step_s"] - out["ddp_no_buffers"]["step_s"]
    return out


def per_call(op) -> dict:
    """Host seconds per enqueue and seconds per call to the last one's end, of CALLS calls."""
    import torch
    for _ in range(50):
        op()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(CALLS):
        op()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return {"host_s_per_call": (t1 - t0) / CALLS, "s_per_call": (t2 - t0) / CALLS}


def launch() -> dict:
    import torch
    x = torch.zeros(1, device="cuda")
    out = {"kernel_1_element": per_call(lambda: x.add_(1))}
    dist = group()
    small = torch.zeros(2, device="cuda")
    out["nccl_all_reduce_8_bytes"] = per_call(lambda: dist.all_reduce(small))
    gpu = {}
    for k in range(3, 27, 3):                       # 8 B .. 64 MiB
        buf = torch.ones(max(1, 2**k // 4), device="cuda")
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        for _ in range(5):
            dist.all_reduce(buf)
        ev[0].record()
        for _ in range(20):
            dist.all_reduce(buf)
        ev[1].record()
        ev[1].synchronize()
        gpu[str(2**k)] = ev[0].elapsed_time(ev[1]) / 1e3 / 20
    out["nccl_all_reduce_one_rank_s_by_bytes"] = gpu
    return out


def _jpegs() -> list[bytes]:
    """IMAGES synthetic 500x375 JPEGs of about ImageNet's mean size (quality 90)."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:375, 0:500]
    out = []
    for i in range(IMAGES):
        base = np.stack([(xx * (1 + i % 3) + yy) % 256, (yy * 2 + i) % 256,
                         (xx + yy * (i % 5)) % 256], axis=-1).astype(np.float64)
        img = np.clip(base + rng.normal(0, 16, base.shape), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def _pipeline(jpegs: list[bytes]) -> float:
    """Seconds per image of decode, RandomResizedCrop(224) and flip, over ROUNDS passes."""
    import math
    import random

    import numpy as np
    from PIL import Image
    rnd = random.Random(0)
    t0 = time.perf_counter()
    for _ in range(ROUNDS):
        for b in jpegs:
            img = Image.open(io.BytesIO(b)).convert("RGB")
            w, h = img.size
            area = w * h * rnd.uniform(0.08, 1.0)
            ratio = math.exp(rnd.uniform(math.log(3 / 4), math.log(4 / 3)))
            cw = min(w, round(math.sqrt(area * ratio)))
            ch = min(h, round(math.sqrt(area / ratio)))
            x0, y0 = rnd.randint(0, w - cw), rnd.randint(0, h - ch)
            img = img.resize((224, 224), Image.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))
            if rnd.random() < 0.5:
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
            np.asarray(img)
    return (time.perf_counter() - t0) / (ROUNDS * len(jpegs))


def _busy_worker(jpegs: list[bytes], barrier, queue) -> None:
    """One of the processes that decode at once: starts with the others, reports its time."""
    barrier.wait()
    queue.put(_pipeline(jpegs))


def input_pipeline() -> dict:
    jpegs = _jpegs()
    one = _pipeline(jpegs)
    cores = os.cpu_count() or 1
    ctx = multiprocessing.get_context("spawn")      # no CUDA state copied into the workers
    barrier, queue = ctx.Barrier(cores), ctx.Queue()
    procs = [ctx.Process(target=_busy_worker, args=(jpegs, barrier, queue))
             for _ in range(cores)]
    for proc in procs:
        proc.start()
    each = [queue.get(timeout=180) for _ in procs]
    for proc in procs:
        proc.join()
    return {"jpeg_bytes_mean": statistics.mean(map(len, jpegs)), "s_per_image_one_process": one,
            "processes": cores, "s_per_image_per_process_all_busy": statistics.median(each),
            "all_busy_over_one": statistics.median(each) / one,
            "images_per_s_all_cores": sum(1 / t for t in each)}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def build_parser() -> cli.Parser:
    ap = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."),
                    help="folder for step_probe.json (default: $OUT, else here)")
    ap.add_argument("--parts", default="ddp,launch,input", help="which parts to measure")
    return ap


def run(args) -> int:
    wanted = [x for x in args.parts.split(",") if x]
    unknown = [x for x in wanted if x not in PARTS]
    if unknown or not wanted:
        print(f"step_probe: --parts: unknown part {unknown[0]!r} (choose from {', '.join(PARTS)})"
              if unknown else "step_probe: --parts: name at least one part", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("step_probe: torch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("step_probe: no CUDA device: run it on a machine with a GPU", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    result = {"device": torch.cuda.get_device_name(0), "cpu": cpu_name(),
              "cpu_count": os.cpu_count(), "torch": torch.__version__, "cuda": torch.version.cuda,
              "nccl": ".".join(map(str, torch.cuda.nccl.version())), "batch": BATCH,
              "warmup": WARMUP, "timed": TIMED, "errors": {}}
    parts = {"ddp": lambda: {p: ddp(p) for p in PRECISIONS}, "launch": launch,
             "input": input_pipeline}
    for name in wanted:
        try:
            result[name] = parts[name]()
        except Exception as e:   # noqa: BLE001  (recorded; the other parts still run)
            result["errors"][name] = f"{type(e).__name__}: {e}"
        print(f"{name}: {json.dumps(result.get(name, result['errors'].get(name)))}", flush=True)
    result["seconds"] = time.perf_counter() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "step_probe.json").write_text(json.dumps(result, indent=1))
    print(f"wrote {out / 'step_probe.json'} ({result['seconds']:.0f} s); "
          f"errors: {result['errors'] or 'none'}")
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())

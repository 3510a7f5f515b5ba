"""Time ResNet-50's training step on one GPU alone and beside communication-like work.

    python -m benchmarks.gpu.interference_probe --out "$OUT"       # about 4 minutes

What it measures, for the mechanisms of issue 41 (``simulator/model/hardware/interference``):

* the step (forward, backward, SGD update) of ResNet-50 v1.5 (``benchmarks.horovod.models``,
  random weights, synthetic data) at batch 256 in fp32, tf32 and amp (torch.autocast fp16
  with a GradScaler, fp32 master weights), and the forward's and backward's share of it;
* the same step with a second CUDA stream kept busy by what NCCL does beside a backward:
  ``copy``, a device-to-device copy of 256 MiB (copy engines and memory bandwidth);
  ``allreduce``, NCCL all_reduce of 256 MiB on a one-rank process group (NCCL's own kernel
  on this GPU, loopback rendezvous); ``reduce-k``, a Triton kernel of k programs (one per
  SM, as NCCL's channels are one block each) that adds two 256 MiB buffers in a loop, for
  k = 8, 16, 32 (skipped without Triton);
* the background's own rate alone and beside the step (what the step costs it).

Each measurement: 10 warm-up steps, then 30 timed with CUDA events; the median step and the
compute slowdown ``step beside / step alone - 1`` (the model's ``compute_slowdown``) are
written to ``OUT/interference.json`` with the device, torch, CUDA and NCCL versions; a summary
is printed. Needs torch with CUDA only (no downloads, no torchvision weights). Not used by
the project's tests or predictions.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
import cli

PROG = "python -m benchmarks.gpu.interference_probe"

BATCH, WARMUP, TIMED = 256, 10, 30
BYTES = 256 * 2**20                   # each background operation's buffer


def step_fn(model, opt, scaler, precision, x, y):
    import torch
    loss_fn = torch.nn.functional.cross_entropy
    if precision == "amp":
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    opt.zero_grad(set_to_none=True)


def timed_steps(model, opt, scaler, precision, x, y, n) -> list[float]:
    """Seconds of each of ``n`` steps (CUDA events around each)."""
    import torch
    out = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step_fn(model, opt, scaler, precision, x, y)
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / 1e3)
    return out


def phases(model, opt, scaler, precision, x, y) -> dict:
    """Median forward and backward seconds of 10 steps (events between the phases)."""
    import torch
    fw, bw = [], []
    loss_fn = torch.nn.functional.cross_entropy
    for _ in range(10):
        e = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        e[0].record()
        with torch.autocast("cuda", dtype=torch.float16, enabled=precision == "amp"):
            loss = loss_fn(model(x), y)
        e[1].record()
        (scaler.scale(loss) if precision == "amp" else loss).backward()
        e[2].record()
        e[2].synchronize()
        opt.zero_grad(set_to_none=True)
        fw.append(e[0].elapsed_time(e[1]) / 1e3)
        bw.append(e[1].elapsed_time(e[2]) / 1e3)
    return {"forward_s": statistics.median(fw), "backward_s": statistics.median(bw)}


class Background:
    """A thread that keeps a side stream busy with one kind of operation and counts them."""

    def __init__(self, kind: str, op):
        import torch
        self.kind, self.op, self.count = kind, op, 0
        self.stream = torch.cuda.Stream()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        import torch
        with torch.cuda.stream(self.stream):
            while not self.stop.is_set():
                for _ in range(4):
                    self.op()
                self.stream.synchronize()       # at most 4 in flight: the queue stays short
                self.count += 4

    def __enter__(self):
        self.t0 = time.perf_counter()
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.seconds = time.perf_counter() - self.t0


def rate_alone(op, seconds: float = 2.0) -> float:
    """Operations per second of ``op`` alone on a side stream."""
    import torch
    bg = Background("alone", op)
    with bg:
        time.sleep(seconds)
    torch.cuda.synchronize()
    return bg.count / bg.seconds


def backgrounds(errors: dict) -> dict:
    """name -> operation (a callable enqueuing one on the current stream)."""
    import torch
    a = torch.empty(BYTES // 4, device="cuda")
    b = torch.empty_like(a)
    ops = {"copy": lambda: b.copy_(a)}
    try:
        import torch.distributed as dist
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("nccl", rank=0, world_size=1)
        c = torch.ones(BYTES // 4, device="cuda")
        ops["allreduce"] = lambda: dist.all_reduce(c)
    except Exception as e:                           # recorded, the rest still measured
        errors["allreduce"] = f"{type(e).__name__}: {e}"
    try:
        ops.update(triton_reducers(a, b))
    except Exception as e:
        errors["reduce-k"] = f"{type(e).__name__}: {e}"
    return ops


def triton_reducers(a, b) -> dict:
    """reduce-k: k programs add ``a`` into ``b`` in a grid-stride loop, like a reduce kernel
    of NCCL spread over k channels (one block, one SM, each)."""
    import triton
    import triton.language as tl

    @triton.jit
    def add_loop(a_ptr, b_ptr, n, BLOCK: tl.constexpr):
        pid, programs = tl.program_id(0), tl.num_programs(0)
        for start in range(pid * BLOCK, n, programs * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(b_ptr + offs, tl.load(a_ptr + offs, mask=mask)
                     + tl.load(b_ptr + offs, mask=mask), mask=mask)

    n = a.numel()
    return {f"reduce-{k}": (lambda k=k: add_loop[(k,)](a, b, n, BLOCK=4096))
            for k in (8, 16, 32)}


def measure(precision: str, ops: dict) -> dict:
    import torch

    from benchmarks.horovod.models import resnet50
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    model = resnet50().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.875)
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "amp")
    x = torch.randn(BATCH, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (BATCH,), device="cuda")
    timed_steps(model, opt, scaler, precision, x, y, WARMUP)
    alone = statistics.median(timed_steps(model, opt, scaler, precision, x, y, TIMED))
    out = {"batch": BATCH, "step_s": alone, "images_per_s": BATCH / alone,
           **phases(model, opt, scaler, precision, x, y), "beside": {}}
    for name, op in ops.items():
        rate = rate_alone(op)
        with Background(name, op) as bg:
            steps = timed_steps(model, opt, scaler, precision, x, y, TIMED)
        torch.cuda.synchronize()
        step = statistics.median(steps)
        out["beside"][name] = {"step_s": step, "compute_slowdown": step / alone - 1,
                               "background_per_s_alone": rate,
                               "background_per_s_beside": bg.count / bg.seconds}
    del model, opt
    torch.cuda.empty_cache()
    return out


def build_parser() -> cli.Parser:
    ap = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."),
                    help="folder for interference.json (default: $OUT, else here)")
    ap.add_argument("--precisions", default="fp32,tf32,amp", help="which to measure")
    return ap


def run(args) -> int:
    try:
        import torch
    except ImportError:
        print("interference_probe: torch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("interference_probe: no CUDA device: run it on a machine with a GPU",
              file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    errors: dict = {}
    ops = backgrounds(errors)
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "cuda": torch.version.cuda, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
              "sms": torch.cuda.get_device_properties(0).multi_processor_count,
              "background_bytes": BYTES, "warmup": WARMUP, "timed": TIMED,
              "errors": errors, "precisions": {}}
    for p in args.precisions.split(","):
        result["precisions"][p] = measure(p, ops)
        r = result["precisions"][p]
        print(f"{p}: {r['images_per_s']:.0f} img/s alone (step {r['step_s'] * 1e3:.1f} ms, "
              f"backward {r['backward_s'] / r['step_s']:.0%}); beside: "
              + ", ".join(f"{k} {v['compute_slowdown']:+.1%}" for k, v in r["beside"].items()))
    result["seconds"] = time.perf_counter() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "interference.json").write_text(json.dumps(result, indent=1))
    print(f"wrote {out / 'interference.json'} ({result['seconds']:.0f} s); errors: {errors or 'none'}")
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())

"""``python -m calibrate.workload``: a workload file from a real PyTorch model.

    python -m calibrate.workload --model cnn --input-shape 1,28,28 --batch-size 64 --out cnn.toml
    python -m calibrate.workload --model mypkg.nets:ResNet --input-shape 3,224,224 \\
        --batch-size 32 --device cpu --out my_model.toml

``--model`` names a built-in model (``real.training.models``) or ``package.module:Name``,
where ``Name`` is an ``nn.Module`` class or a factory called without arguments
(or an instance). On synthetic data of ``--input-shape`` (and random labels
where the output is ``(batch, classes)``) the command

1. runs ``--warmup`` steps (forward, backward, SGD update) that are not timed;
2. times ``--steps`` whole steps, split into forward, backward and update
   (the device synchronised at each boundary), and as many at half the batch:
   the two medians give the step's line against the batch;
3. runs ``--layer-steps`` steps with hooks: ``register_post_accumulate_grad_hook``
   on every parameter records the order in which gradients become ready in
   backward, and when; forward hooks on the modules that own parameters time
   the forward. A layer's backward time is the time since the previous layer's
   gradients were ready, so parameter-free modules count with the next layer
   that has parameters. Hook overhead is taken out by scaling each phase's
   per-layer times to the median of the un-hooked steps;
4. counts FLOPs of one forward + backward with ``torch.utils.flop_counter``'s formulas,
   each operation once, in the layer whose module ran it (``flop_counts``).

The file (``contracts.workload``) lists layers in gradient-ready
order with their tensors (element count, dtype and position in
``parameters()``), times and FLOPs, the model's buffers (``buffer_tensors``), and the
provenance (command, host, torch version, date). ``simulator.predict
--workload FILE`` predicts with it.

Imports: torch (when measuring), real.training.models, cli, contracts (profile, workload).
"""
from __future__ import annotations

import importlib
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import cli
from cli import Parser, positive_int, usage_error
from contracts.workload import (
    Layer,
    ModelWorkload,
    StepLine,
    Tensor,
    WorkloadError,
    save_workload,
)

PROG = "python -m calibrate.workload"
DTYPES = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16",
          "torch.float64": "float64", "torch.int64": "int64"}


class ModelError(ValueError):
    """A model that cannot be imported, built or run on the input; one line says why."""


def shape(text: str) -> tuple[int, ...]:
    import argparse
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape like 3,224,224") from None
    if not dims or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be sizes of at least 1, like 3,224,224")
    return dims


def build_parser() -> Parser:
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True,
                   help="a built-in model (cnn, ps_cnn, linear, mlp, vgg11) or "
                        "package.module:ClassOrFactory")
    p.add_argument("--input-shape", type=shape, metavar="C,H,W",
                   help="shape of one sample, e.g. 3,224,224 (needed unless --from-profile)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="samples per step")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="torch threads on the CPU (the project's profiles measure 1 and 2)")
    p.add_argument("--classes", type=positive_int, default=10,
                   help="classes of a built-in model's output")
    p.add_argument("--warmup", type=positive_int, default=3, help="untimed steps first")
    p.add_argument("--steps", type=positive_int, default=10,
                   help="timed steps (and as many at half the batch)")
    p.add_argument("--layer-steps", type=positive_int, default=3,
                   help="steps timed layer by layer with hooks")
    p.add_argument("--name", help="the model's name in the file (default: the built-in name or "
                                  "the class or factory's name)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, type=cli.output_file(".toml"),
                   help="workload TOML file to write")
    p.add_argument("--from-profile", metavar="PROFILE",
                   help="write the profile's (calibrated) model --model as a workload file "
                        "instead of measuring: a profile JSON, or 'embedded' for the shipped one")
    return p


def from_profile(args) -> ModelWorkload:
    """A profile's model as a workload file: its tensors, layers and step lines."""
    from contracts.profile import load, load_default
    from contracts.workload import workload_of_cost
    prof = load_default() if args.from_profile == "embedded" else load(args.from_profile)
    cost = prof.model(args.model)
    return workload_of_cost(cost, device="cpu", batch_size=args.batch_size, provenance={
        "source": "profile", "profile": args.from_profile, "host": prof.provenance.host,
        "created_utc": prof.provenance.created_utc,
        "command": f"{PROG} --model {args.model} --from-profile {args.from_profile} "
                   f"--batch-size {args.batch_size} --out {args.out}",
        "note": "the profile's step lines per thread count; layers' backward shares by "
                "parameters (as the profile has them)"})


# ---------------------------------------------------------------- the model

def load_model(spec: str, input_shape: tuple[int, ...], classes: int):
    """An ``nn.Module`` from a built-in name or ``package.module:Name``."""
    from torch import nn

    from real.training.models import MODELS, build_model
    if spec in MODELS:
        try:
            return build_model(spec, input_shape, classes)
        except ValueError as e:
            raise ModelError(f"model {spec} does not build for input shape "
                             f"{','.join(map(str, input_shape))}: {e}") from None
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ModelError(f"model {spec!r} is neither a built-in model ({', '.join(MODELS)}) nor "
                         "a path like package.module:ClassOrFactory")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:    # noqa: BLE001  (whatever the user's module raises)
        raise ModelError(f"model path {spec}: module {module_name} does not import "
                         f"({type(e).__name__}: {_first_line(e)}); check the name and "
                         "that its folder is on PYTHONPATH") from None
    if not hasattr(module, attr):
        raise ModelError(f"model path {spec}: module {module_name} has no {attr!r}")
    target = getattr(module, attr)
    if isinstance(target, nn.Module):
        return target
    try:
        model = target()
    except Exception as e:    # noqa: BLE001
        raise ModelError(f"model {spec} does not build ({type(e).__name__}: {_first_line(e)}); "
                         "give a class or factory that takes no arguments") from None
    if not isinstance(model, nn.Module):
        raise ModelError(f"model {spec} built a {type(model).__name__}, not a torch.nn.Module")
    if not any(p.requires_grad for p in model.parameters()):
        raise ModelError(f"model {spec} has no trainable parameters")
    return model


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [""])[0][:200]


def _output(out):
    """The tensor a loss is taken of (the first of a tuple, e.g. Inception's aux output)."""
    if isinstance(out, (tuple, list)):
        out = out[0]
    if hasattr(out, "logits"):
        out = out.logits
    return out


def loss_of(out, labels):
    import torch.nn.functional as F
    out = _output(out)
    if out.dim() == 2:
        return F.cross_entropy(out.float(), labels % out.shape[1])
    return out.float().square().mean()


class Bench:
    """The model, its optimizer and synthetic batches on one device."""

    def __init__(self, model, spec: str, input_shape, batch: int, device: str, seed: int):
        import torch
        torch.manual_seed(seed)
        self.torch = torch
        self.device = device
        self.model = model.to(device).train()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        self.spec = spec
        self.shape = input_shape
        self.batches = {}
        self.batch = batch
        self._check(batch)

    def data(self, batch: int):
        if batch not in self.batches:
            g = self.torch.Generator().manual_seed(batch)
            x = self.torch.randn((batch, *self.shape), generator=g)
            y = self.torch.randint(0, 1000, (batch,), generator=g)
            self.batches[batch] = (x.to(self.device), y.to(self.device))
        return self.batches[batch]

    def _check(self, batch: int) -> None:
        x, y = self.data(batch)
        try:
            loss_of(self.model(x), y).backward()
        except Exception as e:   # noqa: BLE001  (shape errors come as RuntimeError, ValueError...)
            raise ModelError(f"model {self.spec} does not accept input shape "
                             f"{','.join(map(str, self.shape))} ({type(e).__name__}: "
                             f"{_first_line(e)}); check --input-shape") from None
        self.opt.zero_grad(set_to_none=True)

    def sync(self) -> float:
        if self.device == "cuda":
            self.torch.cuda.synchronize()
        return time.perf_counter()

    def step(self, batch: int) -> tuple[float, float, float]:
        """(forward, backward, update) seconds of one step."""
        x, y = self.data(batch)
        t0 = self.sync()
        loss = loss_of(self.model(x), y)
        t1 = self.sync()
        loss.backward()
        t2 = self.sync()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        t3 = self.sync()
        return t1 - t0, t2 - t1, t3 - t2


# ---------------------------------------------------------------- layers and FLOPs

def owners(model) -> dict:
    """Each trainable parameter -> (qualified name of the module that owns it, its name)."""
    out = {}
    for mod_name, mod in model.named_modules():
        for p_name, p in mod.named_parameters(recurse=False):
            if p.requires_grad and id(p) not in out:
                out[id(p)] = (mod_name, f"{mod_name}.{p_name}" if mod_name else p_name)
    return out


def layer_times(bench: Bench, steps: int) -> tuple[list, dict, dict]:
    """Gradient-ready order of the parameters and per-module forward / backward times
    (median over ``steps`` hooked steps): (order of (param id, time), forward, backward)."""
    model = bench.model
    own = owners(model)
    modules = {name: m for name, m in model.named_modules() if name in {o[0] for o in own.values()}}
    ready, fwd_end = [], {}
    def grad_ready(p):
        ready.append((id(p), bench.sync()))
    handles = [p.register_post_accumulate_grad_hook(grad_ready) for p in model.parameters()
               if p.requires_grad]
    def forward_done(name):
        def hook(_module, _inputs, _output):       # (returns None: the output stays)
            fwd_end.setdefault(name, bench.sync())
        return hook
    handles += [m.register_forward_hook(forward_done(name)) for name, m in modules.items()]
    forward, backward, orders = {}, {}, []
    x, y = bench.data(bench.batch)
    try:
        for _ in range(steps):
            ready.clear()
            fwd_end.clear()
            t0 = bench.sync()
            loss = loss_of(model(x), y)
            t1 = bench.sync()
            loss.backward()
            bench.opt.step()
            bench.opt.zero_grad(set_to_none=True)
            orders.append(list(ready))
            last = t0
            for name, t in sorted(fwd_end.items(), key=lambda kv: kv[1]):
                forward.setdefault(name, []).append(t - last)
                last = t
            last = t1
            done = {}
            for pid, t in ready:
                done[own[pid][0]] = t
            for name, t in sorted(done.items(), key=lambda kv: kv[1]):
                backward.setdefault(name, []).append(t - last)
                last = t
    finally:
        for h in handles:
            h.remove()
    return orders[-1], {k: statistics.median(v) for k, v in forward.items()}, \
        {k: statistics.median(v) for k, v in backward.items()}


def flop_counts(bench: Bench) -> tuple[float, dict]:
    """FLOPs of one forward + backward at the bench's batch: the total, and each layer's (a
    module that owns parameters), every operation counted once, so the layers sum to the
    total.

    ``torch.utils.flop_counter`` prices each operation; its ``FlopCounterMode`` adds one to
    every module its tracker holds active, and in backward the branches of a residual block
    are active together (ResNet-101's layers summed to 50.5 GFLOPs against 46.6). Here an
    operation has one module: in forward the innermost one running (forward hooks), in
    backward the one whose forward made the autograd node running (a pre-hook on each node
    of the graph its forward added); then the nearest module above it that owns parameters,
    else the layer whose operation came last before it (first: the first layer's)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode
    model = bench.model
    registry = FlopCounterMode().flop_registry
    owning = {name for name, m in model.named_modules()
              if any(p.requires_grad for p in m.parameters(recurse=False))}
    running: list[str] = []                   # the modules whose forward runs, innermost last
    in_backward: list[str | None] = [None]    # the module of the autograd node running
    made: dict = {}                           # autograd node -> the module whose forward made it
    per_layer: dict[str, float] = {}
    early = [0.0]                             # counted before any layer's: the first layer's
    last: list[str | None] = [None]

    def layer_of(name: str | None) -> str | None:
        while name is not None:
            if name in owning:
                return name
            name = name.rpartition(".")[0] if name else None
        return None

    def add(flops: float) -> None:
        module = running[-1] if running else in_backward[0]
        layer = layer_of(module) or last[0]
        if layer is None:
            early[0] += flops
            return
        per_layer[layer] = per_layer.get(layer, 0.0) + flops + early[0]
        early[0], last[0] = 0.0, layer

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            formula = registry.get(func._overloadpacket)
            if formula is not None:
                add(float(formula(*args, **(kwargs or {}), out_val=out)))
            return out

    def mark(name: str, output) -> None:
        """The nodes this module's forward added to the graph (below its output, down to
        nodes an inner module or an earlier one made) are its own."""
        import torch
        todo = [t.grad_fn for t in _tensors(output) if isinstance(t, torch.Tensor)
                and t.grad_fn is not None]
        while todo:
            node = todo.pop()
            if node is None or node in made:
                continue
            made[node] = name
            node.register_prehook(lambda _grads, n=name: in_backward.__setitem__(0, n))
            todo.extend(nxt for nxt, _i in node.next_functions)

    def entered(name):
        return lambda _m, _inputs: running.append(name)

    def left(name):
        def hook(_m, _inputs, output):
            running.pop()
            mark(name, output)
        return hook

    handles = [h for name, m in model.named_modules()
               for h in (m.register_forward_pre_hook(entered(name)),
                         m.register_forward_hook(left(name)))]
    x, y = bench.data(bench.batch)
    try:
        with Count():
            loss_of(model(x), y).backward()
    finally:
        for h in handles:
            h.remove()
    bench.opt.zero_grad(set_to_none=True)
    return sum(per_layer.values()) + early[0], per_layer


def _tensors(output) -> list:
    """The tensors of a module's output (a tensor, or tuples, lists and dicts of them)."""
    if isinstance(output, (tuple, list)):
        return [t for o in output for t in _tensors(o)]
    if isinstance(output, dict):
        return [t for o in output.values() for t in _tensors(o)]
    return [output]


def buffer_tensors(model) -> tuple[Tensor, ...]:
    """The model's buffers in ``named_buffers()`` order (BatchNorm's running statistics):
    DDP broadcasts them before every forward, so a phantom's stand-in holds them too."""
    return tuple(Tensor(name, b.numel(), DTYPES.get(str(b.dtype), "float32"))
                 for name, b in model.named_buffers() if b.numel() > 0)


def build_layers(bench: Bench, order, forward: dict, backward: dict, flops: dict,
                 scale_f: float, scale_b: float) -> tuple[Layer, ...]:
    """Layers (modules owning parameters) in the order their last gradient became ready."""
    own = owners(bench.model)
    ready = {pid for pid, _t in order}
    trainable = [p for p in bench.model.parameters() if p.requires_grad and id(p) in ready]
    params = {id(p): p for p in trainable}
    position = {id(p): i for i, p in enumerate(trainable)}     # parameters() order
    by_module: dict[str, list] = {}
    for pid, _t in order:
        mod, name = own[pid]
        p = params[pid]
        by_module.setdefault(mod, []).append(
            Tensor(name, p.numel(), DTYPES.get(str(p.dtype), "float32"), position[pid]))
    layers = []
    for mod, tensors in by_module.items():
        layers.append(Layer(mod or type(bench.model).__name__, tuple(tensors),
                            forward_s=forward.get(mod, 0.0) * scale_f,
                            backward_s=backward.get(mod, 0.0) * scale_b,
                            flops_per_sample=flops.get(mod, 0.0) / bench.batch))
    return tuple(layers)


# ---------------------------------------------------------------- the measurement

def measure(args, model) -> ModelWorkload:
    import torch
    torch.set_num_threads(args.threads)
    bench = Bench(model, args.model, args.input_shape, args.batch_size, args.device, args.seed)
    half = max(1, args.batch_size // 2)
    for _ in range(args.warmup):
        bench.step(args.batch_size)
        bench.step(half)
    full = [bench.step(args.batch_size) for _ in range(args.steps)]
    halves = [sum(bench.step(half)) for _ in range(args.steps)]
    f_s, b_s, u_s = (statistics.median(x[k] for x in full) for k in range(3))
    step_s = statistics.median(sum(x) for x in full)
    spread = statistics.pstdev(sum(x) for x in full) / statistics.mean(sum(x) for x in full)
    order, fwd, bwd = layer_times(bench, args.layer_steps)
    total_flops, per_module = flop_counts(bench)
    layers = build_layers(bench, order, fwd, bwd, per_module,
                          f_s / (sum(fwd.values()) or 1.0), b_s / (sum(bwd.values()) or 1.0))
    lines = ()
    if half < args.batch_size:
        slope = (step_s - statistics.median(halves)) / (args.batch_size - half)
        if slope > 0:
            lines = (StepLine(args.threads, max(0.0, step_s - slope * args.batch_size), slope,
                              spread),)
    return ModelWorkload(
        name=args.name or args.model.rpartition(":")[2], layers=layers, device=device_name(args),
        batch_size=args.batch_size, step_s=step_s, backward_s=b_s, forward_s=f_s, update_s=u_s,
        spread_cv=spread, threads=args.threads, lines=lines,
        flops_per_sample=total_flops / args.batch_size, input_shape=tuple(args.input_shape),
        provenance=provenance(args) | spread_verdict(spread, args.steps),
        buffers=buffer_tensors(bench.model))


def spread_verdict(spread_cv: float, steps: int) -> dict:
    """The run-to-run spread of the timed steps against the stated limit
    (``calibrate.fits.quality.SPREAD_LIMIT_CV``), for the file's provenance; said on stderr
    when above it."""
    from calibrate.fits.quality import SPREAD_LIMIT_CV
    out = {"spread_limit_cv": SPREAD_LIMIT_CV}
    if spread_cv > SPREAD_LIMIT_CV:
        out["spread_warning"] = (f"run-to-run spread {spread_cv:.0%} of {steps} timed steps, "
                                 f"above {SPREAD_LIMIT_CV:.0%}: the machine was not quiet; "
                                 "measure again before predicting with it")
        print(f"{PROG}: warning: {out['spread_warning']}", file=sys.stderr)
    return out


def device_name(args) -> str:
    if args.device == "cuda":
        import torch
        return torch.cuda.get_device_name(0)
    return "cpu"


def provenance(args) -> dict:
    import torch
    argv = ["--model", args.model, "--input-shape", ",".join(map(str, args.input_shape)),
            "--batch-size", str(args.batch_size), "--device", args.device,
            "--threads", str(args.threads), "--out", str(args.out)]
    return {"source": "measured", "command": f"{PROG} " + " ".join(argv),
            "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "processor": platform.processor() or platform.machine(),
            "torch": torch.__version__, "warmup_steps": args.warmup, "timed_steps": args.steps,
            "layer_steps": args.layer_steps,
            "note": "medians; per-layer times from gradient hooks, scaled to the un-hooked "
                    "medians; FLOPs by torch.utils.flop_counter (forward + backward)"}


def main(argv=None) -> int:
    from contracts.profile import ProfileError
    return cli.command(PROG, build_parser().parse_args, run, argv,
                       (ModelError, WorkloadError, ProfileError))


def run(args) -> int:
    if not Path(args.out).parent.is_dir() and str(Path(args.out).parent) not in ("", "."):
        return usage_error(PROG, f"--out {args.out}: folder {Path(args.out).parent} does not exist")
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            return usage_error(PROG, "--device cuda: this machine has no CUDA device "
                                     "(torch.cuda.is_available() is false); use --device cpu "
                                     "or run it on a GPU host")
    if args.from_profile:
        workload = from_profile(args)
    elif args.input_shape is None:
        return usage_error(PROG, "--input-shape is missing (the shape of one sample, "
                                 "e.g. 3,224,224)")
    else:
        model = load_model(args.model, tuple(args.input_shape), args.classes)
        workload = measure(args, model)
    save_workload(workload, args.out, comment=f"workload of {args.model}, made by {PROG}")
    print(f"wrote {args.out}: {workload.name}, {workload.params:,} parameters in "
          f"{len(workload.layers)} layers, {workload.step_s * 1e3:.3g} ms per step of "
          f"{workload.batch_size} on {workload.device} ({workload.flops_per_sample:.3g} FLOPs "
          "per sample)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""NVIDIA DeepLearningExamples' other published PyTorch tables beside the ones
``benchmarks.dle.check`` predicts: the same servers in earlier releases, and ResNet-50's two
sibling models. What they say of the check's three mixed-precision misses.

    python -m benchmarks.dle.published

**Releases** (``PyTorch/Classification/ConvNets/resnet50v1.5/README.md``, "Training
performance results", one and eight GPUs of a DGX A100 and a DGX-1 16 and 32 GB):

* pytorch-20.06 (README at 46ff3707, 2020-06-27; the same table at 90610830): the
  benchmark command (``main.py ... --training-only -p 1 --prof 100``) names no
  ``--data-backend``, so ``main.py``'s default ran, ``dali-cpu`` (NVIDIA DALI, decoding on
  the CPU in its C++ threads); apex AMP, NCHW; the DGX A100 of 40 GB;
* pytorch-20.12 (097c7ff9, 2021-03-04) and pytorch-21.03 (7bdfc81d, 2021-04-20, the
  check's ``TABLES``): ``launch.py --mode benchmark_training``, whose ``configs.yml`` sets
  ``data_backend: pytorch`` (torchvision's ``ImageFolder``, PIL in DataLoader worker
  processes: 16 a GPU on a DGX A100, 8 on a DGX-1); native AMP, NHWC; the DGX A100 of 80 GB.

With DALI every eight-GPU point scaled at 96.8-98.9%; from 20.12 on FP32 and TF32 scale at
96.1-97.4% while mixed precision falls to 80.6-87.1% (``release_lines``). The change of
release brought the DataLoader, native AMP, NHWC and a faster one-GPU step at once, so the
releases do not separate them; 20.12's eight-GPU rate taken as a ceiling on the server's
images a second (``carried``) predicts 21.03's points 3.3-7.4 points pessimistic.

**Siblings** (``resnext101-32x4d`` and ``se-resnext101-32x4d`` READMEs at 7bdfc81d,
pytorch-21.03: ResNet-50's code, loader, workers, container, servers and accumulation; the
batch a GPU from ``configs.yml`` at the same commit: 128 in mixed precision and TF32, 112 for
SE-ResNeXt's mixed precision on a DGX-1, 64 in FP32). What an eight-GPU iteration takes
beyond the one-GPU step (``lost_s``: ``8 b / rate(8) - b / rate(1)``), in mixed precision
beyond FP32 / TF32, is 9.2-9.9 ms on the DGX A100 and 17.3-24.1 ms on the DGX-1 for all three
models (``sibling_lines``), while the eight GPUs ask the loader for 2,925-16,621 images a
second and the models hold 161, about 314 and about 446 parameter tensors. So the misses
are a cost a step that goes with the server, not the loader's CPU (ResNeXt's 4,065 images a
second on a DGX-1 lose as much as ResNet-50's 8,322 through the same loader) nor a cost a
tensor (it would grow 2.8 times from ResNet-50 to SE-ResNeXt). Nor do they grow as the
check's model of the optimizer's update does (``modelled_update_beyond_s``: 4.8, 9.3 and
13.7 ms beyond the one-GPU run for the three models' 707, 1,370 and 2,030 calls, against
9.9, 9.2 and 9.2 ms lost beyond FP32 / TF32 on the DGX A100).

**EfficientNet** (``efficientnet/README.md`` and ``configs.yml`` at 7bdfc81d: the same loop,
loader, container and servers; RMSprop, AutoAugment, an optimizer batch of 4,096, so eight
GPUs step the optimizer once in 2 to 32 iterations; ``efficientnet_lines``). On the DGX-1
all four models lose 15.5-21.2 ms beyond FP32, B4 with its optimizer stepped once in 16
iterations at eight GPUs: there the loss is not the update after ``found_inf.item()``; and
B0's FP32 and mixed-precision steps are equally long at one GPU (97.7 / 98.4 ms) yet lose
11.9 and 33.1 ms at eight, so it is not a step too short to hide the same host work. On the
DGX A100 B0 loses 7.6 and 12.3 ms beyond TF32, as the ResNets do, while B4 (a 387 ms step at
2,570 images a second) loses 0.7 and -1.6 ms: there it is not a constant cost a step of
mixed precision. Not found; nothing here is applied to a prediction.

Imports: cli, benchmarks.dle.check, contracts.cluster, simulator.model.hardware.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import cli
from benchmarks.dle.check import TABLES, update_tensors
from contracts.cluster import load_preset
from simulator.model.hardware.optimizer_step import sgd_ops_bytes, zero_ops_bytes

PROG = "python -m benchmarks.dle.published"
README = "PyTorch/Classification/ConvNets/resnet50v1.5/README.md"
SIBLINGS_SOURCE = "PyTorch/Classification/ConvNets/<model>/README.md at 7bdfc81d (pytorch-21.03)"


@dataclass(frozen=True)
class Release:
    container: str
    commit: str              # the README's commit
    loader: str              # the input pipeline of the benchmark command
    system: str
    precision: str
    throughput: dict         # GPUs -> images per second, as published


DALI, DATALOADER = "DALI dali-cpu", "PyTorch DataLoader, PIL"
EARLIER = (
    Release("pytorch-20.06", "46ff3707", DALI, "DGX A100", "amp", {1: 1240.81, 8: 9604.92}),
    Release("pytorch-20.06", "46ff3707", DALI, "DGX A100", "tf32", {1: 680.15, 8: 5379.82}),
    Release("pytorch-20.06", "46ff3707", DALI, "DGX-1 16GB", "amp", {1: 856.52, 8: 6635.90}),
    Release("pytorch-20.06", "46ff3707", DALI, "DGX-1 16GB", "fp32", {1: 373.21, 8: 2899.62}),
    Release("pytorch-20.06", "46ff3707", DALI, "DGX-1 32GB", "amp", {1: 816.00, 8: 6347.26}),
    Release("pytorch-20.06", "46ff3707", DALI, "DGX-1 32GB", "fp32", {1: 359.76, 8: 2813.23}),
    Release("pytorch-20.12", "097c7ff9", DATALOADER, "DGX A100", "amp", {1: 2461, 8: 15977}),
    Release("pytorch-20.12", "097c7ff9", DATALOADER, "DGX A100", "tf32", {1: 945, 8: 7365}),
    Release("pytorch-20.12", "097c7ff9", DATALOADER, "DGX-1 16GB", "amp", {1: 1180, 8: 7608}),
    Release("pytorch-20.12", "097c7ff9", DATALOADER, "DGX-1 16GB", "fp32", {1: 371, 8: 2851}),
    Release("pytorch-20.12", "097c7ff9", DATALOADER, "DGX-1 32GB", "amp", {1: 1115, 8: 7375}),
    Release("pytorch-20.12", "097c7ff9", DATALOADER, "DGX-1 32GB", "fp32", {1: 365, 8: 2811}),
)


def releases() -> tuple[Release, ...]:
    """Every release's PyTorch points: the earlier ones, then 21.03's (``check.TABLES``)."""
    later = tuple(Release("pytorch-21.03", "7bdfc81d", DATALOADER,
                          t.system.replace(" 80GB", ""), t.precision, t.throughput)
                  for t in TABLES if t.framework == "PyTorch")
    return EARLIER + later


def efficiency(r: Release) -> float:
    """Published eight-GPU scaling efficiency, a fraction."""
    return r.throughput[8] / (8 * r.throughput[1])


def carried(before: Release, after: Release) -> float:
    """``after``'s eight-GPU efficiency were ``before``'s eight-GPU rate the server's
    ceiling: ``min(1, ceiling / (8 x one GPU))``."""
    return min(1.0, before.throughput[8] / (8 * after.throughput[1]))


# MXNet's README one release before the check's (``MxNet/Classification/RN50v1.5/README.md``
# at e470c215, mxnet-19.07): the same ``benchmark.py -i 500 -e 3 -w 1 --num-examples 32000
# --mode train`` on the same servers at the same batch a GPU (DGX-1 192 / 96, DGX-2 256 /
# 128; the DGX-2 section's sentence names a DGX-1, its table has 16 GPUs).
MXNET_1907 = (
    Release("mxnet-19.07", "e470c215", "DALI", "DGX-1 16GB", "amp",
            {1: 1427, 2: 2820, 4: 5560, 8: 10931}),
    Release("mxnet-19.07", "e470c215", "DALI", "DGX-1 16GB", "fp32",
            {1: 385, 2: 768, 4: 1513, 8: 3023}),
    Release("mxnet-19.07", "e470c215", "DALI", "DGX-2", "amp",
            {1: 1438, 2: 2868, 4: 5624, 8: 11174, 16: 20530}),
    Release("mxnet-19.07", "e470c215", "DALI", "DGX-2", "fp32",
            {1: 409, 2: 817, 4: 1617, 8: 3214, 16: 6356}),
)


def mxnet_lines() -> list[str]:
    """Each MXNet point of the check on a DGX-1 or DGX-2 (mxnet-20.12) beside the same
    benchmark's point in mxnet-19.07: the published figure's own spread between releases."""
    out = ["| system | precision | GPUs | mxnet-19.07 | mxnet-20.12 (the check's) | "
           "20.12 - 19.07 (points) |", "|---|---|---:|---:|---:|---:|"]
    for r in MXNET_1907:
        t = next(t for t in TABLES if (t.framework, t.system, t.precision)
                 == ("MXNet", r.system, r.precision))
        for p in sorted(set(r.throughput) & set(t.throughput) - {1}):
            before = r.throughput[p] / (p * r.throughput[1])
            after = t.throughput[p] / (p * t.throughput[1])
            out.append(f"| {r.system} | {r.precision} | {p} | {before:.1%} | {after:.1%} | "
                       f"{100 * (after - before):+.1f} |")
    return out


def release_lines() -> list[str]:
    """The markdown: each server and precision's eight-GPU efficiency by release, and the
    ceiling of 20.12 carried to 21.03's mixed-precision points."""
    rs = releases()
    keys = list(dict.fromkeys((r.system, r.precision) for r in rs))
    out = ["| system | precision | " + " | ".join(
               f"{c}, {next(r.loader for r in rs if r.container == c)}: 1 -> 8 GPUs"
               for c in dict.fromkeys(r.container for r in rs)) + " |",
           "|---|---|" + "---:|" * len(dict.fromkeys(r.container for r in rs))]
    for system, precision in keys:
        cells = [f"{r.throughput[1]:,.0f} -> {r.throughput[8]:,.0f} img/s, {efficiency(r):.1%}"
                 for r in rs if (r.system, r.precision) == (system, precision)]
        out.append(f"| {system} | {precision} | " + " | ".join(cells) + " |")
    out += ["", "| mixed precision, 21.03 | published | 20.12's eight-GPU rate as the "
            "ceiling | difference (points) |", "|---|---:|---:|---:|"]
    for system, precision in keys:
        if precision != "amp":
            continue
        before, after = (next(r for r in rs if (r.container, r.system, r.precision)
                              == (c, system, precision))
                         for c in ("pytorch-20.12", "pytorch-21.03"))
        got, want = carried(before, after), efficiency(after)
        out.append(f"| {system} | {want:.1%} | {got:.1%} | {100 * (got - want):+.1f} |")
    return out


@dataclass(frozen=True)
class Point:
    model: str
    system: str
    precision: str
    batch: int               # a GPU, configs.yml at 7bdfc81d
    throughput: dict         # GPUs -> images per second, as published


SIBLINGS = (
    Point("resnext101-32x4d", "DGX A100", "amp", 128, {1: 1211, 8: 7925}),
    Point("resnext101-32x4d", "DGX A100", "tf32", 128, {1: 456, 8: 3471}),
    Point("resnext101-32x4d", "DGX-1 16GB", "amp", 128, {1: 587, 8: 4065}),
    Point("resnext101-32x4d", "DGX-1 16GB", "fp32", 64, {1: 147, 8: 1133}),
    Point("resnext101-32x4d", "DGX-1 32GB", "amp", 128, {1: 565, 8: 3863}),
    Point("resnext101-32x4d", "DGX-1 32GB", "fp32", 64, {1: 144, 8: 1108}),
    Point("se-resnext101-32x4d", "DGX A100", "amp", 128, {1: 855, 8: 5779}),
    Point("se-resnext101-32x4d", "DGX A100", "tf32", 128, {1: 395, 8: 2991}),
    Point("se-resnext101-32x4d", "DGX-1 16GB", "amp", 112, {1: 443, 8: 2971}),
    Point("se-resnext101-32x4d", "DGX-1 16GB", "fp32", 64, {1: 132, 8: 1004}),
    Point("se-resnext101-32x4d", "DGX-1 32GB", "amp", 112, {1: 427, 8: 2925}),
    Point("se-resnext101-32x4d", "DGX-1 32GB", "fp32", 64, {1: 130, 8: 992}),
)


# EfficientNet's tables (``efficientnet/README.md`` at 7bdfc81d, "Training performance
# results", pytorch-21.03, the benchmark command ``launch.py --mode benchmark_training
# --epochs 1 --prof 100`` as ResNet-50's): the same ``main.py``, ``training.py`` loop
# (autocast, GradScaler, ``torch.cuda.synchronize()`` each step), DataLoader with 16
# workers a GPU on the DGX A100 and 8 on the DGX-1, servers and container; its own
# ``configs.yml`` entries at the same commit: RMSprop, AutoAugment, bicubic, NHWC in mixed
# precision, an optimizer batch of 4,096 (``efficientnet_b0_params_4k``,
# ``efficientnet_b4_params_4k``), and the batch a GPU of the DGXA100 and DGX1V-16G entries.
# The README's DGX-1 32GB table is left out: its eight-GPU rows read 17.6x one GPU (B4, both
# precisions), more than eight GPUs can, so its one-GPU rows are not of the same runs.
EFFICIENTNET_SOURCE = ("PyTorch/Classification/ConvNets/efficientnet/README.md and "
                       "configs.yml at 7bdfc81d (pytorch-21.03)")
EFFICIENTNET_OPTIMIZER_BATCH = 4096
EFFICIENTNETS = (
    Point("efficientnet-b0", "DGX A100", "amp", 256, {1: 2489, 8: 16652}),
    Point("efficientnet-b0", "DGX A100", "tf32", 256, {1: 1078, 8: 8193}),
    Point("efficientnet-b0", "DGX-1 16GB", "amp", 128, {1: 1301, 8: 7789}),
    Point("efficientnet-b0", "DGX-1 16GB", "fp32", 64, {1: 655, 8: 4672}),
    Point("efficientnet-b4", "DGX A100", "amp", 128, {1: 331, 8: 2570}),
    Point("efficientnet-b4", "DGX A100", "tf32", 64, {1: 157, 8: 1223}),
    Point("efficientnet-b4", "DGX-1 16GB", "amp", 32, {1: 204, 8: 1366}),
    Point("efficientnet-b4", "DGX-1 16GB", "fp32", 16, {1: 83, 8: 616}),
    Point("efficientnet-widese-b0", "DGX A100", "amp", 256, {1: 2512, 8: 16368}),
    Point("efficientnet-widese-b0", "DGX A100", "tf32", 256, {1: 1078, 8: 8244}),
    Point("efficientnet-widese-b0", "DGX-1 16GB", "amp", 128, {1: 1299, 8: 7875}),
    Point("efficientnet-widese-b0", "DGX-1 16GB", "fp32", 64, {1: 655, 8: 4592}),
    Point("efficientnet-widese-b4", "DGX A100", "amp", 128, {1: 331, 8: 2585}),
    Point("efficientnet-widese-b4", "DGX A100", "tf32", 64, {1: 157, 8: 1223}),
    Point("efficientnet-widese-b4", "DGX-1 16GB", "amp", 32, {1: 204, 8: 1356}),
    Point("efficientnet-widese-b4", "DGX-1 16GB", "fp32", 16, {1: 83, 8: 612}),
)


def points() -> tuple[Point, ...]:
    """ResNet-50's PyTorch points (``check.TABLES``), then its siblings'."""
    return tuple(Point("resnet50", t.system.replace(" 80GB", ""), t.precision, t.batch,
                       t.throughput) for t in TABLES if t.framework == "PyTorch") + SIBLINGS


def lost_s(p: Point) -> float:
    """What an eight-GPU iteration takes beyond the one-GPU step, seconds."""
    return p.batch * (8 / p.throughput[8] - 1 / p.throughput[1])


# Parameter tensors the example's SGD decays and does not (``get_sgd_optimizer``: names
# without "bn" decayed), from the models in ``image_classification/models`` at 7bdfc81d:
# ResNeXt101-32x4d, 104 convolutions (4 on the shortcuts) and their BatchNorms, the
# shortcuts' 4 named ``downsample.1``: 104 + 8 + the fc's 2 decayed, 100 x 2 not;
# SE-ResNeXt101 adds to each of its 33 blocks ``SqueezeAndExcitation``'s two biased 1x1
# convolutions (``models/common.py``): 4 decayed tensors more a block. ResNet-50's from the
# check's workload file (``check.update_tensors``).
SIBLING_TENSORS = {"resnext101-32x4d": (114, 200), "se-resnext101-32x4d": (114 + 33 * 4, 200)}


# ``ResNet.Arch`` of each model in ``image_classification/models/resnet.py`` at 7bdfc81d:
# blocks a stage, widths, expansion, cardinality, and whether a block ends in
# ``SqueezeAndExcitation(planes * expansion, se_squeeze=16)`` (two biased 1x1 convolutions
# through 16 channels).
ARCH = {"resnet50": ((3, 4, 6, 3), (64, 128, 256, 512), 4, 1, False),
        "resnext101-32x4d": ((3, 4, 23, 3), (128, 256, 512, 1024), 2, 32, False),
        "se-resnext101-32x4d": ((3, 4, 23, 3), (128, 256, 512, 1024), 2, 32, True)}


def parameters(model: str) -> int:
    """Parameters of ``model`` as the example builds it (``ARCH``): a 7x7 stem of 64 and its
    BatchNorm; each bottleneck's 1x1, grouped 3x3 and 1x1 convolutions without bias and
    their BatchNorms, a 1x1 shortcut where the shape changes, the SE convolutions; the fc
    to 1,000 classes. Its gradients are what DDP allreduces, fp32 in both precisions."""
    layers, widths, expansion, groups, se = ARCH[model]
    n, inplanes = 3 * 64 * 49 + 2 * 64, 64
    for stage, (blocks, w) in enumerate(zip(layers, widths)):
        out = w * expansion
        for b in range(blocks):
            n += inplanes * w + w * (w // groups) * 9 + w * out + 2 * (2 * w + out)
            if b == 0 and (stage > 0 or inplanes != out):
                n += inplanes * out + 2 * out
            n += 2 * out * 16 + 16 + out if se else 0
            inplanes = out
    return n + inplanes * 1000 + 1000


def update_calls(model: str) -> int:
    """Calls of the example's ``torch.optim.SGD.step`` and ``zero_grad`` for ``model``
    (``optimizer_step.sgd_ops_bytes``, ``zero_ops_bytes``: the same count as the check's)."""
    if model == "resnet50":
        decayed, plain = (sum(d == want for _, d in update_tensors()) for want in (True, False))
    else:
        decayed, plain = SIBLING_TENSORS[model]
    return (len(sgd_ops_bytes([1] * decayed, [1] * plain))
            + len(zero_ops_bytes([1] * (decayed + plain))))


def modelled_update_beyond_s(model: str, system: str) -> float:
    """What the check's model of the update (the calls one by one after
    ``found_inf.item()``, at the preset's ``host_call``) adds to mixed precision's eight-GPU
    step beyond its one-GPU run's, which steps it once in 8: 7/8 of the calls' host time."""
    device = load_preset("dgx-a100" if system == "DGX A100" else "dgx1-v100").device
    return update_calls(model) * device.host_call_s * 7 / 8


def pair(ps, model: str, system: str) -> tuple[Point, Point]:
    """The mixed-precision point of ``model`` on ``system`` and its FP32 / TF32 point."""
    return tuple(next(p for p in ps if (p.model, p.system) == (model, system)
                      and (p.precision == "amp") == want) for want in (True, False))


def loss_cells(amp: Point, other: Point) -> list[str]:
    """Each precision's step at one and eight GPUs (what eight lose), the images a second
    mixed precision asks at eight, and what it loses beyond the other precision."""
    steps = [f"{1e3 * q.batch / q.throughput[1]:.1f} -> "
             f"{8e3 * q.batch / q.throughput[8]:.1f} ms (+{1e3 * lost_s(q):.1f})"
             for q in (amp, other)]
    return [steps[0], f"{amp.throughput[8]:,}", steps[1],
            f"{1e3 * (lost_s(amp) - lost_s(other)):+.1f} ms"]


LOSS_HEADER = ("mixed precision: 1 -> 8 GPUs (lost) | images/s at 8 | FP32 / TF32: 1 -> 8 GPUs "
               "(lost) | mixed precision's loss beyond FP32 / TF32's")


def sibling_lines() -> list[str]:
    """Each model and server: the steps, what eight GPUs lose in each precision, what mixed
    precision loses beyond the other, and what the check's modelled update would add."""
    ps = points()
    out = [f"| model | system | {LOSS_HEADER} | the modelled update's calls beyond one GPU |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for model, system in dict.fromkeys((p.model, p.system) for p in ps):
        cells = loss_cells(*pair(ps, model, system))
        out.append(f"| {model} | {system} | {' | '.join(cells)} | {update_calls(model):,} "
                   f"calls: {1e3 * modelled_update_beyond_s(model, system):.1f} ms |")
    return out


def optimizer_period(p: Point, gpus: int) -> int:
    """Iterations between two optimizer steps: ``main.py``'s ``batch_size_multiplier =
    int(optimizer_batch_size / (world_size x batch_size))`` (at 7bdfc81d)."""
    return int(EFFICIENTNET_OPTIMIZER_BATCH / (gpus * p.batch))


def efficientnet_lines() -> list[str]:
    """Each EfficientNet and server: the steps and losses of ``sibling_lines``, and how
    often each precision's runs step the optimizer at one and at eight GPUs."""
    out = [f"| model | system | {LOSS_HEADER} | optimizer steps once in (iterations, 1 / 8 "
           "GPUs): mixed precision; FP32 / TF32 |", "|---|---|---:|---:|---:|---:|---:|"]
    for model, system in dict.fromkeys((p.model, p.system) for p in EFFICIENTNETS):
        amp, other = pair(EFFICIENTNETS, model, system)
        period = "; ".join(f"{optimizer_period(q, 1)} / {optimizer_period(q, 8)}"
                           for q in (amp, other))
        out.append(f"| {model} | {system} | {' | '.join(loss_cells(amp, other))} | {period} |")
    return out


def markdown() -> str:
    """Both tables, each under a line that names its sources."""
    return ("The same servers by release: eight-GPU scaling of the example's PyTorch tables "
            f"({README} at 46ff3707, 097c7ff9, 7bdfc81d; the DGX A100 of 40 GB in 20.06, of "
            f"80 GB after; `{PROG}`)\n\n" + "\n".join(release_lines())
            + "\n\nResNet-50 beside its siblings, the same loader, container and servers "
            f"({SIBLINGS_SOURCE}; `{PROG}`)\n\n" + "\n".join(sibling_lines())
            + "\n\nEfficientNet through the same loop, loader, container and servers "
            f"({EFFICIENTNET_SOURCE}; `{PROG}`)\n\n" + "\n".join(efficientnet_lines())
            + "\n\nMXNet's points on a DGX-1 and a DGX-2 one release earlier, the same "
            "benchmark, servers and batch (MxNet/Classification/RN50v1.5/README.md at e470c215 "
            f"and 8c42220b; `{PROG}`)\n\n" + "\n".join(mxnet_lines())
            + "\n\nParameters as the example builds each model (`models/resnet.py`; their "
            "fp32 gradients are what DDP allreduces in both precisions): "
            + ", ".join(f"{m} {parameters(m) / 1e6:.1f} million" for m in ARCH) + ".")


def run(args) -> int:
    print(markdown())
    return 0


def main(argv=None) -> int:
    parser = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    return cli.command(PROG, parser.parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())

"""Time the CPU an image of DeepLearningExamples' PyTorch input pipeline, on one core and with
N loader processes decoding at once.

    python -m benchmarks.dle.input_probe --out DIR          # about 2 minutes on 16 cores

What a loader worker of the published ResNet-50 runs does an image (NVIDIA
DeepLearningExamples, ``PyTorch/Classification/ConvNets/image_classification/dataloaders.py``
at 7bdfc81d, the tables' commit, ``data_backend: pytorch``): torchvision's ``ImageFolder``
opens the file and PIL decodes it (``default_loader`` -> ``pil_loader``: ``Image.open(f)``,
``convert("RGB")``); ``RandomResizedCrop(224, interpolation=bilinear)`` and
``RandomHorizontalFlip()`` run on the PIL image; the loader's ``collate_fn`` is the
example's ``fast_collate`` (``np.asarray`` of the image, ``np.rollaxis`` to CHW, a copy,
added into a ``uint8`` batch tensor made by ``torch.zeros`` in the run's memory format,
``channels_last`` for ``memory_format: nhwc``), and the finished batch goes to the main
process through shared memory (the DataLoader's queue pickles the tensor with
``torch.multiprocessing``'s reducer, which moves its storage to shared memory). The mean and
std normalization, the float conversion and mixup run on the GPU in the main process
(``PrefetchedWrapper.prefetched_loader``, ``mixup.py``): not here. This module does the
same without torchvision (it does not import on the project's machine):
``random_resized_crop`` follows torchvision 0.10's ``RandomResizedCrop.get_params``
(``torchvision/transforms/transforms.py``: ten tries of an area in [0.08, 1] of the image's
and a log-uniform aspect in [3/4, 4/3], ``int(round(sqrt(area * aspect)))`` wide, the
fallback a centre crop) and ``F.resized_crop`` (``functional.py``: ``crop`` then
``resize``; ``functional_pil.py``: ``img.crop((left, top, left + w, top + h))`` and
``img.resize((224, 224), Image.BILINEAR)``); the flip is ``img.transpose(FLIP_LEFT_RIGHT)``
with probability 1/2 (``functional_pil.hflip``). torch's random numbers are replaced by
Python's: the same distributions, so the same work.

The images (``imagenet_like_jpegs``): JPEG decoding costs per pixel (inverse DCT, colour
conversion: set by the size and the chroma subsampling) and per entropy-coded byte (Huffman
decoding: set by the file's size at that size). So each synthetic image has ImageNet's
mean resolution (469 x 387, the figure quoted for ILSVRC's images), its usual coding
(quality 96, no chroma subsampling: M. Ehrlich, "Compression in the ImageNet Dataset",
2021, a survey of every training image's JPEG settings) and its mean file size (114.7 kB:
ILSVRC2012_img_train.tar's 147,897,477,120 bytes over its 1,281,167 images, less about
770 bytes of tar header and padding an image). The pixels are 1/f noise (the amplitude
spectrum of natural images falls as 1/frequency: Field 1987; van der Schaaf and van Hateren
1996), luminance with weaker chroma, its contrast set by bisection so that the set's mean
size lands within 1% of the target. Deterministic: the same bytes from the same seed and
Pillow.

The measurement: N processes (``--workers``, default 1, 2, 4, 8, ... up to the host's
cores) start together at a barrier, each a loader worker over the files on disk (the page
cache) making batches of 256; after ``--warmup`` seconds every process's images that end in
each of ``--repeats`` windows of ``--window`` seconds give its time an image in that window
(the batch's allocation and its move to shared memory shared over its 256 images). All N
work through every window. Per N: the median over windows of the median over processes, the
spread, the share of that time the process ran on a CPU (``time.process_time``: below 100%
it waited for a core, so the host was busy with more than the N), and the images a second
of all N; against one process, the rise. Writes
``input_probe.json`` into ``--out`` with the CPU, its cores, Pillow's and libjpeg-turbo's
versions. Needs Pillow and numpy; torch for ``fast_collate`` as the example runs it
(without torch, the same copy into a numpy batch; the JSON says which).
"""
from __future__ import annotations

import json
import math
import multiprocessing
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import cli
from contracts.files import atomic_write_text

PROG = "python -m benchmarks.dle.input_probe"

WIDTH, HEIGHT = 469, 387                 # ImageNet's mean resolution, as quoted
QUALITY = 96                             # Ehrlich 2021: most training images
TARGET_BYTES = 114_670                   # 147,897,477,120 / 1,281,167 - ~770 tar bytes
IMAGES = 48                              # distinct files, read in turn
CROP = 224
BATCH = 256                              # the examples' batch a GPU
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)


def _pink(rng, shape):
    """A field whose amplitude spectrum falls as 1/f, zero mean, unit standard deviation."""
    import numpy as np
    fy = np.fft.fftfreq(shape[0])[:, None]
    fx = np.fft.rfftfreq(shape[1])[None, :]
    f = np.sqrt(fx ** 2 + fy ** 2)
    f[0, 0] = 1.0
    spec = (rng.standard_normal(f.shape) + 1j * rng.standard_normal(f.shape)) / f
    spec[0, 0] = 0.0
    field = np.fft.irfft2(spec, s=shape)
    return (field - field.mean()) / field.std()


def _fields(n: int, seed: int):
    """n images' luminance and two chroma fields, before the contrast is chosen."""
    import numpy as np
    rng = np.random.default_rng(seed)
    return [(_pink(rng, (HEIGHT, WIDTH)), _pink(rng, (HEIGHT, WIDTH)),
             _pink(rng, (HEIGHT, WIDTH))) for _ in range(n)]


def _encode(fields, contrast: float) -> list[bytes]:
    import io

    import numpy as np
    from PIL import Image
    out = []
    for lum, cb, cr in fields:
        y = 128 + contrast * lum
        u, v = 0.35 * contrast * cb, 0.35 * contrast * cr
        rgb = np.stack([y + 1.402 * v, y - 0.344 * u - 0.714 * v, y + 1.772 * u], axis=-1)
        buf = io.BytesIO()
        Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(
            buf, format="JPEG", quality=QUALITY, subsampling=0)
        out.append(buf.getvalue())
    return out


def imagenet_like_jpegs(n: int = IMAGES, seed: int = 0, target: int = TARGET_BYTES,
                        tolerance: float = 0.01) -> tuple[list[bytes], float]:
    """n JPEGs of ImageNet's mean resolution, coding and mean file size; and the contrast
    (standard deviation of the luminance, 0-255) that gave that size."""
    fields = _fields(n, seed)
    lo, hi = 1.0, 120.0
    for _ in range(30):
        mid = (lo + hi) / 2
        jpegs = _encode(fields, mid)
        mean = statistics.mean(map(len, jpegs))
        if abs(mean / target - 1) <= tolerance:
            return jpegs, mid
        lo, hi = (mid, hi) if mean < target else (lo, mid)
    raise RuntimeError(f"no contrast gives a mean of {target} bytes (last {mean:.0f})")


def crop_params(width: int, height: int, rnd: random.Random) -> tuple[int, int, int, int]:
    """torchvision 0.10 ``RandomResizedCrop.get_params``: (top, left, height, width)."""
    area = width * height
    log_ratio = (math.log(RATIO[0]), math.log(RATIO[1]))
    for _ in range(10):
        target_area = area * rnd.uniform(*SCALE)
        aspect = math.exp(rnd.uniform(*log_ratio))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rnd.randint(0, height - h), rnd.randint(0, width - w), h, w
    in_ratio = width / height
    if in_ratio < min(RATIO):
        w, h = width, int(round(width / min(RATIO)))
    elif in_ratio > max(RATIO):
        w, h = int(round(height * max(RATIO))), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def load_and_transform(path: str, rnd: random.Random):
    """``pil_loader``, ``RandomResizedCrop(224)`` (bilinear), ``RandomHorizontalFlip()``."""
    from PIL import Image
    with open(path, "rb") as f:
        img = Image.open(f)
        img = img.convert("RGB")
    top, left, h, w = crop_params(img.size[0], img.size[1], rnd)
    img = img.crop((left, top, left + w, top + h)).resize((CROP, CROP), Image.BILINEAR)
    if rnd.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    return img


class Collate:
    """The example's ``fast_collate`` into a channels-last ``uint8`` batch (torch), or the
    same copy into a numpy batch where torch is missing; ``done`` moves a torch batch to
    shared memory, as the DataLoader's queue does."""

    def __init__(self):
        try:
            import torch
            torch.set_num_threads(1)          # as torch.utils.data's _worker_loop does
            self.torch = torch
        except ImportError:
            self.torch = None

    def new(self, n: int):
        import numpy as np
        if self.torch is None:
            return np.zeros((n, CROP, CROP, 3), dtype=np.uint8)
        return self.torch.zeros((n, 3, CROP, CROP), dtype=self.torch.uint8).contiguous(
            memory_format=self.torch.channels_last)

    def put(self, batch, i: int, img) -> None:
        import numpy as np
        array = np.asarray(img, dtype=np.uint8)
        if self.torch is None:
            batch[i] += array
            return
        batch[i] += self.torch.from_numpy(np.rollaxis(array, 2).copy())

    def done(self, batch) -> None:
        if self.torch is not None:
            batch.share_memory_()


def worker(paths: list[str], seed: int, start, end_s: float, barrier, go, queue) -> None:
    """A loader worker: once every process is ready (``barrier``) and the start is set
    (``go``), batches of BATCH images until ``start + end_s``; puts (end time, seconds,
    CPU seconds) for every image, the batch's own work spread over its images."""
    rnd = random.Random(seed)
    collate = Collate()
    records, k = [], seed
    barrier.wait()
    go.wait()
    stop = start.value + end_s
    while time.monotonic() < stop:
        t0, c0 = time.monotonic(), time.process_time()
        batch = collate.new(BATCH)
        own, own_cpu, times = time.monotonic() - t0, time.process_time() - c0, []
        for i in range(BATCH):
            t1, c1 = time.monotonic(), time.process_time()
            collate.put(batch, i, load_and_transform(paths[k % len(paths)], rnd))
            k += 1
            t2 = time.monotonic()
            times.append((t2, t2 - t1, time.process_time() - c1))
            if t2 >= stop:
                break
        t3, c3 = time.monotonic(), time.process_time()
        collate.done(batch)
        own += time.monotonic() - t3
        own_cpu += time.process_time() - c3
        records += [(t, dt + own / BATCH, cpu + own_cpu / BATCH) for t, dt, cpu in times]
    queue.put(records)


def level(paths: list[str], n: int, warmup_s: float, window_s: float, repeats: int) -> dict:
    """n loader processes at once: seconds an image a process, window by window."""
    ctx = multiprocessing.get_context("spawn")
    barrier, go, queue = ctx.Barrier(n + 1), ctx.Event(), ctx.Queue()
    start = ctx.Value("d", 0.0)
    end_s = warmup_s + repeats * window_s
    procs = [ctx.Process(target=worker, args=(paths, 1000 * n + i, start, end_s, barrier, go,
                                                  queue))
             for i in range(n)]
    for p in procs:
        p.start()
    barrier.wait(timeout=300)                 # every process has started and imported
    start.value = time.monotonic() + 0.05
    go.set()
    runs = [queue.get(timeout=end_s + 300) for _ in procs]
    for p in procs:
        p.join()
    t0 = start.value + warmup_s
    windows = []
    for r in range(repeats):
        lo, hi = t0 + r * window_s, t0 + (r + 1) * window_s
        inside = [[(dt, cpu) for t, dt, cpu in run if lo <= t < hi] for run in runs]
        if not all(inside):
            raise RuntimeError(f"{n} at once: a process finished no image in a {window_s} s "
                               "window; give a longer --window")
        each = [statistics.mean(dt for dt, _ in x) for x in inside]
        cpu = [statistics.mean(c for _, c in x) for x in inside]
        windows.append({"median_s": statistics.median(each), "min_s": min(each),
                        "max_s": max(each), "cpu_s": statistics.median(cpu),
                        "images": sum(map(len, inside))})
    med = statistics.median(w["median_s"] for w in windows)
    return {"processes": n, "s_per_image": med,
            "cpu_s_per_image": statistics.median(w["cpu_s"] for w in windows),
            "s_per_image_windows": [w["median_s"] for w in windows],
            "s_per_image_process_range": [min(w["min_s"] for w in windows),
                                          max(w["max_s"] for w in windows)],
            "images_per_s": statistics.median(w["images"] for w in windows) / window_s}


def default_levels(cores: int) -> list[int]:
    """1, 2, 4, 8, ... and the host's cores."""
    out, n = [], 1
    while n < cores:
        out.append(n)
        n *= 2
    return out + [cores]


def host() -> dict:
    import numpy
    import PIL
    from PIL import features
    info = {"cpu": platform.processor(), "cpu_count": os.cpu_count(),
            "cpus_allowed": len(os.sched_getaffinity(0)), "python": platform.python_version(),
            "pillow": PIL.__version__, "libjpeg_turbo": features.version("libjpeg_turbo"),
            "numpy": numpy.__version__}
    try:
        text = Path("/proc/cpuinfo").read_text()
        names = [line.split(":", 1)[1].strip() for line in text.splitlines()
                 if line.startswith("model name")]
        mhz = [float(line.split(":", 1)[1]) for line in text.splitlines()
               if line.startswith("cpu MHz")]
        info["cpu"] = names[0] if names else info["cpu"]
        info["cpu_mhz_median"] = statistics.median(mhz) if mhz else None
        info["threads_per_core"] = len(Path(
            "/sys/devices/system/cpu/cpu0/topology/thread_siblings_list").read_text()
            .strip().replace("-", ",").split(","))
    except (OSError, ValueError, IndexError):
        pass
    try:
        import torch
        info["torch"] = torch.__version__
    except ImportError:
        info["torch"] = None
    return info


def photo_check(photos: list[str], reps: int = 30) -> list[dict]:
    """Each photo cut to the images' size and coded as they are, against synthetic images
    of the same bytes: the decode's time (fastest of ``reps`` passes), each and the ratio."""
    import io

    from PIL import Image

    def decode_s(blobs):
        best = math.inf
        for _ in range(reps):
            t0 = time.perf_counter()
            for b in blobs:
                Image.open(io.BytesIO(b)).convert("RGB")
            best = min(best, (time.perf_counter() - t0) / len(blobs))
        return best
    out = []
    for path in photos:
        img = Image.open(path).convert("RGB")
        s = max(WIDTH / img.size[0], HEIGHT / img.size[1])
        img = img.resize((round(img.size[0] * s), round(img.size[1] * s)), Image.BICUBIC)
        buf = io.BytesIO()
        img.crop((0, 0, WIDTH, HEIGHT)).save(buf, format="JPEG", quality=QUALITY, subsampling=0)
        synthetic, _ = imagenet_like_jpegs(8, target=len(buf.getvalue()))
        photo_s, synthetic_s = decode_s([buf.getvalue()]), decode_s(synthetic)
        out.append({"photo": Path(path).name, "bytes": len(buf.getvalue()),
                    "photo_decode_s": photo_s, "synthetic_decode_s": synthetic_s,
                    "synthetic_over_photo": synthetic_s / photo_s})
    return out


def table(result: dict) -> str:
    one = result["levels"][0]["s_per_image"]
    lines = ["| loader processes at once | ms an image a process (windows) | processes' range "
             "| of it on a CPU | images/s, all | rise over one |",
             "|---:|---:|---:|---:|---:|---:|"]
    for lv in result["levels"]:
        wins = " / ".join(f"{1e3 * s:.2f}" for s in lv["s_per_image_windows"])
        lo, hi = lv["s_per_image_process_range"]
        lines.append(f"| {lv['processes']} | {1e3 * lv['s_per_image']:.2f} ({wins}) | "
                     f"{1e3 * lo:.2f}-{1e3 * hi:.2f} | "
                     f"{lv['cpu_s_per_image'] / lv['s_per_image']:.0%} | {lv['images_per_s']:.0f} | "
                     f"x{lv['s_per_image'] / one:.2f} |")
    return "\n".join(lines)


def build_parser() -> cli.Parser:
    ap = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."),
                    help="folder for input_probe.json (default: $OUT, else here)")
    ap.add_argument("--workers", default="",
                    help="loader processes at once, comma-separated (default: 1, 2, 4, ... "
                         "and the host's cores)")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds before the windows")
    ap.add_argument("--window", type=float, default=3.0, help="seconds a window")
    ap.add_argument("--repeats", type=int, default=3, help="windows a level")
    ap.add_argument("--photo", nargs="*", default=[], metavar="JPEG",
                    help="also decode these photos, cut and coded as the synthetic images, "
                         "against synthetic images of the same bytes")
    return ap


def run(args) -> int:
    try:
        import numpy  # noqa: F401
        import PIL  # noqa: F401
    except ImportError as e:
        print(f"input_probe: {e.name} is not installed: install Pillow and numpy "
              "(pip install pillow numpy)", file=sys.stderr)
        return 2
    cores = len(os.sched_getaffinity(0))
    try:
        levels = ([int(x) for x in args.workers.split(",") if x.strip()]
                  or default_levels(cores))
    except ValueError:
        print(f"input_probe: --workers: {args.workers!r} is not a list of counts",
              file=sys.stderr)
        return 2
    if min(levels) < 1 or args.window <= 0 or args.repeats < 1 or args.warmup < 0:
        print("input_probe: --workers must be >= 1, --window > 0, --repeats >= 1, "
              "--warmup >= 0", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    jpegs, contrast = imagenet_like_jpegs()
    result = {"host": host(), "images": {
        "count": len(jpegs), "width": WIDTH, "height": HEIGHT, "quality": QUALITY,
        "subsampling": "4:4:4", "bytes_mean": statistics.mean(map(len, jpegs)),
        "bytes_target": TARGET_BYTES, "luminance_sd": contrast},
        "batch": BATCH, "warmup_s": args.warmup, "window_s": args.window,
        "repeats": args.repeats, "levels": []}
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, b in enumerate(jpegs):
            path = Path(tmp) / f"n{i:08d}.JPEG"
            path.write_bytes(b)
            paths.append(str(path))
        for n in levels:
            result["levels"].append(level(paths, n, args.warmup, args.window, args.repeats))
            lv = result["levels"][-1]
            print(f"{n} at once: {1e3 * lv['s_per_image']:.2f} ms an image a process, "
                  f"{lv['images_per_s']:.0f} images/s", flush=True)
    result["photo_check"] = photo_check(args.photo)
    result["seconds"] = time.monotonic() - t0
    out = Path(args.out)
    atomic_write_text(out / "input_probe.json", json.dumps(result, indent=1) + "\n")
    h = result["host"]
    print(f"\n{h['cpu']}, {h['cpus_allowed']} CPUs; Pillow {h['pillow']}, libjpeg-turbo "
          f"{h['libjpeg_turbo']}; {len(jpegs)} JPEGs {WIDTH}x{HEIGHT} q{QUALITY} 4:4:4, "
          f"{result['images']['bytes_mean'] / 1e3:.1f} kB mean\n")
    print(table(result))
    for c in result["photo_check"]:
        print(f"decode, {c['photo']} ({c['bytes'] / 1e3:.1f} kB): photo "
              f"{1e3 * c['photo_decode_s']:.3f} ms, synthetic {1e3 * c['synthetic_decode_s']:.3f}"
              f" ms (x{c['synthetic_over_photo']:.2f})")
    print(f"\nwrote {out / 'input_probe.json'} ({result['seconds']:.0f} s)", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())

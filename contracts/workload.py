"""The workload contract: which model, what one step of it costs, how long to train.

Two parts:

* ``Workload``: what the engines take for one prediction: the model's name,
  the **per-worker** batch (each of P workers takes ``batch_per_worker``
  samples per step, so one synchronous step consumes ``P * batch_per_worker``
  samples), the dataset size and how long to train. An epoch is
  ``ceil(dataset_samples / (P * batch_per_worker))`` iterations per worker
  for every data-parallel scheme (the dataset is split over the workers).
* ``ModelWorkload``: a model's workload *file* (TOML), written by ``python -m
  calibrate.workload`` from a real ``nn.Module`` or by hand from a few
  numbers: the parameter tensors in the order their gradients become ready in
  backward (with their element counts and dtypes), grouped in layers, the
  forward and backward time of each layer and of a whole step on a named
  device, the spread of single steps, FLOPs per sample and provenance.

The measured form (every time a value with a unit)::

    schema_version = 1
    [model]
    name = "cnn"
    input_shape = [1, 28, 28]
    flops_per_sample = 2.4e6        # forward + backward, torch.utils.flop_counter
    [measured]
    device = "cpu"                  # the device the times are for (a name)
    threads = 1                     # threads of the process that measured them
    batch_size = 32
    step = "5.1ms"                  # median forward + backward + update
    forward = "1.2ms"
    backward = "3.4ms"
    update = "0.5ms"
    spread_cv = 0.02                # std / mean of single steps
    [[layers]]                      # in gradient-ready order: the last layer first
    name = "fc2"
    forward = "0.05ms"
    backward = "0.1ms"
    flops_per_sample = 3000
    tensors = [
      { name = "fc2.weight", params = 500, dtype = "float32", param_index = 6 },
      { name = "fc2.bias", params = 10, dtype = "float32", param_index = 7 },
    ]
    [provenance]
    source = "measured"             # or "numbers"
    command = "python -m calibrate.workload --model cnn ..."

A model's buffers (BatchNorm's running statistics: not trained, but DDP broadcasts
them from rank 0 before every forward in training, ``broadcast_buffers=True``) are listed
as ``buffers = [ { name = "bn1.running_mean", params = 64, dtype = "float32" }, ... ]``
under ``[model]``, in ``named_buffers()`` order; ``calibrate.workload`` writes them, and
a phantom run's stand-in holds them, so its DDP sends what the real model's does.

A tensor's optional ``param_index`` is its position in the model's
``parameters()``: the order a loop over the tensors (the per-tensor all_reduce)
and DDP's first buckets follow. Give it for every tensor or for none; without
it, that order is taken as the gradient-ready order reversed.

The few-numbers form, for a model that cannot be run here: ``[model]`` with
``params`` (one tensor) or ``tensor_params`` (a list in gradient-ready order,
one layer each), optional ``dtype``, and ``[measured]`` with ``device``,
``batch_size`` and either ``step`` or ``samples_per_second``;
``backward_fraction`` (default 2/3: backward costs about twice the forward)
splits the step, and layers without times share the backward by their
``flops_per_sample`` where given, else by their parameters. Optional
``[[measured.lines]]`` (``threads``, ``intercept``, ``per_sample``,
``spread_cv``) give the step time against the batch per thread count (a CPU
model of this project's profile); without them a step is taken proportional
to the batch. ``device_flops`` (e.g. ``"9.3TFLOP/s"``) names the measuring
device's sustained compute rate, which scales the step to other devices.

Precision (``PRECISIONS``): ``measured.precision`` names the arithmetic the times were
measured in (``fp32``, the default; ``tf32``; ``amp``, mixed precision with fp16 or
bf16 math and fp32 master weights), and ``[measured.precisions]`` gives the same
device's step in the others, each with its source::

    [measured]
    precision = "tf32"
    samples_per_second = 938
    [measured.precisions]
    amp = { samples_per_second = 2470, source = "DeepLearningExamples ... 1 GPU" }

``at_precision(w, "amp")`` is the workload as the precision runs it: every time (step,
forward, backward, update, the layers') scaled by the ratio of the steps, the tensors
unchanged (AMP keeps fp32 master weights, so its gradients stay fp32).

Input pipeline: ``measured.input_per_sample`` (e.g. ``"2.5ms"``) is the host CPU time
one sample's loading, decoding and augmentation takes on one core. With the cluster's
``cpu_cores`` per host, the k ranks of a host cannot step faster than their input::

    t_step >= batch * input_per_sample / min(input_workers, cpu_cores / k)

(the pipeline prefetches beside the device's step, so the longer of the two sets the pace).
``measured.input_workers`` is the loader processes a rank runs (PyTorch's DataLoader
``num_workers``: each worker makes whole batches, ``_MultiProcessingDataLoaderIter`` hands
them out in turn, so at most that many images are decoded at once); absent or 0, a rank's
pipeline may use any core of its host (``cpu_cores / k``). ``measured.input_per_sample_at``
(e.g. ``{ 8 = "2.9ms", 16 = "4.2ms" }``, ``benchmarks.dle.input_probe``) is the time a
sample when that many loader processes decode at once on the host; the bound then reads
the time at the host's busy processes, ``min(cpu_cores, k * input_workers)``
(``simulator.model.hardware.input_pipeline``).

Imports: ``contracts.checks``, ``contracts.units``, ``contracts.tomlw``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import tomllib

from contracts.checks import ConfigError, positive, whole
from contracts.units import duration_text, parse_duration, parse_flop_rate

SCHEMA_VERSION = 1
PRECISIONS = ("fp32", "tf32", "amp")   # what --precision takes
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8,
               "int64": 8}     # int64: a buffer's (BatchNorm's num_batches_tracked)
DEFAULT_BACKWARD_FRACTION = 2 / 3      # backward: about twice the forward's FLOPs


@dataclass(frozen=True)
class Workload:
    model: str = "cnn"
    batch_per_worker: int = 64         # samples per step on EACH worker
    dataset_samples: int = 60000
    epochs: float = 1.0
    iterations: int | None = None      # per worker; overrides epochs when set
    threads_per_worker: int | None = 1   # None: cores // ranks on the host, as real.train does
    # on accelerator hosts, the optimizer steps once every K iterations (gradient
    # accumulation, PyTorch's convention: K backward passes, then optimizer.step() and
    # zero_grad()); a measured step holds one update, so K > 1 takes (1 - 1/K) of it off
    # each (engine.run.with_optimizer_step); 1: the step as measured
    accumulation_steps: int = 1
    # with accumulation_steps K > 1, DDP runs K - 1 of every K iterations inside no_sync():
    # its gradients cross once in K (engine.no_sync); False: every iteration, as DDP does
    # without it
    no_sync: bool = False

    def __post_init__(self):
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(f"model must be a name (got {self.model!r})")
        whole("batch_per_worker", self.batch_per_worker)
        whole("dataset_samples", self.dataset_samples)
        positive("epochs", self.epochs)
        if self.threads_per_worker is not None:
            whole("threads_per_worker", self.threads_per_worker)
        if self.iterations is not None:
            whole("iterations", self.iterations)
        whole("accumulation_steps", self.accumulation_steps)
        if not isinstance(self.no_sync, bool):
            raise ConfigError(f"no_sync must be true or false (got {self.no_sync!r})")

    def iterations_per_epoch(self, workers: int) -> int:
        return max(1, math.ceil(self.dataset_samples / (workers * self.batch_per_worker)))

    def iterations_per_worker(self, workers: int) -> int:
        if self.iterations is not None:
            return self.iterations
        return max(1, math.ceil(self.epochs * self.iterations_per_epoch(workers)))


# ---------------------------------------------------------------- workload files

@dataclass(frozen=True)
class Tensor:
    """One parameter tensor: its gradient has ``params`` elements of ``dtype``;
    ``param_index``: its position in the model's ``parameters()`` (None: not given)."""
    name: str
    params: int
    dtype: str = "float32"
    param_index: int | None = None

    @property
    def bytes(self) -> int:
        return self.params * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class Layer:
    """Tensors whose gradients become ready together, with the layer's own times
    (at the workload's batch on its device; 0 = not measured)."""
    name: str
    tensors: tuple[Tensor, ...]
    forward_s: float = 0.0
    backward_s: float = 0.0
    flops_per_sample: float = 0.0      # forward + backward

    @property
    def params(self) -> int:
        return sum(t.params for t in self.tensors)

    @property
    def bytes(self) -> int:
        return sum(t.bytes for t in self.tensors)


@dataclass(frozen=True)
class StepLine:
    """t_step(batch) = intercept_s + s_per_sample * batch, with ``threads`` threads."""
    threads: int
    intercept_s: float
    s_per_sample: float
    spread_cv: float = 0.0


@dataclass(frozen=True)
class ModelWorkload:
    """A model's workload file: tensors in gradient-ready order and step costs."""
    name: str
    layers: tuple[Layer, ...]          # gradient-ready order (backward finishes them so)
    device: str                        # the device the times were measured on
    batch_size: int                    # samples per step of the measurement
    step_s: float                      # forward + backward + update (median)
    backward_s: float
    forward_s: float = 0.0
    update_s: float = 0.0
    spread_cv: float = 0.0
    threads: int = 1
    lines: tuple[StepLine, ...] = ()   # step time against batch, per thread count
    flops_per_sample: float = 0.0      # forward + backward of one sample (0: unknown)
    device_flops_per_s: float = 0.0    # the device's sustained rate (0: unknown)
    input_shape: tuple[int, ...] = ()
    provenance: dict = field(default_factory=dict)
    input_s_per_sample: float = 0.0    # host CPU core-seconds of input pipeline per sample
    input_workers: int = 0             # loader processes a rank (0: any core of the host)
    # (processes busy at once, seconds a sample) where measured beyond one process
    input_at: tuple[tuple[int, float], ...] = ()
    precision: str = "fp32"            # the arithmetic the times were measured in
    precision_steps: tuple[tuple[str, float, str], ...] = ()   # (precision, step_s, source)
    buffers: tuple[Tensor, ...] = ()   # the model's buffers, named_buffers() order
    slept_from: str = ""               # a phantom run's slept workload: the model it sleeps
                                       # (whose real update its server runs; ``slept``)

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def grad_bytes(self) -> int:
        return sum(layer.bytes for layer in self.layers)

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        """Every tensor in gradient-ready order."""
        return tuple(t for layer in self.layers for t in layer.tensors)

    def parameter_order(self) -> tuple[Tensor, ...]:
        """Every tensor in the model's ``parameters()`` order: by ``param_index`` where
        the file gives it, else the gradient-ready order reversed."""
        tensors = self.tensors
        if tensors and all(t.param_index is not None for t in tensors):
            return tuple(sorted(tensors, key=lambda t: t.param_index))
        return tuple(reversed(tensors))

    @property
    def backward_fraction(self) -> float:
        return self.backward_s / self.step_s if self.step_s > 0 else DEFAULT_BACKWARD_FRACTION

    def backward_shares(self) -> tuple[float, ...]:
        """Each layer's share of the backward, in gradient-ready order: its measured
        backward time where every layer has one, else its FLOPs where the file counts
        them (a layer torch counts none for, a batch norm, gets none), else its
        parameters."""
        how = self.shares_from()
        key = {"measured per-layer backward times": lambda l: l.backward_s,
               "per-layer FLOPs": lambda l: l.flops_per_sample}.get(how, lambda l: l.params)
        weights = [key(layer) for layer in self.layers]
        total = sum(weights) or 1
        return tuple(w / total for w in weights)

    def shares_from(self) -> str:
        """What the backward shares were taken from (said in a prediction's provenance)."""
        if self.layers and all(layer.backward_s > 0 for layer in self.layers):
            return "measured per-layer backward times"
        if sum(layer.flops_per_sample for layer in self.layers) > 0:
            return "per-layer FLOPs"
        return "per-layer parameter counts"

    def achieved_flops_per_s(self) -> float:
        """The rate this model reached on its device (0 where FLOPs are unknown)."""
        if self.flops_per_sample <= 0 or self.step_s <= 0:
            return 0.0
        return self.flops_per_sample * self.batch_size / self.step_s


class WorkloadError(ConfigError):
    """A workload file that cannot be used; the message names file, field and fix."""


def load_workload(path: str | Path) -> ModelWorkload:
    """Read a workload TOML file; a missing, negative or unit-less value raises
    WorkloadError naming the file, the field and what to write."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise WorkloadError(f"workload file {path} does not exist") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise WorkloadError(f"workload file {path} cannot be read: {e}") from None
    try:
        return workload_from_dict(raw)
    except (ConfigError, ValueError) as e:
        raise WorkloadError(f"workload file {path}: {e}") from None


def _section(raw: dict, key: str) -> dict:
    v = raw.get(key)
    if not isinstance(v, dict):
        raise ConfigError(f"section [{key}] is missing")
    return v


def _number(d: dict, key: str, where: str, default=None, integer: bool = False,
            allow_zero: bool = False):
    if key not in d:
        if default is not None:
            return default
        raise ConfigError(f"value {where}.{key} is missing")
    v = d[key]
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        kind = "a whole number" if integer else "a number"
        raise ConfigError(f"value {where}.{key} must be {kind} above 0"
                          f"{' (or 0)' if allow_zero else ''} (got {v!r})")
    return v


def _time(d: dict, key: str, where: str, default: float | None = None) -> float:
    if key not in d:
        if default is not None:
            return default
        raise ConfigError(f"value {where}.{key} is missing (a time like \"12ms\")")
    try:
        return parse_duration(d[key])
    except ValueError as e:
        raise ConfigError(f"value {where}.{key}: {e}") from None


def _tensor(t, where: str) -> Tensor:
    if not isinstance(t, dict):
        raise ConfigError(f"{where} must be a table like {{ name = \"w\", params = 10 }}")
    dtype = t.get("dtype", "float32")
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"value {where}.dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
    index = t.get("param_index")
    if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
        raise ConfigError(f"value {where}.param_index must be a whole number >= 0 (its "
                          f"position in the model's parameters()), got {index!r}")
    return Tensor(str(t.get("name", "")), _number(t, "params", where, integer=True), dtype,
                  index)


def _check_param_indices(layers: tuple[Layer, ...]) -> None:
    """``param_index`` on every tensor or on none, each position once."""
    given = [t.param_index for layer in layers for t in layer.tensors]
    known = [i for i in given if i is not None]
    if known and len(known) < len(given):
        raise ConfigError(f"param_index is given for {len(known)} of {len(given)} tensors: "
                          "give it for every tensor or for none")
    if known and sorted(known) != list(range(len(known))):
        raise ConfigError("param_index values must be 0 .. (tensors - 1), each once "
                          f"(got {sorted(known)})")


def _layers(raw: dict, model: dict) -> tuple[Layer, ...]:
    """[[layers]] of the measured form, or the few numbers' params / tensor_params."""
    if "layers" in raw:
        layers = []
        for i, lay in enumerate(raw["layers"]):
            where = f"layers[{i}]"
            if not isinstance(lay, dict) or not lay.get("tensors"):
                raise ConfigError(f"value {where}.tensors is missing (a list of "
                                  "{ name, params, dtype } tables)")
            tensors = tuple(_tensor(t, f"{where}.tensors[{j}]")
                            for j, t in enumerate(lay["tensors"]))
            layers.append(Layer(str(lay.get("name", f"layer{i}")), tensors,
                                _time(lay, "forward", where, 0.0),
                                _time(lay, "backward", where, 0.0),
                                _number(lay, "flops_per_sample", where, 0.0, allow_zero=True)))
        _check_param_indices(tuple(layers))
        return tuple(layers)
    dtype = model.get("dtype", "float32")
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"value model.dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
    if "tensor_params" in model:
        counts = model["tensor_params"]
        if not isinstance(counts, list) or not counts:
            raise ConfigError("value model.tensor_params must be a list of element counts")
        return tuple(Layer(f"tensor{i}", (Tensor(f"tensor{i}", _number(
            {"n": c}, "n", f"model.tensor_params[{i}]", integer=True), dtype),))
            for i, c in enumerate(counts))
    if "params" not in model:
        raise ConfigError("value model.params is missing (the parameter count), or give "
                          "model.tensor_params or [[layers]]")
    return (Layer("all", (Tensor("all", _number(model, "params", "model", integer=True),
                                 dtype),)),)


def _lines(measured: dict) -> tuple[StepLine, ...]:
    out = []
    for i, line in enumerate(measured.get("lines", [])):
        where = f"measured.lines[{i}]"
        if not isinstance(line, dict):
            raise ConfigError(f"{where} must be a table (threads, intercept, per_sample)")
        out.append(StepLine(_number(line, "threads", where, integer=True),
                            _time(line, "intercept", where),
                            _time(line, "per_sample", where),
                            _number(line, "spread_cv", where, 0.0, allow_zero=True)))
    return tuple(out)


def workload_from_dict(raw: dict) -> ModelWorkload:
    version = raw.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ConfigError(f"schema_version {version!r} is newer than this program reads "
                          f"({SCHEMA_VERSION}): upgrade the package")
    model, measured = _section(raw, "model"), _section(raw, "measured")
    name = model.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError("value model.name is missing (the model's name)")
    if not isinstance(measured.get("device"), str) or not measured["device"]:
        raise ConfigError("value measured.device is missing (the device the times are for, "
                          "e.g. \"cpu\" or \"Tesla P100\")")
    batch = _number(measured, "batch_size", "measured", integer=True)
    if "step" in measured:
        step_s = _time(measured, "step", "measured")
    elif "samples_per_second" in measured:
        step_s = batch / _number(measured, "samples_per_second", "measured")
    else:
        raise ConfigError("value measured.step is missing: give the step time (\"250ms\") or "
                          "measured.samples_per_second")
    if step_s <= 0:
        raise ConfigError("value measured.step must be above 0")
    fraction = _number(measured, "backward_fraction", "measured", DEFAULT_BACKWARD_FRACTION)
    if fraction >= 1:
        raise ConfigError(f"value measured.backward_fraction must be below 1 (got {fraction})")
    backward_s = _time(measured, "backward", "measured", fraction * step_s)
    device_flops = 0.0
    if "device_flops" in measured:
        try:
            device_flops = parse_flop_rate(measured["device_flops"])
        except ValueError as e:
            raise ConfigError(f"value measured.device_flops: {e}") from None
    shape = model.get("input_shape", [])
    if not isinstance(shape, list) or not all(isinstance(s, int) and s > 0 for s in shape):
        raise ConfigError("value model.input_shape must be a list of positive sizes")
    provenance = raw.get("provenance", {})
    if not isinstance(provenance, dict):
        raise ConfigError("[provenance] must be a table")
    precision = measured.get("precision", "fp32")
    if precision not in PRECISIONS:
        raise ConfigError(f"value measured.precision {precision!r} is not one of "
                          f"{', '.join(PRECISIONS)}")
    return ModelWorkload(
        name=name, layers=_layers(raw, model), device=measured["device"], batch_size=batch,
        step_s=step_s, backward_s=backward_s,
        forward_s=_time(measured, "forward", "measured", 0.0),
        update_s=_time(measured, "update", "measured", 0.0),
        spread_cv=_number(measured, "spread_cv", "measured", 0.0, allow_zero=True),
        threads=_number(measured, "threads", "measured", 1, integer=True),
        lines=_lines(measured),
        flops_per_sample=_number(model, "flops_per_sample", "model", 0.0, allow_zero=True),
        device_flops_per_s=device_flops, input_shape=tuple(shape),
        provenance={str(k): v for k, v in provenance.items()},
        precision=precision, precision_steps=_precision_steps(measured, batch, precision),
        input_s_per_sample=_time(measured, "input_per_sample", "measured", 0.0),
        input_workers=_number(measured, "input_workers", "measured", 0, integer=True,
                              allow_zero=True),
        input_at=_input_at(measured), buffers=_buffers(model))


def _input_at(measured: dict) -> tuple[tuple[int, float], ...]:
    """``measured.input_per_sample_at``: processes decoding at once (above 1) -> the time a
    sample then, e.g. ``{ 16 = "4.2ms" }``, in rising order."""
    table = measured.get("input_per_sample_at", {})
    if not isinstance(table, dict):
        raise ConfigError("value measured.input_per_sample_at must be a table like "
                          "{ 16 = \"4.2ms\" } (loader processes at once = time a sample)")
    out = []
    for key in table:
        if not (str(key).isdigit() and int(key) > 1):
            raise ConfigError(f"key measured.input_per_sample_at.{key} must be a count of "
                              "processes above 1")
        out.append((int(key), _time(table, key, "measured.input_per_sample_at")))
    if out and not _time(measured, "input_per_sample", "measured", 0.0):
        raise ConfigError("measured.input_per_sample_at needs measured.input_per_sample (the "
                          "time a sample with one process)")
    return tuple(sorted(out))


def _buffers(model: dict) -> tuple[Tensor, ...]:
    """``model.buffers``: the model's buffers (name, elements, dtype), in order."""
    raw = model.get("buffers", [])
    if not isinstance(raw, list):
        raise ConfigError("value model.buffers must be a list of tables like "
                          "{ name = \"bn1.running_mean\", params = 64, dtype = \"float32\" }")
    return tuple(_tensor(t, f"model.buffers[{i}]") for i, t in enumerate(raw))


def _precision_steps(measured: dict, batch: int, own: str) -> tuple:
    """[measured.precisions]: (precision, step_s, source) of each other precision."""
    table = measured.get("precisions", {})
    if not isinstance(table, dict):
        raise ConfigError("[measured.precisions] must be a table like "
                          "amp = { samples_per_second = 2470, source = \"...\" }")
    out = []
    for name, entry in table.items():
        where = f"measured.precisions.{name}"
        if name not in PRECISIONS or name == own:
            raise ConfigError(f"{where}: a precision other than measured.precision "
                              f"({own}), one of {', '.join(PRECISIONS)}")
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} must be a table with step or samples_per_second")
        if "step" in entry:
            step_s = _time(entry, "step", where)
        elif "samples_per_second" in entry:
            step_s = batch / _number(entry, "samples_per_second", where)
        else:
            raise ConfigError(f"value {where}.step is missing: give step or "
                              "samples_per_second")
        out.append((name, step_s, str(entry.get("source", ""))))
    return tuple(out)


def at_precision(w: ModelWorkload, precision: str) -> ModelWorkload:
    """``w`` as ``precision`` runs it: every time scaled by the ratio of its measured
    step to the file's own step (the layers' shares of the backward unchanged) but the
    update, which is not measured in it (0); the tensors as they are (AMP keeps fp32
    master weights and gradients)."""
    if precision == w.precision:
        return w
    steps = {name: (step_s, source) for name, step_s, source in w.precision_steps}
    if precision not in steps:
        have = ", ".join([w.precision] + sorted(steps))
        raise WorkloadError(f"workload {w.name} has no step time in {precision} (it has "
                            f"{have}): add [measured.precisions] {precision} = "
                            "{ samples_per_second = ..., source = \"...\" } to its file")
    step_s, source = steps[precision]
    k = step_s / w.step_s
    layers = tuple(replace(layer, forward_s=layer.forward_s * k,
                           backward_s=layer.backward_s * k) for layer in w.layers)
    lines = tuple(replace(line, intercept_s=line.intercept_s * k,
                          s_per_sample=line.s_per_sample * k) for line in w.lines)
    others = tuple(p for p in w.precision_steps if p[0] != precision) + (
        (w.precision, w.step_s, "the file's measured step"),)
    provenance = dict(w.provenance, precision=f"{precision}: {source or 'the workload file'}")
    # (the update is not measured in that precision: 0, the model prices it where a run
    # needs it, engine.run.with_optimizer_step; its cost does not scale with the step's)
    return replace(w, layers=layers, lines=lines, step_s=step_s, forward_s=w.forward_s * k,
                   backward_s=w.backward_s * k, update_s=0.0, precision=precision,
                   precision_steps=others, provenance=provenance)


def slept_update_s(w: ModelWorkload) -> float:
    """The update a phantom run sleeps (``real.phantom.plan.PhantomPlan.update_s``): the
    file's update, else what the step leaves after forward and backward (at least 0)."""
    if w.update_s > 0:
        return w.update_s
    return max(0.0, w.step_s - sum(lay.forward_s + lay.backward_s for lay in w.layers))


def slept(w: ModelWorkload, time_scale: float, name: str | None = None) -> ModelWorkload:
    """The compute a phantom run of ``w`` at time scale S sleeps, as a workload: every
    layer's forward and backward and the update times S; its step is their sum (not the
    file's un-hooked median), at other batches scaled by the file's step line as the
    phantom scales it (``real.phantom.plan``: ``S * line(b) / line(B)``); no spread
    (a sleep does not vary); on the device "cpu", the host that sleeps it (nothing is
    scaled to another device). The phantom server's update is not slept: it updates the
    real model, ``slept_from``."""
    fwd = sum(lay.forward_s for lay in w.layers)
    bwd = sum(lay.backward_s for lay in w.layers)
    step = time_scale * (fwd + bwd + slept_update_s(w))
    line = next((s for s in w.lines if s.threads == w.threads), None)
    lines = ()
    if line is not None:
        at = line.intercept_s + line.s_per_sample * w.batch_size
        k = step / at if at > 0 else 0.0
        lines = (StepLine(w.threads, line.intercept_s * k, line.s_per_sample * k),) if k else ()
    layers = tuple(replace(lay, forward_s=lay.forward_s * time_scale,
                           backward_s=lay.backward_s * time_scale) for lay in w.layers)
    # on the host that sleeps it, as measured (device "cpu": the engines scale nothing)
    return replace(w, name=name or w.name, slept_from=w.name, layers=layers, step_s=step,
                   device="cpu",
                   forward_s=time_scale * fwd, backward_s=time_scale * bwd,
                   update_s=time_scale * slept_update_s(w), spread_cv=0.0, lines=lines,
                   provenance=dict(w.provenance, phantom=f"{w.device}'s times slept at time "
                                                         f"scale {time_scale:g}"))


def workload_to_dict(w: ModelWorkload, comment: str | list[str] | None = None) -> dict:
    """The measured form of ``w`` as plain values (``contracts.tomlw.dumps`` writes it)."""
    measured = {"device": w.device, "threads": w.threads, "batch_size": w.batch_size,
                "step": duration_text(w.step_s), "forward": duration_text(w.forward_s),
                "backward": duration_text(w.backward_s), "update": duration_text(w.update_s),
                "spread_cv": float(w.spread_cv)}
    if w.device_flops_per_s > 0:
        measured["device_flops"] = f"{w.device_flops_per_s:.9g}FLOP/s"
    if w.precision != "fp32":
        measured["precision"] = w.precision
    if w.input_s_per_sample > 0:
        measured["input_per_sample"] = duration_text(w.input_s_per_sample)
    if w.input_workers:
        measured["input_workers"] = w.input_workers
    if w.input_at:
        measured["input_per_sample_at"] = {str(n): duration_text(t) for n, t in w.input_at}
    if w.precision_steps:
        measured["precisions"] = {name: {"step": duration_text(step_s), "source": source or None}
                                  for name, step_s, source in w.precision_steps}
    if w.lines:
        measured["lines"] = [{"threads": s.threads, "intercept": duration_text(s.intercept_s),
                              "per_sample": duration_text(s.s_per_sample),
                              "spread_cv": float(s.spread_cv)} for s in w.lines]
    model = {"name": w.name, "input_shape": list(w.input_shape) or None,
             "flops_per_sample": float(w.flops_per_sample) if w.flops_per_sample else None,
             "buffers": [{"name": t.name, "params": t.params, "dtype": t.dtype}
                         for t in w.buffers] or None}
    layers = [{"name": layer.name,
               "forward": duration_text(layer.forward_s) if layer.forward_s else None,
               "backward": duration_text(layer.backward_s) if layer.backward_s else None,
               "flops_per_sample": float(layer.flops_per_sample) or None,
               "tensors": [{"name": t.name, "params": t.params, "dtype": t.dtype,
                            "param_index": t.param_index} for t in layer.tensors]}
              for layer in w.layers]
    return {"#": comment, "schema_version": SCHEMA_VERSION, "model": model,
            "measured": measured, "layers": layers, "provenance": dict(w.provenance) or None}


def save_workload(w: ModelWorkload, path: str | Path, comment=None) -> Path:
    """Write ``w`` atomically as a workload TOML file."""
    from contracts.files import atomic_write_text
    from contracts.tomlw import dumps
    return atomic_write_text(path, dumps(workload_to_dict(w, comment)))


# ---------------------------------------------------------------- the profile's terms

def model_cost(w: ModelWorkload):
    """The workload as the profile's ``ModelCost`` (what the engines read): layers and
    tensors in forward order, each layer's share of the backward, the step time against
    the batch (the file's lines, else proportional to the batch it was measured at)."""
    from contracts.profile import ModelCost, StepFit
    forward = tuple(reversed(w.layers))
    if w.lines:
        steps = tuple(StepFit(threads=s.threads, step_intercept_s=s.intercept_s,
                              step_s_per_sample=s.s_per_sample, spread_cv=s.spread_cv)
                      for s in w.lines)
    else:
        steps = (StepFit(threads=w.threads, step_intercept_s=0.0,
                         step_s_per_sample=w.step_s / w.batch_size, spread_cv=w.spread_cv,
                         batches=(w.batch_size,)),)
    return ModelCost(
        model=w.name, param_count=w.params,
        layer_param_counts=tuple(layer.params for layer in forward), steps=steps,
        backward_fraction=w.backward_fraction,
        eval_s_per_sample=w.forward_s / w.batch_size,
        tensor_param_counts=tuple(t.params for t in w.parameter_order()),
        layer_backward_shares=tuple(reversed(w.backward_shares())),
        bytes_per_param=w.grad_bytes / max(1, w.params),
        input_s_per_sample=w.input_s_per_sample, input_workers=w.input_workers,
        input_busy=tuple(float(n) for n, _ in w.input_at),
        input_s_per_sample_busy=tuple(t for _, t in w.input_at),
        precision=w.precision, buffer_count=len(w.buffers),
        update_fraction=min(1.0, w.update_s / w.step_s) if w.step_s > 0 else 0.0)


def workload_of_cost(cost, device: str = "cpu", batch_size: int = 64,
                     provenance: dict | None = None) -> ModelWorkload:
    """A profile's model as a workload file (the built-in models are workloads like any
    other): its tensors grouped into its layers, in gradient-ready order, and its step
    lines; the step at ``batch_size`` on the fewest threads measured."""
    tensors = list(cost.tensor_param_counts or cost.layer_param_counts)
    layers, k = [], 0
    for i, layer_params in enumerate(cost.layer_param_counts):
        group, total = [], 0
        while k < len(tensors) and (total < layer_params or not group):
            group.append(Tensor(f"layer{i}.t{len(group)}", int(tensors[k])))
            total += tensors[k]
            k += 1
        layers.append((f"layer{i}", group))
    shares = cost.backward_shares()
    fit = min(cost.steps, key=lambda s: s.threads)
    step_s = fit.step_s(batch_size)
    backward_s = cost.backward_fraction * step_s
    ready = [Layer(name, tuple(reversed(group)), backward_s=backward_s * share)
             for (name, group), share in zip(layers, shares)]
    lines = tuple(StepLine(s.threads, s.step_intercept_s, s.step_s_per_sample, s.spread_cv)
                  for s in cost.steps)
    return ModelWorkload(
        name=cost.model, layers=tuple(reversed(ready)), device=device, batch_size=batch_size,
        step_s=step_s, backward_s=backward_s, forward_s=cost.eval_s_per_sample * batch_size,
        spread_cv=fit.spread_cv, threads=fit.threads, lines=lines,
        provenance=dict(provenance or {}))

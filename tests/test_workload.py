"""Workload files: python -m calibrate.workload on a model this test defines, the file
schema and its errors, and the built-in models as workloads like any other."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from calibrate.probes import workload as cw
from contracts.cluster import calibrated_cluster
from contracts.checks import ConfigError
from contracts.profile import load_default
from contracts.workload import (
    load_workload,
    model_cost,
    save_workload,
    workload_from_dict,
    workload_of_cost,
)


class SmallNet(nn.Module):
    """Branches and a shared-input layer, so backward order is not simply reversed."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.left = nn.Linear(4 * 8 * 8, 16)
        self.right = nn.Linear(4 * 8 * 8, 16, bias=False)
        self.head = nn.Linear(32, 5)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x))).flatten(1)
        return self.head(torch.cat([self.left(x), self.right(x)], 1))


def broken_factory():
    raise RuntimeError("cannot build this one")


def hook_order(model: nn.Module, shape) -> list[str]:
    """The order gradients become ready in one backward, from hooks registered here."""
    names = {id(p): n for n, p in model.named_parameters()}
    order: list[str] = []
    hooks = [p.register_post_accumulate_grad_hook(lambda p: order.append(names[id(p)]))
             for p in model.parameters()]
    x = torch.randn(4, *shape)
    nn.functional.cross_entropy(model(x), torch.zeros(4, dtype=torch.long)).backward()
    for h in hooks:
        h.remove()
    return order


def test_workload_command_on_a_small_model(tmp_path, capsys):
    out = tmp_path / "small.toml"
    code = cw.main(["--model", "tests.test_workload:SmallNet", "--input-shape", "1,8,8",
                    "--batch-size", "8", "--warmup", "1", "--steps", "3", "--layer-steps", "2",
                    "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    w = load_workload(out)
    model = SmallNet()
    assert w.params == sum(p.numel() for p in model.parameters())
    assert [t.name for t in w.tensors] == hook_order(model, (1, 8, 8))
    assert all(t.dtype == "float32" and t.bytes == 4 * t.params for t in w.tensors)
    assert w.layers[0].name == "head"                        # the last layer is ready first
    assert w.step_s > 0 and w.backward_s > 0 and w.forward_s > 0
    assert sum(layer.backward_s for layer in w.layers) == pytest.approx(w.backward_s, rel=1e-6)
    # FLOPs from torch's own counter: forward + backward of the whole model
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter:
        x = torch.randn(8, 1, 8, 8)
        cw.loss_of(SmallNet()(x), torch.zeros(8, dtype=torch.long)).backward()
    assert w.flops_per_sample == pytest.approx(counter.get_total_flops() / 8)
    assert w.provenance["source"] == "measured" and "calibrate.workload" in w.provenance["command"]


@pytest.mark.parametrize("model,shape,expect", [
    ("no_such_package.nets:Net", "1,8,8", "does not import"),
    ("tests.test_workload:Missing", "1,8,8", "has no 'Missing'"),
    ("tests.test_workload:broken_factory", "1,8,8", "does not build"),
    ("tests.test_workload:SmallNet", "3,9,9", "does not accept input shape 3,9,9"),
    ("cnn", "1,2,2", "does not build for input shape"),
    ("justaname", "1,8,8", "neither a built-in model"),
])
def test_bad_models_are_one_line(tmp_path, capsys, model, shape, expect):
    code = cw.main(["--model", model, "--input-shape", shape, "--out", str(tmp_path / "w.toml")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and expect in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "w.toml").exists()


def test_cuda_refused_without_a_gpu(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: --device cuda would measure")
    code = cw.main(["--model", "cnn", "--input-shape", "1,28,28", "--device", "cuda",
                    "--out", str(tmp_path / "w.toml")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "no CUDA device" in err and len(err.splitlines()) == 1


FEW_NUMBERS = """
[model]
name = "big"
tensor_params = [4000, 1000000, 16]
[measured]
device = "Tesla P100 PCIe"
batch_size = 64
samples_per_second = 128.0
"""


def test_a_workload_from_a_few_numbers(tmp_path):
    f = tmp_path / "big.toml"
    f.write_text(FEW_NUMBERS)
    w = load_workload(f)
    assert w.params == 1_004_016 and len(w.layers) == 3
    assert w.step_s == pytest.approx(0.5) and w.backward_s == pytest.approx(1 / 3)
    assert w.shares_from() == "per-layer parameter counts"
    cost = model_cost(w)
    assert cost.layer_param_counts == (16, 1_000_000, 4000)          # forward order
    assert cost.steps[0].step_s(32) == pytest.approx(0.25)            # proportional to the batch


@pytest.mark.parametrize("change,field", [
    (("samples_per_second = 128.0", ""), "measured.step is missing"),
    (("samples_per_second = 128.0", "step = 0.5"), "measured.step"),           # no unit
    (("samples_per_second = 128.0", "step = \"-1s\""), "measured.step"),
    (("batch_size = 64", "batch_size = -3"), "measured.batch_size"),
    (("tensor_params = [4000, 1000000, 16]", "tensor_params = [4000, -5]"),
     "model.tensor_params[1]"),
    (("device = \"Tesla P100 PCIe\"", ""), "measured.device is missing"),
])
def test_bad_workload_files_name_file_and_field(tmp_path, change, field):
    f = tmp_path / "bad.toml"
    f.write_text(FEW_NUMBERS.replace(*change))
    with pytest.raises(ConfigError) as e:
        load_workload(f)
    assert str(f) in str(e.value) and field in str(e.value)


def test_built_in_models_are_workloads_like_any_other(tmp_path):
    """Every model of the shipped profile, written as a workload file and read back, costs
    what the profile says: the same prediction."""
    from dataclasses import replace

    from contracts.workload import Workload
    from simulator.engine import simulate
    prof = load_default()
    for cost in prof.models:
        path = save_workload(workload_of_cost(cost), tmp_path / f"{cost.model}.toml")
        back = model_cost(load_workload(path))
        assert back.layer_param_counts == cost.layer_param_counts
        assert back.tensor_param_counts == cost.tensor_param_counts
        other = replace(prof, models=(replace(back, model="from_file"),))
        for scheme in ("ddp", "mpi_allreduce"):
            a = simulate(scheme, 3, Workload(model=cost.model, iterations=6), calibrated_cluster(prof.cores), prof)
            b = simulate(scheme, 3, Workload(model="from_file", iterations=6), calibrated_cluster(other.cores), other)
            assert b.time_s == pytest.approx(a.time_s, rel=1e-9)


def test_schema_rejects_newer_versions():
    with pytest.raises(ConfigError, match="newer"):
        workload_from_dict({"schema_version": 99})


class Bottleneck(nn.Module):
    """A residual block as torchvision's ResNet has it: 1x1, 3x3, 1x1 convolutions beside a
    downsampling branch, both reading the block's input."""

    def __init__(self, cin: int, width: int, cout: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.conv3(torch.relu(self.conv2(torch.relu(self.bn1(self.conv1(x))))))
        return torch.relu(out + self.down(x))


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.blocks = nn.Sequential(Bottleneck(8, 4, 16), Bottleneck(16, 8, 32))
        self.fc = nn.Linear(32 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).flatten(1))


def test_flops_are_counted_once_in_a_branchy_model():
    """Each layer's FLOPs are its own operations' (forward, and backward to its weights and
    input), each counted once: the layers sum to torch's total, which FlopCounterMode's
    per-module counts exceed on residual blocks (both branches active in backward)."""
    from torch.utils.flop_counter import FlopCounterMode
    batch = 4
    bench = cw.Bench(Residual(), "residual", (3, 8, 8), batch, "cpu", 0)
    total, per_layer = cw.flop_counts(bench)
    x, y = bench.data(batch)
    with FlopCounterMode(display=False) as torch_count:
        cw.loss_of(bench.model(x), y).backward()
    assert total == sum(per_layer.values()) == torch_count.get_total_flops()
    forward = 2 * batch * 8 * 8                # multiply-adds of a convolution per pixel: 2
    assert per_layer["blocks.0.conv1"] == 3 * forward * 8 * 4           # forward, dW, dX
    assert per_layer["blocks.0.down.0"] == 3 * forward * 8 * 16
    assert per_layer["stem"] == 2 * forward * 3 * 8 * 9                 # no dX: the data
    assert set(per_layer) == {n for n, m in bench.model.named_modules()
                              if isinstance(m, (nn.Conv2d, nn.Linear))}
    modules = {k: sum(v.values()) for k, v in torch_count.get_flop_counts().items()}
    assert sum(modules[f"Residual.{n}"] for n in per_layer) > total  # torch's own: twice some

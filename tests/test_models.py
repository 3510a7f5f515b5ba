"""real.training.models: shapes, exact parameter counts, the seed-000 layer order, flat parameter views."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from real.training.data import DATASETS, load_dataset
from real.training.models import (
    DEFAULT_DATASET,
    MODELS,
    PRESETS,
    build_model,
    flat_params,
    layer_param_counts,
    load_flat_params,
    param_count,
)

MNIST_SHAPE, CIFAR_SHAPE = (1, 28, 28), (3, 32, 32)

# Worked out by hand from the layer sizes in each class's docstring.
PARAMS = {
    ("cnn", MNIST_SHAPE): [10 * 1 * 25 + 10, 20 * 10 * 25 + 20, 80 * 50 + 50, 50 * 10 + 10],
    ("cnn", CIFAR_SHAPE): [10 * 3 * 25 + 10, 20 * 10 * 25 + 20, 180 * 50 + 50, 50 * 10 + 10],
    ("ps_cnn", MNIST_SHAPE): [32 * 9 + 32, 64 * 32 * 9 + 64, 9216 * 128 + 128, 128 * 10 + 10],
    ("linear", MNIST_SHAPE): [784 * 10 + 10],
    ("linear", CIFAR_SHAPE): [3072 * 10 + 10],
    ("mlp", MNIST_SHAPE): [784 * 128 + 128, 128 * 10 + 10],
}
TOTALS = {("cnn", MNIST_SHAPE): 9_840, ("ps_cnn", MNIST_SHAPE): 1_199_882,
          ("linear", MNIST_SHAPE): 7_850, ("mlp", MNIST_SHAPE): 101_770,
          ("vgg11", CIFAR_SHAPE): 9_231_114}


@pytest.mark.parametrize("name, shape", [(m, MNIST_SHAPE) for m in MODELS if m != "vgg11"]
                         + [(m, CIFAR_SHAPE) for m in MODELS])
def test_output_is_log_probabilities_per_sample(name, shape):
    torch.manual_seed(0)
    model = build_model(name, shape)
    out = model(torch.randn(2, *shape))
    assert out.shape == (2, 10)
    torch.testing.assert_close(out.exp().sum(dim=1), torch.ones(2))
    F.nll_loss(out, torch.tensor([3, 7])).backward()  # the loss every scheme uses


@pytest.mark.parametrize("key", sorted(TOTALS))
def test_exact_parameter_counts(key):
    name, shape = key
    assert param_count(build_model(name, shape)) == TOTALS[key]


@pytest.mark.parametrize("key", sorted(PARAMS))
def test_layer_parameter_counts_in_forward_order(key):
    model = build_model(*key)
    assert layer_param_counts(model) == PARAMS[key]
    assert sum(PARAMS[key]) == param_count(model)


def test_vgg11_has_eight_convolutions_each_with_batchnorm():
    counts = layer_param_counts(build_model("vgg11", CIFAR_SHAPE))
    channels = [64, 128, 256, 256, 512, 512, 512, 512]
    inputs = [3] + channels[:-1]
    expected = []
    for c_in, c_out in zip(inputs, channels):
        expected += [c_out * c_in * 9 + c_out, 2 * c_out]  # conv, then BatchNorm's scale and shift
    assert counts == expected + [512 * 10 + 10]


def test_cnn_modules_are_named_and_run_in_the_sheets_order():
    model = build_model("cnn")
    order = ["conv1", "pool1", "conv2", "pool2", "dropout", "pool3", "fc1", "fc2"]
    assert [name for name, _ in model.named_children()] == order
    assert [name for name, _ in model.named_parameters()] == [
        f"{layer}.{kind}" for layer in ("conv1", "conv2", "fc1", "fc2") for kind in ("weight", "bias")]
    called = []
    for name, module in model.named_children():
        module.register_forward_hook(lambda *_, name=name: called.append(name))
    model(torch.zeros(1, *MNIST_SHAPE))
    assert called == order


def test_unknown_model_lists_the_valid_ones():
    with pytest.raises(ValueError, match="cnn, ps_cnn, linear, mlp, vgg11"):
        build_model("resnet")


def test_input_too_small_is_refused():
    with pytest.raises(ValueError, match="vgg11 cannot take"):
        build_model("vgg11", MNIST_SHAPE)


def test_flat_params_round_trip_between_models():
    torch.manual_seed(1)
    source = build_model("cnn").eval()
    torch.manual_seed(2)
    target = build_model("cnn").eval()
    flat = flat_params(source)
    assert flat.shape == (param_count(source),)
    load_flat_params(target, flat)
    x = torch.randn(3, *MNIST_SHAPE)
    torch.testing.assert_close(target(x), source(x))
    flat += 1  # a copy: the model keeps its weights
    torch.testing.assert_close(flat_params(source), flat - 1)


def test_load_flat_params_refuses_the_wrong_length():
    model = build_model("linear")
    with pytest.raises(ValueError, match=r"needs \(7850,\)"):
        load_flat_params(model, torch.zeros(7849))


def test_default_datasets_and_presets():
    assert set(DEFAULT_DATASET) == set(MODELS)
    assert set(DEFAULT_DATASET.values()) <= set(DATASETS)
    assert DEFAULT_DATASET["cnn"] == "fashion-mnist" and DEFAULT_DATASET["vgg11"] == "cifar10"
    assert PRESETS["seed001"] == {"model": "mlp", "dataset": "mnist", "lr": 1.0, "momentum": 0.0,
                                  "lr_decay": 0.01, "batch_size": 100, "epochs": 5}


@pytest.fixture
def one_thread():
    """One torch thread: a tiny net gains nothing from more, and loses much on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name, lr", [("cnn", 0.05), ("mlp", PRESETS["seed001"]["lr"])])
def test_loss_falls_on_synthetic_data(name, lr, one_thread):
    torch.manual_seed(0)
    ds = load_dataset("synthetic", train_size=1280, test_size=10, seed=0)
    model = build_model(name, ds.input_shape)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9 if name == "cnn" else 0.0)
    x, y = torch.from_numpy(ds.train_x), torch.from_numpy(ds.train_y)
    losses = []
    for _ in range(3):
        for start in range(0, len(y), 64):
            opt.zero_grad()
            loss = F.nll_loss(model(x[start:start + 64]), y[start:start + 64])
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5

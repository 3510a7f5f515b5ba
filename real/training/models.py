"""The networks of the exercise sheets, and flat views of their parameters.

=========  ==================================================  =====================
name       what it is                                          where it comes from
=========  ==================================================  =====================
cnn        conv-pool-relu-conv-pool-relu-dropout-pool-fc-fc    seed 000 (sheet 9)
ps_cnn     two convolutions, two dense layers                  seed 003 (TP 2)
linear     flatten -> one dense layer                          seed 003 (TP 2)
mlp        flatten -> dense(128) -> sigmoid -> dense           seed 001 (slides)
vgg11      VGG-11 with BatchNorm, for CIFAR-10                 seed 002 (CS744 A2)
=========  ==================================================  =====================

Every ``forward`` returns log-probabilities (``log_softmax``), to be used with
``F.nll_loss``; the sheets' "softmax layer" is that last step.  Input sizes
are computed from ``input_shape``, so each network takes (1, 28, 28) and
(3, 32, 32) images (``vgg11`` needs at least 32x32: it halves the size five
times).

The flat-parameter helpers give the schemes one vector per model (for
averaging weights, sending them to a server, sizing messages); their order is
``model.parameters()`` order, the same on every rank.

Imports: torch.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

MODELS = ("cnn", "ps_cnn", "linear", "mlp", "vgg11")

# The dataset each model was trained on in its exercise sheet (seed 000 used
# MNIST; Fashion-MNIST has the same shape and is what Debian installs).
DEFAULT_DATASET = {"cnn": "fashion-mnist", "ps_cnn": "mnist", "linear": "mnist",
                   "mlp": "mnist", "vgg11": "cifar10"}


def default_dataset(model: str) -> str:
    """The dataset a run of ``model`` takes when none is named: the model's own, else (a
    phantom run's workload, whose model is not built here) ``synthetic``, 60,000 samples."""
    return DEFAULT_DATASET.get(model, "synthetic")

# Flag defaults that reproduce a sheet's experiment, keyed by seed; keys are
# the dest names of real.train's flags (--lr-decay is the fraction the
# learning rate drops after each epoch).  Plain dicts of JSON values so they
# go into a run record's config unchanged; treat them as constants.
PRESETS = {
    # Seed 001: sigmoid MLP, plain mini-batch SGD, lr 1 reduced by 1% after
    # each epoch (lr * 0.99 per epoch), batch 100, 5 epochs.
    "seed001": {"model": "mlp", "dataset": "mnist", "lr": 1.0, "momentum": 0.0,
                "lr_decay": 0.01, "batch_size": 100, "epochs": 5},
}

MLP_HIDDEN_UNITS = 128  # seed 001 does not give the width; 128 is the usual choice for MNIST
VGG11_CONFIG = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


def build_model(name: str, input_shape: tuple[int, int, int] = (1, 28, 28),
                num_classes: int = 10) -> nn.Module:
    """A freshly initialised model ``name`` (seed torch first for identical weights on every
    rank)."""
    builders = {"cnn": SeedCnn, "ps_cnn": PsCnn, "linear": Linear, "mlp": SigmoidMlp,
                "vgg11": Vgg11}
    if name not in builders:
        raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(MODELS)}")
    if len(input_shape) != 3 or min(input_shape) < 1:
        raise ValueError(f"input_shape must be (channels, height, width), got {input_shape}")
    return builders[name](tuple(int(d) for d in input_shape), num_classes)


class SeedCnn(nn.Module):
    """Seed 000's network, its layers in the sheet's order; sizes as in pytorch/examples' MNIST net.

    Shapes for a (1, 28, 28) input (for (3, 32, 32): 32, 16, 12, 6, 3 -> fc1 in 180)::

        conv1   1->10, 5x5, pad 2   10 x 28 x 28   (padding keeps 28 so pool3 still has 2x2 left)
        pool1   max 2x2             10 x 14 x 14
        relu
        conv2   10->20, 5x5         20 x 10 x 10
        pool2   max 2x2             20 x  5 x  5
        relu
        dropout p=0.25
        pool3   max 2x2             20 x  2 x  2   (floor: the fifth row and column are dropped)
        fc1     80->50, relu
        fc2     50->10, log_softmax

    9,840 parameters for MNIST-shaped input.
    """

    def __init__(self, input_shape=(1, 28, 28), num_classes: int = 10, dropout_p: float = 0.25):
        super().__init__()
        channels, height, width = input_shape
        self.conv1 = nn.Conv2d(channels, 10, kernel_size=5, padding=2)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.pool2 = nn.MaxPool2d(2)
        self.dropout = nn.Dropout(dropout_p)
        self.pool3 = nn.MaxPool2d(2)
        # Each size: conv1 keeps it, pool halves, conv2 (5x5, no pad) takes 4 off.
        side = [((s // 2 - 4) // 2) // 2 for s in (height, width)]
        _require_positive("cnn", input_shape, side)
        self.fc1 = nn.Linear(20 * side[0] * side[1], 50)
        self.fc2 = nn.Linear(50, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.pool1(self.conv1(x)))
        x = F.relu(self.pool2(self.conv2(x)))
        x = self.pool3(self.dropout(x))
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return F.log_softmax(self.fc2(x), dim=1)


class PsCnn(nn.Module):
    """Seed 003's "deep network with two convolution and two dense layers".

    The sheet gives no sizes; these are pytorch/examples' MNIST net (1.2 M
    parameters, most of them in fc1, which makes it the communication-heavy
    model of the set).  For a (1, 28, 28) input::

        conv1  c->32, 3x3, relu     32 x 26 x 26
        conv2  32->64, 3x3, relu    64 x 24 x 24
        max 2x2, dropout 0.25       64 x 12 x 12
        fc1    9216->128, relu, dropout 0.5
        fc2    128->10, log_softmax
    """

    def __init__(self, input_shape=(1, 28, 28), num_classes: int = 10):
        super().__init__()
        channels, height, width = input_shape
        self.conv1 = nn.Conv2d(channels, 32, kernel_size=3)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        side = [(s - 4) // 2 for s in (height, width)]
        _require_positive("ps_cnn", input_shape, side)
        self.fc1 = nn.Linear(64 * side[0] * side[1], 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        x = self.dropout1(F.max_pool2d(x, 2))
        x = self.dropout2(F.relu(self.fc1(torch.flatten(x, 1))))
        return F.log_softmax(self.fc2(x), dim=1)


class Linear(nn.Module):
    """Seed 003's linear model: flatten -> Linear(C*H*W, classes) -> log_softmax (7,850 for
    MNIST)."""

    def __init__(self, input_shape=(1, 28, 28), num_classes: int = 10):
        super().__init__()
        self.fc = nn.Linear(math.prod(input_shape), num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.fc(torch.flatten(x, 1)), dim=1)


class SigmoidMlp(nn.Module):
    """Seed 001's MLP: flatten -> Linear(784, 128) -> sigmoid -> Linear(128, 10) -> log_softmax.

    Seed 001 names the sigmoid activation but not the width; 128 hidden units
    (``MLP_HIDDEN_UNITS``) gives 101,770 parameters for MNIST.
    """

    def __init__(self, input_shape=(1, 28, 28), num_classes: int = 10,
                 hidden_units: int = MLP_HIDDEN_UNITS):
        super().__init__()
        self.fc1 = nn.Linear(math.prod(input_shape), hidden_units)
        self.fc2 = nn.Linear(hidden_units, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.sigmoid(self.fc1(torch.flatten(x, 1)))
        return F.log_softmax(self.fc2(x), dim=1)


class Vgg11(nn.Module):
    """VGG-11 with BatchNorm as in the CS744 base ``model.py`` (kuangliu/pytorch-cifar).

    Each number in ``VGG11_CONFIG`` is a 3x3 conv (pad 1) + BatchNorm + ReLU,
    each "M" a 2x2 max-pool; five pools take 32x32 to 1x1, so the classifier
    is Linear(512, 10).  9,231,114 parameters for CIFAR-10.  The base file
    returns logits for CrossEntropyLoss; here log_softmax is added so every
    model takes F.nll_loss (the same loss).
    """

    def __init__(self, input_shape=(3, 32, 32), num_classes: int = 10):
        super().__init__()
        channels, height, width = input_shape
        layers: list[nn.Module] = []
        for item in VGG11_CONFIG:
            if item == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers += [nn.Conv2d(channels, item, kernel_size=3, padding=1),
                           nn.BatchNorm2d(item), nn.ReLU(inplace=True)]
                channels = item
        self.features = nn.Sequential(*layers)
        side = [s // 32 for s in (height, width)]
        _require_positive("vgg11", input_shape, side)
        self.classifier = nn.Linear(channels * side[0] * side[1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(self.features(x), 1)
        return F.log_softmax(self.classifier(x), dim=1)


def _require_positive(name: str, input_shape, side: list[int]) -> None:
    if min(side) < 1:
        raise ValueError(f"{name} cannot take input_shape {tuple(input_shape)}: "
                         "the image shrinks to nothing before the dense layer")


# --- flat parameter views ----------------------------------------------------

def param_count(model: nn.Module) -> int:
    """Number of trainable scalars (BatchNorm's running statistics are buffers, not counted)."""
    return sum(p.numel() for p in model.parameters())


def layer_param_counts(model: nn.Module) -> list[int]:
    """Parameters per module that owns any (weight and bias together), in registration order.

    Registration order is forward order for every model here; it is the
    granularity of a per-layer all_reduce (seed 002, part 2b).
    """
    return [sum(p.numel() for p in module.parameters(recurse=False))
            for module in model.modules() if any(True for _ in module.parameters(recurse=False))]


def tensor_param_counts(model: nn.Module) -> list[int]:
    """Parameters per tensor (a weight, a bias), in ``model.parameters()`` order: the
    granularity of the all_reduce loop of ``real.schemes.allreduce``, one call a tensor."""
    return [p.numel() for p in model.parameters()]


def flat_params(model: nn.Module) -> torch.Tensor:
    """All parameters as one new 1-D tensor in host memory (a copy: changing it leaves the
    model alone; on a GPU the copy is what MPI and the weight digest read)."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()


def load_flat_params(model: nn.Module, flat: torch.Tensor) -> None:
    """Copy a vector made by ``flat_params`` (of the same architecture) back into ``model``."""
    expected = param_count(model)
    if flat.dim() != 1 or flat.numel() != expected:
        raise ValueError(f"flat parameters have shape {tuple(flat.shape)}, "
                         f"the model needs ({expected},)")
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()

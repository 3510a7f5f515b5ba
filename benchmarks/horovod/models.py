"""The three networks of Horovod's published benchmark, in PyTorch, for ``calibrate.workload``.

Written from the papers (and sized as the usual ImageNet definitions: 1000
classes, 224x224 input, 299x299 for Inception V3), to give the workload files
their tensors in gradient-ready order and their FLOPs per layer:

* ``vgg16``: Simonyan & Zisserman 2014, configuration D: 13 convolutions 3x3
  with biases, three dense layers; 138,357,544 parameters;
* ``resnet101``: He et al. 2015, bottleneck blocks [3, 4, 23, 3], convolutions
  without bias followed by batch norm (stride in the 3x3 convolution);
  44,549,160 parameters;
* ``inception3``: Szegedy et al. 2015 (Inception V3) without the auxiliary
  classifier, convolutions without bias followed by batch norm;
  23,834,568 parameters;
* ``resnet50``: ResNet-50 v1.5, the ``resnet101`` blocks [3, 4, 6, 3] (the
  DeepLearningExamples checks, ``benchmarks.dle``); 25,557,032 parameters.

    python -m calibrate.workload --model benchmarks.horovod.models:vgg16 \\
        --input-shape 3,224,224 --batch-size 2 --out benchmarks/horovod/vgg16-cpu.toml
"""
from __future__ import annotations

import torch
from torch import nn

VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


class Vgg16(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        layers, cin = [], 3
        for v in VGG16:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU(inplace=True)]
                cin = v
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(inplace=True), nn.Dropout(),
            nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(), nn.Linear(4096, classes))

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 7)
        return self.classifier(torch.flatten(x, 1))


def conv_bn(cin: int, cout: int, kernel, stride=1, padding=0) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, padding, bias=False),
                         nn.BatchNorm2d(cout, eps=1e-3), nn.ReLU(inplace=True))


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = 4 * width
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        relu = nn.functional.relu
        y = relu(self.bn1(self.conv1(x)))
        y = relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return relu(y + (x if self.down is None else self.down(x)))


class ResNet101(nn.Module):
    def __init__(self, classes: int = 1000, blocks=(3, 4, 23, 3)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        stages, cin = [], 64
        for i, n in enumerate(blocks):
            width = 64 * 2 ** i
            for j in range(n):
                stages.append(Bottleneck(cin, width, 2 if j == 0 and i > 0 else 1))
                cin = 4 * width
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class Branches(nn.Module):
    """Parallel branches whose outputs are concatenated along the channels."""

    def __init__(self, *branches: nn.Module):
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x):
        return torch.cat([b(x) for b in self.branches], 1)


def _seq(*mods) -> nn.Sequential:
    return nn.Sequential(*mods)


def block_a(cin: int, pool: int) -> Branches:
    return Branches(conv_bn(cin, 64, 1),
                    _seq(conv_bn(cin, 48, 1), conv_bn(48, 64, 5, padding=2)),
                    _seq(conv_bn(cin, 64, 1), conv_bn(64, 96, 3, padding=1),
                         conv_bn(96, 96, 3, padding=1)),
                    _seq(nn.AvgPool2d(3, 1, 1), conv_bn(cin, pool, 1)))


def block_b(cin: int) -> Branches:
    return Branches(conv_bn(cin, 384, 3, 2),
                    _seq(conv_bn(cin, 64, 1), conv_bn(64, 96, 3, padding=1),
                         conv_bn(96, 96, 3, 2)),
                    nn.MaxPool2d(3, 2))


def block_c(cin: int, c7: int) -> Branches:
    s, t = (1, 7), (7, 1)
    return Branches(conv_bn(cin, 192, 1),
                    _seq(conv_bn(cin, c7, 1), conv_bn(c7, c7, s, padding=(0, 3)),
                         conv_bn(c7, 192, t, padding=(3, 0))),
                    _seq(conv_bn(cin, c7, 1), conv_bn(c7, c7, t, padding=(3, 0)),
                         conv_bn(c7, c7, s, padding=(0, 3)), conv_bn(c7, c7, t, padding=(3, 0)),
                         conv_bn(c7, 192, s, padding=(0, 3))),
                    _seq(nn.AvgPool2d(3, 1, 1), conv_bn(cin, 192, 1)))


def block_d(cin: int) -> Branches:
    return Branches(_seq(conv_bn(cin, 192, 1), conv_bn(192, 320, 3, 2)),
                    _seq(conv_bn(cin, 192, 1), conv_bn(192, 192, (1, 7), padding=(0, 3)),
                         conv_bn(192, 192, (7, 1), padding=(3, 0)), conv_bn(192, 192, 3, 2)),
                    nn.MaxPool2d(3, 2))


def block_e(cin: int) -> Branches:
    def split(c: int) -> Branches:
        return Branches(conv_bn(c, 384, (1, 3), padding=(0, 1)),
                        conv_bn(c, 384, (3, 1), padding=(1, 0)))
    return Branches(conv_bn(cin, 320, 1),
                    _seq(conv_bn(cin, 384, 1), split(384)),
                    _seq(conv_bn(cin, 448, 1), conv_bn(448, 384, 3, padding=1), split(384)),
                    _seq(nn.AvgPool2d(3, 1, 1), conv_bn(cin, 192, 1)))


class Inception3(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = _seq(conv_bn(3, 32, 3, 2), conv_bn(32, 32, 3), conv_bn(32, 64, 3, padding=1),
                         nn.MaxPool2d(3, 2), conv_bn(64, 80, 1), conv_bn(80, 192, 3),
                         nn.MaxPool2d(3, 2))
        self.blocks = _seq(block_a(192, 32), block_a(256, 64), block_a(288, 64), block_b(288),
                           block_c(768, 128), block_c(768, 160), block_c(768, 160),
                           block_c(768, 192), block_d(768), block_e(1280), block_e(2048))
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def vgg16() -> nn.Module:
    return Vgg16()


def resnet101() -> nn.Module:
    return ResNet101()


def inception3() -> nn.Module:
    return Inception3()


def resnet50() -> nn.Module:
    """ResNet-50 v1.5 (the 3x3 convolution strides, as NVIDIA's DeepLearningExamples train
    it): bottleneck blocks [3, 4, 6, 3]; 25,557,032 parameters."""
    return ResNet101(blocks=(3, 4, 6, 3))

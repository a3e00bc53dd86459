"""ddp's built-in sample models as PyTorch modules, sized from the data as ddp sizes them, with
ddp's parameter names, so `load_state_dict(strict=True)` takes a ddp `model.safetensors`.

    build(name, channels, height, width, outputs, hidden=None) -> nn.Module

mnist-cnn (conv1..3, dense1..2), mlp (linear_relu_stack.{0,2,...}), convnet-bn (layer1/layer2
conv + BatchNorm, fc), resnet18 (torchvision's names, a 3x3 stride-1 stem taking `channels`, no
max-pool), linear (weight, bias).

Used by load_classifier.py, by scripts/torch-imagefolder.py, and by the benchmark
bench/pytorch/torch_ref.py, which trains mnist-cnn, mlp and resnet18 with PyTorch DDP.
"""
import torch.nn as nn
import torch.nn.functional as F


class MnistCnn(nn.Module):
    def __init__(self, c, h, w, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(c, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.conv3 = nn.Conv2d(64, 64, 3)
        side = lambda n: ((n - 2) // 2 - 2) // 2 - 2  # noqa: E731
        self.dense1 = nn.Linear(64 * side(h) * side(w), 64)
        self.dense2 = nn.Linear(64, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.conv3(x)).flatten(1)
        return self.dense2(F.relu(self.dense1(x)))


class Mlp(nn.Module):
    def __init__(self, inputs, hidden, outputs):
        super().__init__()
        layers, width = [], inputs
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, outputs))
        self.linear_relu_stack = nn.Sequential(*layers)

    def forward(self, x):
        return self.linear_relu_stack(x.flatten(1))


class ConvNetBn(nn.Module):
    def __init__(self, c, h, w, classes):
        super().__init__()
        self.layer1 = nn.Sequential(nn.Conv2d(c, 16, 5, padding=2), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
        self.layer2 = nn.Sequential(nn.Conv2d(16, 32, 5, padding=2), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2))
        self.fc = nn.Linear(32 * (h // 4) * (w // 4), classes)

    def forward(self, x):
        return self.fc(self.layer2(self.layer1(x)).flatten(1))


def resnet18(c, classes):
    import torchvision

    m = torchvision.models.resnet18(num_classes=classes)
    m.conv1 = nn.Conv2d(c, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    return m


def build(name, c, h, w, outputs, hidden=None):
    if name == "mnist-cnn":
        return MnistCnn(c, h, w, outputs)
    if name == "mlp":
        return Mlp(c * h * w, [512, 512] if hidden is None else hidden, outputs)
    if name == "convnet-bn":
        return ConvNetBn(c, h, w, outputs)
    if name == "resnet18":
        return resnet18(c, outputs)
    if name == "linear":
        return nn.Linear(c * h * w, outputs)
    raise SystemExit(f"no PyTorch module for model {name!r}")

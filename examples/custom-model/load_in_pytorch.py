#!/usr/bin/env python3
"""Load the custom model's model.safetensors (written by ddp) into PyTorch and test it.

The network is src/main.rs written in PyTorch, with the same attribute names (conv, fc1, fc2), so
ddp's parameter names load as they are with strict=True. candle's `Tensor::gelu` is the tanh
approximation, hence nn.GELU(approximate="tanh"). The test split is the data folder's t10k files,
normalised as ddp does: (x / 255 - 0.5) / 0.5 in float32.

    python load_in_pytorch.py RUN/model.safetensors [--data ../data/mnist-sample]

Needs torch, safetensors and numpy.
"""

import argparse
import gzip
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file


class Net(nn.Module):
    """Conv(1->8, 5x5, stride 2) -> GELU -> Linear(8*12*12->64) -> GELU -> Linear(64->10)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 5, stride=2)
        self.fc1 = nn.Linear(8 * 12 * 12, 64)
        self.fc2 = nn.Linear(64, 10)
        self.act = nn.GELU(approximate="tanh")

    def forward(self, x):
        x = self.act(self.conv(x)).flatten(1)
        return self.fc2(self.act(self.fc1(x)))


def read_idx(path):
    """An IDX file, gzipped or not, as a numpy array of unsigned bytes."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find(data, name):
    for p in (data / name, data / f"{name}.gz"):
        if p.is_file():
            return p
    raise SystemExit(f"{data}: neither {name} nor {name}.gz")


def main():
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path, help="model.safetensors written by ddp")
    ap.add_argument("--data", type=Path, default=here / ".." / "data" / "mnist-sample",
                    help="MNIST-format folder with t10k-{images-idx3,labels-idx1}-ubyte[.gz]")
    ap.add_argument("--batch-size", type=int, default=500)
    args = ap.parse_args()

    net = Net()
    net.load_state_dict(load_file(args.model), strict=True)
    net.eval()

    images = read_idx(find(args.data, "t10k-images-idx3-ubyte"))
    labels = torch.from_numpy(read_idx(find(args.data, "t10k-labels-idx1-ubyte")).astype(np.int64))
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0 - 0.5) / 0.5
    x = x.unsqueeze(1)  # N x 1 x 28 x 28

    correct, loss_sum = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(x), args.batch_size):
            logits = net(x[i : i + args.batch_size])
            y = labels[i : i + args.batch_size]
            loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(1) == y).sum().item()
    n = len(x)
    print(f"test loss {loss_sum / n:.4f} accuracy {100 * correct / n:.2f}% "
          f"({correct}/{n} samples), torch {torch.__version__}")


if __name__ == "__main__":
    main()

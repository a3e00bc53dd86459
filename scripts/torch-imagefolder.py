#!/usr/bin/env python3
"""PyTorch's side of the image-folder benchmark (scripts/bench-image-folder.sh): the reference MNIST CNN
(examples/pytorch/classifiers.py's mnist-cnn, as bench/pytorch/torch_ref.py trains it; Adam lr 0.001)
trained for one epoch on an image folder read with torchvision's ImageFolder + DataLoader, then
evaluated on its test/ part, in one process.

    torch-imagefolder.py DIR [--workers N] [--threads T] [--batch 32]

DIR holds train/<class>/*.png and test/<class>/*.png (scripts/make-image-folder.py). The transform is the
usual one for grayscale digits: Grayscale(1), ToTensor(), Normalize((0.5,), (0.5,)) (ImageFolder's loader
opens every image as RGB). The clock starts after the imports, before the data sets are made, and stops
after the test evaluation. Prints one JSON line: first_epoch_s (that time), train_s (the training loop
alone), samples_per_s (training samples / train_s), test_acc.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from torchvision import datasets, transforms

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "examples", "pytorch"))
from classifiers import MnistCnn  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: all cores)")
    p.add_argument("--batch", type=int, default=32)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    t0 = time.perf_counter()
    tf = transforms.Compose([transforms.Grayscale(1), transforms.ToTensor(), transforms.Normalize((0.5,), (0.5,))])
    train = datasets.ImageFolder(f"{a.dir}/train", transform=tf)
    test = datasets.ImageFolder(f"{a.dir}/test", transform=tf)
    kw = dict(batch_size=a.batch, num_workers=a.workers)
    loader = torch.utils.data.DataLoader(train, shuffle=True, **kw)
    net = MnistCnn(1, 28, 28, len(train.classes))
    opt = torch.optim.Adam(net.parameters(), lr=0.001)
    net.train()
    t1 = time.perf_counter()
    for xb, yb in loader:
        opt.zero_grad(); loss = F.cross_entropy(net(xb), yb); loss.backward(); opt.step()
    train_s = time.perf_counter() - t1
    net.eval(); correct = 0
    with torch.no_grad():
        for xb, yb in torch.utils.data.DataLoader(test, **kw):
            correct += (net(xb).argmax(1) == yb).sum().item()
    total = time.perf_counter() - t0
    print(json.dumps({"engine": "pytorch-" + torch.__version__, "workers": a.workers,
                      "threads": torch.get_num_threads(), "first_epoch_s": round(total, 3),
                      "train_s": round(train_s, 3), "samples_per_s": round(len(train) / train_s, 1),
                      "test_acc": round(correct / len(test), 4)}), flush=True)


if __name__ == "__main__":
    main()

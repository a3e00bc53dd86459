#!/usr/bin/env python3
"""PyTorch's side of ddp-bench's training benchmark: PyTorch DDP (gloo, CPU) training of the
classifiers ddp-bench trains, with the same data, batch, optimiser and schedule.

    torch_ref.py DATA_DIR [--world 2] [--model cnn|mlp|resnet18] [--epochs 2] [--batch 32]
                 [--lr 0.01] [--threads T] [--port 29517] [--synthetic 1024] [--sync-bn]
                 [--autocast bf16] [--out FILE]

Started by torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set: Spark's TorchDistributor
runs it so, scripts/bench-spark.sh), it is one rank of that world and --world/--port are not
used; otherwise it starts --world processes itself.

Models (examples/pytorch/classifiers.py, the repository's PyTorch versions of ddp's models):
  cnn       mnist-cnn: conv1..3 (3x3) with 2x2 max-pools, dense1 576->64, dense2 64->10
  mlp       mlp: 784->512->512->10 with ReLUs
  resnet18  torchvision's ResNet-18 with the CIFAR stem (3x3 stride-1 conv1, no max-pool), 10
            classes, initialised as ddp initialises it (PyTorch's default per layer); needs
            torchvision. `--sync-bn` turns its BatchNorm into SyncBatchNorm.
Data: cnn and mlp read DATA_DIR's MNIST-format gzipped IDX files (train-images-idx3-ubyte.gz,
train-labels-idx1-ubyte.gz, t10k-*), pixels normalised to (x/255 - 0.5)/0.5. resnet18 ignores
DATA_DIR and trains on --synthetic N 3x32x32 images of 10 classes (a fixed mean per class plus
noise, so that it can learn), tested on N/4 more.
Training: every rank seeds torch with 1 (DDP broadcasts rank 0's initial weights); a
DistributedSampler (seed 0) shards and shuffles the training set; batch --batch per rank. The cnn
uses Adam (lr 0.001 x world), mlp and resnet18 SGD with momentum 0.9 (lr --lr x world); all step
the learning rate by 0.7 after every epoch (StepLR(1, 0.7)). --threads sets torch's threads per
process (default: cores // world).

Output (stdout, rank 0, and appended to --out FILE when given), one JSON object per line:
  first step {"first_step_at": unix time after the first optimiser step}
  per epoch  {"epoch", "train_s", "samples_per_s", "test_acc", "loss"}
  at the end {"summary": true, "engine": "pytorch-<version>", "world", "model", "threads",
              "train_s", "samples_per_s", "test_acc"}
train_s is the time of the epoch's training loop between two barriers (evaluation excluded), the
summary's the sum over epochs; samples_per_s counts the samples of all ranks (the whole training
set per epoch); test_acc is the accuracy on the whole test set after the (last) epoch, each rank
evaluating its share. ddp-bench reads the summary line (trainer/src/bin/ddp-bench/torch.rs).
"""
import argparse
import gzip
import json
import os
import struct
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

from bench_common import default_threads, join_group
from classifiers import build  # examples/pytorch/, put on sys.path by bench_common

MODELS = ("cnn", "mlp", "resnet18")
# --model -> (classifiers.build's name, channels, height, width)
SHAPES = {"cnn": ("mnist-cnn", 1, 28, 28), "mlp": ("mlp", 1, 28, 28), "resnet18": ("resnet18", 3, 32, 32)}
CLASSES = 10


def read_idx(path):
    """A gzipped IDX file as a uint8 tensor of its dimensions (magic: 0, 0, type, rank)."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    rank = data[3]
    dims = struct.unpack(">" + "I" * rank, data[4:4 + 4 * rank])
    return torch.frombuffer(bytearray(data[4 + 4 * rank:]), dtype=torch.uint8).reshape(dims)


def load_mnist(folder):
    """((x_train, y_train), (x_test, y_test)): images [N, 1, 28, 28] in [-1, 1], labels int64."""

    def part(prefix):
        x = read_idx(os.path.join(folder, f"{prefix}-images-idx3-ubyte.gz")).float()
        y = read_idx(os.path.join(folder, f"{prefix}-labels-idx1-ubyte.gz")).long()
        return ((x / 255 - 0.5) / 0.5).unsqueeze(1), y

    return part("train"), part("t10k")


def synthetic_images(n, seed):
    """n 3x32x32 images and their classes: one fixed random mean per class (the same for every
    call) plus Gaussian noise drawn from `seed`."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, CLASSES, (n,), generator=gen)
    means = torch.randn(CLASSES, 3, 32, 32, generator=torch.Generator().manual_seed(7)) * 0.5
    return means[y] + 0.5 * torch.randn(n, 3, 32, 32, generator=gen), y


def build_model(name):
    """The model of --model, from examples/pytorch/classifiers.py."""
    kind, c, h, w = SHAPES[name]
    if name == "resnet18":
        try:
            import torchvision  # noqa: F401  (classifiers.resnet18 builds torchvision's)
        except ImportError:
            raise SystemExit("torch_ref.py --model resnet18 needs torchvision in this Python")
    model = build(kind, c, h, w, CLASSES)
    if name == "resnet18":
        # torchvision draws its convolutions from a Kaiming normal; ddp initialises every layer
        # as PyTorch does by default (trainer/src/models/init.rs), and so does the reference.
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear, nn.BatchNorm2d)):
                m.reset_parameters()
    return model


def make_optimizer(a, params):
    """Adam for the cnn, SGD with momentum for the others; the learning rate scaled by the world
    size; StepLR(1, 0.7)."""
    if a.model == "cnn":
        opt = torch.optim.Adam(params, lr=0.001 * a.world)
    else:
        opt = torch.optim.SGD(params, lr=a.lr * a.world, momentum=0.9)
    return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)


def say(a, record):
    """Rank 0's output line, also appended to --out."""
    line = json.dumps(record)
    print(line, flush=True)
    if a.out:
        with open(a.out, "a") as f:
            f.write(line + "\n")


def worker(rank, a):
    join_group(rank, a.world, a.port, a.threads, from_env=a.torchrun)
    torch.manual_seed(1)
    if a.model == "resnet18":
        (x_train, y_train), (x_test, y_test) = synthetic_images(a.synthetic, 1), synthetic_images(a.synthetic // 4, 2)
    else:
        (x_train, y_train), (x_test, y_test) = load_mnist(a.data)
    train_set = torch.utils.data.TensorDataset(x_train, y_train)
    sampler = torch.utils.data.distributed.DistributedSampler(train_set, num_replicas=a.world, rank=rank, seed=0)
    loader = torch.utils.data.DataLoader(train_set, batch_size=a.batch, sampler=sampler)

    net = build_model(a.model)
    if a.model == "resnet18" and a.sync_bn:
        net = nn.SyncBatchNorm.convert_sync_batchnorm(net)
    model = nn.parallel.DistributedDataParallel(net)
    opt, sched = make_optimizer(a, model.parameters())

    # This rank's share of the test set.
    x_shard, y_shard = x_test[rank::a.world], y_test[rank::a.world]
    total_s = 0.0
    for epoch in range(1, a.epochs + 1):
        sampler.set_epoch(epoch)
        model.train()
        dist.barrier()
        t0 = time.perf_counter()
        seen = 0
        for xb, yb in loader:
            opt.zero_grad()
            with autocast(a):
                loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            if seen == 0 and epoch == 1 and rank == 0:
                say(a, {"first_step_at": time.time()})
            seen += len(yb)
        dist.barrier()
        epoch_s = time.perf_counter() - t0
        total_s += epoch_s
        sched.step()

        model.eval()
        with torch.no_grad(), autocast(a):
            correct = (model(x_shard).argmax(1) == y_shard).sum()
        # [correct, tested, trained] summed over the ranks.
        counts = torch.tensor([float(correct), float(len(y_shard)), float(seen)])
        dist.all_reduce(counts)
        test_acc = counts[0].item() / counts[1].item()
        if rank == 0:
            say(a, {"epoch": epoch, "train_s": round(epoch_s, 3),
                    "samples_per_s": round(counts[2].item() / epoch_s, 1),
                    "test_acc": round(test_acc, 4), "loss": round(loss.item(), 4)})
    if rank == 0:
        say(a, {"summary": True, "engine": "pytorch-" + torch.__version__, "world": a.world,
                "autocast": a.autocast,
                "model": a.model, "threads": torch.get_num_threads(), "train_s": round(total_s, 3),
                "samples_per_s": round(len(train_set) * a.epochs / total_s, 1),
                "test_acc": round(test_acc, 4)})
    dist.destroy_process_group()


def autocast(a):
    """torch.autocast on the CPU in bfloat16 with --autocast bf16; off otherwise."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast == "bf16")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data", help="MNIST-format folder (ignored by resnet18)")
    p.add_argument("--world", type=int, default=2, help="processes (ranks)")
    p.add_argument("--model", default="cnn", choices=MODELS)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=32, help="batch per rank")
    p.add_argument("--lr", type=float, default=0.01, help="SGD's learning rate before scaling by the world (mlp, resnet18)")
    p.add_argument("--threads", type=int, default=0, help="torch threads per process (default: cores // world)")
    p.add_argument("--port", type=int, default=29517, help="rendezvous port on 127.0.0.1")
    p.add_argument("--synthetic", type=int, default=1024, help="resnet18: synthetic training images")
    p.add_argument("--sync-bn", action="store_true", help="resnet18: SyncBatchNorm")
    p.add_argument("--out", help="rank 0 also appends its output lines to this file")
    p.add_argument("--autocast", choices=["bf16"], help="forward and loss under torch.autocast(\"cpu\", bfloat16)")
    a = p.parse_args()
    # One rank of a world torchrun started (TorchDistributor): its size is torchrun's.
    a.torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if a.torchrun:
        a.world = int(os.environ["WORLD_SIZE"])
    if a.threads <= 0:
        a.threads = default_threads(a.world)
    return a


if __name__ == "__main__":
    args = parse_args()
    if args.torchrun:
        worker(int(os.environ["RANK"]), args)
    else:
        mp.spawn(worker, args=(args,), nprocs=args.world)

#!/usr/bin/env python3
"""PyTorch's side of the network benchmark (scripts/bench-network.sh): one rank of PyTorch DDP
(gloo, CPU), started as torchrun starts it, so that each rank can run on its own host (or in its
own network namespace) and the gradients cross a real link.

    RANK=r WORLD_SIZE=w MASTER_ADDR=a MASTER_PORT=p \\
    torch_network.py --model resnet18|gpt [--steps 12] [--warmup 2] [--batch 32]
                     [--hook none|bf16|fp16|powersgd] [--powersgd-rank 4] [--bucket-mb 25]
                     [--threads T] [--text FILE]

Models (the repository's PyTorch versions of ddp's models, examples/pytorch/):
  resnet18  torchvision's ResNet-18 with the CIFAR stem, 10 classes, on synthetic 3x32x32 images
            (--batch per rank, default 32), SGD momentum 0.9, lr 0.05
  gpt       gpt_module's Gpt, 6 layers, 6 heads, embd 384, block 128 (about 10.7 M parameters),
            character-level on --text (the shipped Shakespeare), --batch windows per rank
            (default 8), AdamW lr 1e-3, gradients clipped to 1.0
Communication: DistributedDataParallel(bucket_cap_mb=--bucket-mb); --hook registers
torch.distributed.algorithms.ddp_comm_hooks' bf16_compress_hook, fp16_compress_hook or
powerSGD_hook (matrix_approximation_rank --powersgd-rank, start_powerSGD_iter 2, error feedback
on, as its defaults).

Output (stdout, rank 0), one JSON object:
  {"summary": true, "engine": "pytorch-<version>", "model", "world", "hook", "threads",
   "step_s": [...], "median_step_s", "samples_per_s", "tokens_per_s" (gpt), "loss",
   "timed_from", "timed_to"}
step_s are the times of the steps after --warmup, each between two points where rank 0 has
finished its optimizer step; samples_per_s (windows for gpt) counts every rank's samples over the
median step. timed_from and timed_to are the wall-clock times (Unix seconds) where the timed
steps begin and end on rank 0, for counting the bytes the link carried meanwhile.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import bench_common  # noqa: F401  (puts examples/pytorch/ on sys.path)
from classifiers import build
from gpt_module import Gpt


class TrainingGpt(Gpt):
    """The Gpt whose forward pass is the mean next-token cross-entropy."""

    def forward(self, idx, targets):
        logits = self.logits(idx)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def text_ids(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    return len(chars), torch.tensor([index[c] for c in text], dtype=torch.long)


def register_hook(ddp, a):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if a.hook == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif a.hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif a.hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=a.powersgd_rank,
            start_powerSGD_iter=2,
        )
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("resnet18", "gpt"), default="resnet18")
    p.add_argument("--steps", type=int, default=12, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--batch", type=int, default=None, help="samples (windows) per rank")
    p.add_argument("--hook", choices=("none", "bf16", "fp16", "powersgd"), default="none")
    p.add_argument("--powersgd-rank", type=int, default=4)
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--text", default=None, help="gpt: the text file")
    a = p.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    threads = a.threads or max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)
    gen = torch.Generator().manual_seed(100 + rank)
    if a.model == "resnet18":
        batch = a.batch or 32
        model = build("resnet18", 3, 32, 32, 10)
        opt_of = lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)  # noqa: E731

        def next_batch():
            x = torch.randn(batch, 3, 32, 32, generator=gen)
            y = torch.randint(0, 10, (batch,), generator=gen)
            return (x,), y
    else:
        if not a.text:
            raise SystemExit("--model gpt needs --text FILE")
        batch, block = a.batch or 8, 128
        vocab, ids = text_ids(a.text)
        model = TrainingGpt(vocab, block, 6, 6, 384)
        opt_of = lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.99))  # noqa: E731

        def next_batch():
            starts = torch.randint(len(ids) - block - 1, (batch,), generator=gen).tolist()
            x = torch.stack([ids[s:s + block] for s in starts])
            y = torch.stack([ids[s + 1:s + 1 + block] for s in starts])
            return (x, y), None

    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_mb)
    register_hook(ddp, a)
    opt = opt_of(model)
    times, loss = [], None
    dist.barrier()
    last = time.perf_counter()
    timed_from = time.time()
    for step in range(a.warmup + a.steps):
        inputs, y = next_batch()
        out = ddp(*inputs)
        loss = out if y is None else F.cross_entropy(out, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.model == "gpt":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        now = time.perf_counter()
        if step >= a.warmup:
            times.append(now - last)
        else:
            timed_from = time.time()
        last = now
    timed_to = time.time()
    dist.barrier()
    if rank == 0:
        median = statistics.median(times)
        out = {
            "summary": True,
            "engine": f"pytorch-{torch.__version__}",
            "model": a.model,
            "world": world,
            "hook": a.hook,
            "threads": threads,
            "step_s": [round(t, 4) for t in times],
            "median_step_s": round(median, 4),
            "samples_per_s": round(batch * world / median, 2),
            "loss": round(loss.item(), 4),
            "timed_from": timed_from,
            "timed_to": timed_to,
        }
        if a.model == "gpt":
            out["tokens_per_s"] = round(batch * world * 128 / median, 1)
        print(json.dumps(out), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

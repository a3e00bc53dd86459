#!/usr/bin/env python3
"""PyTorch's side of ddp-bench's GPT benchmark: the "baby GPT" recipe of character-level
Shakespeare (examples/gpt-shakespeare.toml) trained with PyTorch DDP (gloo, CPU).

    torch_gpt.py TEXT_FILE [--world 2] [--iters 2000] [--batch 12] [--block 64] [--layers 4]
                 [--heads 4] [--embd 128] [--lr 1e-3] [--min-lr 1e-4] [--warmup 100]
                 [--eval-iters 20] [--threads T] [--seed 1337] [--port 29533] [--save PATH]
                 [--autocast bf16]

Data: the file decoded as UTF-8; the vocabulary is its sorted distinct characters; the first 90 %
of the characters train, the last 10 % validate. At every step each rank draws --batch random
windows of --block + 1 characters from the training part (a generator seeded with seed + rank),
so the global batch is world x batch windows.
Model: examples/pytorch/gpt_module.py's Gpt, nanoGPT's layout and names (the token embedding
transformer.wte tied to lm_head, learned positions transformer.wpe, pre-norm blocks
transformer.h.{i} with ln_1, attn.c_attn [3E, E], attn.c_proj, ln_2, mlp.c_fc [4E, E], mlp.c_proj,
then transformer.ln_f); causal attention, exact GELU, no dropout; weights N(0, 0.02), the c_proj
weights N(0, 0.02 / sqrt(2 x layers)), biases 0. Seeded with --seed on every rank.
Optimiser: AdamW (betas 0.9/0.99, eps 1e-8) with weight decay 0.1 on the tensors of rank >= 2
only; the learning rate rises linearly over --warmup steps, then follows a cosine from --lr to
--min-lr at step --iters (not scaled by the world size); gradients clipped to norm 1.0.

Output (stdout, rank 0), one JSON object per line:
  every 100 steps {"step", "loss", "elapsed_s"}
  at the end      {"summary": true, "model": "gpt", "world", "threads", "iters", "params", "vocab",
                   "train_s", "tokens_per_s", "train_loss", "val_loss", "peak_rss_mb", "torch"}
train_s is the training loop between two barriers (the slowest rank's); tokens_per_s counts the
tokens of all ranks (iters x batch x block x world) over it; train_loss and val_loss are the mean
loss of --eval-iters random batches of each part (the same batches for every run with the same
seed); peak_rss_mb is the largest peak resident set among the ranks. --save writes the trained
state dict (torch.save), which ddp-bench's quality run evaluates. ddp-bench reads the summary
line (trainer/src/bin/ddp-bench/torch.rs).
"""
import argparse
import json
import math
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

from bench_common import default_threads, join_group, peak_rss_mb
from gpt_module import Gpt  # examples/pytorch/, put on sys.path by bench_common


class TrainingGpt(Gpt):
    """gpt_module's Gpt whose forward pass is the loss, as DistributedDataParallel calls it:
    the mean next-token cross-entropy of `idx` against `targets`."""

    def forward(self, idx, targets):
        logits = self.logits(idx)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def load_text(path):
    """(vocabulary size, training ids, validation ids) of a text file, character by character."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([index[c] for c in text], dtype=torch.long)
    cut = int(0.9 * len(ids))
    return len(chars), ids[:cut], ids[cut:]


def random_batch(ids, n, block, gen):
    """n random windows of `ids`: inputs [n, block] and the next tokens [n, block]."""
    starts = torch.randint(len(ids) - block - 1, (n,), generator=gen).tolist()
    x = torch.stack([ids[s:s + block] for s in starts])
    y = torch.stack([ids[s + 1:s + 1 + block] for s in starts])
    return x, y


def lr_at(step, a):
    """Linear warm-up over a.warmup steps, then a cosine from a.lr to a.min_lr at step a.iters."""
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    progress = min(1.0, (step - a.warmup) / max(1, a.iters - a.warmup))
    return a.min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (a.lr - a.min_lr)


def make_optimizer(model, a):
    """AdamW with weight decay on the matrices (embeddings included) only."""
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    others = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": matrices, "weight_decay": 0.1}, {"params": others, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.99), eps=1e-8)


def mean_loss(model, ids, a):
    """The mean loss of a.eval_iters random batches of `ids`, drawn from a fixed seed."""
    gen = torch.Generator().manual_seed(a.seed + 7)
    total = sum(model(*random_batch(ids, a.batch, a.block, gen)).item() for _ in range(a.eval_iters))
    return total / a.eval_iters


def worker(rank, a, results):
    join_group(rank, a.world, a.port, a.threads)
    vocab, train, val = load_text(a.text)
    torch.manual_seed(a.seed)
    model = TrainingGpt(vocab, a.block, a.layers, a.heads, a.embd)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = make_optimizer(model, a)
    gen = torch.Generator().manual_seed(a.seed + rank)

    dist.barrier()
    t0 = time.perf_counter()
    for step in range(a.iters):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, a)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
            loss = ddp(*random_batch(train, a.batch, a.block, gen))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if rank == 0 and (step + 1) % 100 == 0:
            print(json.dumps({"step": step + 1, "loss": round(loss.item(), 4),
                              "elapsed_s": round(time.perf_counter() - t0, 2)}), flush=True)
    dist.barrier()
    train_s = time.perf_counter() - t0

    model.eval()
    with torch.no_grad():
        losses = {"train": mean_loss(model, train, a), "val": mean_loss(model, val, a)}
    if rank == 0 and a.save:
        torch.save(model.state_dict(), a.save)
    params = sum(p.numel() for p in model.parameters())
    results.put({"rank": rank, "train_s": train_s, "losses": losses, "rss_mb": peak_rss_mb(),
                 "params": params, "vocab": vocab})
    dist.destroy_process_group()


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("text", help="UTF-8 text file (examples/data/shakespeare/input.txt)")
    p.add_argument("--world", type=int, default=2, help="processes (ranks)")
    p.add_argument("--iters", type=int, default=2000, help="optimizer steps")
    p.add_argument("--batch", type=int, default=12, help="windows per rank and step")
    p.add_argument("--block", type=int, default=64, help="context length")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--embd", type=int, default=128, help="width")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--min-lr", type=float, default=1e-4, help="learning rate at the last step")
    p.add_argument("--warmup", type=int, default=100, help="warm-up steps")
    p.add_argument("--eval-iters", type=int, default=20, help="batches of the final losses")
    p.add_argument("--threads", type=int, default=0, help="torch threads per process (default: cores // world)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--port", type=int, default=29533, help="rendezvous port on 127.0.0.1")
    p.add_argument("--save", default="", help="write the trained state dict here (torch.save)")
    p.add_argument("--autocast", choices=["bf16"], help="forward and loss under torch.autocast(\"cpu\", bfloat16)")
    a = p.parse_args()
    if a.threads <= 0:
        a.threads = default_threads(a.world)
    return a


def main():
    a = parse_args()
    results = mp.get_context("spawn").SimpleQueue()
    mp.spawn(worker, args=(a, results), nprocs=a.world, join=True)
    ranks = sorted((results.get() for _ in range(a.world)), key=lambda r: r["rank"])
    train_s = max(r["train_s"] for r in ranks)
    tokens = a.iters * a.batch * a.block * a.world
    first = ranks[0]
    print(json.dumps({"summary": True, "model": "gpt", "world": a.world, "threads": a.threads, "iters": a.iters,
                      "params": first["params"], "vocab": first["vocab"], "train_s": round(train_s, 2),
                      "tokens_per_s": round(tokens / train_s, 1), "train_loss": round(first["losses"]["train"], 4),
                      "val_loss": round(first["losses"]["val"], 4),
                      "peak_rss_mb": round(max(r["rss_mb"] for r in ranks), 1), "torch": torch.__version__,
                      "autocast": a.autocast}),
          flush=True)


if __name__ == "__main__":
    main()

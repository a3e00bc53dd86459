#!/usr/bin/env python3
"""Loads a ddp `gpt` run's model.safetensors into the PyTorch module (gpt_module.py) with
`load_state_dict(strict=True)` and prints its validation loss, computed as ddp computes it: the
mean next-token cross-entropy over every non-overlapping window of the validation part (window i
reads tokens [i·block, (i+1)·block) and predicts the tokens one position later, for
i < (L − 1) // block), the last `val_fraction` of the text tokenized with the run's
tokenizer.json.

Usage: python3 load_gpt.py RUN_DIR --text input.txt [--val-fraction 0.1] [--heads 4] [--batch 64]
Prints one line: `val loss 1.234567 (N windows) perplexity P`. Needs torch and safetensors.
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_module import Gpt, shape_of  # noqa: E402


def tokenize(tokenizer, text_bytes):
    if tokenizer["kind"] == "byte":
        return list(text_bytes)
    ids = {c: i for i, c in enumerate(tokenizer["chars"])}
    return [ids[c] for c in text_bytes.decode("utf-8")]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run")
    p.add_argument("--text", required=True)
    p.add_argument("--val-fraction", type=float, default=0.1)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    a = p.parse_args()

    state = load_file(os.path.join(a.run, "model.safetensors"))
    vocab, block, layers, heads, embd = shape_of(state, a.heads)
    model = Gpt(vocab, block, layers, heads, embd)
    model.load_state_dict(state, strict=True)
    model.eval()

    with open(os.path.join(a.run, "tokenizer.json")) as f:
        tokenizer = json.load(f)
    with open(a.text, "rb") as f:
        ids = tokenize(tokenizer, f.read())
    cut = min(math.floor((1.0 - a.val_fraction) * len(ids)), len(ids))
    val = torch.tensor(ids[cut:], dtype=torch.long)
    windows = (len(val) - 1) // block
    total = 0.0
    with torch.no_grad():
        for start in range(0, windows, a.batch):
            rows = range(start, min(start + a.batch, windows))
            x = torch.stack([val[i * block:(i + 1) * block] for i in rows])
            y = torch.stack([val[i * block + 1:(i + 1) * block + 1] for i in rows])
            logits = model.logits(x)
            total += F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1), reduction="sum").item()
    loss = total / (windows * block)
    print(f"val loss {loss:.6f} ({windows} windows) perplexity {math.exp(loss):.4f}")


if __name__ == "__main__":
    main()

"""The GPT of the PyTorch benchmark (bench/pytorch/torch_gpt.py: nanoGPT's layout), as a module that
ddp's `gpt` checkpoints load into with `load_state_dict(strict=True)`.

Parameter names: transformer.wte.weight [vocab, embd] (tied: lm_head.weight is the same tensor),
transformer.wpe.weight [block, embd], transformer.h.{i}.ln_1.{weight,bias},
transformer.h.{i}.attn.c_attn.{weight,bias} [3·embd, embd], transformer.h.{i}.attn.c_proj.*,
transformer.h.{i}.ln_2.*, transformer.h.{i}.mlp.c_fc.* [4·embd, embd], transformer.h.{i}.mlp.c_proj.*,
transformer.ln_f.*. Pre-norm blocks, causal attention, exact GELU, no dropout.

Used by load_gpt.py, by trainer/tests/fixtures/gpt/make_fixtures.py and by the benchmark
bench/pytorch/torch_gpt.py (which trains it). Needs torch only.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, e, h):
        super().__init__()
        self.h = h
        self.ln_1 = nn.LayerNorm(e)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(e, 3 * e)
        self.attn.c_proj = nn.Linear(e, e)
        self.ln_2 = nn.LayerNorm(e)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(e, 4 * e)
        self.mlp.c_proj = nn.Linear(4 * e, e)

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(e, dim=2)
        q, k, v = (z.view(b, t, self.h, e // self.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn.c_proj(y.transpose(1, 2).contiguous().view(b, t, e))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, block, layers, heads, embd):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(vocab, embd)
        self.transformer.wpe = nn.Embedding(block, embd)
        self.transformer.h = nn.ModuleList(Block(embd, heads) for _ in range(layers))
        self.transformer.ln_f = nn.LayerNorm(embd)
        self.lm_head = nn.Linear(embd, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            elif p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias") and "ln_" not in name:
                nn.init.zeros_(p)

    def logits(self, idx):
        t = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(t))
        for blk in self.transformer.h:
            x = blk(x)
        return self.lm_head(self.transformer.ln_f(x))


def shape_of(state, heads):
    """(vocab, block, layers, heads, embd) of a state dict."""
    vocab, embd = state["transformer.wte.weight"].shape
    block = state["transformer.wpe.weight"].shape[0]
    layers = len({k.split(".")[2] for k in state if k.startswith("transformer.h.")})
    return vocab, block, layers, heads, embd

#!/usr/bin/env python3
"""Loads a ddp run's model.safetensors into the matching PyTorch module (classifiers.py: the
built-in model of the run's spec, sized from the data as ddp sizes it) with
`load_state_dict(strict=True)`, and evaluates it on a test file of the `tensors` format: a
.safetensors file with inputs `x` ([N, C, H, W], [N, H, W] or [N, D]; f32, or u8 scaled by 1/255 as
ddp reads it) and integer classes `y`.

Usage: python3 load_classifier.py RUN_DIR --data test.safetensors [--spec SPEC] [--x x] [--y y]
(SPEC: the run's spec, RUN_DIR/spec.toml for a workspace run.) The spec's `train.precision`
(`bf16`, `fp16`) evaluates under `torch.autocast` in that dtype, as the run evaluated.
Prints one line: `test loss 1.234567 accuracy 0.912500 (N samples)`. Needs torch and safetensors
(torchvision for resnet18).
"""
import argparse
import json
import os
import sys
import tomllib

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from classifiers import build  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run")
    p.add_argument("--data", required=True)
    p.add_argument("--x", default="x")
    p.add_argument("--y", default="y")
    p.add_argument("--spec")
    a = p.parse_args()
    with open(a.spec or os.path.join(a.run, "spec.toml"), "rb") as f:
        spec = tomllib.load(f)
    arrays = load_file(a.data)
    x, y = arrays[a.x], arrays[a.y].long()
    if x.dtype == torch.uint8:
        x = x.float() / 255.0
    x = x.float()
    if x.dim() == 2:
        x = x.reshape(x.shape[0], 1, 1, x.shape[1])
    elif x.dim() == 3:
        x = x.unsqueeze(1)
    _, c, h, w = x.shape
    # The classes the run trained with, as its data.json records them.
    with open(os.path.join(a.run, "data.json")) as f:
        classes = len(json.load(f)["classes"])
    state = load_file(os.path.join(a.run, "model.safetensors"))
    model = spec["model"]
    net = build(model["name"], c, h, w, classes, model.get("hidden"))
    net.load_state_dict(state, strict=True)
    net.eval()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(spec.get("train", {}).get("precision"))
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        out = net(x).float()
        loss = F.cross_entropy(out, y).item()
        acc = (out.argmax(1) == y).float().mean().item()
    print(f"test loss {loss:.6f} accuracy {acc:.6f} ({len(y)} samples)")


if __name__ == "__main__":
    main()

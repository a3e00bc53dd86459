#!/usr/bin/env python3
"""A workspace of many finished runs made from one real run's folder, for measuring how the views
scale (docs/performance.md, "10,000 runs").

    scripts/make-workspace.py --from WS/experiments/E/runs/RUN --runs 10000 --out /tmp/ws10k

Every run is a copy of the source folder with its own identity and figures: a new id (creation
times one minute apart, ending now), one of 20 experiments, a status (mostly completed; some
failed, stopped, paused), a learning rate, batch size and optimizer in its frozen spec, its
metric records' losses and accuracies scaled so that every run ends with different figures,
tags on one run in ten, a sweep id on one run in four. Large files (checkpoints, the model,
TensorBoard events, plots) are hard links to the source's; 10,000 runs take about 750 MB (mostly
small files and folders).
The source must be a completed run of a `ddp` workspace; the output folder must not exist.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import time
from pathlib import Path

LINKED = ("checkpoints", "tb", "plots", "model.safetensors")
STATUSES = ["completed"] * 16 + ["failed", "stopped", "paused", "completed"]


def new_id(t: float, rng: random.Random) -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(t)) + "-" + "%06x" % rng.getrandbits(24)


def scaled_metrics(src: Path, factor: float) -> str:
    """The source's metric records with losses scaled by `factor` and accuracies moved the
    other way (kept in [0, 1])."""
    out = []
    for line in src.read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if isinstance(r.get("loss"), (int, float)):
            r["loss"] = r["loss"] * factor
        if isinstance(r.get("accuracy"), (int, float)):
            r["accuracy"] = max(0.0, min(1.0, r["accuracy"] - (factor - 1.0) * 0.05))
        out.append(json.dumps(r, separators=(",", ":")))
    return "\n".join(out) + "\n"


def spec_with(text: str, lr: float, batch: int, optimizer: str, name: str) -> str:
    text = re.sub(r"(?m)^name = .*$", f'name = "{name}"', text, count=1)
    text = re.sub(r"(?m)^lr = .*$", f"lr = {lr!r}", text)
    text = re.sub(r"(?m)^batch_size = .*$", f"batch_size = {batch}", text)
    text = re.sub(r'(?m)^optimizer = .*$', f'optimizer = "{optimizer}"', text)
    return text


def copy_tree_linked(src: Path, dst: Path) -> None:
    """`src`'s files into `dst`: the large ones hard-linked, the rest copied."""
    dst.mkdir(parents=True)
    for entry in src.iterdir():
        target = dst / entry.name
        if entry.name in LINKED:
            if entry.is_dir():
                target.mkdir()
                for f in entry.iterdir():
                    os.link(f, target / f.name)
            else:
                os.link(entry, target)
        elif entry.is_dir():
            shutil.copytree(entry, target)
        else:
            shutil.copy2(entry, target)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="src", required=True, type=Path, help="a completed run's folder")
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--out", required=True, type=Path, help="the new workspace (must not exist)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    src = a.src.resolve()
    record = json.loads((src / "run.json").read_text())
    if record.get("status") != "completed":
        sys.exit(f"make-workspace: {src} is {record.get('status')}: give a completed run's folder")
    marker = src.parents[3] / ".ddp-workspace"
    if not marker.is_file():
        sys.exit(f"make-workspace: {src} is not in a ddp workspace ({marker} is missing)")
    if a.out.exists():
        sys.exit(f"make-workspace: {a.out} exists: give a new folder")
    rng = random.Random(a.seed)
    spec_text = (src / "spec.toml").read_text()
    metrics = sorted((src / "metrics").glob("rank-*.jsonl"))
    a.out.mkdir(parents=True)
    shutil.copy2(marker, a.out / ".ddp-workspace")
    now = time.time()
    sweeps = [new_id(now - 86400 * 30 + i * 3600, rng) for i in range(a.runs // 100 + 1)]
    started = time.monotonic()
    for i in range(a.runs):
        created = now - (a.runs - i) * 60.0
        experiment = f"exp-{i % 20:02d}"
        rid = new_id(created, rng)
        d = a.out / "experiments" / experiment / "runs" / rid
        copy_tree_linked(src, d)
        lr = 10 ** rng.uniform(-4, -1)
        batch = rng.choice([16, 32, 64, 128])
        optimizer = rng.choice(["adam", "sgd", "adamw"])
        status = rng.choice(STATUSES)
        factor = rng.uniform(0.8, 1.6)
        r = dict(record)
        r.update(
            id=rid,
            experiment=experiment,
            name=f"{experiment}/lr={lr:.3g},batch={batch}",
            status=status,
            created=created,
            started=created + 1.0,
            ended=created + 1.0 + rng.uniform(5, 500),
            supervisor=None,
            replica_pids={},
        )
        r.pop("pause_at", None)
        if i % 4 == 0:
            r["sweep"] = sweeps[i // 100]
        else:
            r.pop("sweep", None)
        if status == "failed":
            r["error"] = "rank 1 exited with code 1; see its log"
        (d / "run.json").write_text(json.dumps(r, indent=2))
        (d / "spec.toml").write_text(spec_with(spec_text, lr, batch, optimizer, experiment))
        for m in metrics:
            (d / "metrics" / m.name).write_text(scaled_metrics(m, factor))
        if i % 10 == 0:
            (d / "tags").write_text(rng.choice(["baseline", "best", "lr-sweep", "ablation"]) + "\n")
        if (i + 1) % 1000 == 0:
            rate = (i + 1) / (time.monotonic() - started)
            print(f"{i + 1} runs ({rate:.0f}/s)", file=sys.stderr)
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

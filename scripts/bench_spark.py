#!/usr/bin/env python3
"""Runs on Spark against the local launcher and against Spark's TorchDistributor
(scripts/bench-spark.sh brings up the cluster and runs this; docs/performance.md, "Runs on
Spark").

Every side trains the reference CNN recipe (examples/mnist.toml: Adam, batch 32 a replica) on
the embedded MNIST sample, all 8,000 training digits (no validation share), 2 replicas of 1
thread, --epochs epochs, --repeat times each, the sides taking turns:

  ddp local       `ddp run` (the local launcher, in the foreground)
  ddp on spark    `ddp run --on spark --master M --detach`, followed through run.json
  torch local     bench/pytorch/torch_ref.py --world 2 (torch.multiprocessing)
  torch on spark  bench/pytorch/torch_distributor.py M: TorchDistributor(2, local_mode=False)
                  running torch_ref.py, one rank a task

Figures (medians): seconds from the command's start until the run is running on the cluster
(ddp: run.json says `running`, its barrier stage started; TorchDistributor: its Spark session
made, before the stage), until the first optimiser step (ddp: the first metrics record less its
steps before; torch: torch_ref.py's `first_step_at`), and until the command's end; training
samples/s of both replicas (ddp: the epochs' metrics records, evaluation excluded; torch: the
training loops between barriers).

    scripts/bench_spark.py DDP_BINARY MASTER WORKDIR [--repeat 3] [--epochs 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETS = ["ddp.threads=1", "data.val_fraction=0", "ddp.replicas=2"]


def ddp_figures(run_dir, started):
    """(first step after start, samples/s) from rank 0's metrics records."""
    records = [json.loads(l) for l in (run_dir / "metrics" / "rank-0.jsonl").read_text().splitlines()]
    train = [r for r in records if r.get("kind") == "train"]
    first = train[0]
    first_step = first["time"] - (first["step"] - 1) * first["breakdown"]["step_s"]
    samples, seconds = 0.0, 0.0
    for epoch in sorted({r["epoch"] for r in train}):
        rs = [r for r in train if r["epoch"] == epoch]
        # Each record counts one replica's samples since the one before it.
        if len(rs) >= 2:
            samples += sum(r["samples"] for r in rs[1:]) * rs[0]["world_size"]
            seconds += rs[-1]["time"] - rs[0]["time"]
    return first_step - started, samples / seconds


def one_run(workspace):
    runs = list((workspace / "experiments").glob("*/runs/*"))
    assert len(runs) == 1, runs
    return runs[0]


def ddp_local(a, work, i):
    ws = work / f"local-{i}"
    started = time.time()
    cmd = [a.ddp, "--workspace", ws, "run", ROOT / "examples/mnist.toml"]
    for s in SETS + [f"train.epochs={a.epochs}"]:
        cmd += ["--set", s]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    ended = time.time()
    first, rate = ddp_figures(one_run(ws), started)
    return {"running": None, "first": first, "end": ended - started, "rate": rate}


def ddp_spark(a, work, i):
    ws = work / f"spark-{i}"
    started = time.time()
    cmd = [a.ddp, "--workspace", ws, "run", ROOT / "examples/mnist.toml", "--on", "spark"]
    cmd += ["--master", a.master, "--detach"]
    for s in SETS + [f"train.epochs={a.epochs}"]:
        cmd += ["--set", s]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    run = one_run(ws)
    running = None
    while True:
        rec = json.loads((run / "run.json").read_text())
        if running is None and rec["status"] == "running":
            running = time.time() - started
        if rec["status"] in ("completed", "failed", "stopped"):
            break
        if time.time() - started > 600:
            sys.exit(f"bench-spark: {run} did not end within 600 s")
        time.sleep(0.05)
    if rec["status"] != "completed":
        sys.exit(f"bench-spark: {run} {rec['status']}: {rec.get('error')}")
    first, rate = ddp_figures(run, started)
    return {"running": running, "first": first, "end": rec["ended"] - started, "rate": rate}


def torch_lines(path):
    lines = [json.loads(l) for l in Path(path).read_text().splitlines()] if Path(path).exists() else []
    if not any(l.get("summary") for l in lines):
        sys.exit(f"bench-spark: no summary in {path}: {lines}")
    return lines


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torch_local(a, work, i):
    out = work / f"torch-local-{i}.jsonl"
    started = time.time()
    cmd = [sys.executable, ROOT / "bench/pytorch/torch_ref.py", ROOT / "examples/data/mnist-sample"]
    cmd += ["--world", "2", "--threads", "1", "--epochs", str(a.epochs), "--out", out, "--port", str(free_port())]
    # gloo sometimes aborts in its teardown after the summary: the summary is what counts.
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ended = time.time()
    lines = torch_lines(out)
    first = next(l["first_step_at"] for l in lines if "first_step_at" in l)
    summary = next(l for l in lines if l.get("summary"))
    return {"running": None, "first": first - started, "end": ended - started,
            "rate": summary["samples_per_s"]}


def torch_spark(a, work, i):
    out = work / f"torch-spark-{i}.jsonl"
    cmd = [sys.executable, ROOT / "bench/pytorch/torch_distributor.py", a.master, out, "--"]
    cmd += ["--threads", "1", "--epochs", str(a.epochs)]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lines = torch_lines(out)
    at = {k: l[k] for l in lines for k in ("started_at", "submitted_at", "first_step_at", "ended_at") if k in l}
    summary = next(l for l in lines if l.get("summary"))
    started = at["started_at"]
    return {"running": at["submitted_at"] - started, "first": at["first_step_at"] - started,
            "end": at["ended_at"] - started, "rate": summary["samples_per_s"]}


def has_torch():
    probe = "import torch, numpy, pyspark.ml.torch.distributor"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ddp")
    p.add_argument("master")
    p.add_argument("work", type=Path)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--epochs", type=int, default=2)
    a = p.parse_args()
    sides = [("ddp local", ddp_local), ("ddp on spark", ddp_spark)]
    if has_torch():
        sides += [("torch local", torch_local), ("torch on spark (TorchDistributor)", torch_spark)]
    else:
        print(f"bench-spark: no torch/numpy in {sys.executable}: the PyTorch side is left out", file=sys.stderr)
    seen = {name: [] for name, _ in sides}
    for i in range(a.repeat):
        for name, side in sides:
            r = side(a, a.work, i)
            print(f"bench-spark: {name} #{i + 1}: {json.dumps({k: v and round(v, 2) for k, v in r.items()})}",
                  file=sys.stderr)
            seen[name].append(r)

    def med(rs, key, fmt):
        vs = [r[key] for r in rs if r[key] is not None]
        return fmt.format(statistics.median(vs)) if vs else "-"

    print(f"| side ({a.repeat} runs each, medians) | start → running on the cluster | start → first step "
          "| start → end | train samples/s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, rs in seen.items():
        print(f"| {name} | {med(rs, 'running', '{:.1f} s')} | {med(rs, 'first', '{:.1f} s')} "
              f"| {med(rs, 'end', '{:.1f} s')} | {med(rs, 'rate', '{:,.0f}')} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch's side of scripts/bench-spark.sh: torch_ref.py (the MNIST CNN with PyTorch DDP over
gloo) run on a Spark cluster by Spark's own TorchDistributor, as its users run PyTorch there.

    torch_distributor.py MASTER OUT.jsonl [--processes 2] -- [torch_ref.py options...]

A Spark session on MASTER, then TorchDistributor(num_processes, local_mode=False,
use_gpu=False).run(torch_ref.py, <repo>/examples/data/mnist-sample, options..., --out OUT.jsonl):
one barrier stage of `processes` tasks, each running torchrun with one rank. OUT.jsonl gets one
JSON object per line: {"started_at"} before the session is made, {"submitted_at"} when the
distributor is called, then rank 0's lines (first step, epochs, summary), then {"ended_at"}.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, os.pardir, os.pardir))


def mark(out, key):
    with open(out, "a") as f:
        f.write(json.dumps({key: time.time()}) + "\n")


def main():
    argv = sys.argv[1:]
    ref_args = []
    if "--" in argv:
        at = argv.index("--")
        argv, ref_args = argv[:at], argv[at + 1:]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("master")
    p.add_argument("out")
    p.add_argument("--processes", type=int, default=2)
    a = p.parse_args(argv)
    out = os.path.abspath(a.out)
    mark(out, "started_at")
    # The executors' Python is this one (torch, pyspark), unless the caller says otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.ml.torch.distributor import TorchDistributor

    spark = (
        SparkSession.builder.master(a.master)
        .appName("torch-ref")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    mark(out, "submitted_at")
    script = os.path.join(HERE, "torch_ref.py")
    data = os.path.join(REPO, "examples", "data", "mnist-sample")
    TorchDistributor(num_processes=a.processes, local_mode=False, use_gpu=False).run(
        script, data, *ref_args, "--out", out
    )
    mark(out, "ended_at")
    spark.stop()


if __name__ == "__main__":
    main()

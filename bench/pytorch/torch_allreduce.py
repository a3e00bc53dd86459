#!/usr/bin/env python3
"""PyTorch's side of ddp-bench's all-reduce benchmark: gloo all-reduce (sum of f32 buffers)
between W local processes over loopback.

    torch_allreduce.py [W] [--port 29531]        (W: processes, default 2)

For each size, 1 MiB, 25 MiB and 100 MiB: a buffer of ones; 3 all-reduces to warm up; then 10,
each after a barrier and timed alone; the median of the 10. ddp's own engines are measured the
same way (`ddp_trainer::dist::bench::bench_all_reduce`).

Output (stdout, rank 0): one JSON object per size and nothing else,
  {"engine": "gloo", "world", "bytes", "median_s", "algbw_GBps", "busbw_GBps"}
with nccl-tests' definitions: algbw = bytes / median_s / 1e9, busbw = algbw x 2(W-1)/W.
ddp-bench reads every line (trainer/src/bin/ddp-bench/allreduce.rs, `read_figures`).
"""
import argparse
import json
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bench_common import join_group

SIZES = [1 << 20, 25 << 20, 100 << 20]
WARMUP = 3
TIMED = 10


def median_time(buf):
    """The median of TIMED all-reduces of `buf`, each started after a barrier."""
    for _ in range(WARMUP):
        dist.all_reduce(buf)
    times = []
    for _ in range(TIMED):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        times.append(time.perf_counter() - t0)
    return sorted(times)[TIMED // 2]


def worker(rank, world, port):
    join_group(rank, world, port, threads=1)
    for nbytes in SIZES:
        median_s = median_time(torch.ones(nbytes // 4))
        if rank == 0:
            algbw = nbytes / median_s / 1e9
            busbw = algbw * 2 * (world - 1) / world
            print(json.dumps({"engine": "gloo", "world": world, "bytes": nbytes, "median_s": round(median_s, 6),
                              "algbw_GBps": round(algbw, 3), "busbw_GBps": round(busbw, 3)}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("world", type=int, nargs="?", default=2, help="processes (default 2)")
    p.add_argument("--port", type=int, default=29531, help="rendezvous port on 127.0.0.1")
    a = p.parse_args()
    mp.spawn(worker, args=(a.world, a.port), nprocs=a.world)


if __name__ == "__main__":
    main()

"""What the PyTorch reference benchmarks share: the process group, the thread count, the peak
resident memory, and the way to the repository's PyTorch model definitions.

The models themselves are not defined here: `examples/pytorch/classifiers.py` (the CNN, the MLP,
ResNet-18) and `examples/pytorch/gpt_module.py` (the baby GPT) are the repository's PyTorch
versions of ddp's built-in models, with ddp's parameter names and shapes, and the benchmarks train
exactly those. `import bench_common` puts their folder on `sys.path`; `mp.spawn`'s workers get the
same `sys.path`, so they import them too.
"""
import os
import resource
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
# bench/pytorch/ -> the repository root -> examples/pytorch/
MODELS_DIR = os.path.join(HERE, os.pardir, os.pardir, "examples", "pytorch")
if MODELS_DIR not in sys.path:
    sys.path.insert(0, os.path.normpath(MODELS_DIR))


def default_threads(world):
    """Threads per process when none are asked for: the cores shared out between the ranks."""
    return max(1, (os.cpu_count() or 1) // world)


def join_group(rank, world, port, threads, from_env=False):
    """Sets this process's torch threads, then joins the gloo group of `world` local processes
    (rendezvous on 127.0.0.1:`port`), or, `from_env`, the group torchrun's variables describe."""
    torch.set_num_threads(threads)
    if not from_env:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)


def peak_rss_mb():
    """This process's peak resident set in MB (Linux reports `ru_maxrss` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

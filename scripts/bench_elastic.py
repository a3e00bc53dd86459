#!/usr/bin/env python3
"""Losing replicas mid-run: an elastic run against today's restart from a checkpoint
(scripts/bench-elastic.sh runs this; docs/performance.md, "Losing replicas").

Every scenario is `ddp run` of the reference CNN recipe (examples/mnist.toml) with 4 replicas
of 1 thread, in a fresh workspace:

  undisturbed   ddp.elastic = { min_replicas = 2 }, nothing killed
  elastic       the same; SIGKILL of a replica (not rank 0) at a random step of epoch 2, then
                of rank 0 about two epochs later (drawn once, from --seed); the recipe's
                restart.max_restarts = 3 starts each again, and it joins the group under way
  restart       no ddp.elastic, restart.max_restarts = 3 (checkpoints every epoch, as the
                recipe): the same kills at the same steps; every replica restarts from the
                newest checkpoint
  silent        elastic; SIGSTOP of the same replica at the same step of epoch 2 (its sockets
                stay open: the others wait ddp.timeout_s, here 10 s)
  rejoin        elastic with restart.max_restarts = 1, restart.backoff_s = 1: the first kill
                alone; the replica joins again

Figures per scenario: seconds from each kill to the first step completed once the group goes on
again (after its `membership` event, or the restart's `started`), training
samples/s of all replicas before the first kill and after the last recovery, the final test
accuracy, and the time from `ddp run` to its end; for a join, the seconds from the kill to the
group's `membership` event that takes the replica back in, and the seconds that event says the
members lost to it (from their last step to going on, the new member's state sent).

    scripts/bench_elastic.py DDP_BINARY [--seed 7] [--epochs 8]
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "examples" / "mnist.toml"
REPLICAS = 4


def records(run):
    out = []
    for f in sorted((run / "metrics").glob("rank-*.jsonl")):
        for line in f.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def train(run):
    return [r for r in records(run) if r["kind"] == "train"]


def replica_pids(run):
    """RANK -> pid of the replicas of `run` (by their --out argument and RANK variable)."""
    pids = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
            env = (p / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(run).encode() not in cmd or not any(a.startswith(b"RANK=") for a in env):
            continue
        if b"--out" not in cmd:
            continue
        rank = next(int(a[5:]) for a in env if a.startswith(b"RANK="))
        pids[rank] = int(p.name)
    return pids


def run_scenario(ddp, work, name, sets, actions, epochs):
    """Runs one scenario; `actions` are (step, rank, signal) done once a replica recorded
    `step` (the rank as the run's current attempt numbers it). Returns its figures."""
    ws = work / name
    ws.mkdir()
    args = [ddp, "run", str(SPEC), "--workspace", str(ws), "--replicas", str(REPLICAS),
            "--set", f"train.epochs={epochs}", "--set", "train.log_every=1",
            "--set", "ddp.threads=1", "--set", "ddp.timeout_s=10"]
    for s in sets:
        args += ["--set", s]
    env = dict(os.environ, RAYON_NUM_THREADS="1")
    t0 = time.time()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    run = None
    while run is None:
        runs = list(ws.glob("experiments/*/runs/*"))
        run = runs[0] if runs else None
        if proc.poll() is not None and run is None:
            sys.exit(f"bench-elastic: ddp run failed: {proc.stderr.read().decode()}")
        time.sleep(0.05)
    kills = []
    for step, rank, sig in actions:
        while True:
            t = train(run)
            if t and max(r["step"] for r in t) >= step:
                break
            if proc.poll() is not None:
                sys.exit(f"bench-elastic: {name} ended before step {step}")
            time.sleep(0.02)
        pid = replica_pids(run).get(rank)
        if pid is None:
            sys.exit(f"bench-elastic: {name}: no replica of rank {rank} at step {step}")
        os.kill(pid, sig)
        kills.append((time.time(), step, sig))
    err = proc.communicate()[1].decode()
    total = time.time() - t0
    if proc.returncode != 0:
        sys.exit(f"bench-elastic: {name} failed ({proc.returncode}):\n{err[-2000:]}")
    t = sorted(train(run), key=lambda r: r["time"])
    # A kill is over when the group goes on: the first step completed after the event that
    # follows it (the elastic group's `membership`, the restart's `started`). Steps recorded
    # just after the kill by replicas that had not noticed it yet do not count.
    events = [json.loads(l) for l in (run / "events.jsonl").read_text().splitlines() if l]
    marks = sorted(e["time"] for e in events if e["event"] in ("membership", "started"))
    recover = []
    for when, step, _ in kills:
        mark = next((m for m in marks if m > when), None)
        after = [r["time"] for r in t if mark is not None and r["time"] > mark]
        recover.append(after[0] - when if after else float("nan"))
    start = t[0]["time"]
    first = kills[0][0] if kills else t[-1]["time"]
    last_back = (kills[-1][0] + recover[-1]) if kills else start
    end = t[-1]["time"]

    def rate(a, b):
        n = sum(r.get("samples", 0) for r in t if a < r["time"] <= b)
        return n / (b - a) if b > a else float("nan")

    test = [r for r in records(run) if r["kind"] == "test"]
    joins = []
    for e in events:
        if e["event"] == "membership" and e.get("joined") and kills:
            killed = max((k[0] for k in kills if k[0] < e["time"]), default=kills[0][0])
            joins.append((e["joined"], e["time"] - killed, e["seconds_lost"]))
    return {
        "joins": joins,
        "name": name,
        "recover_s": recover,
        "before": rate(start, first),
        "after": rate(last_back, end),
        "accuracy": test[-1]["accuracy"] if test else float("nan"),
        "total_s": total,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ddp", help="the ddp executable (target/release/ddp)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--epochs", type=int, default=8)
    a = p.parse_args()
    # 7,200 training samples over 4 replicas of 32: 57 steps an epoch (76 with 3 replicas, 113
    # with 2): the first kill in epoch 2, the second about two epochs later.
    rng = random.Random(a.seed)
    victim = rng.randint(1, REPLICAS - 1)
    first = rng.randint(60, 110)
    second = rng.randint(first + 130, first + 180)
    elastic = ["ddp.elastic.min_replicas=2"]
    restart = ["restart.max_restarts=3", "restart.backoff_s=1"]
    kill = [(first, victim, signal.SIGKILL), (second, 0, signal.SIGKILL)]
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        rows = [
            run_scenario(a.ddp, work, "undisturbed", elastic, [], a.epochs),
            run_scenario(a.ddp, work, "elastic", elastic, kill, a.epochs),
            run_scenario(a.ddp, work, "restart", restart, kill, a.epochs),
            run_scenario(a.ddp, work, "silent", elastic,
                         [(first, victim, signal.SIGSTOP)], a.epochs),
            run_scenario(a.ddp, work, "rejoin",
                         elastic + ["restart.max_restarts=1", "restart.backoff_s=1"],
                         kill[:1], a.epochs),
        ]
    print(f"\nkills: rank {victim} after step {first}, then rank 0 after step {second} "
          f"(the silent scenario stops rank {victim} after step {first})\n")
    print("| scenario | seconds from each kill to the next step | samples/s before | "
          "samples/s after | test accuracy | time to finish |")
    print("| --- | --- | --- | --- | --- | --- |")
    base = rows[0]["accuracy"]
    for r in rows:
        rec = ", ".join(f"{x:.2f}" for x in r["recover_s"]) or "-"
        acc = f"{100 * r['accuracy']:.2f} %"
        if r["name"] != "undisturbed":
            acc += f" ({100 * (r['accuracy'] - base):+.2f})"
        after = "-" if not r["recover_s"] else f"{r['after']:,.0f}"
        print(f"| {r['name']} | {rec} | {r['before']:,.0f} | {after} | {acc} | "
              f"{r['total_s']:.1f} s |")
    print()
    for r in rows:
        for ids, back, lost in r["joins"]:
            who = ", ".join(str(i) for i in ids)
            print(f"- {r['name']}: replica {who} (restarted by the launcher) joined the group "
                  f"{back:.2f} s after its kill; the members lost {lost:.2f} s taking it in")


if __name__ == "__main__":
    main()

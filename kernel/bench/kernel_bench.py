"""Performance targets of the `ddp` Jupyter kernel, measured through real jupyter_client clients.

    .venv-test/bin/python kernel/bench/kernel_bench.py [--kernel PATH_TO_ddp-kernel] [--runs 100] [--repeat 200]

(`scripts/python-venv.sh` makes the venv.) The kernel is `--kernel`, else
`target/release/ddp-kernel` when it exists (`cargo build --release -p ddp-kernel`), else
`target/debug/ddp-kernel`; the bench says which. Runs started from the kernel are supervised and
trained by that same executable, so a debug kernel also trains slowly.

What it measures, each figure printed beside its target:

1. **start → kernel_info_reply < 500 ms** (`--starts` kernels, default 10): the kernelspec is
   installed into a temporary prefix (`ddp-kernel install --prefix DIR`, found through
   `JUPYTER_PATH=DIR/share/jupyter`); the time runs from `KernelManager.start_kernel()` to the
   first `kernel_info_reply` read by a `BlockingKernelClient` whose channels start right after
   `start_kernel()` returns and which sends `kernel_info_request` at once (again every 2 s until
   answered). min / median / max; each kernel is shut down before the next starts.
2. **`%ddp ls` round trip < 50 ms p50, < 100 ms p99** on a workspace of `--runs` runs (default
   100): one real run (`%ddp run examples/mnist.toml --set train.epochs=1 --wait`, through a
   kernel), then its folder copied `--runs`-1 times with new ids (`YYYYmmdd-HHMMSS-xxxxxx`, the
   times a minute apart going back, `created`/`started`/`ended` shifted alike; big files are
   hard links). A fresh kernel with `DDP_WORKSPACE` on it, once quiet (evcxr's start-up done),
   answers `--warmup` unmeasured `%ddp ls` then `--repeat` measured ones (default 200): each is
   the time from sending `execute_request` to having both its `execute_reply` and its `idle` on
   IOPub. p50 / p95 / p99 / max, and the first (cold) call apart.
3. **a live run card < 2 % of a core, ≤ 2 updates/s**: a fresh kernel, after `--settle-s`
   (default 30 s: the kernel starts evcxr in the background, a few seconds of CPU), is measured
   idle for `--window-s` (default 20 s): utime+stime of the kernel process
   (`/proc/PID/stat`, all its threads; not evcxr's child, not the run's processes). Then
   `%ddp run examples/mnist.toml --set train.epochs=N --set ddp.replicas=1` without `--wait`
   (`--card-epochs`, default 8, so that it is still training when the window ends); once the
   run is `running`, the same measurement over `--window-s` while its card is live, counting
   the card's `update_display_data` messages (their mean rate and the most in any 1 s). The run
   is stopped afterwards. The card's cost is the difference of the two.

4. **`%%ddp train`: cell → first training step < 30 s with a warm build cache** (`--parts train`,
   not in the default parts): a fresh kernel runs `%%ddp train examples/custom-model/custom.toml
   --set train.log_every=1` cells whose body is the custom model of examples/custom-model (its
   hidden width changed each time, so the cell's crate really recompiles). The figure is the time
   from sending `execute_request` to the first `train` record in the run's `metrics/rank-0.jsonl`
   (written after the first optimizer step), with the build's own seconds ("built in X s") apart.
   First with an empty build cache (`DDP_BUILD_CACHE` in the scratch folder: candle and
   ddp-trainer are compiled; recorded, no target; `--no-cold` skips it), then `--train-cells`
   cells (default 3) with the cache warm: median and max. Each run is stopped once it trains.

Everything runs in a scratch folder (kernelspec, Jupyter's data/runtime/config folders, TMPDIR,
the workspace), removed at the end (`--keep` keeps it). Every wait has a time limit, and the
whole bench is stopped after `--timeout-s` (default 1800 s); kernels are shut down, runs still
going are stopped, and every process started for the bench (found by a marker in its
environment, or the scratch folder on its command line) is killed at the end, whatever happened.
5. **`%ddp ls` on a large workspace ≤ 300 ms, kernel RSS ≤ 150 MB** (`--parts large --workspace
   WS`, not in the default parts): `%ddp ls --limit 50` and a filtered, sorted `%ddp ls` on an
   existing workspace (scripts/make-workspace.py makes one of 10,000 runs), `--large-repeat`
   calls each after a first; p50 and max, then the kernel's RSS.

`--parts start,ls,card` picks the measurements. Exit status 0 when everything measured meets its
target, 1 when a target is missed, 2 on an error.
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from queue import Empty
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]
KERNEL_NAME = "ddp"
#: Marks every process started for this bench (inherited through the environment).
SANDBOX_VAR = "DDP_KERNEL_BENCH_SANDBOX"
TERMINAL = ("completed", "failed", "stopped")
CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchTimeout(Exception):
    pass


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def percentile(xs: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[k]


def ms(x: float) -> str:
    return f"{x * 1000:.1f} ms"


# ---------------------------------------------------------------------------------------------
# Processes


def cpu_ticks(pid: int) -> int:
    """utime + stime of process `pid` (every thread of it), in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    # fields 14 and 15 of the stat line; `rest` starts at field 3
    return int(rest[11]) + int(rest[12])


def sandbox_pids(root: Path) -> list[int]:
    """The live processes started for the sandbox `root` (marker in the environment, or the
    sandbox on the command line), not this one."""
    marker = f"{SANDBOX_VAR}={root}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z":
            continue
        if marker in environ or str(root).encode() in cmdline:
            found.append(int(entry))
    return found


def kill_sandbox(root: Path) -> None:
    pids = sandbox_pids(root)
    if not pids:
        return
    log(f"stopping {len(pids)} leftover process(es): {pids}")
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and sandbox_pids(root):
            time.sleep(0.1)
        pids = sandbox_pids(root)
        if not pids:
            return
    log(f"warning: still there after SIGKILL: {pids}")


def sandbox_cpu_ticks(root: Path) -> int:
    total = 0
    for pid in sandbox_pids(root):
        try:
            total += cpu_ticks(pid)
        except (OSError, IndexError, ValueError):
            pass
    return total


def settle(root: Path, min_s: float, max_s: float, quiet_pct: float = 3.0) -> float:
    """Waits at least `min_s`, then until every sandbox process together used < `quiet_pct` % of
    a core in each of 3 consecutive seconds (evcxr's start-up done), at most `max_s`; the wait."""
    start = time.monotonic()
    quiet = 0
    prev = sandbox_cpu_ticks(root)
    while True:
        time.sleep(1.0)
        now = sandbox_cpu_ticks(root)
        pct = 100.0 * max(0, now - prev) / CLK_TCK
        prev = now
        quiet = quiet + 1 if pct < quiet_pct else 0
        waited = time.monotonic() - start
        if waited >= min_s and quiet >= 3:
            return waited
        if waited >= max_s:
            log(f"warning: the kernel's processes are still busy after {max_s:.0f} s ({pct:.0f} % of a core)")
            return waited


# ---------------------------------------------------------------------------------------------
# A kernel


def msg_parent(msg: dict[str, Any]) -> str | None:
    return (msg.get("parent_header") or {}).get("msg_id")


def display_id(msg: dict[str, Any]) -> str | None:
    return ((msg.get("content") or {}).get("transient") or {}).get("display_id")


class Kernel:
    """A `ddp` kernel (KernelManager) with a blocking client; IOPub messages are kept."""

    def __init__(self, cwd: Path, startup_timeout: float = 120):
        from jupyter_client.manager import KernelManager

        self.km = KernelManager(kernel_name=KERNEL_NAME)
        self.kc = None
        self.km.start_kernel(cwd=str(cwd))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=startup_timeout)
        self.iopub: list[dict[str, Any]] = []

    @property
    def pid(self) -> int:
        return kernel_pid(self.km)

    def close(self) -> None:
        close_kernel(self.km, self.kc)

    def pump(self, timeout: float) -> dict[str, Any] | None:
        try:
            msg = self.kc.get_iopub_msg(timeout=max(timeout, 0.001))
        except Empty:
            return None
        self.iopub.append(msg)
        return msg

    def execute(self, code: str, timeout: float) -> tuple[dict[str, Any], list[dict[str, Any]], float]:
        """Runs one cell: its execute_reply, its outputs, and the seconds from sending it to
        having both the reply and its `idle` status."""
        import zmq

        shell, iopub = self.kc.shell_channel, self.kc.iopub_channel
        poller = zmq.Poller()
        poller.register(shell.socket, zmq.POLLIN)
        poller.register(iopub.socket, zmq.POLLIN)
        t0 = time.perf_counter()
        msg_id = self.kc.execute(code, allow_stdin=False)
        deadline = time.monotonic() + timeout
        reply = None
        idle = False
        while reply is None or not idle:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchTimeout(f"no reply/idle for {code!r} within {timeout:.0f} s")
            ready = dict(poller.poll(min(left, 1.0) * 1000))
            if shell.socket in ready:
                while shell.msg_ready():
                    msg = shell.get_msg(timeout=0)
                    if msg_parent(msg) == msg_id:
                        reply = msg
            if iopub.socket in ready:
                while iopub.msg_ready():
                    msg = iopub.get_msg(timeout=0)
                    self.iopub.append(msg)
                    if (
                        msg["msg_type"] == "status"
                        and msg_parent(msg) == msg_id
                        and msg["content"].get("execution_state") == "idle"
                    ):
                        idle = True
        took = time.perf_counter() - t0
        outputs = [
            m
            for m in self.iopub
            if msg_parent(m) == msg_id and m["msg_type"] not in ("status", "execute_input")
        ]
        return reply, outputs, took

    def execute_ok(self, code: str, timeout: float) -> tuple[list[dict[str, Any]], float]:
        reply, outputs, took = self.execute(code, timeout)
        c = reply["content"]
        if c.get("status") != "ok":
            raise RuntimeError(
                f"{code!r} replied {c.get('status')}: {c.get('ename')}: {c.get('evalue')}\n"
                + "\n".join(c.get("traceback") or [])
            )
        return outputs, took


def kernel_pid(km: Any) -> int:
    proc = getattr(getattr(km, "provisioner", None), "process", None)
    if proc is not None:
        return proc.pid
    return km.kernel.pid


def close_kernel(km: Any, kc: Any) -> None:
    try:
        if kc is not None:
            kc.stop_channels()
    finally:
        try:
            if km.has_kernel:
                km.shutdown_kernel(now=False)  # shutdown_request, killed after shutdown_wait_time
        except Exception as e:  # noqa: BLE001 - cleanup goes on
            log(f"warning: shutting the kernel down: {e}")
            try:
                km.shutdown_kernel(now=True)
            except Exception:  # noqa: BLE001
                pass


def text_of(msg: dict[str, Any]) -> str:
    return ((msg.get("content") or {}).get("data") or {}).get("text/plain", "")


# ---------------------------------------------------------------------------------------------
# 1. start -> kernel_info_reply


def bench_start(n: int, cwd: Path) -> dict[str, Any]:
    from jupyter_client.manager import KernelManager

    times = []
    for i in range(n):
        km = KernelManager(kernel_name=KERNEL_NAME)
        kc = None
        try:
            t0 = time.perf_counter()
            km.start_kernel(cwd=str(cwd))
            kc = km.client()
            kc.start_channels()
            kc.kernel_info()
            sent = time.monotonic()
            deadline = sent + 60
            took = None
            while took is None:
                try:
                    msg = kc.get_shell_msg(timeout=0.05)
                except Empty:
                    now = time.monotonic()
                    if now > deadline:
                        raise BenchTimeout("no kernel_info_reply within 60 s")
                    if now - sent > 2:
                        kc.kernel_info()
                        sent = now
                    continue
                if msg["msg_type"] == "kernel_info_reply":
                    took = time.perf_counter() - t0
            times.append(took)
            log(f"start {i + 1}/{n}: kernel_info_reply after {ms(took)}")
        finally:
            close_kernel(km, kc)
    return {
        "n": n,
        "min": min(times),
        "median": statistics.median(times),
        "max": max(times),
        "times": times,
    }


# ---------------------------------------------------------------------------------------------
# 2. %ddp ls on a workspace of N runs


def run_records(ws: Path) -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for p in sorted(ws.glob("experiments/*/runs/*/run.json")):
        try:
            out.append((p.parent, json.loads(p.read_text())))
        except (OSError, ValueError):
            pass
    return out


def link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def clone_runs(run_dir: Path, total: int) -> list[str]:
    """Copies the run folder `run_dir` until its experiment holds `total` runs; the new ids."""
    record = json.loads((run_dir / "run.json").read_text())
    base = calendar.timegm(time.strptime(record["id"][:15], "%Y%m%d-%H%M%S"))
    used = {p.name for p in run_dir.parent.iterdir()}
    rng = random.Random(1)
    ids = []
    for i in range(1, total):
        shift = 60.0 * i
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(base - shift))
        while True:
            new_id = f"{stamp}-{rng.randrange(1 << 24):06x}"
            if new_id not in used:
                break
        used.add(new_id)
        dst = run_dir.parent / new_id
        # hard links: nothing of a copy is ever rewritten in place but run.json, written anew
        shutil.copytree(run_dir, dst, copy_function=link_or_copy)
        (dst / "run.json").unlink()
        copy = dict(record)
        copy["id"] = new_id
        for key in ("created", "started", "ended"):
            if isinstance(copy.get(key), (int, float)):
                copy[key] = copy[key] - shift
        copy.pop("name", None)
        (dst / "run.json").write_text(json.dumps(copy, indent=2) + "\n")
        ids.append(new_id)
    return ids


def bench_ls(args: argparse.Namespace, root: Path, cwd: Path, ws: Path) -> dict[str, Any]:
    spec = REPO / "examples" / "mnist.toml"
    log(f"making the first run: %ddp run {spec} --set train.epochs=1 --wait")
    k = Kernel(cwd)
    try:
        outputs, took = k.execute_ok(
            f"%ddp run {spec} --set train.epochs=1 --name bench-ls-source --wait", args.run_timeout_s
        )
        log(f"first run done in {took:.1f} s")
    finally:
        k.close()
    recs = run_records(ws)
    source = [(d, r) for d, r in recs if r.get("name") == "bench-ls-source"]
    if len(source) != 1 or source[0][1].get("status") != "completed":
        raise RuntimeError(f"the first run did not complete: {[(r.get('id'), r.get('status')) for _, r in recs]}")
    run_dir, record = source[0]
    t0 = time.monotonic()
    clone_runs(run_dir, args.runs)
    recs = run_records(ws)
    log(f"workspace of {len(recs)} runs made ({time.monotonic() - t0:.1f} s for the copies)")
    if len(recs) != args.runs:
        raise RuntimeError(f"expected {args.runs} runs in {ws}, found {len(recs)}")
    ids = [r["id"] for _, r in recs]

    k = Kernel(cwd)
    try:
        waited = settle(root, 5, 90)
        log(f"kernel quiet after {waited:.0f} s; timing %ddp ls")
        outputs, first = k.execute_ok("%ddp ls", 60)
        shown = "\n".join(text_of(m) for m in outputs)
        listed = sum(1 for i in ids if i in shown)
        for _ in range(max(0, args.warmup - 1)):
            k.execute_ok("%ddp ls", 60)
        times = []
        for _ in range(args.repeat):
            _, took = k.execute_ok("%ddp ls", 60)
            times.append(took)
            k.iopub.clear()
    finally:
        k.close()
    log(f"%ddp ls: first {ms(first)}, listed {listed} of {len(ids)} ids")
    return {
        "runs": len(ids),
        "listed": listed,
        "first": first,
        "n": len(times),
        "p50": percentile(times, 50),
        "p95": percentile(times, 95),
        "p99": percentile(times, 99),
        "max": max(times),
    }


LARGE_FILTER = "--where 'spec.train.lr < 0.01 and status = \"completed\"' --sort -test_accuracy --limit 20"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def bench_large(args: argparse.Namespace, root: Path, cwd: Path) -> dict[str, Any]:
    """`%ddp ls --limit 50` and a filtered, sorted `%ddp ls` on `--workspace` (an existing
    workspace of many runs, e.g. from scripts/make-workspace.py), and the kernel's RSS after."""
    k = Kernel(cwd)
    try:
        waited = settle(root, 5, 90)
        log(f"kernel quiet after {waited:.0f} s; timing %ddp ls on {args.workspace}")
        out: dict[str, Any] = {"workspace": args.workspace, "rss_before_mb": rss_mb(k.pid)}
        for name, line in (("plain", "%ddp ls --limit 50"), ("filtered", f"%ddp ls {LARGE_FILTER}")):
            outputs, first = k.execute_ok(line, 120)
            shown = "\n".join(text_of(m) for m in outputs)
            times = []
            for _ in range(args.large_repeat):
                _, took = k.execute_ok(line, 60)
                times.append(took)
                k.iopub.clear()
            out[name] = {
                "line": line,
                "first": first,
                "rows": max(0, len(shown.strip().splitlines()) - 1),
                "p50": percentile(times, 50),
                "max": max(times),
            }
        out["rss_mb"] = rss_mb(k.pid)
    finally:
        k.close()
    return out


# ---------------------------------------------------------------------------------------------
# 3. CPU of a live run card


def cpu_window(k: Kernel, seconds: float, count: Callable[[dict[str, Any]], bool]) -> tuple[float, list[float]]:
    """The kernel's CPU (% of one core) over `seconds`, reading IOPub meanwhile; the times (s
    from the start) of the messages for which `count` holds."""
    pid = k.pid
    c0, t0 = cpu_ticks(pid), time.monotonic()
    hits = []
    while (left := t0 + seconds - time.monotonic()) > 0:
        msg = k.pump(min(left, 0.5))
        if msg is not None and count(msg):
            hits.append(time.monotonic() - t0)
    c1, t1 = cpu_ticks(pid), time.monotonic()
    return 100.0 * (c1 - c0) / CLK_TCK / (t1 - t0), hits


def max_per_second(times: list[float]) -> int:
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - 1.0:
            j += 1
        best = max(best, i - j + 1)
    return best


def wait_status(ws: Path, run_id: str, statuses: tuple[str, ...], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        for _, r in run_records(ws):
            if r.get("id") == run_id:
                status = r.get("status")
        if status in statuses:
            return status
        time.sleep(0.2)
    raise BenchTimeout(f"run {run_id} is {status!r} after {timeout:.0f} s, expected one of {statuses}")


def bench_card(args: argparse.Namespace, root: Path, cwd: Path, ws: Path) -> dict[str, Any]:
    spec = REPO / "examples" / "mnist.toml"
    k = Kernel(cwd)
    run_id = None
    try:
        log(f"kernel pid {k.pid}; waiting ≥ {args.settle_s:.0f} s for evcxr's start-up")
        settle(root, args.settle_s, args.settle_s + 60)
        k.iopub.clear()
        log(f"idle window, {args.window_s:.0f} s")
        idle_pct, idle_msgs = cpu_window(k, args.window_s, lambda m: m["msg_type"] != "status")

        code = (
            f"%ddp run {spec} --set train.epochs={args.card_epochs} --set ddp.replicas=1 --name bench-card"
        )
        log(code)
        outputs, took = k.execute_ok(code, 120)
        cards = [m for m in outputs if m["msg_type"] == "display_data" and display_id(m)]
        if not cards:
            raise RuntimeError(f"%ddp run showed no run card: {[m['msg_type'] for m in outputs]}")
        ident = display_id(cards[0])
        run_id = next(r["id"] for _, r in run_records(ws) if r.get("name") == "bench-card")
        wait_status(ws, run_id, ("running",) + TERMINAL, 120)
        log(f"run {run_id} running (%ddp run replied in {ms(took)}); live-card window, {args.window_s:.0f} s")
        live_pct, updates = cpu_window(
            k, args.window_s, lambda m: m["msg_type"] == "update_display_data" and display_id(m) == ident
        )
        status_after = next(r.get("status") for _, r in run_records(ws) if r.get("id") == run_id)
        live_all_window = status_after not in TERMINAL
        if not live_all_window:
            log(f"warning: the run ended ({status_after}) before the window did: raise --card-epochs")
        log("stopping the run")
        k.execute_ok(f"%ddp stop {run_id}", 120)
        wait_status(ws, run_id, TERMINAL, 120)
    finally:
        k.close()
    return {
        "idle_pct": idle_pct,
        "idle_msgs": len(idle_msgs),
        "live_pct": live_pct,
        "card_pct": live_pct - idle_pct,
        "updates": len(updates),
        "rate": len(updates) / args.window_s,
        "max_per_s": max_per_second(updates),
        "live_all_window": live_all_window,
        "window_s": args.window_s,
        "run_id": run_id,
    }


CUSTOM_MODEL = """use candle_core::{{Result, Tensor}};
use candle_nn::{{Conv2d, Conv2dConfig, Linear, Module, VarBuilder}};

pub struct Net {{ conv: Conv2d, fc1: Linear, fc2: Linear }}

pub fn model(vb: VarBuilder) -> Result<Net> {{
    let cfg = Conv2dConfig {{ stride: 2, ..Default::default() }};
    Ok(Net {{
        conv: candle_nn::conv2d(1, 8, 5, cfg, vb.pp("conv"))?,
        fc1: candle_nn::linear(8 * 12 * 12, {hidden}, vb.pp("fc1"))?,
        fc2: candle_nn::linear({hidden}, 10, vb.pp("fc2"))?,
    }})
}}

impl Module for Net {{
    fn forward(&self, x: &Tensor) -> Result<Tensor> {{
        x.apply(&self.conv)?.gelu()?.flatten_from(1)?.apply(&self.fc1)?.gelu()?.apply(&self.fc2)
    }}
}}
"""


def first_train_record(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / "metrics" / "rank-0.jsonl"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # being written
        if rec.get("kind") == "train":
            return rec
    return None


def train_cell(k: Kernel, ws: Path, name: str, hidden: int, timeout: float) -> dict[str, float]:
    """One `%%ddp train` cell: seconds to the first training step, and the build's seconds."""
    import re

    spec = REPO / "examples" / "custom-model" / "custom.toml"
    code = f"%%ddp train {spec} --set train.log_every=1 --name {name}\n" + CUSTOM_MODEL.format(hidden=hidden)
    sent = time.time()
    outputs, replied = k.execute_ok(code, timeout)
    text = "".join(m["content"].get("text", "") for m in outputs if m["msg_type"] == "stream")
    built = re.search(r"built in (\d+(?:\.\d+)?) s", text)
    if not built:
        raise RuntimeError(f"no 'built in X s' in the cell's output:\n{text[-2000:]}")
    run_dir, run_id = next((d, r["id"]) for d, r in run_records(ws) if r.get("name") == name)
    deadline = time.monotonic() + timeout
    while (rec := first_train_record(run_dir)) is None:
        if time.monotonic() > deadline:
            raise BenchTimeout(f"run {run_id} wrote no train record within {timeout:.0f} s")
        time.sleep(0.02)
    k.execute_ok(f"%ddp stop {run_id}", 120)
    wait_status(ws, run_id, TERMINAL, 120)
    return {"first_step_s": rec["time"] - sent, "build_s": float(built.group(1)), "reply_s": replied}


def bench_train(args: argparse.Namespace, root: Path, cwd: Path, ws: Path) -> dict[str, Any]:
    os.environ["DDP_BUILD_CACHE"] = str(root / "cell-build-cache")
    k = Kernel(cwd)
    out: dict[str, Any] = {}
    try:
        if args.cold:
            log("cold build cache: the first cell compiles candle and ddp-trainer (minutes)")
            out["cold"] = train_cell(k, ws, "bench-cold", 64, args.run_timeout_s)
            log(f"cold: first step after {out['cold']['first_step_s']:.1f} s (build {out['cold']['build_s']:.1f} s)")
        else:
            log("warming the build cache (not measured)")
            train_cell(k, ws, "bench-warmup", 64, args.run_timeout_s)
        warm = []
        for i in range(args.train_cells):
            w = train_cell(k, ws, f"bench-warm-{i}", 65 + i, 600)
            log(f"warm {i + 1}/{args.train_cells}: first step after {w['first_step_s']:.2f} s (build {w['build_s']:.1f} s)")
            warm.append(w)
        firsts = [w["first_step_s"] for w in warm]
        builds = [w["build_s"] for w in warm]
        out.update(
            {
                "n": len(warm),
                "warm_median": statistics.median(firsts),
                "warm_max": max(firsts),
                "warm_build_median": statistics.median(builds),
            }
        )
    finally:
        k.close()
    return out


# ---------------------------------------------------------------------------------------------


def pick_kernel(explicit: str | None) -> tuple[Path, str]:
    if explicit:
        return Path(explicit).resolve(), "given with --kernel"
    for profile in ("release", "debug"):
        p = REPO / "target" / profile / "ddp-kernel"
        if p.is_file():
            return p, f"{profile} build"
    raise SystemExit("no target/{release,debug}/ddp-kernel: cargo build --release -p ddp-kernel, or pass --kernel")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", help="the ddp-kernel executable (default: target/release, else target/debug)")
    ap.add_argument("--parts", default="start,ls,card", help="which measurements: start,ls,card,train,large")
    ap.add_argument("--workspace", help="the existing workspace of the `large` part (e.g. 10,000 runs)")
    ap.add_argument("--large-repeat", type=int, default=20, help="measured calls of each `large` %%ddp ls")
    ap.add_argument("--train-cells", type=int, default=3, help="%%%%ddp train cells measured with a warm cache")
    ap.add_argument("--no-cold", dest="cold", action="store_false", help="skip the cold-cache %%%%ddp train cell")
    ap.add_argument("--starts", type=int, default=10, help="kernels started for the start-up time")
    ap.add_argument("--runs", type=int, default=100, help="runs in the workspace of %%ddp ls")
    ap.add_argument("--repeat", type=int, default=200, help="measured %%ddp ls round trips")
    ap.add_argument("--warmup", type=int, default=5, help="unmeasured %%ddp ls first (the first is reported)")
    ap.add_argument("--settle-s", type=float, default=30, help="least wait after the card kernel's start")
    ap.add_argument("--window-s", type=float, default=20, help="each CPU window (idle, live card)")
    ap.add_argument("--card-epochs", type=int, default=8, help="epochs of the run whose card is measured")
    ap.add_argument("--run-timeout-s", type=float, default=1200, help="longest wait for the first run to train")
    ap.add_argument("--timeout-s", type=int, default=1800, help="stop the whole bench after this")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    args = ap.parse_args()
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    unknown = parts - {"start", "ls", "card", "train", "large"}
    if "large" in parts and not args.workspace:
        ap.error("the `large` part needs --workspace WS")
    if unknown:
        ap.error(f"unknown parts {sorted(unknown)}")

    exe, which = pick_kernel(args.kernel)
    root = Path(tempfile.mkdtemp(prefix="ddp-kernel-bench-")).resolve()
    prefix, cwd, ws = root / "jupyter-prefix", root / "notebook", root / "ws"
    for d in (cwd, root / "tmp"):
        d.mkdir(parents=True)
    os.environ.update(
        {
            "JUPYTER_PATH": str(prefix / "share" / "jupyter"),
            "JUPYTER_DATA_DIR": str(root / "jupyter-data"),
            "JUPYTER_RUNTIME_DIR": str(root / "jupyter-runtime"),
            "JUPYTER_CONFIG_DIR": str(root / "jupyter-config"),
            "EVCXR_CONFIG_DIR": str(root / "evcxr-config"),
            "DDP_WORKSPACE": str(ws),
            "TMPDIR": str(root / "tmp"),
            SANDBOX_VAR: str(root),
        }
    )
    os.environ.pop("JUPYTER_PREFER_ENV_PATH", None)
    tempfile.tempdir = None

    def on_alarm(signum: int, frame: Any) -> None:
        raise BenchTimeout(f"the bench ran longer than --timeout-s {args.timeout_s}")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(args.timeout_s)

    load = os.getloadavg()
    log(f"kernel: {exe} ({which}); {os.cpu_count()} CPUs; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if load[0] > 0.5:
        log("warning: the machine is not idle (1-minute load > 0.5); the figures will suffer")
    log(f"scratch folder {root}")
    results: dict[str, Any] = {"kernel": str(exe), "build": which}
    code = 0
    try:
        out = subprocess.run(
            [str(exe), "install", "--prefix", str(prefix)], capture_output=True, text=True, timeout=60
        )
        if out.returncode != 0:
            raise RuntimeError(f"ddp-kernel install failed: {out.stdout}{out.stderr}")
        if "start" in parts:
            results["start"] = bench_start(args.starts, cwd)
        if "ls" in parts:
            results["ls"] = bench_ls(args, root, cwd, ws)
        if "large" in parts:
            os.environ["DDP_WORKSPACE"] = str(Path(args.workspace).resolve())
            results["large"] = bench_large(args, root, cwd)
            os.environ["DDP_WORKSPACE"] = str(ws)
        if "card" in parts:
            results["card"] = bench_card(args, root, cwd, ws)
        if "train" in parts:
            results["train"] = bench_train(args, root, cwd, ws)
    except (BenchTimeout, RuntimeError, OSError, subprocess.SubprocessError) as e:
        log(f"error: {type(e).__name__}: {e}")
        code = 2
    except KeyboardInterrupt:
        log("interrupted")
        code = 2
    finally:
        signal.alarm(0)
        # runs still going (a failed part): stop their supervisors, then everything else
        for d, r in run_records(ws) if ws.exists() else []:
            sup = (r.get("supervisor") or {}).get("pid")
            if r.get("status") not in TERMINAL and sup and sup in sandbox_pids(root):
                try:
                    os.kill(sup, signal.SIGTERM)
                except OSError:
                    pass
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and sandbox_pids(root):
            time.sleep(0.2)
        kill_sandbox(root)
        if args.keep or code == 2:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)

    ok = report(results, exe, which)
    if args.json:
        print(json.dumps(results))
    if code == 0 and not ok:
        code = 1
    return code


def report(results: dict[str, Any], exe: Path, which: str) -> bool:
    rows: list[tuple[str, str, str, bool]] = []
    if "start" in results:
        s = results["start"]
        rows.append(
            (
                f"start → kernel_info_reply ({s['n']} kernels)",
                "< 500 ms",
                f"min {ms(s['min'])}, median {ms(s['median'])}, max {ms(s['max'])}",
                s["median"] < 0.5,
            )
        )
    if "ls" in results:
        s = results["ls"]
        rows.append(
            (
                f"`%ddp ls`, {s['runs']} runs ({s['n']} calls)",
                "p50 < 50 ms, p99 < 100 ms",
                f"p50 {ms(s['p50'])}, p95 {ms(s['p95'])}, p99 {ms(s['p99'])}, max {ms(s['max'])} "
                f"(first call {ms(s['first'])}; {s['listed']}/{s['runs']} ids listed)",
                s["p50"] < 0.05 and s["p99"] < 0.1 and s["listed"] == s["runs"],
            )
        )
    if "large" in results:
        s = results["large"]
        for name in ("plain", "filtered"):
            f = s[name]
            rows.append(
                (
                    f"`{f['line']}` on {s['workspace']}",
                    "≤ 300 ms",
                    f"p50 {ms(f['p50'])}, max {ms(f['max'])} (first call {ms(f['first'])}; {f['rows']} rows)",
                    f["p50"] <= 0.3,
                )
            )
        grown = s["rss_mb"] - s["rss_before_mb"]
        rows.append(
            (
                "kernel RSS after them (before them)",
                "≤ 150 MB",
                f"{s['rss_mb']:.0f} MB ({s['rss_before_mb']:.0f} MB: +{grown:.0f} MB)",
                s["rss_mb"] <= 150,
            )
        )
    if "card" in results:
        s = results["card"]
        rows.append(
            (
                f"live run card, kernel CPU ({s['window_s']:.0f} s windows)",
                "< 2 % of a core",
                f"{s['card_pct']:.2f} % (live {s['live_pct']:.2f} % − idle {s['idle_pct']:.2f} %)"
                + ("" if s["live_all_window"] else " [run ended inside the window]"),
                s["card_pct"] < 2.0,
            )
        )
        rows.append(
            (
                "live run card, update_display_data",
                "≤ 2 /s",
                f"{s['updates']} in {s['window_s']:.0f} s = {s['rate']:.2f} /s (most in 1 s: {s['max_per_s']})",
                s["max_per_s"] <= 2,
            )
        )
    if "train" in results:
        s = results["train"]
        if "cold" in s:
            c = s["cold"]
            rows.append(
                (
                    "`%%ddp train` cell → first step, cold build cache",
                    "(recorded)",
                    f"{c['first_step_s']:.1f} s (build {c['build_s']:.1f} s)",
                    True,
                )
            )
        rows.append(
            (
                f"`%%ddp train` cell → first step, warm cache ({s['n']} cells)",
                "< 30 s",
                f"median {s['warm_median']:.2f} s, max {s['warm_max']:.2f} s (build median {s['warm_build_median']:.2f} s)",
                s["warm_max"] < 30,
            )
        )
    print()
    print(f"ddp-kernel: {exe} ({which}), {os.cpu_count()} CPUs")
    w = [max(len(r[i]) for r in rows + [("figure", "target", "measured", True)]) for i in range(3)]
    print(f"{'figure':<{w[0]}}  {'target':<{w[1]}}  {'measured':<{w[2]}}  ok")
    print(f"{'-' * w[0]}  {'-' * w[1]}  {'-' * w[2]}  --")
    for fig, target, measured, ok in rows:
        print(f"{fig:<{w[0]}}  {target:<{w[1]}}  {measured:<{w[2]}}  {'yes' if ok else 'NO'}")
    return all(r[3] for r in rows)


if __name__ == "__main__":
    sys.exit(main())

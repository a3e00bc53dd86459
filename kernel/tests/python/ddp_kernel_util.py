"""Shared helpers of the kernel's Jupyter tests (kernel/tests/jupyter.rs runs the test_*.py scripts).

The environment is set by jupyter.rs: JUPYTER_PATH finds the `ddp` kernelspec it installed,
DDP_WORKSPACE is a fresh workspace, DDP_REPO is the repository root.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from queue import Empty
from typing import Any, Callable, Iterable

from jupyter_client.manager import KernelManager

KERNEL_NAME = "ddp"

#: A line showing the test accuracy: "test accuracy 96.90%", "test  loss 0.0812  accuracy 97.10%".
TEST_ACCURACY = re.compile(r"\btest\b[^\n]*?\bacc[^\n]*?\d+(\.\d+)?\s*%", re.IGNORECASE)

TERMINAL = ("completed", "failed", "stopped")

#: Timeouts of a `%%ddp train` cell: a cold build cache compiles candle and ddp-trainer in
#: release mode (minutes on 2 cores), then the run trains.
BUILD_TIMEOUT = 1500
TRAINING_TIMEOUT = 300

#: A `%%ddp train` cell's model: an MLP on 28×28 images, `pub fn model` for ddp_trainer::Trainer.
MODEL = """use candle_core::{Result, Tensor};
use candle_nn::{Linear, Module, VarBuilder};

pub struct Mlp {
    fc1: Linear,
    fc2: Linear,
}

pub fn model(vb: VarBuilder) -> Result<Mlp> {
    Ok(Mlp {
        fc1: candle_nn::linear(28 * 28, 64, vb.pp("fc1"))?,
        fc2: candle_nn::linear(64, 10, vb.pp("fc2"))?,
    })
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.flatten_from(1)?.apply(&self.fc1)?.relu()?.apply(&self.fc2)
    }
}
"""


def repo() -> Path:
    return Path(os.environ.get("DDP_REPO") or Path(__file__).resolve().parents[3])


def workspace() -> Path:
    ws = os.environ.get("DDP_WORKSPACE")
    if not ws:
        raise SystemExit("DDP_WORKSPACE is not set (kernel/tests/jupyter.rs sets it)")
    return Path(ws)


def mnist_spec() -> Path:
    return repo() / "examples" / "mnist.toml"


def mnist_data() -> Path:
    return repo() / "examples" / "data" / "mnist-sample"


# ---------------------------------------------------------------------------------------------
# Runs on disk


def runs() -> list[dict[str, Any]]:
    """Every run.json of the workspace, each with `_dir` (its folder), oldest first."""
    out = []
    for path in sorted(workspace().glob("experiments/*/runs/*/run.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being replaced right now: rewritten atomically, so only a race with creation
        record["_dir"] = str(path.parent)
        out.append(record)
    out.sort(key=lambda r: (r.get("created") or 0, r.get("id") or ""))
    return out


def run_named(name: str) -> dict[str, Any]:
    found = [r for r in runs() if r.get("name") == name]
    if len(found) != 1:
        raise AssertionError(
            f"expected exactly one run named {name!r} in {workspace()}, found {len(found)}: "
            + ", ".join(f"{r.get('id')} ({r.get('name')}, {r.get('status')})" for r in runs())
        )
    return found[0]


def wait_run(name: str, statuses: Iterable[str], timeout: float) -> dict[str, Any]:
    """Polls run.json until the run named `name` has one of `statuses`."""
    statuses = tuple(statuses)
    deadline = time.monotonic() + timeout
    while True:
        run = run_named(name)
        if run.get("status") in statuses:
            return run
        if time.monotonic() > deadline:
            raise AssertionError(
                f"run {name!r} ({run.get('id')}) is {run.get('status')!r} after {timeout:.0f} s, "
                f"expected one of {statuses}; run.json: {json.dumps(run)}"
            )
        time.sleep(0.5)


# ---------------------------------------------------------------------------------------------
# Messages


def parent_id(msg: dict[str, Any]) -> str | None:
    return (msg.get("parent_header") or {}).get("msg_id")


def display_id(msg: dict[str, Any]) -> str | None:
    return ((msg.get("content") or {}).get("transient") or {}).get("display_id")


def plain(msg: dict[str, Any]) -> str:
    """The readable text of one output message."""
    kind, content = msg["msg_type"], msg.get("content") or {}
    if kind == "stream":
        return content.get("text", "")
    if kind == "error":
        return "\n".join([f"{content.get('ename')}: {content.get('evalue')}"] + content.get("traceback", []))
    data = content.get("data") or {}
    if "text/plain" in data:
        return data["text/plain"]
    return " ".join(sorted(data))


def summary(msgs: Iterable[dict[str, Any]], limit: int = 60) -> str:
    lines = []
    for m in list(msgs)[-limit:]:
        c = m.get("content") or {}
        extra = c.get("execution_state") or ""
        if m["msg_type"] in ("stream", "error", "display_data", "update_display_data", "execute_result"):
            extra = plain(m)[:300].replace("\n", "\\n")
        lines.append(f"  {m['msg_type']:<20} parent={parent_id(m)} display_id={display_id(m)} {extra}")
    return "\n".join(lines)


def reply_error(reply: dict[str, Any]) -> str:
    c = reply["content"]
    return f"{c.get('ename')}: {c.get('evalue')}\n" + "\n".join(c.get("traceback") or [])


# ---------------------------------------------------------------------------------------------
# A kernel with every IOPub message kept


class Kernel:
    """A `ddp` kernel started by jupyter_client's KernelManager, with a blocking client.

    Every IOPub message read is kept in `self.iopub` (in order), so messages published after a
    cell's `idle` (run card updates) can be looked for later.
    """

    def __init__(self, cwd: str | os.PathLike[str] | None = None, startup_timeout: float = 120):
        self.km = KernelManager(kernel_name=KERNEL_NAME)
        kw: dict[str, Any] = {}
        if cwd is not None:
            kw["cwd"] = str(cwd)
        self.km.start_kernel(**kw)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=startup_timeout)
        self.iopub: list[dict[str, Any]] = []

    def close(self) -> None:
        try:
            self.kc.stop_channels()
        finally:
            self.km.shutdown_kernel(now=False)

    def stop_runs_and_close(self) -> None:
        """Stops the workspace's runs still going (`%ddp stop`), then shuts the kernel down."""
        try:
            for run in runs():
                if run.get("status") not in TERMINAL:
                    self.execute(f"%ddp stop {run['id']}", timeout=180)
        finally:
            self.close()

    def restart(self, startup_timeout: float = 120) -> None:
        self.km.restart_kernel(now=False)
        self.kc.wait_for_ready(timeout=startup_timeout)

    # IOPub -------------------------------------------------------------------------------------

    def pump(self, timeout: float) -> dict[str, Any] | None:
        """Reads one IOPub message (waiting up to `timeout` s), keeps and returns it."""
        try:
            msg = self.kc.get_iopub_msg(timeout=max(timeout, 0.001))
        except Empty:
            return None
        self.iopub.append(msg)
        return msg

    def wait_iopub(
        self, pred: Callable[[dict[str, Any]], bool], timeout: float, what: str, since: int = 0
    ) -> dict[str, Any]:
        """The first kept or newly read IOPub message from index `since` on that satisfies `pred`."""
        for msg in self.iopub[since:]:
            if pred(msg):
                return msg
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"no {what} on IOPub within {timeout:.0f} s; last messages:\n{summary(self.iopub[since:])}"
                )
            msg = self.pump(min(left, 1.0))
            if msg is not None and pred(msg):
                return msg

    def outputs(self, msg_id: str) -> list[dict[str, Any]]:
        """The output messages (not status, not execute_input) parented to `msg_id` so far."""
        return [
            m
            for m in self.iopub
            if parent_id(m) == msg_id and m["msg_type"] not in ("status", "execute_input")
        ]

    # Shell -------------------------------------------------------------------------------------

    def send(self, code: str, **kw: Any) -> str:
        return self.kc.execute(code, allow_stdin=False, **kw)

    def reply(self, msg_id: str, timeout: float, what: str | None = None) -> dict[str, Any]:
        """The shell reply to `msg_id` (other replies are dropped); reads IOPub meanwhile."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"no reply to {what or msg_id} within {timeout:.0f} s; IOPub so far:\n"
                    f"{summary(m for m in self.iopub if parent_id(m) == msg_id)}"
                )
            try:
                msg = self.kc.get_shell_msg(timeout=min(left, 0.2))
            except Empty:
                while self.pump(0.001) is not None:
                    pass
                continue
            if parent_id(msg) == msg_id:
                return msg

    def wait_idle(self, msg_id: str, timeout: float = 30) -> None:
        self.wait_iopub(
            lambda m: m["msg_type"] == "status"
            and parent_id(m) == msg_id
            and m["content"].get("execution_state") == "idle",
            timeout,
            f"idle status for {msg_id}",
        )

    def execute(self, code: str, timeout: float = 120, **kw: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Runs one cell: its execute_reply and its outputs (up to its `idle`)."""
        msg_id = self.send(code, **kw)
        reply = self.reply(msg_id, timeout, what=repr(code[:80]))
        self.wait_idle(msg_id)
        return reply, self.outputs(msg_id)

    def execute_ok(self, code: str, timeout: float = 120, **kw: Any) -> list[dict[str, Any]]:
        reply, outputs = self.execute(code, timeout, **kw)
        if reply["content"]["status"] != "ok":
            raise AssertionError(
                f"{code!r} replied {reply['content']['status']!r}:\n{reply_error(reply)}\n"
                f"outputs:\n{summary(outputs)}"
            )
        return outputs

    def execute_error(self, code: str, timeout: float = 120) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        reply, outputs = self.execute(code, timeout)
        if reply["content"]["status"] != "error":
            raise AssertionError(
                f"{code!r} replied {reply['content']['status']!r}, expected an error; outputs:\n{summary(outputs)}"
            )
        return reply, outputs

    # Run cards -----------------------------------------------------------------------------------

    def cards(self, ident: str) -> list[dict[str, Any]]:
        """Every display_data / update_display_data for display id `ident`, in order."""
        return [
            m
            for m in self.iopub
            if m["msg_type"] in ("display_data", "update_display_data") and display_id(m) == ident
        ]

    def wait_card(self, ident: str, pred: Callable[[str], bool], timeout: float, what: str) -> str:
        """Reads IOPub until the card `ident` (its latest version) satisfies `pred`; its text."""
        deadline = time.monotonic() + timeout
        while True:
            cards = self.cards(ident)
            if cards and pred(plain(cards[-1])):
                return plain(cards[-1])
            left = deadline - time.monotonic()
            if left <= 0:
                last = plain(cards[-1]) if cards else "(no card)"
                raise AssertionError(
                    f"card {ident} never showed {what} within {timeout:.0f} s; its last text:\n{last}\n"
                    f"workspace runs: {[(r.get('name'), r.get('status')) for r in runs()]}"
                )
            self.pump(min(left, 1.0))


def card_of(outputs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run card among a cell's outputs: a display_data with a transient display_id."""
    cards = [m for m in outputs if m["msg_type"] == "display_data" and display_id(m)]
    if not cards:
        raise AssertionError(f"no display_data with transient.display_id among the outputs:\n{summary(outputs)}")
    return cards[0]

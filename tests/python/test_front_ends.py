"""One run, three front ends, with real clients (run by tests/tests/front_ends.rs).

1. A notebook (jupyter_client, the `ddp` kernel) starts a run with `%ddp run`; its card is live.
2. `ddp ls --json` lists the run as running.
3. `ddp-tui`, in a real terminal (tmux), shows it live, then stops it (`s`, `y`).
4. The notebook's card ends as `stopped`.
5. `ddp resume` continues it; the kernel is killed meanwhile (SIGKILL); the run completes all the
   same, and `ddp ls --json` and the dashboard say so.
6. A `%%ddp train` cell defines a model that is not built in; it is built, trained with DDP on
   the embedded sample, and reaches >= 95 % test accuracy.
7. A run made by a `%%ddp train` cell is resumed by the CLI after the kernel is gone: its
   replicas run the trainer kept in the run folder (`code/target/release/ddp-cell`).

`SlurmRun` (run alone, with a Slurm cluster): the notebook submits a run to Slurm (`%ddp run
--on slurm --nodes 2`); its card and the dashboard show it live with its job id, Slurm state and
nodes; the dashboard stops it (the job is cancelled) and both say so.

Environment (set by front_ends.rs): DDP_WORKSPACE, DDP_REPO, DDP_BIN (the `ddp` CLI),
DDP_TUI_BIN (`ddp-tui`), and the Jupyter folders with the `ddp` kernelspec installed; for
`SlurmRun`, SLURM_CONF (the test cluster's) and DDP_SLURM_POLL_MAX_S.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kernel" / "tests" / "python"))

from ddp_kernel_util import (  # noqa: E402
    TERMINAL,
    TEST_ACCURACY,
    Kernel,
    card_of,
    display_id,
    mnist_spec,
    plain,
    reply_error,
    repo,
    run_named,
    runs,
    wait_run,
    workspace,
)

WAIT = 120  # the longest wait for one thing to show up in a front end
TRAINING_TIMEOUT = 600
BUILD_TIMEOUT = 1500  # a cold build cache compiles candle in release mode

# The example's model (examples/custom-model/src/main.rs), as a notebook user writes it in a cell.
CUSTOM_MODEL = """use candle_core::{Result, Tensor};
use candle_nn::{Conv2d, Conv2dConfig, Linear, Module, VarBuilder};

/// Conv(1->8, 5x5, stride 2) -> GELU -> Linear(8*12*12->64) -> GELU -> Linear(64->10).
pub struct Net {
    conv: Conv2d,
    fc1: Linear,
    fc2: Linear,
}

pub fn model(vb: VarBuilder) -> Result<Net> {
    let cfg = Conv2dConfig { stride: 2, ..Default::default() };
    Ok(Net {
        conv: candle_nn::conv2d(1, 8, 5, cfg, vb.pp("conv"))?,
        fc1: candle_nn::linear(8 * 12 * 12, 64, vb.pp("fc1"))?,
        fc2: candle_nn::linear(64, 10, vb.pp("fc2"))?,
    })
}

impl Module for Net {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.apply(&self.conv)?.gelu()?.flatten_from(1)?.apply(&self.fc1)?.gelu()?.apply(&self.fc2)
    }
}
"""


def ddp(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The `ddp` CLI on the test's workspace; fails the test on a non-zero exit."""
    cmd = [os.environ["DDP_BIN"], "--workspace", str(workspace()), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=repo())
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def listed(run_id: str) -> dict[str, Any]:
    """The run as `ddp ls --json` lists it (one JSON object per line)."""
    data = [json.loads(line) for line in ddp("ls", "--json").stdout.splitlines() if line.strip()]
    mine = [r for r in data if r.get("id") == run_id]
    if len(mine) != 1:
        raise AssertionError(f"`ddp ls --json` does not list {run_id} once: {json.dumps(data)[:2000]}")
    return mine[0]


def header_step(screen: str) -> int | None:
    """The step in the run view's header while running (`running    epoch 1/4  step 22  ...`)."""
    m = re.search(r"(?m)^running\s+epoch \S+\s+step (\d+)", screen)
    return int(m.group(1)) if m else None


def header_says(screen: str, status: str) -> bool:
    """Whether the run view's header line starts with `status` (`stopped    epoch ...`)."""
    return any(line.startswith(f"{status} ") for line in screen.splitlines())


class Tmux:
    """`ddp-tui` in a real terminal: a detached tmux session on its own server socket."""

    def __init__(self, command: list[str], width: int = 120, height: int = 36) -> None:
        if shutil.which("tmux") is None:
            raise AssertionError("tmux is needed (the README's test command installs it)")
        self.socket = f"ddp-e2e-{os.getpid()}"
        passed = ("PATH", "HOME", "DDP_WORKSPACE", "SLURM_CONF", "DDP_SLURM_POLL_MAX_S")
        env = {k: os.environ[k] for k in passed if k in os.environ}
        env.update({"TERM": "xterm-256color", "NO_COLOR": "1", "EDITOR": "true"})
        args = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *command]
        self.tmux("new-session", "-d", "-s", "tui", "-x", str(width), "-y", str(height), *args)

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)}: {done.stderr}")
        return done.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "tui")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "tui", *keys)

    def wait_for(self, what: str, ok: Callable[[str], bool], timeout: float = WAIT) -> str:
        deadline = time.monotonic() + timeout
        while True:
            s = self.screen()
            if ok(s):
                return s
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {timeout:.0f} s for {what} in ddp-tui; the screen:\n{s}")
            time.sleep(0.1)

    def stop_run(self, run_id: str) -> None:
        """Stops the run open in the run view: `s`, then `y` to the question."""
        self.keys("s")
        self.wait_for("the stop question", lambda s: f"Stop run {run_id}" in s)
        self.keys("y")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)


class Notebook(unittest.TestCase):
    """A kernel for the test (killed or closed at the end), the dashboard once started, and every
    run left live stopped."""

    def setUp(self) -> None:
        self.notebook_dir = Path(tempfile.mkdtemp(prefix="notebook-", dir=os.getcwd()))
        self.kernel = Kernel(cwd=self.notebook_dir)
        self.kernel_alive = True
        self.tui: Tmux | None = None

    def tearDown(self) -> None:
        try:
            if self.tui is not None:
                self.tui.close()
            for run in runs():
                if run.get("status") not in TERMINAL:
                    subprocess.run(
                        [os.environ["DDP_BIN"], "--workspace", str(workspace()), "stop", run["id"]],
                        capture_output=True,
                        timeout=180,
                    )
        finally:
            if self.kernel_alive:
                self.kernel.close()


class FrontEnds(Notebook):

    def test_one_run_three_front_ends(self) -> None:
        k = self.kernel
        # 1. The notebook starts the run; its card is live.
        outputs = k.execute_ok(
            f"%ddp run {mnist_spec()} --set train.epochs=4 --set ddp.replicas=2 --name e2e", timeout=60
        )
        ident = display_id(card_of(outputs))
        run = wait_run("e2e", ["running"], WAIT)
        run_id, run_dir = run["id"], Path(run["_dir"])

        # 2. The CLI lists it as running.
        self.assertEqual(listed(run_id)["status"], "running")

        # 3. The dashboard shows it live, then stops it.
        self.tui = Tmux([os.environ["DDP_TUI_BIN"], "--workspace", str(workspace())])
        self.tui.wait_for(
            "the notebook's run, running", lambda s: run_id[9:] in s and "running" in s and "1 live" in s
        )
        self.tui.keys("Enter")
        # Live: the step in the run view's header moves on while the run trains.
        screen = self.tui.wait_for("the run view, running", lambda s: run_id in s and header_step(s) is not None)
        first = header_step(screen)
        self.tui.wait_for(f"the header's step to pass {first}", lambda s: (header_step(s) or 0) > first)
        self.tui.stop_run(run_id)
        self.assertEqual(wait_run("e2e", TERMINAL, WAIT)["status"], "stopped")
        self.tui.wait_for("the header saying stopped", lambda s: header_says(s, "stopped"))

        # 4. The notebook's card ends as stopped.
        text = k.wait_card(ident, lambda t: "stopped" in t, WAIT, "'stopped'")
        self.assertNotIn("completed", text)

        # 5. `ddp resume` continues it; killing the kernel meanwhile changes nothing for the run.
        ddp("resume", run_id, "--detach")
        wait_run("e2e", ["running"], WAIT)
        kernel = k.km.provisioner.process
        os.kill(kernel.pid, signal.SIGKILL)
        kernel.wait(timeout=30)
        self.kernel_alive = False
        k.kc.stop_channels()
        self.assertEqual(wait_run("e2e", TERMINAL, TRAINING_TIMEOUT)["status"], "completed")
        self.assertEqual(listed(run_id)["status"], "completed")
        self.tui.wait_for("the header saying completed", lambda s: header_says(s, "completed"))
        events = [json.loads(l)["event"] for l in (run_dir / "events.jsonl").read_text().splitlines()]
        self.assertEqual(events, ["started", "stopped", "started", "completed"], events)

    def test_a_notebook_cell_trains_a_custom_model(self) -> None:
        spec = repo() / "examples" / "custom-model" / "custom.toml"
        reply, outputs = self.kernel.execute(
            f"%%ddp train {spec} --name custom-cell --wait\n{CUSTOM_MODEL}", timeout=BUILD_TIMEOUT + TRAINING_TIMEOUT
        )
        status = reply["content"]["status"]
        self.assertEqual(status, "ok", reply_error(reply) if status != "ok" else "")
        card = plain(self.kernel.cards(display_id(card_of(outputs)))[-1])
        self.assertIn("completed", card)
        self.assertRegex(card, TEST_ACCURACY)
        run = wait_run("custom-cell", TERMINAL, 30)
        self.assertEqual(run["status"], "completed")
        shown = json.loads(ddp("show", run["id"], "--json").stdout)
        accuracy = test_accuracy(shown)
        self.assertGreaterEqual(accuracy, 0.95, f"test accuracy {accuracy:.4f}: {json.dumps(shown)[:2000]}")
        print(f"custom model from a notebook cell: test accuracy {accuracy:.4f}", file=sys.stderr)

    def test_a_cells_run_resumes_after_the_kernel_is_gone(self) -> None:
        k = self.kernel
        model = CUSTOM_MODEL.replace("64", "48")
        k.execute_ok(
            f"%%ddp train {mnist_spec()} --set train.epochs=30 --set ddp.replicas=2 --name cell-resume\n{model}",
            timeout=BUILD_TIMEOUT,
        )
        run = wait_run("cell-resume", ["running"], WAIT)
        trainer = Path(run["_dir"]) / "code" / "target" / "release" / "ddp-cell"
        self.assertEqual(run.get("trainer"), str(trainer))
        kernel = k.km.provisioner.process
        os.kill(kernel.pid, signal.SIGKILL)
        kernel.wait(timeout=30)
        self.kernel_alive = False
        k.kc.stop_channels()

        ddp("stop", run["id"], timeout=180)
        self.assertEqual(wait_run("cell-resume", TERMINAL, 30)["status"], "stopped")
        self.assertIn(str(trainer), ddp("show", run["id"]).stdout)
        ddp("resume", run["id"], "--detach")
        wait_run("cell-resume", ["running"], WAIT)
        deadline = time.monotonic() + WAIT
        while True:
            resumed = run_named("cell-resume")
            pids = list((resumed.get("replica_pids") or {}).values())
            exes = set()
            for pid in pids:
                try:
                    exes.add(os.readlink(f"/proc/{pid}/exe"))
                except OSError:
                    pass
            if len(pids) == 2 and len(exes) > 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(exes, {str(trainer)}, f"the resumed replicas' executables: {json.dumps(resumed)}")
        ddp("stop", run["id"], timeout=180)
        self.assertEqual(wait_run("cell-resume", TERMINAL, 30)["status"], "stopped")


class SlurmRun(Notebook):
    def test_a_slurm_run_live_in_the_notebook_and_the_dashboard(self) -> None:
        if "SLURM_CONF" not in os.environ:
            raise AssertionError("SlurmRun needs SLURM_CONF: front_ends.rs sets it to the test cluster's")
        k = self.kernel
        # 1. The notebook submits the run; its card follows the job.
        outputs = k.execute_ok(
            f"%ddp run {mnist_spec()} --on slurm --nodes 2 --time 10 "
            "--set train.epochs=100 --set ddp.replicas=2 --name on-slurm",
            timeout=60,
        )
        ident = display_id(card_of(outputs))
        run = wait_run("on-slurm", ["queued", "running"], WAIT)
        run_id, job = run["id"], run["slurm"]["job_id"]
        running = f"job {job} RUNNING on ddp-n[1-2]"
        k.wait_card(ident, lambda t: "running" in t and running in t, WAIT, f"'running' and '{running}'")
        # the CLI lists it with its job
        self.assertEqual(listed(run_id)["slurm"]["job_id"], job)
        self.assertIn(f"running (slurm {job})", ddp("ls").stdout)

        # 2. The dashboard lists it as a Slurm run (wide enough for the replicas column) and shows
        # the job in the run view, live.
        self.tui = Tmux([os.environ["DDP_TUI_BIN"], "--workspace", str(workspace())], width=200)
        self.tui.wait_for(
            "the Slurm run in the list", lambda s: run_id[9:] in s and "2× slurm" in s and "1 live" in s
        )
        self.tui.keys("Enter")
        screen = self.tui.wait_for(
            "the run view with the job, running",
            lambda s: run_id in s and running in s and header_step(s) is not None,
        )
        first = header_step(screen)
        self.tui.wait_for(f"the header's step to pass {first}", lambda s: (header_step(s) or 0) > first)

        # 3. The dashboard stops it: the job is cancelled, and the card and the view say so.
        self.tui.stop_run(run_id)
        stopped = wait_run("on-slurm", TERMINAL, WAIT)
        self.assertEqual(stopped["status"], "stopped", json.dumps(stopped))
        self.assertEqual(stopped["slurm"]["state"], "CANCELLED", json.dumps(stopped))
        cancelled = f"job {job} CANCELLED"
        self.tui.wait_for(
            f"the header saying stopped and '{cancelled}'",
            lambda s: cancelled in s and header_says(s, "stopped"),
        )
        text = k.wait_card(ident, lambda t: "stopped" in t and cancelled in t, WAIT, f"'stopped' and '{cancelled}'")
        self.assertNotIn("completed", text)


def test_accuracy(shown: dict[str, Any]) -> float:
    """The final test accuracy (a fraction) in `ddp show --json`."""
    value = (shown.get("summary") or {}).get("test_accuracy")
    if not isinstance(value, (int, float)):
        raise AssertionError(f"no summary.test_accuracy in `ddp show --json`: {json.dumps(shown)[:2000]}")
    return float(value)


if __name__ == "__main__":
    unittest.main(verbosity=2)

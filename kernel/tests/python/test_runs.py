"""Training runs from the `ddp` kernel, through a real Jupyter client (jupyter_client).

- `%ddp run` returns at once and publishes a run card (display_data with a transient display_id)
  that update_display_data messages keep current until the run completes;
- `%ddp wait latest` returns when the run is over; interrupting it stops only the waiting (an ok
  reply and a notice on stdout);
  `%ddp stop latest` stops the run;
- interrupting a running Rust cell gives an error reply and the kernel keeps working;
- a kernel restart leaves runs alone (`%ddp ls --json` still lists them, they complete);
- errors (unknown subcommand, unknown run, unknown spec key) are error replies naming the culprit;
  a missing spec file's names the notebook's folder and the path that exists;
- `%%ddp run --wait` trains an inline spec whose data path is relative to the notebook folder
  (the kernel's working directory);
- `%ddp sweep ... --scheduler asha` returns at once with a live sweep card (status, rungs,
  leaderboard, parallel coordinates) kept current until the search completes.

Run by kernel/tests/jupyter.rs (DDP_WORKSPACE is a fresh workspace); exits non-zero on failure.
The methods run in name order and share one kernel, whose working directory is a scratch
"notebook folder".
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import unittest
from pathlib import Path
from queue import Empty

from ddp_kernel_util import (
    TERMINAL,
    TEST_ACCURACY,
    Kernel,
    card_of,
    display_id,
    mnist_data,
    mnist_spec,
    parent_id,
    plain,
    reply_error,
    run_named,
    runs,
    summary,
    wait_run,
)

# Short trainings: one 2-replica epoch of the 8,000-digit sample takes a few seconds on 2 cores.
SHORT = "--set ddp.replicas=2"
TRAINING_TIMEOUT = 300  # longest wait for a short run to complete (slow CI machines)


def final(card_text: str) -> bool:
    """Whether a run card shows the completed run with its test accuracy."""
    return "completed" in card_text and TEST_ACCURACY.search(card_text) is not None


class RunTests(unittest.TestCase):
    kernel: Kernel
    notebook_dir: Path

    @classmethod
    def setUpClass(cls) -> None:
        cls.notebook_dir = Path(tempfile.mkdtemp(prefix="notebook-", dir=os.getcwd()))
        # the inline spec's data path is relative to this folder, and only resolves from it
        (cls.notebook_dir / "mnist-sample").symlink_to(mnist_data(), target_is_directory=True)
        cls.kernel = Kernel(cwd=cls.notebook_dir)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.kernel.stop_runs_and_close()

    @property
    def k(self) -> Kernel:
        return self.kernel

    def spec(self) -> str:
        return str(mnist_spec())

    # (a) -----------------------------------------------------------------------------------------

    def test_1_run_publishes_a_live_card(self) -> None:
        started = time.monotonic()
        outputs = self.k.execute_ok(f"%ddp run {self.spec()} --set train.epochs=2 {SHORT} --name nb", timeout=60)
        took = time.monotonic() - started
        self.assertLess(took, 30, "%ddp run without --wait should return once the run is started")
        card = card_of(outputs)
        ident = display_id(card)
        self.assertIn("text/plain", card["content"]["data"])

        text = self.k.wait_card(ident, final, TRAINING_TIMEOUT, "'completed' and the test accuracy")
        cards = self.k.cards(ident)
        updates = [m for m in cards if m["msg_type"] == "update_display_data"]
        # updates while training, then the final card
        self.assertGreaterEqual(len(updates), 2, f"update_display_data for {ident}:\n{summary(cards)}")
        progress = [m for m in updates if not final(plain(m))]
        self.assertTrue(progress, f"no update while training (only the final card):\n{summary(cards)}")
        for m in updates:
            self.assertIn("text/plain", m["content"]["data"])
        self.assertIn("completed", text)
        self.assertEqual(wait_run("nb", TERMINAL, 30)["status"], "completed")

    # (b) -----------------------------------------------------------------------------------------

    def test_2_wait_latest_returns_when_the_run_is_over(self) -> None:
        self.k.execute_ok(f"%ddp run {self.spec()} --set train.epochs=1 {SHORT} --name wait", timeout=60)
        self.k.execute_ok("%ddp wait latest", timeout=TRAINING_TIMEOUT)
        run = run_named("wait")
        self.assertEqual(run["status"], "completed", "%ddp wait returned before the run was over")

    # (c) -----------------------------------------------------------------------------------------

    def test_3_interrupting_wait_leaves_the_run_running(self) -> None:
        self.k.execute_ok(f"%ddp run {self.spec()} --set train.epochs=20 {SHORT} --name long", timeout=60)
        wait_run("long", ["running"], 120)
        msg_id = self.k.send("%ddp wait latest\n%ddp ls")
        self.k.wait_iopub(
            lambda m: m["msg_type"] == "status" and parent_id(m) == msg_id and m["content"]["execution_state"] == "busy",
            30,
            "busy for %ddp wait",
        )
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                early = self.k.kc.get_shell_msg(timeout=0.1)
            except Empty:
                continue
            if parent_id(early) == msg_id:
                self.fail(f"%ddp wait returned before the interrupt: {early['content']}")

        self.k.km.interrupt_kernel()
        reply = self.k.reply(msg_id, 30, what="%ddp wait after interrupt_request")
        # stopping the wait is what the interrupt asks for: a notice on stdout, not an error
        self.assertEqual(reply["content"]["status"], "ok", reply_error(reply) if reply["content"]["status"] == "error" else "")
        self.k.wait_idle(msg_id)
        run_id = run_named("long")["id"]
        notices = [
            (o["content"].get("name", "error"), o["content"].get("text", o["content"].get("evalue")))
            for o in self.k.outputs(msg_id)
            if o["msg_type"] in ("stream", "error")
        ]
        self.assertEqual(
            notices,
            [
                (
                    "stdout",
                    f"stopped waiting for run {run_id}; the run goes on "
                    f"(its card keeps updating; `%ddp stop {run_id}` stops it)\n",
                ),
                ("stdout", "interrupted: the rest of the cell was not run\n"),
            ],
        )
        self.assertEqual(run_named("long")["status"], "running", "interrupting %ddp wait must not stop the run")

        self.k.execute_ok("%ddp stop latest", timeout=180)
        self.assertEqual(wait_run("long", TERMINAL, 30)["status"], "stopped")

    # interrupting Rust code ----------------------------------------------------------------------

    def test_4_interrupting_a_rust_cell(self) -> None:
        self.k.execute_ok("let before = 1;", timeout=300)
        msg_id = self.k.send('println!("sleeping"); std::thread::sleep(std::time::Duration::from_secs(300));')
        self.k.wait_iopub(
            lambda m: m["msg_type"] == "stream" and parent_id(m) == msg_id and "sleeping" in m["content"]["text"],
            120,
            "the cell's 'sleeping'",
        )
        self.k.km.interrupt_kernel()
        reply = self.k.reply(msg_id, 30, what="the sleeping cell after interrupt_request")
        self.assertEqual(reply["content"]["status"], "error")
        self.k.wait_idle(msg_id)
        reply, outputs = self.k.execute("40 + 2", timeout=120)
        self.assertEqual(reply["content"]["status"], "ok", reply_error(reply) if reply["content"]["status"] == "error" else "")
        results = [o["content"]["data"].get("text/plain") for o in outputs if o["msg_type"] == "execute_result"]
        self.assertEqual(results, ["42"])

    # (d) -----------------------------------------------------------------------------------------

    def test_5_restart_keeps_runs(self) -> None:
        self.k.execute_ok(f"%ddp run {self.spec()} --set train.epochs=2 {SHORT} --name restart", timeout=60)
        run_id = wait_run("restart", ["running"], 120)["id"]
        self.k.restart()

        outputs = self.k.execute_ok("%ddp ls --json", timeout=60)
        listed = [o["content"]["data"]["application/json"] for o in outputs if "application/json" in (o["content"].get("data") or {})]
        self.assertEqual(len(listed), 1, f"one application/json output expected:\n{summary(outputs)}")
        data = listed[0]
        if isinstance(data, dict) and "runs" in data:
            data = data["runs"]
        self.assertIsInstance(data, list, f"%ddp ls --json: {json.dumps(listed[0])[:2000]}")
        mine = [r for r in data if r.get("id") == run_id]
        self.assertEqual(len(mine), 1, f"run {run_id} is not listed after the restart: {json.dumps(data)[:2000]}")
        self.assertEqual(mine[0].get("name"), "restart")
        self.assertIn(mine[0].get("status"), ("running", "completed"))
        self.assertEqual(wait_run("restart", TERMINAL, TRAINING_TIMEOUT)["status"], "completed")

    # (e) -----------------------------------------------------------------------------------------

    def test_6_errors(self) -> None:
        cases = [
            ("%ddp nosuch", "nosuch"),
            ("%ddp show nosuchrun", "nosuchrun"),
            (f"%ddp run {self.spec()} --set train.nosuchkey=1", "nosuchkey"),
        ]
        before = len(runs())
        for code, needle in cases:
            with self.subTest(code=code):
                reply, outputs = self.k.execute_error(code, timeout=60)
                content = reply["content"]
                for key in ("ename", "evalue", "traceback"):
                    self.assertIn(key, content)
                self.assertIn(needle, content["evalue"], reply_error(reply))
                self.assertTrue([o for o in outputs if o["msg_type"] == "error"], f"no error output:\n{summary(outputs)}")
        self.assertEqual(len(runs()), before, "a refused spec must not create a run")

    def test_6_missing_spec_names_the_notebook_folder(self) -> None:
        # a spec beside the notebook's folder, typed as if from the folder above it
        specs = self.notebook_dir.parent / "specs"
        specs.mkdir(exist_ok=True)
        (specs / "hint.toml").write_text(mnist_spec().read_text())
        reply, _ = self.k.execute_error("%ddp run specs/hint.toml", timeout=60)
        self.assertEqual(
            reply["content"]["evalue"],
            f"specs/hint.toml: no such file (paths are relative to the notebook's folder, "
            f"{self.notebook_dir}); did you mean ../specs/hint.toml?",
        )

    # (f) -----------------------------------------------------------------------------------------

    def test_7_cell_magic_inline_spec(self) -> None:
        spec = "\n".join(
            [
                'name = "inline"',
                "",
                "[model]",
                'name = "mnist-cnn"',
                "",
                "[data]",
                'name = "mnist"',
                'path = "mnist-sample"   # relative to the notebook folder',
                "val_fraction = 0.1",
                "",
                "[train]",
                "epochs = 1",
                "batch_size = 32",
                'optimizer = "adam"',
                "lr = 0.001",
                'lr_scaling = "linear"',
                'scheduler = { kind = "step", step_size = 1, gamma = 0.7 }',
                "",
                "[ddp]",
                "replicas = 2",
            ]
        )
        msg_id = self.k.send(f"%%ddp run --wait --name inline\n{spec}\n")
        reply = self.k.reply(msg_id, TRAINING_TIMEOUT, what="%%ddp run --wait")
        self.assertEqual(reply["content"]["status"], "ok", reply_error(reply))
        self.k.wait_idle(msg_id)
        self.assertEqual(run_named("inline")["status"], "completed", "--wait returned before the run completed")
        card = card_of(self.k.outputs(msg_id))
        self.k.wait_card(display_id(card), final, 30, "'completed' and the test accuracy")

    # (g) -----------------------------------------------------------------------------------------

    def test_8_an_asha_sweep_shows_a_live_sweep_card(self) -> None:
        small = (
            "--replicas 1 --set data.limit_train=320 --set data.limit_test=64 --set data.val_fraction=0.2"
        )
        started = time.monotonic()
        outputs = self.k.execute_ok(
            f"%ddp sweep {self.spec()} {small} --param train.lr=loguniform:1e-4:3e-2 --trials 4 --seed 2 "
            "--scheduler asha --metric val_accuracy --max-budget 3 --max-parallel 2 --name nbsweep",
            timeout=60,
        )
        self.assertLess(time.monotonic() - started, 30, "%ddp sweep should return once the search is started")
        card = card_of(outputs)
        ident = display_id(card)
        self.assertTrue(ident.startswith("ddp-sweep-"), ident)
        text = self.k.wait_card(ident, lambda t: ": completed" in t, TRAINING_TIMEOUT, "the search completed")
        self.assertIn("rung 1 (1 epoch): 4 results", text)
        self.assertIn("leaderboard", text)
        cards = self.k.cards(ident)
        updates = [m for m in cards if m["msg_type"] == "update_display_data"]
        self.assertTrue(updates, f"no update of the sweep card:\n{summary(cards)}")
        html = cards[-1]["content"]["data"]["text/html"]
        self.assertIn("ddp-sweep-card", html)
        self.assertIn("data:image/svg+xml;base64,", html, "the parallel coordinates are missing")
        paused = [r for r in runs() if r.get("status") == "paused"]
        self.assertTrue(paused, "ASHA paused no trial")
        # `%ddp sweep show` shows the finished search's card at once.
        shown = card_of(self.k.execute_ok("%ddp sweep show nbsweep", timeout=60))
        self.assertIn(": completed", plain(shown))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])

"""`%%ddp train` cells through a real Jupyter client (jupyter_client).

- a cell that does not compile gets an `error` reply (CompileError) whose traceback names the
  cell's own line and column, and leaves no run and no staging folder;
- a cell without `fn model`, and a spec with an unknown key, are refused before any build;
- interrupting a long build stops cargo and rustc: an error reply, no run, nothing staged, and
  no compiler left running;
- a good cell streams the build, then shows the run card of `%ddp run` until the run completes;
  its crate (Cargo.toml, src/main.rs with the cell's lines, the built trainer) is in the run
  folder as `code/`, run.json names that trainer, and the trainer is a file of its own;
- a second cell reuses the compiled dependencies (only the cell's crate is compiled).

Run by kernel/tests/jupyter.rs (DDP_WORKSPACE is a fresh workspace; DDP_BUILD_CACHE is shared
between test runs so that candle is compiled once); exits non-zero on failure.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import unittest
from pathlib import Path

from ddp_kernel_util import (
    BUILD_TIMEOUT,
    MODEL,
    TERMINAL,
    TRAINING_TIMEOUT,
    TEST_ACCURACY,
    Kernel,
    card_of,
    display_id,
    mnist_spec,
    parent_id,
    plain,
    reply_error,
    runs,
    summary,
    wait_run,
    workspace,
)

SHORT = "--set train.epochs=1 --set ddp.replicas=2"

# A data set of the cell's own (a bright column at the class's position), a loss (cross-entropy
# written out) and a metric: the kernel hands each `pub fn` it finds to ddp_trainer::Trainer.
DATASET = """
use ddp_trainer::data::{Batch, Dataset, Split, TargetKind};

pub struct Columns(usize);

impl Dataset for Columns {
    fn len(&self) -> usize { self.0 }
    fn shape(&self) -> [usize; 3] { [1, 28, 28] }
    fn target(&self) -> TargetKind { TargetKind::Classes(10) }
    fn fill(&self, indices: &[usize], batch: &mut Batch) -> ddp_trainer::Result<()> {
        for &i in indices {
            let class = i % 10;
            batch.x.extend((0..28 * 28).map(|p| if p % 28 == class * 2 + (i / 10) % 2 { 1.0 } else { 0.0 }));
            batch.classes.push(class as u32);
        }
        Ok(())
    }
}

pub fn dataset(split: Split) -> ddp_trainer::Result<Columns> {
    Ok(Columns(if split == Split::Train { 1000 } else { 200 }))
}

pub fn loss(logits: &Tensor, classes: &Tensor) -> Result<Tensor> {
    let logp = candle_nn::ops::log_softmax(logits, 1)?;
    logp.gather(&classes.unsqueeze(1)?, 1)?.neg()?.mean_all()
}

pub fn metrics(logits: &Tensor, _classes: &Tensor) -> Result<Vec<(String, f64)>> {
    Ok(vec![("ones".to_string(), logits.dim(0)? as f64)])
}
"""


def staged() -> list[Path]:
    cells = workspace() / ".build" / "cells"
    return sorted(cells.iterdir()) if cells.is_dir() else []


def compilers_of(path: Path) -> list[str]:
    """Command lines of running cargo/rustc processes that mention `path`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in cmd and ("rustc" in cmd or "cargo" in cmd):
            found.append(f"{proc.name}: {cmd[:300]}")
    return found


class TrainTests(unittest.TestCase):
    kernel: Kernel

    @classmethod
    def setUpClass(cls) -> None:
        cls.kernel = Kernel()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.kernel.stop_runs_and_close()

    @property
    def k(self) -> Kernel:
        return self.kernel

    def test_1_refused_before_building(self) -> None:
        cases = [
            (f"%%ddp train {mnist_spec()}\nuse candle_core::Tensor;\n", "pub fn model(vb: VarBuilder)"),
            (f"%%ddp train {mnist_spec()} --set train.nosuchkey=1\n{MODEL}", "nosuchkey"),
            (f"%%ddp train /nonexistent/spec.toml\n{MODEL}", "/nonexistent/spec.toml"),
        ]
        for code, needle in cases:
            with self.subTest(needle=needle):
                reply, outputs = self.k.execute_error(code, timeout=60)
                self.assertIn(needle, reply["content"]["evalue"], reply_error(reply))
                built = [o for o in outputs if o["msg_type"] == "stream" and "Compiling" in plain(o)]
                self.assertEqual(built, [], "nothing is built for a refused cell")
        self.assertEqual(runs(), [])
        self.assertEqual(staged(), [])

    def test_2_compile_errors_carry_the_cells_line_numbers(self) -> None:
        # Two blank lines above the magic: the body starts on line 4; the typo is on line 8.
        body = MODEL.replace("x.flatten_from(1)?", "y.flatten_from(1)?")
        line = 3 + body.splitlines().index(next(l for l in body.splitlines() if "y.flatten_from" in l)) + 1
        column = body.splitlines()[line - 4].index("y.flatten_from") + 1
        code = f"\n\n%%ddp train {mnist_spec()} {SHORT}\n{body}"
        reply, outputs = self.k.execute_error(code, timeout=BUILD_TIMEOUT)
        content = reply["content"]
        self.assertEqual(content["ename"], "CompileError", reply_error(reply))
        self.assertIn("1 error", content["evalue"])
        trace = "\n".join(content["traceback"])
        self.assertIn(f"--> cell:{line}:{column}", trace, reply_error(reply))
        self.assertIn("cannot find value `y`", trace)
        self.assertNotIn("src/main.rs", trace)
        self.assertTrue([o for o in outputs if o["msg_type"] == "error"], summary(outputs))
        progress = "".join(plain(o) for o in outputs if o["msg_type"] == "stream")
        self.assertIn("Compiling ddp-cell", progress)
        self.assertEqual(runs(), [], "a cell that does not compile creates no run")
        self.assertEqual(staged(), [], "nothing stays staged after a failed build")

    def test_3_interrupting_a_build(self) -> None:
        # Constant evaluation that takes far longer than the test: the build only ends if stopped.
        slow = (
            "#![allow(long_running_const_eval)]\n"
            "const SLOW: u64 = { let mut i = 0u64; let mut a = 0u64; "
            "while i < 1_000_000_000_000 { a = a.wrapping_add(i); i += 1; } a };\n"
            "pub fn model(vb: candle_nn::VarBuilder) -> candle_core::Result<candle_nn::Linear> {\n"
            "    let _ = SLOW;\n    candle_nn::linear(28 * 28, 10, vb.pp(\"fc\"))\n}\n"
        )
        msg_id = self.k.send(f"%%ddp train {mnist_spec()} {SHORT}\n{slow}")
        self.k.wait_iopub(
            lambda m: m["msg_type"] == "stream" and parent_id(m) == msg_id and "Compiling ddp-cell" in plain(m),
            BUILD_TIMEOUT,
            "the cell's crate compiling",
        )
        stage = staged()
        self.assertEqual(len(stage), 1, stage)
        time.sleep(2)
        self.k.km.interrupt_kernel()
        reply = self.k.reply(msg_id, 60, what="the build after interrupt_request")
        self.assertEqual(reply["content"]["status"], "error")
        self.assertIn("interrupted", reply["content"]["evalue"], reply_error(reply))
        self.k.wait_idle(msg_id)
        self.assertEqual(compilers_of(stage[0]), [], "cargo and rustc stop with the build")
        self.assertEqual(runs(), [])
        self.assertEqual(staged(), [])

    def test_4_a_cell_trains_with_ddp(self) -> None:
        started = time.monotonic()
        reply, outputs = self.k.execute(
            f"%%ddp train {mnist_spec()} {SHORT} --name cell --wait\n{MODEL}", timeout=BUILD_TIMEOUT + TRAINING_TIMEOUT
        )
        self.assertEqual(reply["content"]["status"], "ok", reply_error(reply) if reply["content"]["status"] != "ok" else "")
        took = time.monotonic() - started
        progress = "".join(plain(o) for o in outputs if o["msg_type"] == "stream")
        self.assertIn("Compiling ddp-cell", progress)
        self.assertRegex(progress, r"built in \d+\.\d s")
        card = card_of(outputs)
        text = plain(self.k.cards(display_id(card))[-1])
        self.assertIn("completed", text)
        self.assertRegex(text, TEST_ACCURACY)

        run = wait_run("cell", TERMINAL, 30)
        self.assertEqual(run["status"], "completed")
        code = Path(run["_dir"]) / "code"
        trainer = code / "target" / "release" / "ddp-cell"
        self.assertEqual(run.get("trainer"), str(trainer), json.dumps(run))
        self.assertEqual(os.stat(trainer).st_nlink, 1, "the run's trainer is a file of its own")
        main_rs = (code / "src" / "main.rs").read_text()
        self.assertTrue(main_rs.startswith("// %%ddp train "), main_rs[:200])
        self.assertEqual(main_rs.splitlines()[1:1 + len(MODEL.splitlines())], MODEL.splitlines())
        self.assertIn("ddp_trainer::Trainer::new()\n        .model(model)\n        .main()", main_rs)
        self.assertTrue((code / "Cargo.toml").is_file())
        spec = (Path(run["_dir"]) / "spec.toml").read_text()
        self.assertRegex(spec, r'(?m)^name = "custom"$')
        self.assertEqual(staged(), [])
        # The trainer is a ddp-trainer: the same command line.
        help_text = subprocess.run([str(trainer), "--help"], capture_output=True, text=True, timeout=60).stdout
        self.assertIn("Usage: ddp-cell", help_text)
        self.assertIn("--standalone", help_text)
        print(f"cell to completed run (build included): {took:.1f} s", file=sys.stderr)

    def test_5_a_second_cell_with_its_data_set_loss_and_metrics_reuses_the_dependencies(self) -> None:
        model = MODEL.replace("64", "32")
        reply, outputs = self.k.execute(
            f"%%ddp train {mnist_spec()} {SHORT} --name second\n{model}{DATASET}", timeout=TRAINING_TIMEOUT
        )
        self.assertEqual(reply["content"]["status"], "ok", reply_error(reply) if reply["content"]["status"] != "ok" else "")
        progress = "".join(plain(o) for o in outputs if o["msg_type"] == "stream")
        compiled = re.findall(r"Compiling (\S+)", progress)
        self.assertEqual(compiled, ["ddp-cell"], progress)
        run = wait_run("second", TERMINAL, TRAINING_TIMEOUT)
        self.assertEqual(run["status"], "completed", json.dumps(run))
        folder = Path(run["_dir"])
        main_rs = (folder / "code" / "src" / "main.rs").read_text()
        self.assertIn(".model(model)\n        .dataset(dataset)\n        .loss(loss)\n        .metrics(metrics)", main_rs)
        self.assertRegex((folder / "spec.toml").read_text(), r'(?m)^name = "custom"\n(.*\n)*name = "custom"$')
        self.assertEqual(json.loads((folder / "data.json").read_text())["train_samples"], 1000)
        records = [json.loads(l) for l in (folder / "metrics" / "rank-0.jsonl").read_text().splitlines()]
        test = [r for r in records if r["kind"] == "test"][-1]
        self.assertEqual(test["samples"], 200)
        # The cell's metric (a count per sample) is reported as its mean: exactly 1.
        self.assertEqual(test["metrics"], {"ones": 1.0}, json.dumps(test))


if __name__ == "__main__":
    unittest.main(verbosity=2)

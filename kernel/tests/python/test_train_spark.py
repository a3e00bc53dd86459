"""A `%%ddp train --on spark` cell through a real Jupyter client (jupyter_client): the cell's
trainer is built here and runs on the Spark test cluster (DDP_TEST_SPARK_MASTER), one replica per
barrier task; the run card follows the application (its id, its web UI) to `completed`.

The built trainer goes to the executors in the run folder (code/target/release/ddp-cell), which
they see as the driver does. Run by kernel/tests/jupyter.rs (`train_on_spark`), which holds the
cluster and gives this script DDP_SPARK_PYTHON (the tests' Python, with PySpark); exits non-zero
on failure.
"""

from __future__ import annotations

import json
import os
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
    plain,
    reply_error,
    wait_run,
)


class TrainOnSparkTests(unittest.TestCase):
    def test_a_cell_trains_on_the_cluster(self) -> None:
        master = os.environ["DDP_TEST_SPARK_MASTER"]
        kernel = Kernel()
        try:
            options = (
                "--set train.epochs=1 --set data.limit_train=1000 --set data.limit_test=200 "
                f"--set ddp.threads=1 --replicas 2 --on spark --master {master} --name on-spark --wait"
            )
            reply, outputs = kernel.execute(
                f"%%ddp train {mnist_spec()} {options}\n{MODEL}", timeout=BUILD_TIMEOUT + TRAINING_TIMEOUT
            )
            status = reply["content"]["status"]
            self.assertEqual(status, "ok", reply_error(reply) if status != "ok" else "")
            card = card_of(outputs)
            updates = kernel.cards(display_id(card))
            texts = [plain(u) for u in updates]
            last = texts[-1]
            self.assertIn("completed", last)
            self.assertRegex(last, TEST_ACCURACY)
            run = wait_run("on-spark", TERMINAL, 30)
            self.assertEqual(run["status"], "completed", json.dumps(run))
            app = run["spark"]
            self.assertEqual((app["master"], app["tasks"]), (master, 2), json.dumps(run))
            self.assertTrue(app["app_id"].startswith("app-"), json.dumps(run))
            # The card named the application while it ran, and links its web UI.
            self.assertIn(app["app_id"], last)
            html = updates[-1]["content"]["data"]["text/html"]
            self.assertIn(f'<a href="{app["ui"]}" target="_blank">Spark UI</a>', html)
            # The replicas ran the cell's trainer, from the run folder.
            trainer = Path(run["_dir"]) / "code" / "target" / "release" / "ddp-cell"
            self.assertEqual(run.get("trainer"), str(trainer), json.dumps(run))
            job = json.loads((Path(run["_dir"]) / "spark" / "job.json").read_text())
            self.assertEqual(job["command"][0], str(trainer), json.dumps(job))
            for rank in range(2):
                log = (Path(run["_dir"]) / "logs" / f"rank-{rank}.log").read_text()
                self.assertIn(f"rank {rank}/2", log)
        finally:
            kernel.stop_runs_and_close()


if __name__ == "__main__":
    unittest.main(verbosity=2)

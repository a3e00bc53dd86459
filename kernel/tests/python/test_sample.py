"""`%ddp sample` through a real Jupyter client (jupyter_client).

- the text streams into the cell's stdout as it is drawn: the prompt, then one stream message
  per token, then a newline; exactly the pieces the library (`ddp_workspaces::sample`) gives for
  the same run and options (computed by kernel/tests/jupyter.rs into the fixture file);
- the same seed gives the same text, another seed another text of the same length;
- a run that is not a language model, and a prompt character outside the vocabulary, are error
  replies naming them;
- an interrupt stops the drawing with a notice on stdout (an ok reply: stopping is what it asks).

The runs are the shared fixtures of ddp-workspaces' test_util (a tiny untrained GPT with its
tokenizer and weights, an MLP run) in a workspace of their own, which the script switches to with
`%ddp workspace`; `$DDP_SAMPLE_FIXTURE` (a JSON file) names it, the runs and the expected pieces.
Run by kernel/tests/jupyter.rs; exits non-zero on failure.
"""

from __future__ import annotations

import json
import os
import re
import sys
import unittest
from pathlib import Path
from typing import Any

from ddp_kernel_util import Kernel, parent_id, reply_error


def stdout_texts(outputs: list[dict[str, Any]]) -> list[str]:
    return [o["content"]["text"] for o in outputs if o["msg_type"] == "stream" and o["content"]["name"] == "stdout"]


class SampleTests(unittest.TestCase):
    kernel: Kernel
    fixture: dict[str, Any]

    @classmethod
    def setUpClass(cls) -> None:
        cls.fixture = json.loads(Path(os.environ["DDP_SAMPLE_FIXTURE"]).read_text())
        cls.kernel = Kernel()
        cls.kernel.execute_ok(f"%ddp workspace {cls.fixture['workspace']}")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.kernel.close()

    def sample(self, options: str) -> list[str]:
        return stdout_texts(self.kernel.execute_ok(f"%ddp sample {self.fixture['gpt']} {options}", timeout=120))

    def test_1_streams_the_librarys_text_token_by_token(self) -> None:
        pieces = self.fixture["pieces"]
        self.assertEqual(len(pieces), 1 + 40, pieces)
        got = self.sample(self.fixture["options"])
        self.assertEqual(got, pieces + ["\n"])
        self.assertEqual(self.sample(self.fixture["options"]), got)
        other = "".join(self.sample("--prompt First --tokens 40 --seed 8"))
        self.assertNotEqual(other, "".join(got))
        self.assertEqual(len(other), len("".join(got)))
        self.assertTrue(other.startswith("First"), other)

    def test_2_refusals_are_error_replies(self) -> None:
        mlp, gpt = self.fixture["mlp"], self.fixture["gpt"]
        reply, outputs = self.kernel.execute_error(f"%ddp sample {mlp}")
        c = reply["content"]
        self.assertEqual(c["ename"], "DdpError", reply_error(reply))
        self.assertEqual(
            c["evalue"],
            f'run {mlp} is not a language model (model "mlp" on data "synthetic"): sampling '
            'generates text from a model.name = "gpt" run on data.name = "text"',
        )
        self.assertEqual(stdout_texts(outputs), [])
        reply, outputs = self.kernel.execute_error(f"%ddp sample {gpt} --prompt 'Zed'")
        self.assertEqual(
            reply["content"]["evalue"],
            f"the prompt's character 'Z' (U+005A) at position 0 (counting from 0) is not in the "
            f"vocabulary of run {gpt}, the 27 characters of its training text",
        )
        self.assertEqual(stdout_texts(outputs), [])

    def test_3_an_interrupt_stops_the_drawing(self) -> None:
        k = self.kernel
        since = len(k.iopub)
        msg_id = k.send(f"%ddp sample {self.fixture['gpt']} --tokens 1000000")
        # a few tokens have come: it is drawing
        k.wait_iopub(
            lambda m: m["msg_type"] == "stream"
            and parent_id(m) == msg_id
            and len(stdout_texts(k.outputs(msg_id))) > 5,
            60,
            "the first tokens",
            since,
        )
        k.km.interrupt_kernel()
        reply = k.reply(msg_id, 30, what="%ddp sample after interrupt_request")
        self.assertEqual(reply["content"]["status"], "ok", reply_error(reply) if reply["content"]["status"] == "error" else "")
        k.wait_idle(msg_id)
        texts = stdout_texts(k.outputs(msg_id))
        m = re.fullmatch(r"\ninterrupted: stopped after (\d+) of 1000000 tokens\n", texts[-1])
        self.assertIsNotNone(m, texts[-3:])
        # the prompt, the tokens shown, the notice
        self.assertEqual(len(texts), 1 + int(m.group(1)) + 1)
        self.assertLess(int(m.group(1)), 1000000)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])

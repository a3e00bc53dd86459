"""The `ddp` kernel against jupyter_kernel_test (the Jupyter project's kernel conformance suite):
every message is validated against the messaging spec v5 schema.

Run by kernel/tests/jupyter.rs (JUPYTER_PATH finds the kernelspec it installed); exits non-zero
on failure.
"""

from __future__ import annotations

import sys
import unittest

import jupyter_kernel_test

# The first Rust cell compiles evcxr's runtime crate (several seconds on 2 cores), longer than
# jupyter_kernel_test's 15 s per execute allows on a slow machine: warm up once first.
WARM_UP_TIMEOUT = 300


class DdpKernelTests(jupyter_kernel_test.KernelTests):
    kernel_name = "ddp"
    language_name = "rust"
    file_extension = ".rs"

    code_hello_world = 'println!("hello, world");'
    code_stderr = 'eprintln!("oops");'
    # exactly one diagnostic (E0308), so exactly one `error` output
    code_generate_error = 'let x: u32 = "a";'

    code_execute_result = [{"code": "40 + 2", "result": "42"}]
    # evcxr's rich output protocol; content without text/plain is published as display_data
    code_display_data = [
        {
            "code": 'println!("EVCXR_BEGIN_CONTENT text/html\\n<b>hi</b>\\nEVCXR_END_CONTENT");',
            "mime": "text/html",
        }
    ]

    # the complete_reply's matches, compared as a set
    completion_samples = [{"text": "%dd", "matches": {"%ddp", "%%ddp"}}]

    complete_code_samples = ["40 + 2", "%ddp ls", "fn f() {}"]
    incomplete_code_samples = ["fn f() {", "%ddp ls \\"]
    invalid_code_samples = ["fn f() }", "%nosuchmagic"]

    code_inspect_sample = "%ddp ls"
    code_clear_output = "%ddp clear"

    # glob syntax (messaging spec: history_request `pattern`), matching "40 + 2" above
    code_history_pattern = "40*"
    supported_history_operations = ("tail", "range", "search")

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        reply = cls.kc.execute_interactive(
            "let _warm = 1;", timeout=WARM_UP_TIMEOUT, output_hook=lambda msg: None, allow_stdin=False
        )
        if reply["content"]["status"] != "ok":
            cls.tearDownClass()
            raise RuntimeError(f"the warm-up cell failed: {reply['content']}")

    def test_compile_error_in_the_cells_lines(self) -> None:
        """rustc's error shows the cell's line and code, not evcxr's generated file."""
        self.flush_channels()
        reply, outputs = self.execute_helper("let x = 1;\nlet y: String = x;", timeout=60)
        self.assertEqual(reply["content"]["status"], "error")
        self.assertEqual(reply["content"]["ename"], "CompilationError")
        self.assertEqual(reply["content"]["evalue"], "mismatched types")
        errors = [o for o in outputs if o["msg_type"] == "error"]
        self.assertEqual(len(errors), 1, outputs)
        traceback = errors[0]["content"]["traceback"]
        self.assertEqual(traceback, reply["content"]["traceback"])
        self.assertEqual(
            traceback[:6],
            [
                "error[E0308]: mismatched types",
                " --> cell:2:17",
                "  |",
                "2 | let y: String = x;",
                "  |                 ^ expected `String`, found integer",
                "  |        ------ expected due to this",
            ],
        )
        # then rustc's help and notes (their wording is the toolchain's)
        self.assertTrue(all(line.startswith("  = ") for line in traceback[6:]), traceback)
        self.assertNotIn("lib.rs", "\n".join(traceback))

    def test_compile_error_after_a_magic_counts_the_cells_lines(self) -> None:
        self.flush_channels()
        reply, outputs = self.execute_helper("%ddp workspace\nlet x = 1;\nlet y: String = x;", timeout=60)
        self.assertEqual(reply["content"]["status"], "error")
        self.assertEqual(reply["content"]["traceback"][1:4], [" --> cell:3:17", "  |", "3 | let y: String = x;"])

    def test_a_unit_value_is_no_result(self) -> None:
        """`println!(..)` without `;` prints, and its value `()` is not shown."""
        self.flush_channels()
        reply, outputs = self.execute_helper('println!("hi")', timeout=60)
        self.assertEqual(reply["content"]["status"], "ok")
        self.assertEqual(
            [(o["msg_type"], o["content"]) for o in outputs],
            [("stream", {"name": "stdout", "text": "hi\n"})],
        )

    def test_kernel_info_protocol(self) -> None:
        """Beyond the schema: the protocol version this kernel speaks and its language_info."""
        self.flush_channels()
        msg_id = self.kc.kernel_info()
        reply = self.kc.get_shell_msg(timeout=15)
        self.assertEqual(reply["parent_header"]["msg_id"], msg_id)
        content = reply["content"]
        self.assertEqual(content["status"], "ok")
        major, minor = (int(x) for x in content["protocol_version"].split(".")[:2])
        self.assertEqual(major, 5)
        self.assertGreaterEqual(minor, 3)
        self.assertIn("mimetype", content["language_info"])
        self.assertIn("version", content["language_info"])


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    # A skipped test (an empty attribute, an unsupported history operation) would hide a hole:
    # only the pager (no `%ddp` command pages) may be skipped.
    unexpected = [(str(test), why) for test, why in result.skipped if "test_pager" not in str(test)]
    if unexpected:
        print("unexpected skips:", unexpected, file=sys.stderr)
    sys.exit(0 if result.wasSuccessful() and not unexpected else 1)

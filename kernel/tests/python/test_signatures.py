"""The `ddp` kernel drops messages whose HMAC signature is wrong or missing, and keeps serving.

Each forged message is an execute_request for `%ddp workspace` (or a shutdown_request on
control): no reply and no IOPub message (not even `busy`) may answer it within 3 s, and the
kernel must then answer a correctly signed kernel_info and execute. Every message the client
receives is itself checked against the session key by jupyter_client (Session.deserialize).

Run by kernel/tests/jupyter.rs; exits non-zero on failure.
"""

from __future__ import annotations

import sys
import time
import unittest
from queue import Empty
from typing import Any

from jupyter_client.session import DELIM, Session

from ddp_kernel_util import Kernel, parent_id, summary

QUIET = 3.0  # seconds a forged message must stay unanswered

CODE = "%ddp workspace"


def execute_content(code: str) -> dict[str, Any]:
    return {
        "code": code,
        "silent": False,
        "store_history": True,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": True,
    }


class SignatureTests(unittest.TestCase):
    kernel: Kernel

    @classmethod
    def setUpClass(cls) -> None:
        cls.kernel = Kernel()
        assert cls.kernel.kc.session.key, "the connection file has no key: signatures are not checked"
        # The kernel must work before anything is forged.
        cls.kernel.execute_ok(CODE, timeout=300)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.kernel.close()

    # helpers -------------------------------------------------------------------------------------

    def forge(self, msg_type: str, content: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
        """A message signed with the right key: its dict and its wire frames (after the ids)."""
        session = self.kernel.kc.session
        msg = session.msg(msg_type, content)
        frames = session.serialize(msg)
        self.assertEqual(frames[0], DELIM)
        self.assertTrue(frames[1], "the session signs messages")
        return msg, frames

    def assert_ignored(self, msg_id: str, what: str, channels: tuple[str, ...] = ("shell",)) -> None:
        """Nothing parented to msg_id arrives on shell/control or IOPub for QUIET seconds."""
        kc, seen = self.kernel.kc, []
        deadline = time.monotonic() + QUIET
        while time.monotonic() < deadline:
            for name in channels:
                channel = kc.shell_channel if name == "shell" else kc.control_channel
                try:
                    msg = channel.get_msg(timeout=0.05)
                except Empty:
                    continue
                if parent_id(msg) == msg_id:
                    seen.append(msg)
            while True:
                msg = self.kernel.pump(0.05)
                if msg is None:
                    break
                if parent_id(msg) == msg_id:
                    seen.append(msg)
        self.assertEqual(seen, [], f"the kernel answered {what}:\n{summary(seen)}")

    def assert_serving(self) -> None:
        """The kernel is alive and answers correctly signed requests."""
        kernel = self.kernel
        self.assertTrue(kernel.km.is_alive(), "the kernel process exited")
        msg_id = kernel.kc.kernel_info()
        reply = kernel.reply(msg_id, 30, what="kernel_info_request")
        self.assertEqual(reply["msg_type"], "kernel_info_reply")
        self.assertEqual(reply["content"]["status"], "ok")
        kernel.wait_idle(msg_id)
        kernel.execute_ok(CODE, timeout=60)
        reply, outputs = kernel.execute("40 + 2", timeout=120)
        self.assertEqual(reply["content"]["status"], "ok", summary(outputs))
        self.assertIn("42", [o["content"]["data"].get("text/plain") for o in outputs if o["msg_type"] == "execute_result"])

    # forged messages on shell --------------------------------------------------------------------

    def test_wrong_key(self) -> None:
        kc = self.kernel.kc
        wrong = Session(key=b"wrong", session=kc.session.session, username=kc.session.username)
        msg = wrong.send(kc.shell_channel.socket, "execute_request", execute_content(CODE))
        self.assert_ignored(msg["header"]["msg_id"], "an execute_request signed with another key")
        self.assert_serving()

    def test_tampered_signature(self) -> None:
        msg, frames = self.forge("execute_request", execute_content(CODE))
        sig = frames[1]
        frames[1] = sig[:-1] + (b"0" if sig[-1:] != b"0" else b"1")
        self.kernel.kc.shell_channel.socket.send_multipart(frames)
        self.assert_ignored(msg["header"]["msg_id"], "an execute_request with a tampered signature")
        self.assert_serving()

    def test_tampered_content(self) -> None:
        msg, frames = self.forge("execute_request", execute_content(CODE))
        # the signature was made for CODE; the content now asks for something else
        frames[5] = self.kernel.kc.session.pack(execute_content("%ddp ls"))
        self.kernel.kc.shell_channel.socket.send_multipart(frames)
        self.assert_ignored(msg["header"]["msg_id"], "an execute_request whose content was changed after signing")
        self.assert_serving()

    def test_missing_signature(self) -> None:
        msg, frames = self.forge("execute_request", execute_content(CODE))
        frames[1] = b""
        self.kernel.kc.shell_channel.socket.send_multipart(frames)
        self.assert_ignored(msg["header"]["msg_id"], "an execute_request with an empty signature")
        self.assert_serving()

    def test_missing_signature_frame(self) -> None:
        msg, frames = self.forge("execute_request", execute_content(CODE))
        del frames[1]
        self.kernel.kc.shell_channel.socket.send_multipart(frames)
        self.assert_ignored(msg["header"]["msg_id"], "an execute_request without its signature frame")
        self.assert_serving()

    def test_wrong_key_kernel_info(self) -> None:
        kc = self.kernel.kc
        wrong = Session(key=b"wrong", session=kc.session.session, username=kc.session.username)
        msg = wrong.send(kc.shell_channel.socket, "kernel_info_request", {})
        self.assert_ignored(msg["header"]["msg_id"], "a kernel_info_request signed with another key")
        self.assert_serving()

    # forged messages on control ------------------------------------------------------------------

    def test_wrong_key_shutdown_on_control(self) -> None:
        kc = self.kernel.kc
        wrong = Session(key=b"wrong", session=kc.session.session, username=kc.session.username)
        msg = wrong.send(kc.control_channel.socket, "shutdown_request", {"restart": False})
        self.assert_ignored(msg["header"]["msg_id"], "a shutdown_request signed with another key", ("control",))
        self.assert_serving()

    def test_missing_signature_interrupt_on_control(self) -> None:
        msg, frames = self.forge("interrupt_request", {})
        frames[1] = b""
        self.kernel.kc.control_channel.socket.send_multipart(frames)
        self.assert_ignored(msg["header"]["msg_id"], "an unsigned interrupt_request", ("control",))
        self.assert_serving()


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])

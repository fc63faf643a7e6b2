#!/usr/bin/env python3
"""The Python binding (python/slot.py) over the real libslot, $SLOT_LIBSLOT
(the Makefile's unit target sets it to the build's): argument handling, the
fallback against a loopback listener, and requests and answers against a
fake slotd served by a thread (the library's own checks are
tests/unit/test_libslot.c). An ASan build of the library cannot be loaded
into python: the test says so and passes."""

import errno
import os
import re
import socket
import sys
import tempfile
import threading
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ["SLOT_LIB_TIMEOUT_MS"] = "300"
os.environ.pop("SLOT_LIB_SOCKET", None)     # never the host's own slotd

import slot  # noqa: E402


class FakeSlotd:
    """Serves one request at path: records it and the descriptor that came
    with it, answers answer (None: closes without a word)."""

    def __init__(self, path, answer):
        self.path, self.answer = path, answer
        self.request, self.fd_stat = b"", None
        if os.path.exists(path):
            os.unlink(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(1)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        c, _ = self.sock.accept()
        with c:
            while b"\n" not in self.request:
                data, anc, _, _ = c.recvmsg(600, socket.CMSG_SPACE(16))
                for level, kind, blob in anc:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        for i in range(0, len(blob) - len(blob) % 4, 4):
                            fd = int.from_bytes(blob[i:i + 4], sys.byteorder)
                            if self.fd_stat is None:
                                self.fd_stat = os.fstat(fd)
                            os.close(fd)
                if not data:
                    break
                self.request += data
            if self.answer is not None:
                c.sendall(self.answer.encode())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.thread.join(5)
        self.sock.close()
        os.unlink(self.path)


class BindingTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="test_libslot_py.")
        self.path = os.path.join(self.tmp.name, "lib.sock")
        self.nowhere = os.path.join(self.tmp.name, "none", "slotd-lib.sock")
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4)
        self.server = self.listener.getsockname()

    def tearDown(self):
        self.listener.close()
        self.tmp.cleanup()

    def assertOSError(self, err, ctx, text=None):
        self.assertEqual(ctx.exception.errno, err, ctx.exception)
        if text is not None:
            self.assertIn(text, ctx.exception.strerror)

    def accepted(self, s):
        a, peer = self.listener.accept()
        a.close()
        self.assertEqual(peer, s.getsockname())

    def test_version(self):
        with open(os.path.join(ROOT, "include/slot/slot.h")) as f:
            hdr = f.read()
        self.assertEqual(slot.version(), re.search(r'SLOT_LIB_VERSION\s+"(.*)"', hdr).group(1))

    def test_bad_arguments(self):
        with socket.socket() as s:
            for addr in ("127.0.0.1", ("localhost", 80), (b"127.0.0.1", 80), ("127.0.0.1",),
                         ("127.0.0.1", "80"), ("127.0.0.1", 70000), ("::1", 80)):
                with self.assertRaises(OSError) as c:
                    slot.connect(s, addr, socket_path=self.nowhere)
                self.assertOSError(errno.EINVAL, c)
            for kw in ({"relay": "bad"}, {"relay": "1.2.3.4:0"}, {"avoid": ["[::1]"]},
                       {"deadline_ms": 60001}, {"deadline_ms": -1}, {"deadline_ms": "5"}):
                with self.assertRaises(OSError) as c:
                    slot.connect(s, self.server, socket_path=self.nowhere, **kw)
                self.assertOSError(errno.EINVAL, c)
            with self.assertRaises(OSError) as c:
                slot.connect(s, self.server, socket_path=self.nowhere,
                             avoid=["192.0.2.%d:7000" % i for i in range(9)])
            self.assertOSError(errno.E2BIG, c)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            with self.assertRaises(OSError) as c:
                slot.connect(u, self.server, socket_path=self.nowhere)
            self.assertOSError(errno.EPROTOTYPE, c)
        with self.assertRaises(OSError) as c:
            slot.connect(3, self.server)
        self.assertOSError(errno.ENOTSOCK, c)
        with socket.socket() as s, self.assertRaises(OSError) as c:
            slot.decision(s, socket_path=self.nowhere)
        self.assertOSError(errno.ENOTCONN, c, "not connected")

    def test_unreachable(self):
        with socket.socket() as s:
            slot.connect(s, self.server, socket_path=self.nowhere)
            self.accepted(s)
            d = slot.decision(s, socket_path=self.nowhere)
            self.assertEqual(d.state, "fallback")
            self.assertIn(self.nowhere, d.why)
            self.assertEqual(vars(d)["relay"], "")
        with socket.socket() as s, self.assertRaises(OSError) as c:
            slot.connect(s, self.server, socket_path=self.nowhere, fallback=False)
        self.assertOSError(errno.ENOENT, c, self.nowhere)
        with self.assertRaises(OSError) as c:
            slot.attach_self(socket_path=self.nowhere)
        self.assertOSError(errno.ENOENT, c, self.nowhere)

    def test_connect_chain_request(self):
        for relay in (["192.0.2.7:7000", "[2001:DB8::8]:7000"],
                      "192.0.2.7:7000,[2001:db8::8]:7000"):
            with socket.socket() as s, FakeSlotd(self.path, "ok\n") as f:
                slot.connect(s, self.server, relay=relay, socket_path=self.path)
                f.thread.join(5)
                self.assertEqual(f.request.decode(), "connect %s:%d relay=192.0.2.7:7000,"
                                 "[2001:db8::8]:7000\n" % self.server)
                self.accepted(s)
        with socket.socket() as s, self.assertRaises(OSError) as c:
            slot.connect(s, self.server, relay=["192.0.2.7:7000"] * 2, socket_path=self.path)
        self.assertEqual(c.exception.errno, errno.EINVAL)
        self.assertEqual(slot.CHAIN_MAX, 3)

    def test_connect_request(self):
        with socket.socket() as s, FakeSlotd(self.path, "ok\n") as f:
            slot.connect(s, self.server, relay="[2001:DB8::7]:7000",
                         avoid=("192.0.2.2:7000", "192.0.2.1:7000"), deadline_ms=1500,
                         socket_path=self.path)
            f.thread.join(5)
            self.assertEqual(f.request.decode(), "connect %s:%d relay=[2001:db8::7]:7000 "
                             "avoid=192.0.2.2:7000 avoid=192.0.2.1:7000 deadline_ms=1500\n"
                             % self.server)
            st = os.fstat(s.fileno())
            self.assertEqual((f.fd_stat.st_dev, f.fd_stat.st_ino), (st.st_dev, st.st_ino))
            self.accepted(s)

    def test_connect_with_timeout(self):
        # A socket with a timeout is non-blocking inside: EINPROGRESS is waited for.
        with socket.socket() as s, FakeSlotd(self.path, "ok\n"):
            s.settimeout(5)
            slot.connect(s, self.server, socket_path=self.path)
            self.accepted(s)

    def test_refused(self):
        with socket.socket() as s, FakeSlotd(self.path, "err EINVAL relay= is also avoided\n"):
            with self.assertRaises(OSError) as c:
                slot.connect(s, self.server, socket_path=self.path)
            self.assertOSError(errno.EINVAL, c)
            self.assertEqual(c.exception.strerror, "slotd: relay= is also avoided")
        with socket.socket() as s, FakeSlotd(self.path, None):
            with self.assertRaises(OSError) as c:
                slot.connect(s, self.server, socket_path=self.path)
            self.assertOSError(errno.EPROTO, c, "without answering")

    def test_decision(self):
        with socket.create_connection(self.server) as s, FakeSlotd(
                self.path, "decision state=relayed relay=198.51.100.7:7000 path_us=87000 "
                "direct_us=295000 cached=1 why=best of 3, by far\n") as f:
            d = slot.decision(s, socket_path=self.path)
            f.thread.join(5)
            self.assertEqual(f.request.decode(), "decision %s:%d %s:%d\n"
                             % (s.getsockname() + s.getpeername()))
            self.assertIsNone(f.fd_stat)
            self.assertEqual(d, slot.Decision("relayed", "198.51.100.7:7000", 87000, 295000,
                                              True, "best of 3, by far"))

    def test_attach(self):
        with FakeSlotd(self.path, "ok\n") as f:
            slot.attach_self(socket_path=self.path)
            f.thread.join(5)
            self.assertEqual(f.request, b"attach\n")
        with FakeSlotd(self.path, "err EOPNOTSUPP slotd has no run cgroup\n"):
            with self.assertRaises(OSError) as c:
                slot.attach_self(socket_path=self.path)
            self.assertOSError(errno.EOPNOTSUPP, c, "slotd: slotd has no run cgroup")


def asan_build(path):
    """An ASan-instrumented library: python cannot load it (ASan's runtime
    must come first)."""
    try:
        with open(os.path.realpath(path), "rb") as f:
            return b"libasan.so" in f.read()
    except OSError:
        return False


if __name__ == "__main__":
    lib = os.environ.get("SLOT_LIBSLOT")
    if lib and asan_build(lib):
        print("test_libslot.py: skipped, %s is an ASan build" % lib)
        sys.exit(0)
    unittest.main(argv=[sys.argv[0], "-v"] if "-v" in sys.argv else [sys.argv[0]])

"""Data through a pipe: byte-exact transfers, half-closes, resets, backpressure."""

import os
import signal
import socket
import struct
import subprocess
import threading
import time

from conftest import (TESTCLIENT, MiB, make_client, random_file, recv_all, send_file,
                      send_while_receiving)
from netns import sha256_file


def test_client_to_server_64mib(net, relay, client, servers, port, data64):
    path, digest = data64
    p = port()
    srv = servers(p, recv_all)
    out = os.path.join(net.dir, "c2s.out")
    r = client.run(p, stdin=path, stdout=out, timeout=90)
    assert r.rc == 0, r
    assert r.line("pipe ok"), r
    assert srv.result() == (64 * MiB, digest)
    assert os.path.getsize(out) == 0


def test_server_to_client_64mib(net, relay, client, servers, port, data64):
    path, digest = data64
    p = port()

    def serve(c):
        send_file(c, path)
        c.shutdown(socket.SHUT_WR)
        return recv_all(c)

    srv = servers(p, serve)
    out = os.path.join(net.dir, "s2c.out")
    r = client.run(p, stdout=out, timeout=90)
    assert r.rc == 0, r
    assert srv.result() == (0, sha256_empty())
    assert os.path.getsize(out) == 64 * MiB
    assert sha256_file(out) == digest
    os.unlink(out)


def test_both_directions_at_once_64mib(net, relay, client, servers, port, data64):
    up, up_digest = data64
    down, down_digest = random_file(net, "data64b", 64 * MiB)
    p = port()

    srv = servers(p, send_while_receiving(down))
    out = os.path.join(net.dir, "both.out")
    r = client.run(p, stdin=up, stdout=out, timeout=120)
    assert r.rc == 0, r
    assert srv.result() == (64 * MiB, up_digest)
    assert sha256_file(out) == down_digest
    os.unlink(out)
    os.unlink(down)


def sha256_empty():
    return "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def wait_size(path, size, timeout=30):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path) and os.path.getsize(path) >= size:
            return os.path.getsize(path)
        time.sleep(0.02)
    return os.path.getsize(path) if os.path.exists(path) else -1


def test_server_closes_first(net, relay, client, servers, port):
    """The server sends its file and half-closes; the client's data keeps
    flowing to the server afterwards, and both ends see a clean close."""
    a, a_digest = random_file(net, "hc_a", 8 * MiB)
    b, b_digest = random_file(net, "hc_b", 16 * MiB)
    p = port()
    half_closed = threading.Event()

    def serve(c):
        send_file(c, a)
        c.shutdown(socket.SHUT_WR)
        half_closed.set()
        return recv_all(c)

    srv = servers(p, serve)
    out = os.path.join(net.dir, "hc1.out")
    with open(out, "wb") as fout:
        proc = client.start(p, stdin=subprocess.PIPE, stdout=fout)
    assert half_closed.wait(30)
    # The whole server->client direction is done before the client sends a byte.
    assert wait_size(out, 8 * MiB) == 8 * MiB
    time.sleep(0.3)
    with open(b, "rb") as f:
        proc.stdin.write(f.read())
    proc.stdin.close()
    proc.stdin = None
    r = client.finish(proc, 60)
    assert r.rc == 0, r
    assert sha256_file(out) == a_digest
    assert srv.result() == (16 * MiB, b_digest)


def test_client_closes_first(net, relay, client, servers, port):
    """The client sends its file and half-closes; the server reads to EOF, then
    sends its own file; the client gets all of it and exits cleanly."""
    a, a_digest = random_file(net, "hc_a", 8 * MiB)
    b, b_digest = random_file(net, "hc_b", 16 * MiB)
    p = port()

    def serve(c):
        got = recv_all(c)
        time.sleep(0.3)
        send_file(c, b)
        c.shutdown(socket.SHUT_WR)
        assert c.recv(1) == b""
        return got

    srv = servers(p, serve)
    out = os.path.join(net.dir, "hc2.out")
    r = client.run(p, "--bind", net.client_ip, stdin=a, stdout=out, timeout=60)
    assert r.rc == 0, r
    assert srv.result() == (8 * MiB, a_digest)
    assert sha256_file(out) == b_digest


def linger0(c):
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def test_server_reset_reaches_client(net, relay, client, servers, port):
    p = port()

    def serve(c):
        c.sendall(os.urandom(MiB))
        time.sleep(0.5)
        linger0(c)
        c.close()

    servers(p, serve)
    out = os.path.join(net.dir, "rst1.out")
    with open(out, "wb") as fout:
        proc = client.start(p, stdin=subprocess.PIPE, stdout=fout)   # stdin stays open
    try:
        r = client.finish(proc, 15)
    finally:
        if proc.stdin:
            proc.stdin.close()
    assert r.rc == 5, r
    assert r.line("reset"), r
    assert os.path.getsize(out) == MiB
    assert r.elapsed < 5, r


def test_client_reset_reaches_server(net, relay, client, servers, port):
    src, _ = random_file(net, "rst_src", 4 * MiB)
    p = port()

    def serve(c):
        n = 0
        try:
            while True:
                b = c.recv(1 << 16)
                if not b:
                    return ("eof", n)
                n += len(b)
        except ConnectionResetError:
            return ("reset", n)

    srv = servers(p, serve)
    r = client.run(p, "--rst-after", MiB, stdin=src, timeout=15)
    assert r.rc == 0 and r.line("rst sent"), r
    kind, n = srv.result(timeout=10)
    assert kind == "reset", (kind, n)
    assert n <= 4 * MiB


def test_slow_reader_bounded_memory(net, relays, key, servers, port):
    """A client that stops reading: the server's writes block, the relay's RSS
    stays flat, and everything arrives once the client reads again."""
    relay = relays({"limits": {"pipe_size": "64k"}})
    client = make_client(net, relay, key)
    total = 128 * MiB
    p = port()
    sent = [0]
    chunk = os.urandom(256 * 1024)

    def serve(c):
        while sent[0] < total:
            n = c.send(chunk[: min(len(chunk), total - sent[0])])
            sent[0] += n
        c.shutdown(socket.SHUT_WR)
        return recv_all(c)

    srv = servers(p, serve)
    rss0 = relay.rss_kib()
    # Paused until SIGUSR1 below: a pause that ends by itself could end
    # within the measurement on a loaded machine.
    proc = client.start(p, "--pause-read", 300)
    time.sleep(2.5)
    s1 = sent[0]
    time.sleep(1.5)
    s2 = sent[0]
    rss1 = relay.rss_kib()
    c = relay.counters()
    print("slow reader: sent %d then %d bytes, relay RSS %d -> %d KiB, counters %r"
          % (s1, s2, rss0, rss1, c))
    assert proc.poll() is None, "client exited early"
    assert s2 < 48 * MiB, "server wrote %d bytes to a stalled reader" % s2
    assert s2 - s1 < 2 * MiB, "server writes still progressing: %d -> %d" % (s1, s2)
    assert c["bytes_server_to_client"] <= s2
    assert rss1 - rss0 < 4096, "relay RSS grew from %d to %d KiB" % (rss0, rss1)
    proc.send_signal(signal.SIGUSR1)
    r = client.finish(proc, 60)
    assert r.rc == 0, r
    assert int(r.line("closed")["received"]) == total, r
    assert sent[0] == total
    assert srv.result() == (0, sha256_empty())


def test_direct_path_through_forwarding(net, servers, port):
    """The test bed itself: the client reaches the server directly, forwarded by
    the relay namespace's kernel (no relay involved)."""
    p = port()
    srv = servers(p, recv_all)
    q = subprocess.run(net.cmd("client", TESTCLIENT, "--relay", "%s:%d" % (net.server_ip, p),
                               "--data-port", p, "--no-pipe", "--timeout", 10),
                       input=b"direct", capture_output=True, timeout=20)
    assert q.returncode == 0, q.stderr
    assert srv.result()[0] == len(b"direct")

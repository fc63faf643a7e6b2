"""Timeouts, keepalive, drain deadline and hostile bytes on the relay's ports."""

import os
import re
import signal
import socket
import struct
import subprocess
import time

from conftest import ClientResult, MiB, make_client, random_file, recv_all



def read_until_eof(s, timeout=5):
    s.settimeout(timeout)
    out = b""
    while True:
        try:
            b = s.recv(4096)
        except ConnectionResetError:
            return out, "reset"
        if not b:
            return out, "eof"
        out += b


def wait_exit(proc, timeout):
    """Waits for the test client without closing its stdin (communicate()
    would, and the client would then half-close the pipe)."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError("test client still running after %ss" % timeout)
    return ClientResult(proc.returncode, proc.stderr.read().decode(errors="replace"),
                        time.monotonic() - proc.t0)


def idle_pipe(net, client, servers, port):
    """A pipe that carries no bytes: the server waits for the client to talk.
    Returns (client process, server)."""
    p = port()

    def serve(c):
        try:
            n, _ = recv_all(c)
            return ("eof", n)
        except ConnectionResetError:
            return ("reset", 0)

    srv = servers(p, serve)
    proc = client.start(p, stdin=subprocess.PIPE)
    return proc, srv


def test_idle_pipe_is_reset(net, relays, key, servers, port):
    relay = relays({"limits": {"idle_timeout": "1s"}})
    client = make_client(net, relay, key)
    proc, srv = idle_pipe(net, client, servers, port)
    try:
        r = wait_exit(proc, 15)
    finally:
        proc.stdin.close()
    assert r.rc == 5 and r.line("reset"), r
    assert srv.result(timeout=10) == ("reset", 0)
    assert "idle timeout" in relay.log()
    assert relay.counters()["pipes_open"] == 0


def test_active_pipe_outlives_idle_timeout(net, relays, key, servers, port):
    """Traffic keeps a pipe alive past idle_timeout: only silence counts."""
    # 3 s, not 1 s: a gap between writes stretched by a busy machine must
    # not reach it (at 1 s the 0.25 s gaps left 0.75 s).
    relay = relays({"limits": {"idle_timeout": "3s"}})
    client = make_client(net, relay, key)
    p = port()
    srv = servers(p, lambda c: recv_all(c))
    proc = client.start(p, stdin=subprocess.PIPE)
    chunk = os.urandom(4096)
    for _ in range(16):          # 4 s of traffic at least, a write every 0.25 s
        proc.stdin.write(chunk)
        proc.stdin.flush()
        time.sleep(0.25)
    proc.stdin.close()
    proc.stdin = None
    r = client.finish(proc, 15)
    assert r.rc == 0, r
    assert srv.result()[0] == 16 * 4096


def test_drain_deadline_resets_remaining_pipes(net, relays, key, servers, port):
    relay = relays({"limits": {"drain_timeout": "1s"}})
    client = make_client(net, relay, key)
    proc, srv = idle_pipe(net, client, servers, port)
    try:
        relay.wait_counter("pipes_open", lambda v: v == 1)
        t0 = time.monotonic()
        relay.signal(signal.SIGTERM)
        rc = relay.wait(10)
        took = time.monotonic() - t0
        r = wait_exit(proc, 10)
    finally:
        proc.stdin.close()
    assert rc == 0, relay.log()[-2000:]
    assert took >= 0.9, took           # the pipe had its deadline
    assert "drain deadline reached: resetting 1 pipes" in relay.log()
    assert r.rc == 5 and r.line("reset"), r
    assert srv.result(timeout=10) == ("reset", 0)


def test_keepalive_on_both_sockets(net, relays, key, servers, port):
    relay = relays({"limits": {"keepalive_idle": "7s", "keepalive_interval": "3s"}})
    client = make_client(net, relay, key)
    proc, srv = idle_pipe(net, client, servers, port)

    def legs():
        out = net.run_ns("relay", "ss", "-tnoH", "state", "established").stdout
        if isinstance(out, bytes):
            out = out.decode()
        return out, [l for l in out.splitlines() if ":%d" % relay.data_port in l or
                     "%s:" % net.server_ip in l]

    try:
        relay.wait_counter("pipes_open", lambda v: v == 1)
        # The server leg gets its keepalive once the pipe has been open half
        # of keepalive_idle (docs/relay.md: set late, as it cannot act earlier).
        deadline = time.monotonic() + 15
        while True:
            out, lines = legs()
            if (len(lines) >= 2 and all(re.search(r"timer:\(keepalive,", l) for l in lines)
                    or time.monotonic() > deadline):
                break
            time.sleep(0.25)
    finally:
        proc.stdin.close()
        wait_exit(proc, 10)
    # The accepted client socket and the connected server socket.
    assert len(lines) >= 2, out
    for l in lines:
        assert re.search(r"timer:\(keepalive,", l), l


def test_control_first_message_deadline(net, relays):
    """A control connection that says nothing authentic is reset after
    control_first_message_timeout, long before control_idle_timeout."""
    relay = relays({"limits": {"control_first_message_timeout": "1s",
                               "control_idle_timeout": "1h"}})
    s = net.connect("client", net.relay_cip, relay.ctl_port)
    try:
        relay.wait_counter("control_conns", lambda v: v == 1)
        data, how = read_until_eof(s, timeout=20)
    finally:
        s.close()
    assert (data, how) == (b"", "reset")
    c = relay.wait_counter("control_conns", lambda v: v == 0)
    assert c["control_deadline"] == 1, c


def test_control_idle_timeout(net, relays, key, servers, port):
    """An authenticated connection lives past the first-message deadline and
    is closed after control_idle_timeout without messages."""
    relay = relays({"limits": {"control_first_message_timeout": "1s",
                               "control_idle_timeout": "3s"}})
    client = make_client(net, relay, key)
    p = port()
    servers(p, lambda c: None)
    proc = client.start(p, "--no-connect", 30)
    try:
        relay.wait_counter("control_conns", lambda v: v == 1)
        relay.wait_counter("pipes_pending", lambda v: v == 0, timeout=10)
        # Past the first-message deadline: still open.
        assert relay.counters()["control_conns"] == 1
        relay.wait_counter("control_conns", lambda v: v == 0, timeout=15)
    finally:
        proc.kill()
        proc.wait()
    c = relay.counters()
    assert c["control_deadline"] == 0, c
    assert "control %s" % net.client_ip in relay.log() and "closed: idle" in relay.log()


def hostile_control(net, relay, payload):
    s = net.connect("client", net.relay_cip, relay.ctl_port)
    try:
        s.sendall(payload)
        return read_until_eof(s)
    finally:
        s.close()


def test_garbage_on_control_is_closed_unanswered(net, relays, key, servers, port):
    """Nothing unauthenticated gets a signed answer (issue 14): the relay
    resets the connection and spends no MAC on it."""
    relay = relays()
    cases = [
        (b"GET / HTTP/1.0\r\n\r\n", "bad magic"),
        (b"SL\x01\x10" + bytes(96), "unsupported version"),         # version 1
        (b"SL\x02\x10\xff\xff" + bytes(64), "bad length"),
        (b"SL\x02\x10\x00\x84" + bytes(126), "bad MAC"),          # right size, no MAC
        (b"SL\x02\x7e\x00\x5c" + bytes(86), "unknown type"),
    ]
    before = relay.counters()
    for payload, why in cases:
        data, how = hostile_control(net, relay, payload)
        assert (data, how) == (b"", "reset"), (payload, data.hex(), how)
    c = relay.counters()
    assert c["control_errors"] == before["control_errors"], c
    assert c["control_unauthentic"] == before["control_unauthentic"] + len(cases), c
    log = relay.log()
    for _, why in cases:
        assert "%s, closing unanswered" % why in log, why
    # A peer that sends half a header and goes away costs nothing either.
    s = net.connect("client", net.relay_cip, relay.ctl_port)
    s.sendall(b"SL\x02")
    s.close()
    # The relay still serves.
    client = make_client(net, relay, key)
    p = port()
    srv = servers(p, lambda c: recv_all(c))
    src, digest = random_file(net, "after_garbage", MiB)
    r = client.run(p, stdin=src, timeout=20)
    assert r.rc == 0, r
    assert srv.result() == (MiB, digest)


def test_malformed_probes_dropped(net, relays, key, port):
    relay = relays()
    u = net.udp("client")
    u.settimeout(0.5)
    junk = [b"", b"x", b"SL", os.urandom(100), b"SL\x02\x01\x00\x70" + bytes(106),
            os.urandom(2000), b"SL\x02\x01\x00\x70" + bytes(200)]
    try:
        before = relay.counters()["probes_dropped"]
        for j in junk:
            u.sendto(j, (net.relay_cip, relay.probe_port))
        replies = 0
        try:
            while True:
                u.recvfrom(4096)
                replies += 1
        except socket.timeout:
            pass
    finally:
        u.close()
    assert replies == 0
    relay.wait_counter("probes_dropped", lambda v: v == before + len(junk))
    # And a real probe is still answered.
    client = make_client(net, relay, key)
    r = client.run(port(), "--probe", "--probe-port", relay.probe_port, timeout=10)
    assert r.line("probe status")["status"] == "refused", r


def test_probes_for_one_target_share_a_measurement(net, relays, key, port):
    """Twenty probes for a silent target cost it one connection attempt, not
    twenty: relays cannot be used to multiply traffic toward a server."""
    relay = relays({"probe": {"probe_timeout": "1s", "destination_burst": "50",
                              "destination_rate": "50"}})
    client = make_client(net, relay, key)
    p = port()
    rule = ("INPUT", "-p", "tcp", "--dport", str(p), "-j", "DROP")
    net.iptables("server", "-I", *rule)
    try:
        r = client.run(p, "--probe", "--probe-port", relay.probe_port, "--count", 20, timeout=10)
        st = [x["status"] for x in r.all("probe status")]
        out = net.run_ns("server", "iptables", "-w", "-nvxL", "INPUT").stdout
        if isinstance(out, bytes):
            out = out.decode()
    finally:
        net.iptables("server", "-D", *rule)
    assert st == ["timeout"] * 20, r
    row = [l for l in out.splitlines() if "dpt:%d" % p in l]
    assert row, out
    syns = int(row[0].split()[0])
    # One measurement: the connect's SYN, and at 0.9 s (0.9 of its SYN's
    # timeout) the bare SYN that replaces it; the kernel's retransmission
    # of the connect's SYN at 1 s too if a busy relay ran that timer late.
    # Twenty measurements would be twenty SYNs at least.
    assert 1 <= syns <= 3, out

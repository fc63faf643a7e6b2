"""Operating the relay: counters, pending expiry, probes, reload, drain, start-up checks."""

import hmac
import math
import os
import signal
import socket
import struct
import subprocess
import threading
import time

from conftest import MiB, make_client, random_file, recv_all, send_file
from netns import sha256_file, write_key

COUNTERS = ("pipes_open pipes_pending pipes_total pipes_failed pipes_expired "
            "bytes_client_to_server bytes_server_to_client probes_answered probes_refused "
            "probes_dropped control_conns control_errors data_rejected kpipes_in_use "
            "kpipes_free").split()


def test_counters(net, relay, client, servers, port):
    c0 = relay.counters()
    assert set(COUNTERS) <= set(c0), "missing: %s" % (set(COUNTERS) - set(c0))
    assert c0["pipes_total"] == 0 and c0["pipes_open"] == 0
    up, up_digest = random_file(net, "cnt_up", MiB)
    p = port()
    release = threading.Event()

    def serve(c):
        got = recv_all(c)
        c.sendall(b"\0" * (3 * MiB))
        release.wait(10)
        return got

    srv = servers(p, serve)
    with open(up, "rb") as fin:
        proc = client.start(p, stdin=fin)
    c = relay.wait_counter("bytes_server_to_client", lambda v: v == 3 * MiB)
    assert c["pipes_open"] == 1 and c["pipes_total"] == 1 and c["pipes_pending"] == 0, c
    assert c["bytes_client_to_server"] == MiB, c
    release.set()
    r = client.finish(proc, 20)
    assert r.rc == 0, r
    assert srv.result() == (MiB, up_digest)
    c = relay.wait_counter("pipes_open", lambda v: v == 0)
    assert c["pipes_total"] == 1 and c["pipes_failed"] == 0, c
    assert c["bytes_client_to_server"] == MiB and c["bytes_server_to_client"] == 3 * MiB, c
    assert c["kpipes_in_use"] == 0, c

    # A refused pipe counts as failed, not as open.
    r = client.run(port(), timeout=10)
    assert r.rc == 3, r
    c = relay.counters()
    assert c["pipes_failed"] == 1 and c["pipes_open"] == 0, c

    # JSON says the same.
    j = relay.json()
    flat = {}
    for k, v in j.items():
        if isinstance(v, dict):
            flat.update(v)
        else:
            flat[k] = v
    for k in ("pipes_total", "pipes_failed", "bytes_client_to_server", "bytes_server_to_client"):
        assert flat.get(k) == c[k], (k, j, c)


def test_many_requests_on_one_control_connection(net, relay, client, servers, port):
    n = 8
    p = port()
    srv = servers(p, recv_all, conns=n)
    r = client.run(p, "--count", n, timeout=20)
    assert r.rc == 0, r
    oks = r.all("pipe ok")
    assert sorted(int(o["id"]) for o in oks) == list(range(1, n + 1)), r
    for i in range(n):
        assert srv.result(i, timeout=10)[0] == 0
    c = relay.wait_counter("pipes_open", lambda v: v == 0)
    assert c["pipes_total"] == n, c
    assert srv.accepted == n


def test_pending_pipe_expires(net, relays, key, servers, port):
    relay = relays({"limits": {"pending_timeout": "1s"}})
    client = make_client(net, relay, key)
    p = port()
    closed_after = []

    def serve(c):
        t = time.monotonic()
        try:
            while c.recv(4096):
                pass
        except ConnectionResetError:
            pass
        closed_after.append(time.monotonic() - t)

    srv = servers(p, serve, conns=2)
    r = client.run(p, "--no-connect", 2.0, timeout=10)
    assert r.rc == 0, r
    assert int(r.line("pipe ok")["pending_ms"]) == 1000, r
    c = relay.wait_counter("pipes_expired", lambda v: v == 1)
    assert c["pipes_pending"] == 0 and c["pipes_open"] == 0, c
    srv.result(0, timeout=5)
    assert 0.5 < closed_after[0] < 2.5, closed_after   # the relay closed its server side

    # Connecting after the deadline: reset.
    r = client.run(p, "--connect-delay", 1.8, timeout=10)
    assert r.rc == 5 and r.line("reset"), r
    c = relay.wait_counter("pipes_expired", lambda v: v == 2)
    assert c["data_rejected"] == 1, c


def probe(client, target_port, *extra, server_ip=None, timeout=10):
    return client.run(target_port, "--probe", "--probe-port", client.relay.probe_port,
                      *extra, server_ip=server_ip, timeout=timeout)


def test_probes(net, relays, key, wrong_key, port):
    relay = relays({"probe": {"requester_rate": "1", "requester_burst": "6"}})
    client = make_client(net, relay, key)
    p = port()
    ls = net.listen("server", net.server_ip, p)   # never accepts: the relay's probe resets
    try:
        # The requester's bucket (burst 6, 1 token a second) refills while
        # the probes below start: bounded by the time they took.
        t0 = time.monotonic()
        r = probe(client, p)
        assert r.rc == 0, r
        a = r.line("probe status")
        assert a["status"] == "ok" and int(a["flags"]) & 1 == 0, r
        rtt, hold, elapsed = int(a["rtt_us"]), int(a["hold_us"]), int(a["elapsed_us"])
        assert 0 < rtt < 100000, r
        assert rtt <= hold <= elapsed < 500000, r

        r = probe(client, p)                                 # from the cache
        b = r.line("probe status")
        assert b["status"] == "ok" and int(b["flags"]) & 1 == 1, r
        assert int(b["rtt_us"]) == rtt, r

        r = probe(client, port())                            # closed port
        assert r.line("probe status")["status"] == "refused", r
        r = probe(client, 80, server_ip="127.0.0.1")         # policy
        assert r.line("probe status")["status"] == "policy", r

        c0 = relay.counters()
        r = probe(client, p, "--count", 20, timeout=10)      # 2 tokens left of 6
        elapsed = time.monotonic() - t0
        st = [x["status"] for x in r.all("probe status")]
        assert len(st) == 20, r
        # the 4 probes above took 4 tokens: 2 left, plus one per second
        # since the first probe; the rest refused (unlimited: 20 ok)
        ok = st.count("ok")
        assert 2 <= ok <= 2 + math.floor(elapsed), (st, elapsed)
        assert st.count("rate-limited") == 20 - ok > 0, (st, elapsed)
        c1 = relay.counters()
        assert c1["probes_answered"] + c1["probes_refused"] + c1["probes_dropped"] - (
            c0["probes_answered"] + c0["probes_refused"] + c0["probes_dropped"]) == 20, (c0, c1)

        # Stale and badly signed probes: dropped without an answer.
        time.sleep(1.2)
        d0 = relay.counters()["probes_dropped"]
        r = probe(client, p, "--stale", 120, "--timeout", 1)
        assert r.rc == 1 and r.line("probes sent=1 replies=0"), r
        r = probe(client, p, "--wrong-key", wrong_key, "--timeout", 1)
        assert r.rc == 1 and r.line("probes sent=1 replies=0"), r
        assert relay.counters()["probes_dropped"] == d0 + 2
    finally:
        ls.close()


def probe_request(key_path, ts_us, target_ip, target_port):
    """A PROBE_REQUEST as slotd sends it in shared mode (docs/protocol.md),
    MACed with the key in key_path."""
    k = bytes.fromhex(open(key_path).read().strip())
    target = bytes([4, 0]) + struct.pack("!H", target_port) + socket.inet_aton(target_ip) + \
        bytes(12)
    head = b"SL" + struct.pack("!BBHHQQI", 2, 0x01, 112, 0, ts_us,
                               int.from_bytes(os.urandom(8), "big"), 9) + bytes(32) + target
    return head + hmac.new(k, head, "sha256").digest()


def test_copies_of_a_probe_are_never_answered(net, relays, key, port):
    """Copies of one request, as anyone who captured it (or a spoofer
    sending them as from a victim) could send: a stale one is never
    answered, and of a fresh one's copies only the first, also once the
    source is over its rate, where RATE_LIMITED used to go to each copy (a
    reflector)."""
    relay = relays({"probe": {"requester_rate": "1", "requester_burst": "2"}})
    stale = probe_request(key, int((time.time() - 3600) * 1e6), net.server_ip, port())
    fresh = probe_request(key, int(time.time() * 1e6), net.server_ip, port())

    def flood(msg, n=300):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect((net.relay_cip, relay.probe_port))
        s.settimeout(0.001)
        got = []
        for _ in range(n):
            s.send(msg)
            try:
                got.append(s.recv(2048))
            except (socket.timeout, BlockingIOError):
                pass
        s.settimeout(1.0)       # the fresh one's answer waits for its measurement
        while True:
            try:
                got.append(s.recv(2048))
            except socket.timeout:
                break
        s.close()
        return got

    c0 = relay.counters()
    got = net.in_ns("client", lambda: flood(stale))
    assert got == [], [g[60] for g in got]
    got = net.in_ns("client", lambda: flood(fresh))
    assert len(got) == 1, [g[60] for g in got]
    c1 = relay.counters()
    assert c1["probes_dropped"] - c0["probes_dropped"] == 599, (c0, c1)
    assert c1["probes_refused"] == c0["probes_refused"], (c0, c1)


def test_reload_applies_allowed_ports(net, relays, key, servers, port):
    p1, p2 = port(), port()
    relay = relays({"policy": {"allowed_ports": str(p1)}})
    client = make_client(net, relay, key)
    servers(p2, recv_all, conns=1)
    r = client.run(p2, timeout=10)
    assert r.rc == 3 and int(r.line("pipe fail")["reason"]) == 5, r

    relay.update({"policy": {"allowed_ports": "%d,%d" % (p1, p2)}})
    relay.hup()
    end = time.monotonic() + 5
    while True:
        r = client.run(p2, timeout=10)
        if r.rc != 3 or time.monotonic() > end:
            break
        time.sleep(0.2)
    assert r.rc == 0, (r, relay.log()[-2000:])
    assert relay.proc.poll() is None

    relay.update({"policy": {"allowed_ports": str(p1)}})
    relay.hup()
    end = time.monotonic() + 5
    while True:
        r = client.run(p2, timeout=10)
        if r.rc == 3 or time.monotonic() > end:
            break
        time.sleep(0.2)
    assert r.rc == 3 and int(r.line("pipe fail")["reason"]) == 5, r


def test_sigterm_drains(net, relays, key, servers, port):
    relay = relays({"limits": {"drain_timeout": "15s"}})
    client = make_client(net, relay, key)
    a, a_digest = random_file(net, "drain_a", 4 * MiB)
    b, b_digest = random_file(net, "drain_b", 2 * MiB)
    p = port()

    def serve(c):
        got = recv_all(c)
        send_file(c, b)
        c.shutdown(socket.SHUT_WR)
        return got

    srv = servers(p, serve, conns=2)
    out = os.path.join(net.dir, "drain.out")
    with open(out, "wb") as fout:
        proc = client.start(p, stdin=subprocess.PIPE, stdout=fout)
    data = open(a, "rb").read()
    proc.stdin.write(data[: 2 * MiB])
    proc.stdin.flush()
    relay.wait_counter("bytes_client_to_server", lambda v: v >= 2 * MiB)
    relay.signal(signal.SIGTERM)
    time.sleep(0.5)
    assert relay.proc.poll() is None, "relay exited with a pipe in progress:\n" + relay.log()
    # No new pipes while draining.
    r = client.run(p, timeout=10)
    assert r.rc != 0 and not r.line("pipe ok"), r
    proc.stdin.write(data[2 * MiB:])
    proc.stdin.close()
    proc.stdin = None
    r = client.finish(proc, 20)
    assert r.rc == 0, r
    assert srv.result(0) == (4 * MiB, a_digest)
    assert sha256_file(out) == b_digest
    rc = relay.wait(5)
    assert rc == 0, (rc, relay.log()[-3000:])


def test_key_file_readable_by_others_refused(net, relays, key):
    bad = write_key(os.path.join(net.dir, "key0644"), open(key).read().strip(), mode=0o644)
    relay = relays({"relay": {"key_file": bad}}, wait=False)
    rc = relay.wait(10)
    assert rc not in (None, 0), relay.log()
    log = relay.log()
    assert bad in log, log
    assert any(w in log.lower() for w in ("mode", "permission", "group", "other", "readable")), log
    assert not os.path.exists(relay.stats) or relay.proc.poll() is not None


def test_config_check(net, relays, key):
    relay = relays(start=False)
    rc, err = relay.check_config()
    assert rc == 0, err
    relay.update({"limits": {"no_such_key": "1"}})
    lines = open(relay.conf_path).read().splitlines()
    lineno = lines.index("no_such_key = 1") + 1
    rc, err = relay.check_config()
    assert rc == 1, err
    assert "%s:%d" % (relay.conf_path, lineno) in err, err


def test_pending_limit_per_client(net, relays, key, servers, port):
    relay = relays({"limits": {"max_pending_per_client": "2", "pending_timeout": "1s"}})
    client = make_client(net, relay, key)
    p = port()
    servers(p, recv_all, conns=8)
    r = client.run(p, "--count", 4, "--no-connect", 0, timeout=10)
    assert r.rc == 3, r
    assert len(r.all("pipe ok")) == 2, r
    fails = r.all("pipe fail")
    assert len(fails) == 2 and all(int(f["reason"]) == 7 for f in fails), r
    relay.wait_counter("pipes_expired", lambda v: v == 2)
    r = client.run(p, "--count", 2, timeout=10)     # room again once they expired
    assert r.rc == 0 and len(r.all("pipe ok")) == 2, r


def test_pipe_limit(net, relays, key, servers, port):
    relay = relays({"limits": {"max_pipes": "3"}})
    client = make_client(net, relay, key)
    p = port()
    servers(p, recv_all, conns=8)
    r = client.run(p, "--count", 5, timeout=10)
    assert r.rc == 3, r
    assert len(r.all("pipe ok")) == 3, r
    fails = r.all("pipe fail")
    assert len(fails) == 2 and all(int(f["reason"]) == 6 for f in fails), r
    relay.wait_counter("pipes_open", lambda v: v == 0)
    r = client.run(p, "--count", 3, timeout=10)     # closed pipes free their places
    assert r.rc == 0 and len(r.all("pipe ok")) == 3, r

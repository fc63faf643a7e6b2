"""The relay's congestion control on the legs it sends on ([pipe] congestion):
both of a pipe's relay-side sockets use it while the client and the server
keep their own, a reload changes it for new pipes, and an algorithm the
kernel does not have is refused at start and at reload with a clear message."""

import hashlib
import os
import signal
import subprocess
import time

import pytest

from conftest import MiB, make_client, recv_all


def sysctl(net, ns, name):
    return net.run_ns(ns, "sysctl", "-n", name).stdout.strip()


def other_cc(net, ns, avoid=()):
    """An algorithm the kernel lets everyone use that is not ns's default
    (nor in avoid): the test then sees the relay's choice, not a default."""
    default = sysctl(net, ns, "net.ipv4.tcp_congestion_control")
    allowed = sysctl(net, ns, "net.ipv4.tcp_allowed_congestion_control").split()
    for cc in ("reno", "cubic", "bbr"):
        if cc != default and cc in allowed and cc not in avoid:
            return cc
    raise AssertionError("no allowed algorithm besides %s: %s" % (default, allowed))


def tcp_info(net, ns):
    """{(local, peer): congestion control} of ns's established TCP sockets."""
    out = net.run_ns(ns, "ss", "-tinH", "state", "established").stdout
    if isinstance(out, bytes):
        out = out.decode()
    socks, last = {}, None
    for line in out.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            f = line.split()
            last = (f[2], f[3])     # Recv-Q Send-Q Local Peer
            socks[last] = None
        elif last is not None and socks[last] is None:
            socks[last] = line.split()[0]
    return socks


def pipe_legs(net, relay, server_port):
    """The congestion control of the pipe's client leg (accepted on the data
    port) and server leg (connected to the server), as ss sees them."""
    socks = tcp_info(net, "relay")
    cli = [cc for (loc, _), cc in socks.items() if loc == "%s:%d" % (net.relay_cip,
                                                                    relay.data_port)]
    srv = [cc for (_, peer), cc in socks.items() if peer == "%s:%d" % (net.server_ip,
                                                                      server_port)]
    assert len(cli) == 1 and len(srv) == 1, socks
    return cli[0], srv[0]


def open_pipe(net, relay, key, servers, port):
    """A pipe through relay carrying 4 MiB of random bytes from the client,
    held open after them. Returns (client process, server, server port,
    the bytes' sha256)."""
    p = port()
    srv = servers(p, recv_all)
    client = make_client(net, relay, key)
    proc = client.start(p, stdin=subprocess.PIPE)
    data = os.urandom(4 * MiB)
    proc.stdin.write(data)
    proc.stdin.flush()
    relay.wait_counter("pipes_open", lambda v: v == 1, timeout=10)
    return proc, srv, p, hashlib.sha256(data).hexdigest()


def close_pipe(relay, proc, srv, digest):
    proc.stdin.close()
    assert proc.wait(30) == 0, proc.stderr.read()
    # Every byte arrived, intact, and the pipe closed cleanly.
    assert srv.result(timeout=30) == (4 * MiB, digest)
    relay.wait_counter("pipes_open", lambda v: v == 0, timeout=10)


def test_both_relay_legs_use_the_configured_algorithm(net, relays, key, servers, port):
    cc = other_cc(net, "relay")
    relay = relays({"pipe": {"congestion": cc}})
    proc, srv, p, digest = open_pipe(net, relay, key, servers, port)
    try:
        assert pipe_legs(net, relay, p) == (cc, cc)
        # The server keeps its own algorithm for what it sends.
        theirs = [v for (loc, _), v in tcp_info(net, "server").items()
                  if loc == "%s:%d" % (net.server_ip, p)]
        assert theirs == [sysctl(net, "server", "net.ipv4.tcp_congestion_control")], theirs
    finally:
        close_pipe(relay, proc, srv, digest)


# system, and unset (the default): the legs start with the namespace's
# default, congestion_on_loss's bbr waiting for a loss.
@pytest.mark.parametrize("conf", [{"pipe": {"congestion": "system"}}, {}],
                         ids=["system", "unset"])
def test_system_keeps_the_default(net, relays, key, servers, port, conf):
    relay = relays(conf)
    default = sysctl(net, "relay", "net.ipv4.tcp_congestion_control")
    proc, srv, p, digest = open_pipe(net, relay, key, servers, port)
    try:
        assert pipe_legs(net, relay, p) == (default, default)
    finally:
        close_pipe(relay, proc, srv, digest)


def test_reload_changes_new_pipes(net, relays, key, servers, port):
    first = other_cc(net, "relay")
    second = other_cc(net, "relay", avoid=(first,))
    relay = relays({"pipe": {"congestion": first}})
    relay.update({"pipe": {"congestion": second}})
    relay.hup()
    end = time.monotonic() + 10
    while "configuration reloaded" not in relay.log():
        assert time.monotonic() < end, relay.log()[-3000:]
        time.sleep(0.05)
    proc, srv, p, digest = open_pipe(net, relay, key, servers, port)
    try:
        assert pipe_legs(net, relay, p) == (second, second)
    finally:
        close_pipe(relay, proc, srv, digest)


@pytest.mark.parametrize("key", ["congestion", "congestion_on_loss"])
def test_unknown_algorithm_refused_at_start(net, relays, key):
    relay = relays({"pipe": {key: "nosuchcc"}}, start=False)
    rc, err = relay.check_config()
    assert rc != 0
    want = "[pipe] %s = nosuchcc: congestion control nosuchcc is not available " \
           "in this kernel (net.ipv4.tcp_available_congestion_control = " % key
    assert want in err, err
    relay.start(wait=False)
    assert relay.wait(10) not in (None, 0), relay.log()
    assert want in relay.log(), relay.log()


def test_unknown_algorithm_refused_at_reload(net, relays, key, servers, port):
    cc = other_cc(net, "relay")
    relay = relays({"pipe": {"congestion": cc}})
    relay.update({"pipe": {"congestion": "nosuchcc"}})
    relay.signal(signal.SIGHUP)
    want = "reload failed, keeping the running configuration: %s: [pipe] congestion = " \
           "nosuchcc: congestion control nosuchcc is not available" % relay.conf_path
    end = time.monotonic() + 10
    while want not in relay.log():
        assert time.monotonic() < end, relay.log()[-3000:]
        time.sleep(0.05)
    # Still running, with the algorithm it had.
    proc, srv, p, digest = open_pipe(net, relay, key, servers, port)
    try:
        assert pipe_legs(net, relay, p) == (cc, cc)
    finally:
        close_pipe(relay, proc, srv, digest)


# --- [pipe] congestion_on_loss: a leg that retransmits switches ---

def two_algorithms(net):
    """(start, on_loss): two algorithms the relay's user may set, neither the
    namespace's default, so that what ss shows is the relay's doing."""
    start = other_cc(net, "relay")
    return start, other_cc(net, "relay", avoid=(start,))


def lossy_upload(net, relay, key, servers, port, drop_every):
    """An upload of 3 MiB through relay in 256 KiB pieces 0.1 s apart, so
    that its server leg sends for over a second, with every drop_every-th
    large packet the relay sends to the server dropped on arrival by an
    iptables rule in the server's namespace (0: none; a drop in the relay's
    own OUTPUT would be a local send error, which TCP sends again without
    counting a retransmission). Returns the pipe's legs' algorithms as
    ss saw them at the end, with the pipe still open."""
    p = port()
    rule = ["INPUT", "-p", "tcp", "-d", net.server_ip, "--dport", str(p),
            "-m", "length", "--length", "1000:65535",
            "-m", "statistic", "--mode", "nth", "--every", str(drop_every), "--packet", "0",
            "-j", "DROP"]
    if drop_every:
        net.run_ns("server", "iptables", "-I", *rule)
    srv = servers(p, recv_all)
    client = make_client(net, relay, key)
    proc = client.start(p, stdin=subprocess.PIPE)
    h = hashlib.sha256()
    try:
        for _ in range(12):
            piece = os.urandom(256 * 1024)
            h.update(piece)
            proc.stdin.write(piece)
            proc.stdin.flush()
            time.sleep(0.1)
        relay.wait_counter("pipes_open", lambda v: v == 1, timeout=10)
        # Every byte acknowledged by the server: the leg is done sending.
        end = time.monotonic() + 20
        while any(line.split()[1] != "0" for line in net.run_ns(
                "relay", "ss", "-tnH", "state", "established", "dst", net.server_ip,
                ).stdout.splitlines() if line.strip()):
            assert time.monotonic() < end, "the server leg never drained"
            time.sleep(0.05)
        legs = pipe_legs(net, relay, p)
    finally:
        if drop_every:
            net.run_ns("server", "iptables", "-D", *rule, check=False)
        proc.stdin.close()
    assert proc.wait(30) == 0, proc.stderr.read()
    assert srv.result(timeout=30) == (12 * 256 * 1024, h.hexdigest())
    relay.wait_counter("pipes_open", lambda v: v == 0, timeout=10)
    return legs


def test_lossy_leg_switches(net, relays, key, servers, port):
    start, on_loss = two_algorithms(net)
    relay = relays({"pipe": {"congestion": start, "congestion_on_loss": on_loss}})
    before = relay.counters()
    cli, srv = lossy_upload(net, relay, key, servers, port, drop_every=20)
    after = relay.counters()
    # The relay sends on the server leg only (an upload): that leg lost
    # packets and switched; the client leg sent nothing and kept its own.
    assert (cli, srv) == (start, on_loss)
    assert after["congestion_switches"] - before["congestion_switches"] == 1
    assert after["congestion_checks"] - before["congestion_checks"] >= 1


def test_clean_leg_keeps_its_algorithm(net, relays, key, servers, port):
    start, on_loss = two_algorithms(net)
    relay = relays({"pipe": {"congestion": start, "congestion_on_loss": on_loss}})
    before = relay.counters()
    assert lossy_upload(net, relay, key, servers, port, drop_every=0) == (start, start)
    after = relay.counters()
    # Read while it sent (a second and more: 0.25 s, then 0.5 s later), never
    # switched.
    assert after["congestion_checks"] - before["congestion_checks"] >= 2
    assert after["congestion_switches"] == before["congestion_switches"]


def test_on_loss_off(net, relays, key, servers, port):
    start, _ = two_algorithms(net)
    relay = relays({"pipe": {"congestion": start, "congestion_on_loss": "off"}})
    assert lossy_upload(net, relay, key, servers, port, drop_every=20) == (start, start)
    c = relay.counters()
    assert c["congestion_checks"] == 0 and c["congestion_switches"] == 0

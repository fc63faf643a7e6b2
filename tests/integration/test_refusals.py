"""Pipes that must not be made: unreachable or refusing servers, policy,
bad authentication, stale and replayed requests, data connections without a pipe."""

import contextlib
import subprocess
import time

import pytest

from conftest import make_client, recv_all

REFUSED, UNREACHABLE, TIMEOUT, POLICY_ADDR, POLICY_PORT = 1, 2, 3, 4, 5
ERR_AUTH, ERR_STALE, ERR_REPLAY = 2, 3, 4


def fail_reason(r):
    line = r.line("pipe fail")
    assert line is not None, r
    return int(line["reason"])


@contextlib.contextmanager
def iptables_rule(net, ns, *rule):
    net.iptables(ns, "-I", *rule)
    try:
        yield
    finally:
        net.iptables(ns, "-D", *rule)


def test_server_refuses(relay, client, port):
    r = client.run(port(), timeout=10)
    assert r.rc == 3 and fail_reason(r) == REFUSED, r
    assert r.elapsed < 1.5, r


def test_server_unreachable_icmp(net, relay, client, port):
    p = port()
    with iptables_rule(net, "server", "INPUT", "-p", "tcp", "--dport", str(p),
                       "-j", "REJECT", "--reject-with", "icmp-host-unreachable"):
        r = client.run(p, timeout=10)
    assert r.rc == 3 and fail_reason(r) == UNREACHABLE, r
    assert r.elapsed < 1.5, r


def test_server_unreachable_no_route(net, relays, key, port):
    """A destination allowed by policy but without a route at the relay."""
    x = net.x
    net.run_ns("relay", "ip", "route", "replace", "unreachable", "10.%d.3.0/24" % x)
    relay = relays({"policy": {"allow_destinations": "%s, 10.%d.3.0/24" % (net.server_net, x)}})
    r = make_client(net, relay, key).run(80, server_ip="10.%d.3.5" % x, timeout=10)
    assert r.rc == 3 and fail_reason(r) == UNREACHABLE, r
    assert r.elapsed < 1.5, r


def test_server_no_host_on_subnet(net, relays, key, port):
    """No host answers ARP for the address: the relay's connect fails with
    EHOSTUNREACH after neighbour resolution gives up (about 3 s)."""
    relay = relays({"limits": {"connect_timeout": "6s"}})
    r = make_client(net, relay, key).run(port(), server_ip="10.%d.2.77" % net.x, timeout=15)
    assert r.rc == 3 and fail_reason(r) in (UNREACHABLE,), r
    assert 1.5 < r.elapsed < 6.5, r


def test_server_blackholed_times_out(net, relay, client, port):
    """connect_timeout is 2 s in the test config."""
    p = port()
    with iptables_rule(net, "server", "INPUT", "-p", "tcp", "--dport", str(p), "-j", "DROP"):
        r = client.run(p, timeout=15)
    assert r.rc == 3 and fail_reason(r) == TIMEOUT, r
    # connect_timeout is 2 s; the upper bound leaves slack for a loaded CI machine.
    assert 1.8 < r.elapsed < 4.5, r


@pytest.mark.parametrize("where", ["loopback", "client_subnet", "relay_itself", "outside_allow"])
def test_policy_address(net, relay, client, port, where):
    p = port()
    listener = None
    if where == "loopback":
        ip = "127.0.0.1"
        listener = net.listen("relay", ip, p)
    elif where == "client_subnet":
        ip = net.client_ip
        listener = net.listen("client", ip, p)
    elif where == "relay_itself":
        ip = net.relay_sip      # inside allow_destinations, but the relay's own
        listener = net.listen("relay", ip, p)
    else:
        ip = "192.168.77.1"
    try:
        r = client.run(p, server_ip=ip, timeout=10)
        assert r.rc == 3 and fail_reason(r) == POLICY_ADDR, r
        if listener:
            listener.settimeout(0.2)
            with pytest.raises(OSError):
                listener.accept()   # nothing was attempted
    finally:
        if listener:
            listener.close()


def test_policy_port(net, relays, key, servers, port):
    ok, bad = port(), port()
    relay = relays({"policy": {"allowed_ports": "%d" % ok}})
    client = make_client(net, relay, key)
    servers(ok, recv_all)
    bad_listener = net.listen("server", net.server_ip, bad)
    try:
        r = client.run(bad, timeout=10)
        assert r.rc == 3 and fail_reason(r) == POLICY_PORT, r
        r = client.run(ok, timeout=10)
        assert r.rc == 0, r
    finally:
        bad_listener.close()


def test_wrong_key(net, relay, client, servers, port, wrong_key):
    """An unauthentic message is not worth a signed answer: the relay closes
    the connection unanswered (issue 14)."""
    p = port()
    srv = servers(p, lambda c: None)
    r = client.run(p, "--wrong-key", wrong_key, timeout=10)
    assert r.rc == 4, r
    assert r.line("error closed") and not r.line("error AUTH"), r
    assert srv.accepted == 0
    c = relay.counters()
    assert c["control_unauthentic"] == 1 and c["control_errors"] == 0, c
    assert c["pipes_total"] == 0, c


@pytest.mark.parametrize("shift", [120, -120])
def test_stale(net, relay, client, servers, port, shift):
    """max_clock_skew defaults to 30 s; the request is 2 min old or ahead."""
    p = port()
    srv = servers(p, lambda c: None)
    r = client.run(p, "--stale", shift, timeout=10)
    assert r.rc == 4, r
    e = r.line("error")
    assert e and int(e["code"]) == ERR_STALE and e["id"] == "1", r
    assert srv.accepted == 0


def test_replay(net, relay, client, servers, port):
    p = port()
    srv = servers(p, lambda c: c.recv(1), conns=2)
    r = client.run(p, "--replay", timeout=10)
    assert r.rc == 4, r
    assert len(r.all("pipe ok")) == 1, r
    errs = r.all("error")
    assert len(errs) == 1 and int(errs[0]["code"]) == ERR_REPLAY and errs[0]["id"] == "1", r
    assert srv.accepted <= 1


def test_data_connection_without_pipe(net, relay, client):
    before = relay.counters()["data_rejected"]
    p = subprocess.run(client.net.cmd("client", *client.argv(None, "--no-pipe", "--timeout", 10)),
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=20)
    err = p.stderr.decode()
    assert p.returncode == 5 and "reset" in err, err
    assert p.stdout == b""
    relay.wait_counter("data_rejected", lambda v: v == before + 1)


def test_data_connection_from_other_port(net, relay, client, servers, port):
    """A pipe is pending for one source port; a connection from another is reset
    and the pending pipe is still usable."""
    p = port()
    servers(p, recv_all)
    proc = client.start(p, "--connect-delay", 1.0)
    time.sleep(0.4)
    q = subprocess.run(client.net.cmd("client", *client.argv(None, "--no-pipe", "--timeout", 10)),
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
    assert q.returncode == 5, q.stderr
    r = client.finish(proc, 20)
    assert r.rc == 0, r


"""slotd's packet-filter rules (src/client/rules.c) applied to a real kernel,
in a namespace of their own: atomic replacement, idempotence, removal that
leaves the operator's own rules alone, fail-open when nobody reads the queue,
and a relay's mark steering a connection to its data port."""

import atexit
import os
import re
import socket
import subprocess

import pytest

import netns as harness
import topo
from conftest import BUILD

TOOL = os.path.join(BUILD, "tests", "slot-rules")
PREFIX = "sltrl"
NS = "%s%d" % (PREFIX, os.getpid())
SO_MARK = 36


def sh(*args, check=True):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise AssertionError("%s: exit %d: %s%s" % (" ".join(map(str, args)), r.returncode,
                                                    r.stdout, r.stderr))
    return r


def ns(*args, check=True):
    return sh("ip", "netns", "exec", NS, *args, check=check)


def rules(*args, check=True):
    return ns(TOOL, *args, check=check)


def saved(table):
    return ns("iptables-save", "-t", table).stdout


def sweep():
    """Namespaces of earlier runs of this file whose process is gone."""
    for name in sh("ip", "netns", "list").stdout.split():
        m = re.match(r"^%s(\d+)$" % PREFIX, name)
        if m and not os.path.exists("/proc/%s" % m.group(1)):
            sh("ip", "netns", "del", name, check=False)


def down():
    sh("ip", "netns", "del", NS, check=False)


@pytest.fixture(scope="module")
def netns():
    if not os.access(TOOL, os.X_OK):
        pytest.exit("%s is missing: build it first (make all)" % TOOL, returncode=2)
    sweep()
    sh("ip", "netns", "add", NS)
    atexit.register(down)
    try:
        ns("ip", "link", "set", "lo", "up")
        # Addresses on lo: this kernel has no dummy links, and nothing here
        # needs to leave the namespace.
        ns("ip", "addr", "add", "192.0.2.1/24", "dev", "lo")
        # The operator's own rules, which slotd must never touch.
        ns("iptables", "-w", "-t", "mangle", "-A", "OUTPUT", "-p", "udp", "--dport", "9",
           "-j", "ACCEPT")
        ns("iptables", "-w", "-t", "nat", "-A", "OUTPUT", "-p", "udp", "--dport", "9",
           "-j", "ACCEPT")
        yield NS
    finally:
        down()


def in_ns(fn):
    """Runs fn on a thread that has entered the namespace."""
    return topo.in_netns(NS, fn)


def operator_rules_intact():
    assert "-A OUTPUT -p udp -m udp --dport 9 -j ACCEPT" in saved("mangle")
    assert "-A OUTPUT -p udp -m udp --dport 9 -j ACCEPT" in saved("nat")


def test_apply_replace_remove(netns):
    rules("apply", "-p", "80,443", "-x", "192.0.2.128/25", "1=192.0.2.10:7601")
    m, n = saved("mangle"), saved("nat")
    assert m.count("-A OUTPUT -j SLOT_HIJACK") == 1, m
    assert n.count("-A OUTPUT -j SLOT_DNAT") == 1, n
    # The jump comes first, so an earlier ACCEPT cannot skip it.
    assert m.index("-A OUTPUT -j SLOT_HIJACK") < m.index("--dport 9"), m
    assert "--queue-num 7 --queue-bypass" in m and "192.0.2.128/25 -j RETURN" in m, m
    assert "--to-destination 192.0.2.10:7601" in n, n
    operator_rules_intact()

    # Again with another relay set: replaced, not added to; one jump each.
    rules("apply", "-p", "80,443", "2=192.0.2.20:7601", "3=192.0.2.30:7601")
    m, n = saved("mangle"), saved("nat")
    assert m.count("-A OUTPUT -j SLOT_HIJACK") == 1, m
    assert n.count("-A OUTPUT -j SLOT_DNAT") == 1, n
    assert "192.0.2.10" not in n and "192.0.2.20:7601" in n and "192.0.2.30:7601" in n, n
    assert "192.0.2.128/25" not in m, m
    assert m.count("-j NFQUEUE") == 1, m

    rules("remove")
    m, n = saved("mangle"), saved("nat")
    assert "SLOT_" not in m and "SLOT_" not in n, (m, n)
    operator_rules_intact()
    rules("remove")                    # nothing left to remove: still fine


def test_leftovers_of_a_crash_are_removed(netns):
    rules("apply", "1=192.0.2.10:7601")
    # A crash between two inserts could leave a second jump.
    ns("iptables", "-w", "-t", "mangle", "-I", "OUTPUT", "-j", "SLOT_HIJACK")
    rules("remove")
    assert "SLOT_" not in saved("mangle") + saved("nat")
    operator_rules_intact()


def test_bad_rules_change_nothing(netns):
    rules("apply", "-p", "80", "1=192.0.2.10:7601")
    before = saved("mangle") + saved("nat")
    r = rules("apply", "-p", "80", "0x10000=192.0.2.10:7601", check=False)
    assert r.returncode == 1 and "cannot render" in r.stderr, r
    assert saved("mangle") + saved("nat") == before
    rules("remove")


def serve_once(addr, port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(4)
    s.settimeout(10)
    return s


def test_fail_open_and_relay_mark_steers(netns):
    """Nobody reads queue 7: hijacked SYNs pass (--queue-bypass), so a
    connection works as if slotd were not there. A connection carrying a
    relay's mark (what slotd's verdict gives) is sent to that relay's data
    port by SLOT_DNAT."""
    rules("apply", "-p", "80", "5=192.0.2.50:7601")

    def direct():
        ls = serve_once("192.0.2.1", 80)
        c = socket.create_connection(("192.0.2.1", 80), timeout=5)
        a, _ = ls.accept()
        c.sendall(b"ping")
        got = a.recv(4)
        for x in (a, c, ls):
            x.close()
        return got

    assert in_ns(direct) == b"ping"

    def steered():
        ns_addr = "192.0.2.1"
        sh("ip", "netns", "exec", NS, "ip", "addr", "add", "192.0.2.50/32", "dev", "lo",
           check=False)
        relay = serve_once("192.0.2.50", 7601)
        c = socket.socket()
        c.setsockopt(socket.SOL_SOCKET, SO_MARK, 5)
        c.settimeout(5)
        c.connect((ns_addr, 80))     # nothing listens on :80 now: only DNAT can answer
        a, peer = relay.accept()
        c.sendall(b"steered")
        got = a.recv(7)
        for x in (a, c, relay):
            x.close()
        return got

    assert in_ns(steered) == b"steered"
    rules("remove")

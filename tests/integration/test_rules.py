"""slotd's packet-filter rules (src/client/rules.c) applied to a real kernel,
in a namespace of their own: atomic replacement, idempotence, removal that
leaves the operator's own rules alone, fail-open when nobody reads the queue,
and a relay's mark steering a connection to its data port; both families and
the gateway's jumps; and the nft backend's table (replaced whole, listed,
removed, steering by mark over IPv4 and IPv6)."""

import atexit
import os
import re
import socket
import subprocess
import threading

import pytest

import netns as harness
import topo
from conftest import BUILD

TOOL = os.path.join(BUILD, "tests", "slot-rules")
PREFIX = "sltrl"
NS = "%s%d" % (PREFIX, os.getpid())
SO_MARK = 36


def sh(*args, check=True, input_text=None):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=30,
                       input=input_text)
    if check and r.returncode != 0:
        raise AssertionError("%s: exit %d: %s%s" % (" ".join(map(str, args)), r.returncode,
                                                    r.stdout, r.stderr))
    return r


def ns(*args, check=True, input_text=None):
    return sh("ip", "netns", "exec", NS, *args, check=check, input_text=input_text)


def rules(*args, check=True):
    return ns(TOOL, *args, check=check)


def saved(table):
    """The table's rules, without iptables-save's comments (their time
    stamps differ between two calls)."""
    return "".join(l for l in ns("iptables-save", "-t", table).stdout.splitlines(True)
                   if not l.startswith("#"))


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
    # A jump of another shape (an older version's, a sysadmin's copy), which
    # the exact check does not match, would keep the chain referenced: it
    # is found in the saved rules and deleted, and the chains go.
    rules("apply", "1=192.0.2.10:7601")
    ns("iptables", "-w", "-t", "mangle", "-I", "OUTPUT", "-p", "tcp", "-j", "SLOT_HIJACK")
    ns("iptables", "-w", "-t", "nat", "-A", "OUTPUT", "-d", "192.0.2.0/24", "-j", "SLOT_DNAT")
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


# ---------------------------------------------------------------- both families, gateway, nft

def test_both_families_and_gateway_jumps(netns):
    """-b: the same chains in iptables and ip6tables; gateway mode adds
    SLOT_GW from PREROUTING (LAN interfaces only) and nat PREROUTING's jump;
    a start in local mode after a crash in gateway mode drops the stale
    PREROUTING jumps; remove takes everything of both families."""
    rules("apply", "-b", "-p", "443", "-g", "lan0,lan1", "-l", "1=192.0.2.10:7601",
          "2=[2001:db8::10]:7601")
    for save, relay in (("iptables-save", "192.0.2.10:7601"),
                        ("ip6tables-save", "[2001:db8::10]:7601")):
        m = ns(save, "-t", "mangle").stdout
        n = ns(save, "-t", "nat").stdout
        assert "-A PREROUTING -j SLOT_GW" in m and "-A OUTPUT -j SLOT_HIJACK" in m, m
        assert "-A SLOT_GW -i lan0 -j SLOT_HIJACK" in m and "-i lan1" in m, m
        assert "-A PREROUTING -j SLOT_DNAT" in n and "-A OUTPUT -j SLOT_DNAT" in n, n
        assert n.count("-j DNAT") == 1 and relay in n, n
    listed = rules("list", "-b").stdout
    assert "ipv6\tmangle\tSLOT_GW" in listed and "ipv4\tmangle\tPREROUTING" in listed, listed

    rules("apply", "-b", "-p", "443", "1=192.0.2.10:7601")     # local mode again
    for save in ("iptables-save", "ip6tables-save"):
        m = ns(save, "-t", "mangle").stdout
        n = ns(save, "-t", "nat").stdout
        assert "-A PREROUTING -j SLOT_GW" not in m and "-A PREROUTING -j SLOT_DNAT" not in n
        assert "-A OUTPUT -j SLOT_HIJACK" in m, m
    rules("remove", "-b")
    for save in ("iptables-save", "ip6tables-save"):
        assert "SLOT_" not in ns(save, "-t", "mangle").stdout + ns(save, "-t", "nat").stdout
    operator_rules_intact()


NFT_QUEUE_PROBE = "table inet slot_probe {\n\tchain c {\n\t\ttcp dport 9 queue num 9 bypass\n\t}\n}\n"


def nft_queue_works():
    return sh("ip", "netns", "exec", NS, "nft", "-c", "-f", "/dev/stdin", check=False,
              input_text=NFT_QUEUE_PROBE).returncode == 0


def nft_install(*args):
    """The nft backend's table: slot-rules apply -n where the kernel takes
    its queue rule; elsewhere (no CONFIG_NFT_QUEUE) the same rendered
    transaction with each queue statement made an accept, so that the rest
    (the transaction, the chains, hooks and priorities, the DNAT by mark) is
    still the kernel's to check."""
    if nft_queue_works():
        rules("apply", "-n", *args)
        return
    text = rules("render", "-n", *args).stdout
    text = re.sub(r"queue num \d+ bypass", "accept", text)
    r = sh("ip", "netns", "exec", NS, "nft", "-f", "/dev/stdin", input_text=text, check=False)
    assert r.returncode == 0, r.stderr


def nft_table():
    r = ns("nft", "list", "table", "inet", "slot", check=False)
    return r.stdout if r.returncode == 0 else None


def test_nft_table_replace_list_remove(netns):
    """The nft backend's table in a real kernel: installed, replaced whole by
    a second set (no rule of the first left), read back with counters,
    removed (twice: absent is fine); the operator's own table untouched."""
    ns("nft", "-f", "/dev/stdin", input_text="table inet operator {\n\tchain o {\n"
       "\t\ttype filter hook output priority 0; policy accept;\n"
       "\t\tudp dport 9 accept\n\t}\n}\n")
    try:
        nft_install("-p", "80,443,8000-8099", "-x", "192.0.2.128/25,2001:db8:f::/48", "-g",
                    "lan0", "-l", "1=192.0.2.10:7601", "2=[2001:db8::10]:7601")
        t = nft_table()
        assert "dnat ip to 192.0.2.10:7601" in t and "dnat ip6 to [2001:db8::10]:7601" in t, t
        assert "ip daddr 192.0.2.128/25" in t and "ip6 daddr 2001:db8:f::/48" in t, t
        assert "tcp dport { 80, 443, 8000-8099 }" in t, t
        assert 'iifname "lan0" jump hijack' in t and "hook prerouting" in t, t
        listed = rules("list", "-n").stdout
        assert "inet\tslot\thijack\t" in listed and "inet\tslot\tto_relay\t" in listed, listed

        nft_install("-p", "443", "3=192.0.2.30:7601")
        t = nft_table()
        assert "192.0.2.10" not in t and "2001:db8::10" not in t and "lan0" not in t, t
        assert "dnat ip to 192.0.2.30:7601" in t and "hook prerouting" not in t, t
        assert "tcp dport 443" in t or "tcp dport { 443 }" in t, t

        rules("remove", "-n")
        assert nft_table() is None
        rules("remove", "-n")
        assert "udp dport 9 accept" in ns("nft", "list", "table", "inet", "operator").stdout
    finally:
        ns("nft", "delete", "table", "inet", "operator", check=False)
        ns("nft", "delete", "table", "inet", "slot", check=False)


def test_nft_relay_mark_steers_both_families(netns):
    """A connection carrying a relay's mark (slotd's verdict) goes to that
    relay's data port through the table's to_relay chain, over IPv4 and over
    IPv6."""
    ns("ip", "addr", "add", "2001:db8::1/64", "dev", "lo", "nodad", check=False)
    ns("ip", "addr", "add", "2001:db8::50/128", "dev", "lo", "nodad", check=False)
    ns("ip", "addr", "add", "192.0.2.50/32", "dev", "lo", check=False)
    nft_install("-p", "80", "5=192.0.2.50:7601", "6=[2001:db8::50]:7601")
    try:
        def steered(fam, dst, relay_addr, mark):
            ls = socket.socket(fam)
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind((relay_addr, 7601))
            ls.listen(4)
            ls.settimeout(10)
            c = socket.socket(fam)
            c.setsockopt(socket.SOL_SOCKET, SO_MARK, mark)
            c.settimeout(5)
            c.connect((dst, 80))     # nothing listens on :80: only the DNAT answers
            a, _ = ls.accept()
            c.sendall(b"steered")
            got = a.recv(7)
            for x in (a, c, ls):
                x.close()
            return got

        assert in_ns(lambda: steered(socket.AF_INET, "192.0.2.1", "192.0.2.50", 5)) == \
            b"steered"
        assert in_ns(lambda: steered(socket.AF_INET6, "2001:db8::1", "2001:db8::50", 6)) == \
            b"steered"
        listed = rules("list", "-n").stdout
        hits = [l.split("\t") for l in listed.splitlines() if "\tto_relay\t" in l]
        assert len(hits) == 2 and all(int(h[3]) >= 1 for h in hits), listed

        # A pipe set up before a replacement of the table keeps its
        # translation: the transaction never leaves conntrack unused.
        def across_replacement():
            ls = socket.socket()
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind(("192.0.2.50", 7601))
            ls.listen(4)
            ls.settimeout(10)
            c = socket.socket()
            c.setsockopt(socket.SOL_SOCKET, SO_MARK, 5)
            c.settimeout(5)
            c.connect(("192.0.2.1", 80))
            a, _ = ls.accept()
            a.settimeout(5)
            c.sendall(b"before")
            got = [a.recv(6)]
            nft_install("-p", "443", "7=192.0.2.70:7601")     # relay 5 gone
            c.sendall(b"after")
            got.append(a.recv(5))
            a.sendall(b"back")
            got.append(c.recv(4))
            for x in (a, c, ls):
                x.close()
            return got

        assert in_ns(across_replacement) == [b"before", b"after", b"back"]
    finally:
        rules("remove", "-n")


def test_nft_replace_is_atomic(netns):
    """Thirty replacements of the table, alternating two relay sets, while
    another thread lists it without pause: every listing shows one whole set
    (its two DNAT rules, its queue rule, its hooks), never none, half of one
    or a mix."""
    sets = (("1=192.0.2.11:7601", "2=192.0.2.12:7601"),
            ("3=192.0.2.13:7601", "4=192.0.2.14:7601"))
    nft_install("-p", "80", *sets[0])
    stop = threading.Event()
    seen = {"a": 0, "b": 0, "bad": []}

    def watch():
        while not stop.is_set():
            t = nft_table()
            has = [a.split("=")[1] in (t or "") for s in sets for a in s]
            whole = t is not None and "jump hijack" in t and "jump to_relay" in t and \
                "tcp dport 80" in t
            if whole and has == [True, True, False, False]:
                seen["a"] += 1
            elif whole and has == [False, False, True, True]:
                seen["b"] += 1
            else:
                seen["bad"].append(t)

    w = threading.Thread(target=watch)
    w.start()
    try:
        for i in range(30):
            nft_install("-p", "80", *sets[(i + 1) % 2])
    finally:
        stop.set()
        w.join(30)
        rules("remove", "-n")
    assert not seen["bad"], seen["bad"][:2]
    assert seen["a"] > 0 and seen["b"] > 0, seen


def test_syns_queued_while_slotd_binds_go_unheld(netns):
    """Rules left by an earlier run (or a sysadmin's) queue SYNs before
    slotd has bound the queue, and the bind reads until the kernel's ack,
    so SYNs can arrive in the middle of it, before slotd can hold one
    (it crashed on such a SYN). synq accepts them unheld instead. A flood of
    SYNs runs while slot-synq-bind binds the queue over and over: no packet
    reaches the callback before the bind returns, and some were queued
    during a bind (else the race was not exercised)."""
    rule = ["-t", "mangle", "-A", "OUTPUT", "-p", "tcp", "--syn", "--dport", "9",
            "-j", "NFQUEUE", "--queue-num", "77", "--queue-bypass"]
    ns("iptables", "-w", *rule)
    try:
        r = ns(os.path.join(BUILD, "tests", "slot-synq-bind"), "77", "9", "30", check=False)
    finally:
        ns("iptables", "-w", *(["-D" if a == "-A" else a for a in rule]))
    got = dict(kv.split("=") for kv in r.stdout.split())
    assert r.returncode == 0 and got["early"] == "0", (r.returncode, r.stdout, r.stderr[-500:])
    assert int(got["bind_accepted"]) >= 1, r.stdout
    assert "packets queued while binding went through unheld" in r.stderr

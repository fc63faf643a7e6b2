"""Chains of relays chosen by slotd on the emulated WAN, the whole deployment:
relays register with slot-dird and measure each other, slot-dird sends its
landmarks (here every relay) with their RTT rows, slotd computes every relay's
lead-in with its ranking and, with k = 1, probes only the first relay of the
chain-aware ranking.

    client --20 ms-- relay-a --10 ms-- relay-b --5 ms-- server
    client --200 ms-- server, relay-b, relay-c; relay-a --200 ms-- server
    relay-c: 30 ms from relay-b, 5 from the server, 200 from relay-a

No single relay beats the direct path (each has a 200 ms loop), the chain
client -> relay-a -> relay-b -> server has loops of 20, 10 and 5 ms. The
ranking puts relay-b first: it ends that chain, for servers near it and near
relay-c (relay-c ends a longer one, through relay-a and relay-b, 30 ms; relay-a
alone helps only servers near relay-b). slotd probes relay-b alone, and its
answer (200 + 5 ms) comes within 1.25 x the direct RTT: the decision is the
chain, through relay-a first then relay-b. Sending PIPE_ESTABLISH_CHAIN is the
data plane's; until it is there the pipe goes through relay-a alone, so the
test checks the decision (counters, `slotctl json`, the log line) and the
transfer, not which relay of the chain reaches the server.

A relay with `[chain] allow = no` says on its control link that it takes no
chains (docs/protocol.md, KEEPALIVE's CHAINS): relay-a so configured is on
no lead-in (the connection goes direct, not through relay-a then relay-b);
relay-b so configured still ends the chain through relay-a, which sends it a
plain PIPE_ESTABLISH.
"""

import errno
import json
import os
import re
import subprocess

import pytest

import slotbed
from slotbed import BUILD, hostport

LIBGET = os.path.join(BUILD, "tests", "slot-libget")
TESTCLIENT = os.path.join(BUILD, "tests", "slot-testclient")
PY = "/usr/bin/python3"

PATHS = {"relay-a": (20, 200), "relay-b": (200, 5), "relay-c": (200, 5)}
PAIRS = [("relay-a", "relay-b", 10), ("relay-b", "relay-c", 30), ("relay-a", "relay-c", 200)]


def wait_for(pred, timeout, what):
    return slotbed.wait_for(pred, timeout, what, interval=0.2)


@pytest.fixture(scope="module")
def bed():
    yield from slotbed.directory_bed(PATHS, PAIRS, direct_rtt=200, other_rtt=100)


def measured(bed):
    return bed.relays_measured(bed.dird_measuring)


def start_slotd(bed, tag, **select):
    return bed.cover_slotd(bed.dird_measuring, tag, **select)


def ranks(s):
    """slotd's "relays" command in JSON: {control endpoint: rank}."""
    t = json.loads(slotbed.unix_request(s.sock, b"relays json\n"))
    return {x["relay"]: x.get("rank") for x in t["relays"]}


def chain_ranked(bed, s):
    """Waits until slotd s ranks relay-b first as the end of a chain: every
    relay but relay-a has a lead-in (through relay-a, or relay-b for
    relay-c). Returns relay-a's and relay-b's control endpoints."""
    a, b = bed.relay("relay-a").control, bed.relay("relay-b").control
    wait_for(lambda: s.counters()["relays_with_lead_in"] >= 2, 30, "lead-ins")
    try:
        wait_for(lambda: ranks(s).get(b) == 0, 30, "relay-b ranked first")
    except AssertionError as e:
        raise AssertionError("%s: %s; landmarks %s" % (
            e, slotbed.unix_request(s.sock, b"relays json\n"), bed.dird_measuring.listing()))
    return a, b


def test_chain_chosen_through_the_lead_in(bed):
    wait_for(lambda: measured(bed), 40, "every relay measuring the others")
    size, sha = bed.nginx.files["f"]
    s = start_slotd(bed, "chain")
    try:
        a, b = chain_ranked(bed, s)
        res = bed.curl(bed.nginx.url("f", query="id=firstchain"), timeout=60)
        assert res.rc == 0 and res.sha == sha, res
        c = s.counters()
        assert c["decisions_chain"] == 1 and c["probes_sent"] == 1, c
        d = [x for x in s.recent() if x["verdict"] == "relay"][-1]
        assert d["relay"] == a and d["chain"] == [b], d
        # The chain's path: its longest loop, about 20 ms; every other
        # choice (relay-a or relay-b alone, direct) has a 200 ms loop. The
        # client-relay-a part is the control link's smoothed RTT, which a
        # busy machine inflates: the bound is halfway, not near 20 ms.
        assert 15000 <= d["path_rtt_us"] <= 100000, d
        assert "via %s > %s" % (a, b) in s.log()
        # The data plane takes it from relay-a (relay-b once it sends the
        # chain): either way a relay of the chain reaches the server.
        assert bed.nginx.peer_of("id=firstchain") in (bed.ip("relay-a"), bed.ip("relay-b"))
        # The cache keeps the whole chain: the next connection to the server
        # takes it again without probing.
        res = bed.curl(bed.nginx.url("f", query="id=cachedchain"), timeout=60)
        assert res.rc == 0 and res.sha == sha, res
        c = s.counters()
        assert c["cache_hits"] == 1 and c["probes_sent"] == 1, c
        d = [x for x in s.recent() if x["verdict"] == "relay"][-1]
        assert d["cached"] and d["relay"] == a and d["chain"] == [b], d
        assert bed.nginx.peer_of("id=cachedchain") == bed.nginx.peer_of("id=firstchain")
    finally:
        s.stop()


def test_avoided_relay_leads_no_chain(bed):
    """A program's avoid= holds for a chain's lead-in too: with relay-a
    avoided, relay-b (probed) cannot be reached through it, and alone its
    200 ms loop does not beat the direct path: direct. Without the avoid,
    the same program's connection takes the chain through relay-a."""
    wait_for(lambda: measured(bed), 40, "every relay measuring the others")
    size, sha = bed.nginx.files["f"]
    s = start_slotd(bed, "avoidlead")
    try:
        a, _ = chain_ranked(bed, s)
        got = {}
        for tag, opts in (("avoided", ["-a", a]), ("free", [])):
            out = os.path.join(bed.dir, "libget-%s.out" % tag)
            r = bed.run_client(LIBGET, *opts, "-s", s.lib_sock, bed.ip("server"), "80",
                               "/f/f?id=" + tag, out, check=False, timeout=60)
            res = json.loads(r.stdout.strip().splitlines()[-1])
            assert r.returncode == 0 and slotbed.sha256_file(out) == sha, (r, res)
            got[tag] = res
        assert got["avoided"]["state"] == "direct", got
        assert bed.nginx.peer_of("id=avoided") == bed.ip("client")
        assert got["free"]["state"] == "relayed" and got["free"]["relay"] == a, got
        assert s.counters()["decisions_chain"] == 1
    finally:
        s.stop()


def test_max_chain_1_goes_direct(bed):
    # The same overlay without chains: relay-b's path is its 200 ms loop,
    # no better than direct, so the connection goes direct.
    wait_for(lambda: measured(bed), 40, "every relay measuring the others")
    size, sha = bed.nginx.files["f"]
    s = start_slotd(bed, "nochain", max_chain=1)
    try:
        res = bed.curl(bed.nginx.url("f", query="id=nochain"), timeout=60)
        assert res.rc == 0 and res.sha == sha, res
        c = s.counters()
        assert c["decisions_chain"] == 0 and c["relays_with_lead_in"] == 0, c
        assert c["decisions_direct"] >= 1, c
        assert bed.nginx.peer_of("id=nochain") == bed.ip("client")
    finally:
        s.stop()


def takes_chains(s):
    t = json.loads(slotbed.unix_request(s.sock, b"relays json\n"))
    return {x["relay"]: x["takes_chains"] for x in t["relays"]}


def test_no_chain_forwarded_by_a_relay_that_disallows_chains(bed):
    wait_for(lambda: measured(bed), 40, "every relay measuring the others")
    size, sha = bed.nginx.files["f"]
    ra = bed.relay("relay-a")
    a, b = ra.control, bed.relay("relay-b").control
    ra.reload({"chain": {"allow": "no"}})
    s = None
    try:
        s = start_slotd(bed, "nofwd")
        assert takes_chains(s) == {a: False, b: True, bed.relay("relay-c").control: True}
        wait_for(lambda: s.counters()["relays_with_lead_in"] >= 1, 30, "lead-ins")
        c0 = ra.counters()
        res = bed.curl(bed.nginx.url("f", query="id=nofwd"), timeout=60)
        assert res.rc == 0 and res.sha == sha, res
        c = s.counters()
        # relay-a may not forward the chain to relay-b, and no other chain
        # is worth it: no chain, whatever the path
        assert c["decisions_chain"] == 0, c
        assert all(not x.get("chain") for x in s.recent()), s.recent()
        assert "via %s >" % a not in s.log()
        assert slotbed.deltas(c0, ra.counters())["chains_requested"] == 0
    finally:
        if s:
            s.stop()
        ra.reload({"chain": {"allow": "yes"}})


def test_chain_ends_at_a_relay_that_disallows_chains(bed):
    wait_for(lambda: measured(bed), 40, "every relay measuring the others")
    size, sha = bed.nginx.files["f"]
    ra, rb = bed.relay("relay-a"), bed.relay("relay-b")
    a, b = ra.control, rb.control
    rb.reload({"chain": {"allow": "no"}})
    s = None
    try:
        s = start_slotd(bed, "lastnofwd")
        assert takes_chains(s)[b] is False and takes_chains(s)[a] is True
        # A ranking made before relay-a's link was up could rank relay-b
        # first with no lead-in: probed alone it loses to the direct path.
        # So: a ranking with every relay's RTT and relay-b's lead-in.
        wait_for(lambda: s.counters()["relays_with_lead_in"] >= 1 and
                 slotbed.ranked_with_every_rtt(s) and ranks(s).get(b) == 0, 30,
                 "relay-b ranked first with its lead-in")
        ca, cb = ra.counters(), rb.counters()
        res = bed.curl(bed.nginx.url("f", query="id=lastnofwd"), timeout=60)
        assert res.rc == 0 and res.sha == sha, res
        c = s.counters()
        assert c["decisions_chain"] == 1, c
        d = [x for x in s.recent() if x["verdict"] == "relay"][-1]
        assert d["relay"] == a and d["chain"] == [b], d
        # relay-a forwards it; relay-b, last, gets a plain PIPE_ESTABLISH
        assert bed.nginx.peer_of("id=lastnofwd") == bed.ip("relay-b")
        da, db = slotbed.deltas(ca, ra.counters()), slotbed.deltas(cb, rb.counters())
        assert da["chains_requested"] == 1 and da["chains_joined"] == 1, da
        assert db["chains_requested"] == 0 and db["pipes_total"] == 1, db
    finally:
        if s:
            s.stop()
        rb.reload({"chain": {"allow": "yes"}})


def chain_request(bed, relay, hop_ctl, hop_data):
    """One PIPE_ESTABLISH_CHAIN to relay (slot-testclient, a client
    certificate) naming one next relay, to nginx in the server host: (the
    PIPE_FAIL next-hop detail, an errno, or None if it went through; the
    client's lines)."""
    a = bed.auth_for("client", "chain-select-test")
    r = subprocess.run(bed.bed.cmd("client", TESTCLIENT, "--id-key", a["key"], "--id-cert",
                                   a["certificate"], "--ca", a["ca"], "--relay", relay.control,
                                   "--timeout", "20", "--server", "%s:80" % bed.ip("server"),
                                   "--hop", "%s=%s" % (hop_ctl, hop_data), "--no-connect", "0"),
                       capture_output=True, text=True, timeout=60)
    err = r.stderr.splitlines()
    for line in err:
        m = re.match(r"pipe fail next-hop detail=(\d+) ", line)
        if m:
            return int(m.group(1)), err
    assert r.returncode == 0 and any(x.startswith("pipe ok") for x in err), (r.returncode, err)
    return None, err


# Run in relay-b's host: counts the connections to a port there that is not
# relay-b's data port (a service of the host a chain must not reach).
TRAP = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(8)
print("ready", flush=True)
while True:
    c, peer = s.accept()
    print("accepted %s" % (peer,), flush=True)
    c.close()
"""


def test_next_hops_are_the_listed_relays(bed):
    """[chain] next_hops = listed (the default): a next relay must be one
    of the relay's directory listing, at the data port it registered. A
    chain naming relay-b at another port of its host is refused (EINVAL)
    and no connection reaches that port; relay-b moved to a port relay-a's
    listing (list_interval 1h) does not have is refused (ENOENT), which
    makes relay-a list again within 10 s, and then taken. Last in the
    module: relay-b moves, and is put back."""
    wait_for(lambda: measured(bed), 60, "every relay measured")
    ra, rb = bed.relay("relay-a"), bed.relay("relay-b")
    ra.stop()
    ra.update({"directory": {"list_interval": "1h"}})
    ra.start()
    wait_for(lambda: ra.counters()["dir_lists"] >= 1 and ra.counters()["peers"] == 2, 20,
             "relay-a's listing")
    # the listed relay at its listed data port: taken
    detail, err = chain_request(bed, ra, rb.control, hostport(rb.ip, rb.data_port))
    assert detail is None, err

    trap_port = 7650
    trap = bed.bed.popen("relay-b", [PY, "-c", TRAP, rb.ip, str(trap_port)],
                         stdout=subprocess.PIPE, text=True)
    moved = False
    try:
        assert trap.stdout.readline().strip() == "ready"
        c0 = ra.counters()
        detail, err = chain_request(bed, ra, rb.control, hostport(rb.ip, trap_port))
        assert detail == errno.EINVAL, err
        assert "a data port not the one the directory lists" in ra.log()
        d = slotbed.deltas(c0, ra.counters())
        assert d["chains_refused"] == 1 and d["chain_links"] == 0, d

        # relay-b registers again at ports 7700/7701, which relay-a's
        # listing, an hour old by its schedule, does not have
        rb.stop()
        moved = True
        rb.ctl_port, rb.probe_port, rb.data_port = 7700, 7700, 7701
        rb.update({"relay": {"probe_listen": hostport(rb.ip, 7700),
                             "control_listen": hostport(rb.ip, 7700),
                             "data_listen": hostport(rb.ip, 7701)}})
        rb.start()
        wait_for(lambda: rb.control in bed.dird_measuring.listing(), 20,
                 "the directory to list relay-b at 7700")
        lists = ra.counters()["dir_lists"]
        detail, err = chain_request(bed, ra, rb.control, hostport(rb.ip, rb.data_port))
        assert detail == errno.ENOENT, err
        assert "a next relay not in the directory's listing" in ra.log()
        # listed again soon, not in an hour: then the chain is taken
        wait_for(lambda: ra.counters()["dir_lists"] > lists, 15, "relay-a to list again")
        detail, err = chain_request(bed, ra, rb.control, hostport(rb.ip, rb.data_port))
        assert detail is None, err
    finally:
        trap.kill()
        accepted = [x for x in trap.stdout.read().splitlines() if x.startswith("accepted")]
        if moved:
            rb.stop()
            rb.ctl_port, rb.probe_port, rb.data_port = slotbed.RELAY_PORT, slotbed.RELAY_PORT, \
                slotbed.RELAY_PORT + 1
            rb.update({"relay": {"probe_listen": hostport(rb.ip, rb.probe_port),
                                 "control_listen": hostport(rb.ip, rb.ctl_port),
                                 "data_listen": hostport(rb.ip, rb.data_port)}})
            rb.start()
        ra.stop()
        ra.update({"directory": {"list_interval": "500ms"}})
        ra.start()
    assert accepted == [], accepted

"""slotd, the client daemon, on the emulated WAN test bed (tests/integration/slotbed.py).

One test bed for the module:

    client --80 ms-- server          (direct)
    client --40-- relay1 --40-- server   path 40 ms: the relay wins
    client --80-- relay2 --80-- server   path 80 ms: no gain
    client --30-- relay3 --30-- server   the best, but silenced when a test
                                         drops its probes

slot-relayd runs in every relay host, nginx in the server host (files of
random bytes with known sha256, PUT under /up/, an access log naming the peer
of every request: the relay's address when relayed, the client's when
direct). Each test starts slotd in the client host with the config it needs
(and stops it with SIGTERM at the end). Every transfer is checked by sha256
end to end. The only wall-clock bound is the decision time of
test_silent_relays_do_not_delay_the_decision, which is the requirement itself.
"""

import json
import os
import re
import signal
import subprocess
import time

import pytest

import slotbed
from slotbed import KiB, MiB

DIRECT_RTT = 80            # ms, client - server
RELAYS = {"relay1": (40, 40), "relay2": (80, 80), "relay3": (30, 30)}
# c_wait 2, not the bed's 1.25: relay1's answer needs 80 ms of the 100 the
# latter leaves, and a loaded machine's late loops took the 20 ms margin
# (CI: "no relay reached the server in time", the download went direct).
# slotd decides on relay1's answer as soon as it comes all the same.
C_WAIT = 2
# the decision bound: C_WAIT * RTT_direct, plus 10% and 30 ms for scheduling
# (slotd, the relays and the emulator share 2 cores)
DECIDE_SLACK_FACTOR = 1.10
DECIDE_SLACK_MS = 30

FILES = {"tiny": 4 * KiB, "small": 100 * KiB, "big": 4 * MiB}

COUNTERS = ("syn_received syn_retransmits_dropped syn_malformed conns_held cache_hits "
            "cache_misses probes_sent probe_replies direct_probes decisions_direct "
            "decisions_relay repairs relay_before_direct pipes_ok pipes_failed pipes_timeout hold_timeouts "
            "held_overflow relays_up relays_configured reloads reload_failures "
            "rules_applied").split()
DECISION_KEYS = {"client", "server", "verdict", "relay", "why", "rtt_direct_us", "path_rtt_us",
                 "decide_us", "probes", "beside", "cached", "early"}
RELAY_KEYS = {"control", "data_port", "group", "mark", "state", "quarantined"}


def need_slotd():
    if not os.access(slotbed.SLOTD, os.X_OK):
        if not os.path.exists(slotbed.SLOTD_SRC):
            pytest.skip("slotd not written yet (%s)" % slotbed.SLOTD_SRC)
        pytest.fail("%s is missing: build it first (make all)" % slotbed.SLOTD)


@pytest.fixture(scope="module")
def sb():
    b = slotbed.SlotBed(RELAYS, direct_rtt=DIRECT_RTT).up()
    try:
        for name, size in FILES.items():
            b.nginx.add_file(name, size)
        b.nginx.start()
        yield b
    finally:
        b.down()


@pytest.fixture
def tags(request):
    """tags() -> a fresh request id for this test (found again in nginx's log)."""
    base = re.sub(r"[^A-Za-z0-9_-]", "_", request.node.name)[:60]
    n = [0]

    def make():
        n[0] += 1
        return "%s-%d" % (base, n[0])
    return make


@pytest.fixture
def slotd(sb, request):
    """Factory: slotd(relays=("relay1",), overrides=None, extra_relays=()) starts
    slotd with those relays of the bed (and raw `relay =` values); stopped
    (SIGTERM) at the end; leftovers of a SIGKILL are removed; logs printed
    when the test fails."""
    need_slotd()
    started = []

    def start(relays=("relay1",), overrides=None, extra_relays=(), wait=True, relays_up=None):
        s = sb.slotd([sb.relay(n) for n in relays])
        s.extra_relay_lines = list(extra_relays)
        s.update({"select": {"c_wait": C_WAIT}})
        s.update(overrides or {})
        started.append(s)
        return s.start(wait=wait, relays_up=relays_up)

    yield start
    for s in started:
        s.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for s in started:
            print("---- slotd %d (%s) ----\n%s" % (s.n, s.log_path, s.log()[-15000:]))
        for r in sb.relays.values():
            print("---- %s (%s) ----\n%s" % (r.host, r.log_path, r.log()[-5000:]))
    sb.remove_slot_rules()


# ---------------------------------------------------------------- helpers

def fetch(sb, tag, name="small", tool="curl", port=80, args=(), timeout=60):
    """Downloads /f/NAME?id=TAG with curl or wget in the client host; checks
    the bytes; returns the Result with .peer = the address nginx saw."""
    url = sb.nginx.url(name, port=port, query="id=" + tag)
    if tool == "curl":
        r = sb.curl(url, args=args, timeout=timeout)
    else:
        r = sb.wget(url, timeout=timeout)
    size, sha = sb.nginx.files[name]
    assert r.rc == 0, r
    if tool == "curl":
        assert r.status == 200, r
    assert r.size == size and r.sha == sha, r
    r.peer = sb.nginx.peer_of("id=%s " % tag)
    return r


def client_ep(sb, r):
    return "%s:%d" % (sb.ip("client"), r.local_port)


def server_ep(sb, port=80):
    return "%s:%d" % (sb.ip("server"), port)


def assert_relayed(sb, s, r, relay, port=80):
    """r went through relay: slotd's decision, conntrack's DNAT, nginx's peer."""
    d = s.decision(client=client_ep(sb, r))
    assert d["verdict"] == "relay" and d["relay"] == relay.control, d
    assert d["server"] == server_ep(sb, port), d
    ct = sb.ct_entry(r.local_port, dst=sb.ip("server"), dport=port)
    assert ct is not None and ct.dnat == (relay.ip, relay.data_port), ct
    assert r.peer == relay.ip, (r.peer, relay.ip)
    return d


def assert_direct(sb, r):
    """r went straight to the server: no DNAT, nginx saw the client."""
    assert r.peer == sb.ip("client"), (r.peer, sb.ip("client"))
    ct = sb.ct_entry(r.local_port, dst=sb.ip("server")) if r.local_port else None
    assert ct is None or ct.dnat is None, ct


def kernel_queue_conntrack():
    """Whether the running kernel can attach a queued packet's conntrack
    entry to it (CONFIG_NETFILTER_NETLINK_GLUE_CT): True, False, or None
    where its config cannot be read."""
    try:
        r = subprocess.run(["zcat", "/proc/config.gz"], capture_output=True, text=True)
    except OSError:
        return None
    if r.returncode != 0 or not r.stdout:
        return None
    return re.search(r"^CONFIG_NETFILTER_NETLINK_GLUE_CT=[ym]$", r.stdout, re.M) is not None


def assert_synack_conntrack(s, c0, c1, synacks):
    """slotd's queue got the conntrack entries of the relays' SYN-ACKs (at
    least `synacks` of them) where the kernel attaches them; where it
    cannot, slotd said so at start, no SYN-ACK came with an entry, and a
    failed pipe's SYN-ACK was dropped as the rules queue only those with
    DNAT."""
    dc = slotbed.deltas(c0, c1)
    has = kernel_queue_conntrack()
    if has is not None:
        assert c1["queue_conntrack"] == int(has), (has, c1["queue_conntrack"])
    if c1["queue_conntrack"]:
        assert dc["synack_ct"] >= synacks, dc
        assert dc["synack_dropped_rule"] == 0, dc
        assert "attaches no conntrack entry" not in s.log()
    else:
        assert dc["synack_ct"] == 0 and dc["synack_dropped_ct"] == 0, dc
        assert s.log().count("the kernel attaches no conntrack entry to queued packets") == 1, \
            s.log()[-3000:]
    assert dc["synack_dropped"] == dc["synack_dropped_ct"] + dc["synack_dropped_rule"], dc


def normalized_tables(sb, tables=("mangle", "nat")):
    out = []
    for t in tables:
        for l in sb.iptables_save(t).splitlines():
            if l.startswith("#"):
                continue
            out.append(re.sub(r"\[\d+:\d+\]", "", l))
    return out


# ---------------------------------------------------------------- the bed alone

def test_bed_without_slotd(sb, tags):
    """The harness itself: relays answer, nginx serves byte-exact over the
    direct path, no slotd rules anywhere, and the RTTs are as configured."""
    for r in sb.relays.values():
        assert r.counters()["draining"] == 0
    r = fetch(sb, tags(), "big")
    assert_direct(sb, r)
    r = fetch(sb, tags(), "small", tool="wget")
    assert r.peer == sb.ip("client")
    assert sb.slot_rules() == []
    assert abs(sb.bed.ping("client", "server", count=2).min - DIRECT_RTT) < 2


# ---------------------------------------------------------------- 1, 2: unmodified applications

def test_curl_and_wget_download_through_the_relay(sb, slotd, tags):
    s = slotd(["relay1", "relay2"])
    r1 = sb.relay("relay1")
    rc0, c0 = r1.counters(), s.counters()
    assert set(COUNTERS) <= set(c0), "missing counters: %s" % (set(COUNTERS) - set(c0))
    a = fetch(sb, tags(), "big", tool="curl")
    d = assert_relayed(sb, s, a, r1)
    assert DECISION_KEYS <= set(d), d
    assert d["cached"] is False and d["probes"] >= 1, d
    j = s.json()
    assert set(COUNTERS) <= set(j["counters"]), j["counters"]
    rel = {x["control"]: x for x in j["relays"]}
    assert set(rel) == {r1.control, sb.relay("relay2").control}, rel
    for x in rel.values():
        assert RELAY_KEYS <= set(x) and x["state"] == "up" and x["quarantined"] is False, x
    assert rel[r1.control]["data_port"] == r1.data_port, rel
    assert rel[r1.control]["mark"] != rel[sb.relay("relay2").control]["mark"], rel
    b = fetch(sb, tags(), "big", tool="wget")
    assert b.peer == r1.ip
    d = s.decision(server=server_ep(sb))
    assert d["verdict"] == "relay" and d["relay"] == r1.control, d
    rc1 = r1.wait_counter("pipes_open", lambda v: v == 0)
    c1 = s.counters()
    assert rc1["pipes_total"] - rc0["pipes_total"] == 2, (rc0, rc1)
    assert rc1["bytes_server_to_client"] - rc0["bytes_server_to_client"] >= 2 * FILES["big"]
    assert rc1["pipes_failed"] == rc0["pipes_failed"], (rc0, rc1)
    assert rc1["data_rejected"] == rc0["data_rejected"], (rc0, rc1)
    dc = slotbed.deltas(c0, c1)
    assert dc["pipes_ok"] == 2 and dc["pipes_failed"] == 0 and dc["pipes_timeout"] == 0, dc
    assert dc["syn_received"] - dc["syn_retransmits_dropped"] == 2, dc
    assert c1["conns_held"] == 0 and c1["relays_configured"] == 2, c1
    assert dc["decisions_direct"] == 0, dc


def test_upload_through_the_relay(sb, slotd, tags):
    s = slotd(["relay1"])
    r1 = sb.relay("relay1")
    rc0 = r1.counters()
    path, sha = sb.random_file("upload.bin", 4 * MiB)
    name = tags()
    r = sb.upload(path, sb.nginx.upload_url(name))
    assert r.rc == 0 and r.status == 201 and r.size == 4 * MiB, r
    assert slotbed.sha256_file(sb.nginx.upload_path(name)) == sha
    d = s.decision(client=client_ep(sb, r))
    assert d["verdict"] == "relay" and d["relay"] == r1.control, d
    r.peer = sb.nginx.peer_of("PUT /up/%s " % name)
    assert r.peer == r1.ip
    rc1 = r1.wait_counter("pipes_open", lambda v: v == 0)
    assert rc1["bytes_client_to_server"] - rc0["bytes_client_to_server"] >= 4 * MiB, rc1


# ---------------------------------------------------------------- 3: selection

@pytest.mark.parametrize("case", ["best-relay", "min-gain-not-met", "no-faster-relay"])
def test_selection(sb, slotd, tags, case):
    """The triangle 80/40/40: relay1's path (40 ms) beats the direct 80 ms by
    more than min_gain (relay2's 80 ms path does not). With min_gain 3, or
    with relay2 alone, nothing gains enough: direct, no DNAT."""
    if case == "best-relay":
        s = slotd(["relay1", "relay2"])
    elif case == "min-gain-not-met":
        s = slotd(["relay1"], {"select": {"min_gain": 3}})
    else:
        s = slotd(["relay2"])
    totals0 = {n: r.counters()["pipes_total"] for n, r in sb.relays.items()}
    r = fetch(sb, tags(), "big")
    d = s.decision(client=client_ep(sb, r))
    if case == "best-relay":
        r1 = sb.relay("relay1")
        assert_relayed(sb, s, r, r1)
        assert d["path_rtt_us"] > 0, d
        if d["rtt_direct_us"]:
            # the rule: RTT_direct / path >= min_gain
            assert d["rtt_direct_us"] >= 1.1 * d["path_rtt_us"], d
        else:
            # decided before the direct probe finished (relay1 answers from
            # its RTT cache after 40 ms): the direct RTT is then known to
            # exceed the time waited, which must be min_gain * path
            assert d.get("select_us", d["decide_us"]) >= 1.1 * d["path_rtt_us"], d
        want = dict(totals0, relay1=totals0["relay1"] + 1)
    else:
        assert d["rtt_direct_us"] > 0, d
        assert d["verdict"] == "direct" and d["relay"] is None, d
        assert_direct(sb, r)
        assert s.counters()["decisions_direct"] >= 1
        want = totals0
    assert {n: r.counters()["pipes_total"] for n, r in sb.relays.items()} == want


# ---------------------------------------------------------------- 4: silent relays

def test_silent_relays_do_not_delay_the_decision(sb, slotd, tags):
    """relay3 (the best path, 30 ms) has its control connection up but drops
    every probe; one more relay is configured where nothing listens. The
    decision still comes by C_WAIT * RTT_direct (+ slack) and takes relay1."""
    r1, r3 = sb.relay("relay1"), sb.relay("relay3")
    nowhere = "10.%d.250.2:7600 data=7601 group=9" % sb.bed.subnet
    r3.block_probes()
    try:
        s = slotd(["relay1", "relay3"], {"select": {"cache_ttl": 0}}, extra_relays=[nowhere],
                  relays_up=2)
        st = s.relays_state()
        assert st[r1.control]["state"] == "up" and st[r3.control]["state"] == "up", st
        assert st["10.%d.250.2:7600" % sb.bed.subnet]["state"] != "up", st
        p3 = r3.counters()["probes_answered"]
        for _ in range(2):
            r = fetch(sb, tags(), "small")
            d = assert_relayed(sb, s, r, r1)
            assert d["probes"] == 2 and d["cached"] is False, d
            # The selection; decide_us also counts the PIPE_ESTABLISH round
            # trip that follows it (slotd reports that part as select_us).
            check_decision_time(d, d.get("select_us", d["decide_us"]))
        assert r3.counters()["probes_answered"] == p3
    finally:
        r3.unblock_probes()


def test_only_silent_relays_go_direct_in_time(sb, slotd, tags):
    """Every relay that is up is silent: direct, decided by C_WAIT *
    RTT_direct (+ slack), byte-exact."""
    r3 = sb.relay("relay3")
    r3.block_probes()
    try:
        s = slotd(["relay3"], {"select": {"cache_ttl": 0}})
        r = fetch(sb, tags(), "small")
        assert_direct(sb, r)
        d = s.decision(client=client_ep(sb, r))
        assert d["verdict"] == "direct" and d["probes"] == 1, d
        check_decision_time(d, d["decide_us"])
    finally:
        r3.unblock_probes()


def check_decision_time(d, t_us):
    bound_us = (C_WAIT * DIRECT_RTT * DECIDE_SLACK_FACTOR + DECIDE_SLACK_MS) * 1000
    assert t_us <= bound_us, "decision after %.1f ms, bound %.1f ms: %r" % (
        t_us / 1e3, bound_us / 1e3, d)


# ---------------------------------------------------------------- 5: path repair

def test_blackholed_direct_path_goes_through_a_relay(sb, slotd, tags):
    """The emulator drops everything between client and server: the
    connection still succeeds, through relay1 (path repair)."""
    s = slotd(["relay1"], {"select": {"cache_ttl": 0}})
    c0 = s.counters()
    sb.bed.set_pair("client", "server", loss=1.0)
    sb.bed.reload()
    try:
        r = fetch(sb, tags(), "big", timeout=30)
        d = assert_relayed(sb, s, r, sb.relay("relay1"))
        c1 = s.counters()
        # The relay wins before the silent direct probe ends (or, were the
        # relay slower, at repair_timeout): either way without a direct RTT.
        assert d["rtt_direct_us"] == 0, d
        assert (c1["repairs"] + c1["relay_before_direct"]
                - c0["repairs"] - c0["relay_before_direct"]) >= 1, slotbed.deltas(c0, c1)
    finally:
        sb.bed.set_pair("client", "server", loss=0.0)
        sb.bed.reload()


def test_unreachable_direct_path_is_repaired(sb, slotd, tags):
    """The router answers client -> server with ICMP host unreachable: a
    relay repairs the path. The direct probe is a bare SYN on a raw socket,
    which reads no ICMP: it stays silent, and the relay wins as soon as its
    path beats anything the direct one could still be (relay_before_direct),
    or at repair_timeout."""
    s = slotd(["relay1"], {"select": {"cache_ttl": 0}})
    rule = ["FORWARD", "-s", sb.ip("client"), "-d", sb.ip("server"), "-p", "tcp",
            "-j", "REJECT", "--reject-with", "icmp-host-unreachable"]
    c0 = s.counters()
    sb.bed.run("router", "iptables", "-w", "-I", *rule)
    try:
        r = fetch(sb, tags(), "small", timeout=30)
        d = assert_relayed(sb, s, r, sb.relay("relay1"))
        c1 = s.counters()
        assert (c1["repairs"] + c1["relay_before_direct"]
                - c0["repairs"] - c0["relay_before_direct"]) >= 1, (slotbed.deltas(c0, c1), d)
    finally:
        sb.bed.run("router", "iptables", "-w", "-D", *rule, check=False)


# ---------------------------------------------------------------- 6: relay refuses or is down

def test_relay_policy_refusal_goes_direct(sb, slotd, tags):
    """relay1 denies the server's address: its probe answers POLICY, the
    connection goes direct and the application does not notice."""
    r1 = sb.relay("relay1")
    s = slotd(["relay1"], {"select": {"cache_ttl": 0}})
    r1.reload({"policy": {"deny_destinations": "%s/32" % sb.ip("server")}})
    try:
        p0 = r1.counters()
        r = fetch(sb, tags(), "big")
        assert_direct(sb, r)
        d = s.decision(client=client_ep(sb, r))
        assert d["verdict"] == "direct", d
        p1 = r1.counters()
        assert p1["probes_refused"] > p0["probes_refused"], (p0, p1)
        assert p1["pipes_total"] == p0["pipes_total"]
    finally:
        r1.reload({"policy": {"deny_destinations": ""}})


def test_pipe_fail_goes_direct(sb, slotd, tags):
    """relay1's probe says it reaches the server (from its RTT cache), but
    its connect is refused: PIPE_FAIL, the connection goes direct, byte-exact."""
    r1 = sb.relay("relay1")
    s = slotd(["relay1"], {"select": {"cache_ttl": 0}})
    # warm up: relay1 measures the server and caches the RTT
    w = fetch(sb, tags(), "small")
    assert_relayed(sb, s, w, r1)
    rule = ["OUTPUT", "-p", "tcp", "-d", sb.ip("server"), "--dport", "80",
            "-j", "REJECT", "--reject-with", "tcp-reset"]
    sb.bed.run("relay1", "iptables", "-w", "-I", *rule)
    try:
        c0, p0 = s.counters(), r1.counters()
        r = fetch(sb, tags(), "big")
        assert_direct(sb, r)
        d = s.decision(client=client_ep(sb, r))
        assert d["verdict"] == "direct", d
        c1, p1 = s.counters(), r1.counters()
        assert c1["pipes_failed"] - c0["pipes_failed"] == 1, slotbed.deltas(c0, c1)
        assert p1["pipes_failed"] - p0["pipes_failed"] == 1, (p0, p1)
        # synack_hold (the default): the SYN had gone to relay1 with
        # PIPE_ESTABLISH; slotd dropped relay1's SYN-ACK and forgot the
        # conntrack entry, so curl's next SYN went direct
        assert c1["synack_waits"] - c0["synack_waits"] == 1, slotbed.deltas(c0, c1)
        assert c1["synack_failures"] - c0["synack_failures"] == 1, slotbed.deltas(c0, c1)
        assert c1["ct_delete_errors"] == c0["ct_delete_errors"], slotbed.deltas(c0, c1)
        # relay1's first SYN-ACK, held or read after the failure, came with
        # its DNAT entry where the kernel attaches it; read late, it was
        # dropped for that entry (or the rules' DNAT match), not for the
        # time. Its retransmissions, after the deletion, hold no entry: the
        # rules do not queue them, and curl's kernel resets them
        assert_synack_conntrack(s, c0, c1, 1)
        assert c1["synack_passed"] == c0["synack_passed"], slotbed.deltas(c0, c1)
    finally:
        sb.bed.run("relay1", "iptables", "-w", "-D", *rule, check=False)


@pytest.mark.parametrize("hold", ["yes", "no"])
def test_cold_connect_returns_only_once_the_relay_connected(sb, slotd, tags, hold):
    """The paper's connect() meaning on a cold decision, with the SYN sent
    to the relay at once and its SYN-ACK held (synack_hold = yes, the
    default) or the SYN itself held (no): while relay1 cannot connect to the
    server (its kernel's SYNs dropped; its probe's bare SYN, 52 bytes, still
    passes), curl's socket stays in SYN-SENT; once relay1 connects, the
    download completes through it, byte-exact."""
    r1 = sb.relay("relay1")
    s = slotd(["relay1"], {"select": {"cache_ttl": 0, "synack_hold": hold,
                                      "establish_timeout": "20s", "hold_timeout": "30s"}})
    m = sb.iptables_save("mangle")
    assert ("SYN,ACK -m conntrack --ctstate DNAT -j NFQUEUE" in m) == (hold == "yes"), m
    rule = ["OUTPUT", "-p", "tcp", "--syn", "-d", sb.ip("server"), "--dport", "80",
            "-m", "length", "--length", "60:65535", "-j", "DROP"]
    tag = tags()
    out = os.path.join(sb.dir, "cold-connect.out")
    p = None
    # relay1's connect outlives its kernel's SYN retransmission at 3 s
    r1.reload({"limits": {"connect_timeout": "10s"}})
    sb.bed.run("relay1", "iptables", "-w", "-I", *rule)
    try:
        c0 = s.counters()
        p = sb.curl_popen(sb.nginx.url("small", query="id=" + tag), out)
        # the decision is made and PIPE_ESTABLISH sent; relay1 is stuck
        r1.wait_counter("pipes_pending", lambda v: v >= 1, timeout=10)
        if hold == "yes":
            slotbed.wait_for(lambda: s.counters()["synack_holds"] > c0["synack_holds"], 10,
                             "relay1's SYN-ACK held")
        for _ in range(3):
            # past the client's first SYN retransmission (1 s) as well
            ss = sb.bed.run("client", "ss", "-Htn", "state", "syn-sent",
                            "dst", sb.ip("server")).stdout
            assert "%s:80" % sb.ip("server") in ss, ss
            assert "%s:80" % sb.ip("server") not in sb.bed.run(
                "client", "ss", "-Htn", "state", "established", "dst", sb.ip("server")).stdout
            assert p.poll() is None
            time.sleep(0.5)
    finally:
        sb.bed.run("relay1", "iptables", "-w", "-D", *rule, check=False)
        res = sb.finish_curl(p, out, timeout=60) if p else None
        r1.reload({"limits": {"connect_timeout": "2s"}})   # the bed's
    size, sha = sb.nginx.files["small"]
    assert res.rc == 0 and res.status == 200 and res.size == size and res.sha == sha, res
    assert sb.nginx.peer_of("id=%s " % tag) == r1.ip
    d = s.decision(client="%s:%d" % (sb.ip("client"), res.local_port))
    assert d["verdict"] == "relay" and not d["early"], d
    c1 = s.counters()
    waits = c1["synack_waits"] - c0["synack_waits"]
    assert waits == (1 if hold == "yes" else 0), slotbed.deltas(c0, c1)
    assert c1["synack_failures"] == c0["synack_failures"], slotbed.deltas(c0, c1)
    assert_synack_conntrack(s, c0, c1, 1 if hold == "yes" else 0)


def test_synack_queued_before_the_failure_read_after(sb, slotd, tags):
    """synack_hold's race, provoked: relay1's SYN-ACK is queued, still
    holding the connection's DNAT entry, while slotd is stopped (SIGSTOP);
    PIPE_ESTABLISH's timeout falls due meanwhile. Resumed, slotd runs the
    timer first (libev runs the last queued of its pending watchers first:
    the timers come after the file descriptors), so it deletes the entry
    and only then reads the SYN-ACK, the race's order. Passed, that SYN-ACK
    would complete a handshake with relay1 that the server direct knows
    nothing of, and curl would be reset; dropped, curl's next SYN goes
    direct, byte-exact."""
    r1 = sb.relay("relay1")
    s = slotd(["relay1"], {"select": {"cache_ttl": 0, "establish_timeout": "2s",
                                      "hold_timeout": "30s"}})
    # relay1's connect to the server hangs past slotd's timeout (its probe's
    # bare SYN, 52 bytes, still passes), and its first SYN-ACK is lost: its
    # retransmission, 1 s later, comes while slotd is stopped
    hang = ["OUTPUT", "-p", "tcp", "--syn", "-d", sb.ip("server"), "--dport", "80",
            "-m", "length", "--length", "60:65535", "-j", "DROP"]
    lose = ["OUTPUT", "-p", "tcp", "--sport", str(r1.data_port),
            "--tcp-flags", "SYN,ACK,RST,FIN", "SYN,ACK", "-j", "DROP"]
    tag = tags()
    out = os.path.join(sb.dir, "synack-race.out")
    p = res = None
    r1.reload({"limits": {"connect_timeout": "10s"}})
    sb.bed.run("relay1", "iptables", "-w", "-I", *hang)
    sb.bed.run("relay1", "iptables", "-w", "-I", *lose)
    stopped = False

    def synacks_queued():
        m = sb.bed.run("client", "iptables", "-w", "-t", "mangle", "-xnvL", "SLOT_SYNACK").stdout
        return sum(int(l.split()[0]) for l in m.splitlines()[2:] if "NFQUEUE" in l)

    try:
        c0 = s.counters()
        q0 = synacks_queued()
        p = sb.curl_popen(sb.nginx.url("small", query="id=" + tag), out)
        # the SYN went to relay1 with PIPE_ESTABLISH; relay1 is stuck
        r1.wait_counter("pipes_pending", lambda v: v >= 1, timeout=10)
        os.kill(s.proc.pid, signal.SIGSTOP)
        stopped = True
        t_stop = time.monotonic()
        sb.bed.run("relay1", "iptables", "-w", "-D", *lose)
        slotbed.wait_for(lambda: synacks_queued() > q0, 10, "relay1's SYN-ACK queued")
        # past establish_timeout, counted from before the stop
        time.sleep(max(0.0, 2.5 - (time.monotonic() - t_stop)))
        os.kill(s.proc.pid, signal.SIGCONT)
        stopped = False
        res = sb.finish_curl(p, out, timeout=60)
    finally:
        if stopped:
            os.kill(s.proc.pid, signal.SIGCONT)
        for rule in (lose, hang):
            sb.bed.run("relay1", "iptables", "-w", "-D", *rule, check=False)
        if res is None and p is not None:
            res = sb.finish_curl(p, out, timeout=60)
        r1.reload({"limits": {"connect_timeout": "2s"}})   # the bed's
    size, sha = sb.nginx.files["small"]
    assert res.rc == 0 and res.status == 200 and res.size == size and res.sha == sha, res
    assert sb.nginx.peer_of("id=%s " % tag) == sb.ip("client")
    c1 = s.counters()
    dc = slotbed.deltas(c0, c1)
    assert dc["pipes_timeout"] == 1 and dc["synack_waits"] == 1, dc
    # the race's order: the SYN-ACK was never held, but read after the
    # failure and dropped, for its entry and not for the time; relay1's
    # later retransmissions hold none, and the rules do not queue them
    assert dc["synack_holds"] == 0, dc
    assert dc["synack_dropped"] >= 1 and dc["synack_passed"] == 0, dc
    assert_synack_conntrack(s, c0, c1, 1)


def test_relay_down_goes_direct(sb, slotd, tags):
    r1 = sb.relay("relay1")
    s = slotd(["relay1"], {"select": {"cache_ttl": 0}})
    try:
        r1.stop()
        r = fetch(sb, tags(), "big")             # at once: slotd may not know yet
        assert_direct(sb, r)
        slotbed.wait_for(lambda: s.counters()["relays_up"] == 0, 5, "relays_up == 0")
        assert s.relays_state()[r1.control]["state"] != "up"
        r = fetch(sb, tags(), "small")
        assert_direct(sb, r)
    finally:
        if not r1.running:
            r1.start()
    # and it comes back
    s.wait_relays_up(1, timeout=10)
    r = fetch(sb, tags(), "small")
    assert_relayed(sb, s, r, r1)


def test_port_reused_after_its_relay_died_goes_where_slotd_says(sb, slotd, tags):
    """A relayed download is cut by its relay's death (SIGKILL: the relay's
    kernel resets it). The kernel keeps the aborted connection's conntrack
    entry (CLOSE, 10 s) with its DNAT to the dead relay, and a new SYN on the
    same tuple would reuse it, NAT and all. The application's next
    connection from the same port to the same server goes where slotd
    decides (direct: relay2 is slower), not to the dead relay."""
    r1 = sb.relay("relay1")
    s = slotd(["relay1", "relay2"], {"select": {"cache_ttl": 0}})
    lport = str(42000 + os.getpid() % 8000)
    out = os.path.join(sb.dir, "reuse-big.out")
    url = sb.nginx.url("big", query="id=" + tags())
    c0 = s.counters()
    p = sb.curl_popen(url, out, args=("--limit-rate", "300k", "--local-port", lport))
    try:
        slotbed.wait_for(lambda: r1.counters()["pipes_open"] == 1, 20, "the download relayed")
        r1.proc.kill()
        r1.proc.wait(10)
        cut = sb.finish_curl(p, out)
        assert cut.rc == 56, cut                        # reset, not a clean end
        slotbed.wait_for(lambda: s.counters()["relays_up"] == 1, 20, "slotd to see relay1 gone")
        r = fetch(sb, tags(), "small", args=("--local-port", lport))
        assert r.local_port == int(lport), r
        assert_direct(sb, r)
        assert slotbed.deltas(c0, s.counters())["stale_nat_drops"] == 1
    finally:
        if not r1.running:
            r1.start()
    s.wait_relays_up(2, timeout=10)


@pytest.mark.parametrize("then", ["relay", "direct"])
def test_port_reused_after_a_direct_reset(sb, slotd, tags, then):
    """A direct download is reset by the server (its socket destroyed: the
    server's kernel sends the RST). The kernel keeps that entry in CLOSE for
    10 s, without NAT, and a new SYN on the same tuple reuses it: the NAT
    rules never see it, so a relay decision would go direct. The
    application's next connection from the same port goes where slotd
    decides: to relay1 once it is up (the first SYN dropped, the entry
    deleted, the retransmission relayed), or direct at once, its first SYN
    passed on the old entry."""
    r1 = sb.relay("relay1")
    r1.stop()
    try:
        s = slotd(["relay1", "relay2"], {"select": {"cache_ttl": 0}}, relays_up=1)
        # a port of its own per case: the other case's last download from
        # it leaves it in TIME_WAIT for 60 s, and curl cannot bind it then
        lport = str(42000 + (os.getpid() + 4000 + 2000 * (then == "direct")) % 8000)
        out = os.path.join(sb.dir, "reuse-direct.out")
        url = sb.nginx.url("big", query="id=" + tags())
        p = sb.curl_popen(url, out, args=("--limit-rate", "300k", "--local-port", lport))
        slotbed.wait_for(lambda: os.path.exists(out) and os.path.getsize(out) > 0, 20,
                         "the direct download to start")
        d = s.decision(client="%s:%s" % (sb.ip("client"), lport))
        assert d["verdict"] == "direct", d
        sb.bed.run("server", "ss", "-K", "dst", sb.ip("client"), "dport", "=", lport)
        cut = sb.finish_curl(p, out)
        assert cut.rc in (18, 56), cut                  # reset by the server
        ct = sb.ct_entry(int(lport), dst=sb.ip("server"), dport=80)
        assert ct is not None and "CLOSE" in ct.line and ct.dnat is None, ct
        if then == "direct":
            c0 = s.counters()
            r = fetch(sb, tags(), "small", args=("--local-port", lport))
    finally:
        r1.start()
    if then == "relay":
        s.wait_relays_up(2, timeout=20)
        c0 = s.counters()
        r = fetch(sb, tags(), "small", args=("--local-port", lport))
    assert r.local_port == int(lport), r
    dc = slotbed.deltas(c0, s.counters())
    if then == "relay":
        assert_relayed(sb, s, r, r1)
        assert (dc["reused_ct_syns"], dc["reused_ct_drops"]) == (1, 1), dc
        assert dc["syn_received"] == 2, dc              # the retransmission took the relay
    else:
        assert_direct(sb, r)
        assert (dc["reused_ct_syns"], dc["reused_ct_drops"]) == (1, 0), dc
        assert dc["syn_received"] == 1, dc              # the first SYN went through
    assert dc["stale_nat_drops"] == 0, dc


# ---------------------------------------------------------------- 7: slotd dies, restarts, stops

def test_sigkill_during_a_transfer(sb, slotd, tags):
    r1 = sb.relay("relay1")
    s = slotd(["relay1"])
    rc0 = r1.counters()
    tag = tags()
    out = os.path.join(sb.dir, "inflight.out")
    p = sb.curl_popen(sb.nginx.url("big", query="id=" + tag), out, args=["--limit-rate", "1M"])
    try:
        r1.wait_counter("pipes_open", lambda v: v == 1, timeout=10)
        slotbed.wait_for(lambda: os.path.exists(out) and os.path.getsize(out) > 0, 10,
                         "bytes to arrive")
        s.kill()
        assert p.poll() is None, "the transfer ended before slotd was killed: make it slower"
        # the rules stay; --queue-bypass lets new connections go direct
        assert sb.chain_exists("mangle", "SLOT_HIJACK") and sb.chain_exists("nat", "SLOT_DNAT")
        n = fetch(sb, tags(), "small", timeout=20)
        assert_direct(sb, n)
        assert p.poll() is None, "the transfer in flight ended early"
    finally:
        res = sb.finish_curl(p, out)
    size, sha = sb.nginx.files["big"]
    assert res.rc == 0 and res.status == 200 and res.size == size and res.sha == sha, res
    assert sb.nginx.peer_of("id=%s " % tag) == r1.ip
    assert r1.counters()["pipes_total"] - rc0["pipes_total"] == 1

    # a restart cleans up and adds its rules once
    s2 = slotd(["relay1"])
    m, nat = sb.iptables_save("mangle"), sb.iptables_save("nat")
    assert m.count("-A OUTPUT -j SLOT_HIJACK") == 1, m
    assert nat.count("-A OUTPUT -j SLOT_DNAT") == 1, nat
    assert m.count("-A INPUT -j SLOT_SYNACK") == 1, m
    # the SYNs' rule, the offered sockets' (libslot, by [lib] mark), and
    # relay1's SYN-ACKs' (synack_hold)
    assert m.count("NFQUEUE") == 3, m
    assert m.count("SYN,ACK -m conntrack --ctstate DNAT -j NFQUEUE") == 1, m
    assert m.count("0x20000000/0x20000000 -j NFQUEUE") == 1, m
    assert m.count("-A OUTPUT -j SLOT_RUN") == 1, m
    assert nat.count("-j DNAT") == 1, nat
    assert s2.counters()["rules_applied"] >= 1
    r = fetch(sb, tags(), "small")
    assert_relayed(sb, s2, r, r1)


def test_sigterm_removes_every_rule_it_added(sb, slotd):
    admin = [("mangle", ["OUTPUT", "-p", "udp", "--dport", "9", "-j", "ACCEPT"]),
             ("nat", ["OUTPUT", "-p", "udp", "--dport", "9", "-j", "ACCEPT"]),
             ("mangle", ["POSTROUTING", "-p", "tcp", "--dport", "80", "-j", "ACCEPT"])]
    for t, rule in admin:
        sb.run_client("iptables", "-w", "-t", t, "-A", *rule)
    try:
        before = normalized_tables(sb)
        s = slotd(["relay1", "relay2"])
        assert len(sb.slot_rules()) >= 4
        assert s.stop() == 0, s.log()
        assert normalized_tables(sb) == before
        assert sb.slot_rules() == []
    finally:
        for t, rule in admin:
            sb.run_client("iptables", "-w", "-t", t, "-D", *rule, check=False)


def test_second_instance_leaves_the_first_alone(sb, slotd, tags):
    """Starting slotd again while one runs fails on the queue, before it
    touches the running one's rules or control socket."""
    s = slotd(["relay1"])
    rules = sb.slot_rules()
    r = sb.bed.run("client", slotbed.SLOTD, "-c", s.conf_path, check=False, timeout=30)
    assert r.returncode != 0
    assert "NFQUEUE" in r.stderr, r.stderr
    assert sb.slot_rules() == rules
    assert s.counters()["relays_up"] == 1
    d = assert_relayed(sb, s, fetch(sb, tags(), "small"), sb.relay("relay1"))
    assert d["verdict"] == "relay"


# ---------------------------------------------------------------- 8: the selection cache

def test_cache_hit_sends_no_probes(sb, slotd, tags):
    r1 = sb.relay("relay1")
    s = slotd(["relay1"], {"select": {"cache_ttl": "10m"}})
    c0, p0 = s.counters(), r1.counters()
    a = fetch(sb, tags(), "small")
    da = assert_relayed(sb, s, a, r1)
    c1, p1 = s.counters(), r1.counters()
    assert da["cached"] is False and da["probes"] >= 1, da
    assert c1["probes_sent"] > c0["probes_sent"] and c1["cache_misses"] - c0["cache_misses"] == 1
    b = fetch(sb, tags(), "small")
    db = assert_relayed(sb, s, b, r1)
    c2, p2 = s.counters(), r1.counters()
    assert db["cached"] is True and db["probes"] == 0, db
    dc = slotbed.deltas(c1, c2)
    assert dc["probes_sent"] == 0 and dc["direct_probes"] == 0 and dc["probe_replies"] == 0, dc
    assert dc["cache_hits"] == 1 and dc["cache_misses"] == 0, dc
    for k in ("probes_answered", "probes_refused", "probes_dropped"):
        assert p2[k] == p1[k], (k, p1, p2)


def test_cache_early_skips_the_wait_for_pipe_ok(sb, slotd, tags):
    # cache_early: a cache hit gets its verdict at once; the relay holds the
    # early data connection until its connect to the server is done. When
    # that connect then fails, the relay resets the connection and the
    # cache forgets the choice.
    r1 = sb.relay("relay1")
    s = slotd(["relay1"], {"select": {"cache_ttl": "10m", "cache_early": "yes"}})
    a = fetch(sb, tags(), "small")
    assert assert_relayed(sb, s, a, r1)["cached"] is False
    c0 = s.counters()
    for _ in range(3):
        b = fetch(sb, tags(), "big")
        d = assert_relayed(sb, s, b, r1)
        assert d["cached"] is True and d["why"] == "cached decision, early", d
    dc = slotbed.deltas(c0, s.counters())
    assert dc["early_verdicts"] == 3 and dc["early_failures"] == 0, dc
    wait_for = slotbed.wait_for
    wait_for(lambda: slotbed.deltas(c0, s.counters())["pipes_ok"] == 3, 10, "the PIPE_OKs")

    r1.reload({"policy": {"deny_destinations": sb.ip("server") + "/32"}})
    try:
        url = sb.nginx.url("small", query="id=" + tags())
        r = sb.curl(url, timeout=30)
        assert r.rc != 0, r                      # reset: no bytes of another kind
        wait_for(lambda: s.counters()["early_failures"] == 1, 10, "the early failure")
        # the choice is forgotten: the next connection probes, the relay
        # refuses by policy, and it goes direct, byte-exact
        c = fetch(sb, tags(), "small")
        assert_direct(sb, c)
    finally:
        r1.reload({"policy": {"deny_destinations": ""}})


def test_warm_early_connection_whose_request_is_late(sb, slotd, tags):
    """A warm hit connects to the relay at once while its PIPE_ESTABLISH is
    lost once on the control connection and comes again a retransmission
    later (loss on the client-relay leg): the relay holds the data
    connection that came first and joins it to the late pipe; the download
    completes byte-exact instead of being reset."""
    r1 = sb.relay("relay1")
    s = slotd(["relay1"], {"select": {"cache_ttl": "10m", "cache_early": "yes"}})
    assert_relayed(sb, s, fetch(sb, tags(), "small"), r1)
    wait_for = slotbed.wait_for
    wait_for(lambda: s.counters()["pipes_ok"] >= 1, 10, "the first PIPE_OK")
    rc0, c0 = r1.counters(), s.counters()
    # The next segment with a payload to the control port is dropped: the
    # warm hit's PIPE_ESTABLISH (the link is otherwise quiet: its keepalives
    # come every 30 s).
    rule = ["INPUT", "-p", "tcp", "--dport", str(r1.ctl_port), "-m", "length",
            "--length", "80:65535", "-m", "statistic", "--mode", "nth", "--every",
            "1000000", "--packet", "0", "-j", "DROP"]
    sb.bed.run("relay1", "iptables", "-w", "-I", *rule)
    try:
        b = fetch(sb, tags(), "big")
    finally:
        sb.bed.run("relay1", "iptables", "-w", "-D", *rule, check=False)
    d = assert_relayed(sb, s, b, r1)
    assert d["cached"] is True and d["why"] == "cached decision, early", d
    rd = slotbed.deltas(rc0, r1.counters())
    assert rd["data_held"] == 1 and rd["data_held_joined"] == 1, rd
    assert rd["data_rejected"] == 0 and rd["pipes_reset"] == 0, rd
    assert slotbed.deltas(c0, s.counters())["early_failures"] == 0


# ---------------------------------------------------------------- 8b: what the cache learns, flush, warm hits

def ctl(s, *args):
    """slotctl on slotd's socket."""
    return subprocess.run([os.path.join(slotbed.BUILD, "slotctl"), "-s", s.sock, *args],
                          capture_output=True, text=True, timeout=30)


def cache_rows(s):
    """slotctl cache --json, by server ("addr" for an address's entry,
    "addr:port" for a port's)."""
    r = ctl(s, "cache", "--json")
    assert r.returncode == 0, r
    return {row["server"]: row for row in json.loads(r.stdout)["cache"]}


def kv_lines(text):
    return dict(l.split(None, 1) for l in text.splitlines() if l.strip())


def test_refused_port_keeps_the_server_relayed(sb, slotd, tags):
    """Issue 13: a refusal on one port (RST) is about that port. A cached
    relay for the server stays for its other ports (not "direct is best"
    for the whole address); the refused port alone goes direct, for 30 s at
    most. Warm (the relay refuses) and cold (the direct probe refuses)."""
    r1 = sb.relay("relay1")
    s = slotd(["relay1"], {"hijack": {"ports": "80, 5201, 8080"}})
    srv = sb.ip("server")
    refused_ep = "%s:5201" % srv
    a = fetch(sb, tags(), "small")
    assert assert_relayed(sb, s, a, r1)["cached"] is False
    c0 = s.counters()
    # Nothing listens on 5201: the relay's connect is refused, and the
    # application sees a refusal, as it would without slotd (5201 was never
    # reached through the relay, so the hit waited for the relay's answer).
    r = sb.curl("http://%s:5201/" % srv, timeout=20)
    assert r.rc == 7, r
    d = s.decision(server=refused_ep)
    assert d["verdict"] == "direct" and d["cached"] is True and d["early"] is False, d
    assert d["why"] == "PIPE_FAIL: the server refused the port", d
    dc = slotbed.deltas(c0, s.counters())
    assert dc["pipes_failed"] == 1 and dc["early_unreached"] == 1, dc
    assert dc["early_verdicts"] == 0 and dc["early_failures"] == 0, dc
    rows = cache_rows(s)
    assert rows[srv]["choice"] == "relay" and rows[srv]["relay"] == r1.control, rows
    assert rows[refused_ep]["choice"] == "direct" and rows[refused_ep]["why"] == "refused", rows
    assert 0 < rows[refused_ep]["ttl_s"] <= 30, rows
    # The server's other ports go on through the relay: one never used...
    b = fetch(sb, tags(), "small", port=8080)
    assert assert_relayed(sb, s, b, r1, port=8080)["cached"] is True
    # ...and the one that worked.
    c = fetch(sb, tags(), "big")
    assert assert_relayed(sb, s, c, r1)["cached"] is True
    # The refused port again: direct from the cache, with the true reason.
    p0 = r1.counters()["pipes_failed"]
    r = sb.curl("http://%s:5201/" % srv, timeout=20)
    assert r.rc == 7, r
    d = s.decision(server=refused_ep)
    assert d["why"] == "cached: the server refused the port" and d["cached"] is True, d
    assert r1.counters()["pipes_failed"] == p0       # the relay was not asked
    assert "direct is best" not in s.log()

    # Cold: the direct probe is refused. Only the port is remembered; the
    # next connection to the server's good port probes and takes the relay.
    assert ctl(s, "flush").returncode == 0
    r = sb.curl("http://%s:5201/" % srv, timeout=20)
    assert r.rc == 7, r
    d = s.decision(server=refused_ep)
    assert d["verdict"] == "direct" and d["cached"] is False, d
    assert set(cache_rows(s)) == {refused_ep}, cache_rows(s)
    e = fetch(sb, tags(), "small")
    de = assert_relayed(sb, s, e, r1)
    assert de["cached"] is False and de["probes"] >= 1, de
    assert "direct is best" not in s.log()


def test_slotctl_flush(sb, slotd, tags):
    """slotctl flush SERVER forgets one server (its address's entry and its
    ports'), slotctl flush every entry; both say how many went, in text and
    JSON; the next connection probes again."""
    r1 = sb.relay("relay1")
    s = slotd(["relay1"])
    srv, other = sb.ip("server"), sb.ip("relay2")
    assert_relayed(sb, s, fetch(sb, tags(), "small"), r1)
    for host in (srv, other):                     # nothing listens on 5201
        assert sb.curl("http://%s:5201/" % host, timeout=20).rc == 7
    want = {srv, srv + ":5201", other + ":5201"}
    assert set(cache_rows(s)) == want, cache_rows(s)
    assert s.counters()["cache_entries"] == 3

    r = ctl(s, "flush", srv)
    assert r.returncode == 0 and r.stderr == "", r
    kv = kv_lines(r.stdout)
    assert kv["server"] == srv and kv["flushed"] == "2" and kv["cache_entries"] == "1", r.stdout
    assert set(cache_rows(s)) == {other + ":5201"}
    text = ctl(s, "cache")
    assert text.returncode == 0 and not any(l.split()[0] in (srv, srv + ":5201")
                                            for l in text.stdout.splitlines()[1:]), text.stdout
    r = ctl(s, "flush", srv, "--json")
    assert r.returncode == 0, r
    assert json.loads(r.stdout) == {"daemon": "slotd", "server": srv, "flushed": 0,
                                    "cache_entries": 1}, r.stdout

    # The server probes again, and is cached again.
    p0 = s.counters()["probes_sent"]
    d = assert_relayed(sb, s, fetch(sb, tags(), "small"), r1)
    assert d["cached"] is False and s.counters()["probes_sent"] > p0, d
    assert set(cache_rows(s)) == {other + ":5201", srv}

    r = ctl(s, "--json", "flush")
    assert r.returncode == 0, r
    assert json.loads(r.stdout) == {"daemon": "slotd", "server": None, "flushed": 2,
                                    "cache_entries": 0}, r.stdout
    assert cache_rows(s) == {} and s.counters()["cache_entries"] == 0
    r = ctl(s, "flush")
    assert r.returncode == 0 and kv_lines(r.stdout) == {"server": "-", "flushed": "0",
                                                        "cache_entries": "0"}, r.stdout
    d = assert_relayed(sb, s, fetch(sb, tags(), "small"), r1)
    assert d["cached"] is False, d

    # Errors: not an address (the daemon refuses: 1); usage (2).
    r = ctl(s, "flush", "server.example")
    assert r.returncode == 1 and "not an IP address" in r.stderr, r
    assert ctl(s, "flush", srv, other).returncode == 2
    assert ctl(s, "status", srv).returncode == 2
    assert ctl(s, "flush", "a\tb").returncode == 2
    ans = slotbed.unix_request(s.sock, b"status " + srv.encode() + b"\n")
    assert ans.startswith("error:") and "no argument" in ans, ans
    assert len(cache_rows(s)) == 1


def test_warm_hits_go_early_only_to_reached_ports(sb, slotd, tags):
    """cache_early is on by default, but a hit goes early only to a port the
    cached relay has reached (PIPE_OK) since the decision: the first
    connection to another port waits for PIPE_OK, as a cold one does.
    cache_early = no makes every hit wait."""
    r1 = sb.relay("relay1")
    s = slotd(["relay1"], {"hijack": {"ports": "80, 8080"}})
    assert "cache_early" not in s.text()
    srv = sb.ip("server")
    c0 = s.counters()
    a = assert_relayed(sb, s, fetch(sb, tags(), "small"), r1)
    assert a["cached"] is False and a["early"] is False, a
    assert cache_rows(s)[srv]["reached"] == "80"
    b = assert_relayed(sb, s, fetch(sb, tags(), "big"), r1)
    assert b["cached"] is True and b["early"] is True, b
    assert b["why"] == "cached decision, early", b
    c = assert_relayed(sb, s, fetch(sb, tags(), "small", port=8080), r1, port=8080)
    assert c["cached"] is True and c["early"] is False and c["why"] == "cached decision", c
    assert cache_rows(s)[srv]["reached"] == "8080,80"
    e = assert_relayed(sb, s, fetch(sb, tags(), "small", port=8080), r1, port=8080)
    assert e["cached"] is True and e["early"] is True, e
    # An early verdict does not wait for the relay (40 ms away, and its
    # connect to the server 40 ms more); a waiting one does.
    assert b["decide_us"] < 20000 and e["decide_us"] < 20000, (b, e)
    assert c["decide_us"] >= 40000, c
    dc = slotbed.deltas(c0, s.counters())
    assert dc["early_verdicts"] == 2 and dc["early_unreached"] == 1, dc
    assert dc["early_failures"] == 0 and dc["cache_hits"] == 3, dc
    slotbed.wait_for(lambda: slotbed.deltas(c0, s.counters())["pipes_ok"] == 4, 10,
                     "the PIPE_OKs")

    s.update({"select": {"cache_early": "no"}})
    s.hup()
    c1 = s.counters()
    f = assert_relayed(sb, s, fetch(sb, tags(), "small"), r1)
    assert f["cached"] is True and f["early"] is False and f["decide_us"] >= 40000, f
    dc = slotbed.deltas(c1, s.counters())
    assert dc["early_verdicts"] == 0 and dc["early_unreached"] == 0, dc


def test_refusal_on_a_warm_early_connection_is_a_reset(sb, slotd, tags):
    """A warm early connection has connected before the relay knows the
    server's answer: when the server now refuses, the application sees a
    reset (as behind HAProxy), slotd(8). The refusal is about that port: the
    next connection goes direct and sees the refusal itself."""
    r1 = sb.relay("relay1")
    s = slotd(["relay1"])
    srv = sb.ip("server")
    assert_relayed(sb, s, fetch(sb, tags(), "small"), r1)
    assert assert_relayed(sb, s, fetch(sb, tags(), "small"), r1)["early"] is True
    rule = ["INPUT", "-p", "tcp", "--dport", "80", "-j", "REJECT", "--reject-with", "tcp-reset"]
    c0 = s.counters()
    sb.bed.run("server", "iptables", "-w", "-I", *rule)
    try:
        r = sb.curl(sb.nginx.url("small", query="id=" + tags()), timeout=20)
        assert r.rc in (52, 55, 56), r                # reset (no refusal: connect() succeeded)
        assert r.rc != 56 or "reset" in r.err.lower(), r
        d = s.decision(server=server_ep(sb))
        assert d["verdict"] == "relay" and d["early"] is True, d
        slotbed.wait_for(lambda: slotbed.deltas(c0, s.counters())["early_failures"] == 1, 10,
                         "the early failure")
        rows = cache_rows(s)
        assert rows[srv + ":80"]["why"] == "refused", rows
        assert rows[srv]["choice"] == "relay" and rows[srv]["reached"] is None, rows
        # Now a refusal, as without slotd.
        r = sb.curl(sb.nginx.url("small", query="id=" + tags()), timeout=20)
        assert r.rc == 7, r
        d = s.decision(server=server_ep(sb))
        assert d["why"] == "cached: the server refused the port", d
    finally:
        sb.bed.run("server", "iptables", "-w", "-D", *rule, check=False)
    # The port is remembered as refused for 30 s at most; a flush ends that.
    assert_direct(sb, fetch(sb, tags(), "small"))
    assert ctl(s, "flush", srv).returncode == 0
    assert_relayed(sb, s, fetch(sb, tags(), "small"), r1)


def test_relay_caches_an_exact_measurement_despite_a_lost_syn(sb, slotd, tags):
    # The server drops the first SYN of relay1's measurement (its handover
    # connect's). Before the kernel would send that SYN again, the relay
    # closes the connect and measures with a bare SYN from a new port with a
    # new ISN, so the SYN-ACK names the SYN it answers and the RTT is the
    # path's 40 ms, not a retransmission timeout: it is cached
    # (probes_uncached stays). The first connection went direct (the answer
    # came after c_wait); the next one is relayed on the cached 40 ms, with
    # no new measurement (the connect begun for its pipe is none).
    r1 = sb.relay("relay1")
    r1.restart()                         # an RTT cache without the server in it
    s = slotd(["relay1"], {"select": {"cache_ttl": "0"}})
    rule = ["INPUT", "-p", "tcp", "--syn", "-s", r1.ip, "--dport", "80",
            "-m", "statistic", "--mode", "nth", "--every", "100000", "--packet", "0",
            "-j", "DROP"]
    c0 = r1.counters()
    sb.bed.run("server", "iptables", "-w", "-I", *rule)
    try:
        a = fetch(sb, tags(), "small")
        assert_direct(sb, a)             # the relay's answer came after c_wait
        slotbed.wait_for(lambda: r1.counters()["measure_syn"] == c0["measure_syn"] + 1,
                         10, "the measurement's bare SYN")
        slotbed.wait_for(lambda: r1.counters()["probes_answered"] > c0["probes_answered"], 10,
                         "the relay's answer")
        c1 = r1.counters()
        b = fetch(sb, tags(), "small")
        d = assert_relayed(sb, s, b, r1)  # from the cache: 40 ms
        assert d["path_rtt_us"] < 500000, d
        c2 = r1.counters()
        assert c2["probes_uncached"] == c0["probes_uncached"], slotbed.deltas(c0, c2)
        assert c2["measure_syn"] == c1["measure_syn"], slotbed.deltas(c1, c2)
        assert c2["measure_connect"] == c1["measure_connect"], slotbed.deltas(c1, c2)
        assert c1["measure_connect"] == c0["measure_connect"] + 1, slotbed.deltas(c0, c1)
        # the cached answer began a connect for handover, and the pipe took it
        d12 = slotbed.deltas(c1, c2)
        assert d12["handover_preconnects"] == 1 and d12["handovers"] == 1, d12
    finally:
        sb.bed.run("server", "iptables", "-w", "-D", *rule, check=False)


# ---------------------------------------------------------------- 9: what is not selected

@pytest.mark.parametrize("case", ["port", "exclude", "include"])
def test_unselected_connections_are_untouched(sb, slotd, tags, case):
    port = 80
    if case == "port":
        s = slotd(["relay1"], {"hijack": {"ports": "80, 5201"}})
        port = 8080
    elif case == "exclude":
        s = slotd(["relay1"], {"hijack": {"exclude": "%s/32" % sb.ip("server")}})
    else:
        s = slotd(["relay1"], {"hijack": {"include": "192.0.2.0/24"}})
    c0 = s.counters()
    r = fetch(sb, tags(), "small", port=port)
    assert_direct(sb, r)
    c1 = s.counters()
    assert c1["syn_received"] == c0["syn_received"], slotbed.deltas(c0, c1)
    # a selected connection is still seen (the rules are in place)
    if case == "port":
        r = fetch(sb, tags(), "small")
        assert_relayed(sb, s, r, sb.relay("relay1"))
        assert s.counters()["syn_received"] > c1["syn_received"]


def test_sysadmin_rule_queues_to_slotd(sb, slotd, tags):
    """The README's recipe: a rule of the sysadmin's own, in mangle OUTPUT,
    queues SYNs slotd's config does not select (here port 8080); slotd
    relays them, and leaves the rule alone when it stops."""
    s = slotd(["relay1"], {"hijack": {"ports": "80"}})
    rule = ["OUTPUT", "-p", "tcp", "--syn", "-d", sb.ip("server"), "--dport", "8080",
            "-m", "mark", "!", "--mark", "0x10000000/0x10000000",
            "-j", "NFQUEUE", "--queue-num", "7600", "--queue-bypass"]
    sb.run_client("iptables", "-w", "-t", "mangle", "-A", *rule)
    try:
        c0 = s.counters()
        r = fetch(sb, tags(), "small", port=8080)
        assert_relayed(sb, s, r, sb.relay("relay1"), port=8080)
        assert s.counters()["syn_received"] == c0["syn_received"] + 1
        assert s.stop() == 0
        # Still there, and with slotd gone the queue is bypassed: direct.
        sb.run_client("iptables", "-w", "-t", "mangle", "-C", *rule)
        assert_direct(sb, fetch(sb, tags(), "small", port=8080))
    finally:
        sb.run_client("iptables", "-w", "-t", "mangle", "-D", *rule, check=False)


# ---------------------------------------------------------------- 10: a burst

BURST = 500
BURST_SCRIPT = r'''
import asyncio, hashlib, json, resource, sys
host, port, path, want, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * n + 64)), hard))

async def one(i, go):
    await go.wait()
    r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 60)
    try:
        w.write(("GET %s?id=burst-%d HTTP/1.0\r\nHost: %s\r\n\r\n" % (path, i, host)).encode())
        await w.drain()
        data = await asyncio.wait_for(r.read(), 60)
    finally:
        w.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1].decode() if head else "none"
    if status != "200" or hashlib.sha256(body).hexdigest() != want:
        raise RuntimeError("conn %d: status %s, %d bytes" % (i, status, len(body)))
    return i

async def main():
    go = asyncio.Event()
    tasks = [asyncio.ensure_future(one(i, go)) for i in range(n)]
    await asyncio.sleep(0.1)
    go.set()
    res = await asyncio.gather(*tasks, return_exceptions=True)
    errs = [repr(e) for e in res if isinstance(e, BaseException)]
    print(json.dumps({"ok": n - len(errs), "errors": errs[:20]}))

asyncio.run(main())
'''


# Alone (run.sh's serial phase): 500 cold connections at once on a host
# whose other workers starve it (test_deploy's Ansible runs) held SYNs past
# their 1 s retransmission and PIPE_ESTABLISH past its timeout; one of the
# failures then met synack_hold's known race and was reset (CI, twice).
@pytest.mark.serial
def test_burst_of_new_connections(sb, slotd):
    s = slotd(["relay1"])
    script = os.path.join(sb.dir, "burst.py")
    with open(script, "w") as f:
        f.write(BURST_SCRIPT)
    c0 = s.counters()
    r = sb.run_client("/usr/bin/python3", script, sb.ip("server"), 80, "/f/tiny",
                      sb.nginx.files["tiny"][1], BURST, check=False, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["ok"] == BURST, res
    served = [q for q in sb.nginx.requests("id=burst-") if q["status"] == 200]
    assert len(served) >= BURST
    c1 = slotbed.wait_for(lambda: (lambda c: c if c["conns_held"] == 0 else None)(s.counters()),
                          10, "conns_held == 0")
    dc = slotbed.deltas(c0, c1)
    assert dc["syn_received"] >= BURST, dc
    assert dc["decisions_direct"] + dc["decisions_relay"] >= BURST, dc
    assert dc["held_overflow"] == 0, dc
    print("burst: slotd counters moved by %r; relay1 %r" % (
        {k: v for k, v in dc.items() if v}, sb.relay("relay1").counters()))


# ---------------------------------------------------------------- 11: configuration errors

def test_config_check_and_reload(sb, slotd, tags):
    r1 = sb.relay("relay1")
    s = slotd(["relay1"])
    rules = sb.slot_rules()
    rc, out = s.check()
    assert rc == 0, out
    good = s.text()
    r = sb.bed.run("client", s.binary, "-V", check=False)
    assert r.returncode == 0 and r.stdout + r.stderr, r

    # slotd -t names the line of the error
    lines = good.splitlines()
    at = lines.index("[select]") + 1
    bad = lines[:at] + ["no_such_key = 1"] + lines[at:]
    bad_path = os.path.join(sb.dir, "bad.conf")
    with open(bad_path, "w") as f:
        f.write("\n".join(bad) + "\n")
    rc, out = s.check(bad_path)
    assert rc == 1 and "%s:%d" % (bad_path, at + 1) in out, (rc, out)
    bad_relay = [l if not l.startswith("relay =") else "relay = 10.1.1.1:99999" for l in lines]
    at_relay = next(i for i, l in enumerate(bad_relay) if l.startswith("relay =")) + 1
    with open(bad_path, "w") as f:
        f.write("\n".join(bad_relay) + "\n")
    rc, out = s.check(bad_path)
    assert rc == 1 and "%s:%d" % (bad_path, at_relay) in out, (rc, out)
    # checking a file touches nothing of the running daemon's
    assert sb.slot_rules() == rules and s.running

    # SIGHUP with a broken file: the old configuration stays
    c0 = s.counters()
    s.write("\n".join(bad) + "\n")
    c1 = s.hup("reload_failures")
    assert s.running
    assert c1["reload_failures"] - c0["reload_failures"] == 1, slotbed.deltas(c0, c1)
    assert sb.slot_rules() == rules
    r = fetch(sb, tags(), "small")
    assert_relayed(sb, s, r, r1)

    # SIGHUP with a good file: new ports and relay set, atomically
    s.relays = [r1, sb.relay("relay2")]
    s.update({"hijack": {"ports": "80, 8080"}})
    c2 = s.hup("reloads")
    assert c2["reload_failures"] == c1["reload_failures"]
    assert c2["relays_configured"] == 2
    s.wait_relays_up(2)
    m = sb.iptables_save("mangle")
    assert "8080" in m and m.count("-A OUTPUT -j SLOT_HIJACK") == 1, m
    nat = sb.iptables_save("nat")
    assert nat.count("-j DNAT") == 2 and nat.count("-A OUTPUT -j SLOT_DNAT") == 1, nat
    r = fetch(sb, tags(), "small", port=8080)
    assert s.counters()["syn_received"] > c2["syn_received"]
    d = s.decision(client=client_ep(sb, r))
    assert d["server"] == server_ep(sb, 8080), d
    # "reloads" counts configurations put in force: the failed one is not one
    assert c1["reloads"] == c0["reloads"] and c2["reloads"] == c0["reloads"] + 1, \
        "reloads: %d before, %d after the broken file, %d after the good one" % (
            c0["reloads"], c1["reloads"], c2["reloads"])


# ---------------------------------------------------------------- 12: privileges

def test_only_cap_net_admin_is_kept(sb, slotd):
    s = slotd(["relay1"])
    caps = s.caps()
    net_admin = 1 << 12
    assert caps["CapEff"] == net_admin, caps
    assert caps["CapPrm"] == net_admin, caps
    assert caps["CapBnd"] == net_admin, caps
    assert s.running


def test_slotctl(sb, slotd):
    """slotctl asks slotd over its socket: relays with their state, counters;
    meaningful exit codes."""
    s = slotd(["relay1", "relay2"])
    ctl = os.path.join(slotbed.BUILD, "slotctl")
    r = subprocess.run([ctl, "-s", s.sock, "relays"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = {l.split()[0]: l.split() for l in r.stdout.splitlines()[1:]}
    for name, group in (("relay1", 1), ("relay2", 2)):
        row = lines[sb.relay(name).control]
        assert row[3] == "up" and int(row[2]) == group, row
    r = subprocess.run([ctl, "-s", s.sock, "counters"], capture_output=True, text=True)
    assert r.returncode == 0 and slotbed.parse_counters(r.stdout)["relays_up"] == 2, r.stdout
    r = subprocess.run([ctl, "-s", s.sock, "nonsense"], capture_output=True, text=True)
    assert r.returncode == 1 and "unknown command" in r.stderr
    r = subprocess.run([ctl, "-s", s.sock + ".none", "counters"], capture_output=True, text=True)
    assert r.returncode == 3 and "is the daemon running" in r.stderr
    assert subprocess.run([ctl], capture_output=True).returncode == 2

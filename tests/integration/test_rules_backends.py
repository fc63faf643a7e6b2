"""slotd's two rule backends, iptables and nft ([hijack] backend), on the
emulated WAN test bed (tests/integration/slotbed.py), one bed for the module:

    client --60 ms-- server              (direct)
    client --20-- relay1 --20-- server   the relay wins
    client --20-- relay2 --20-- server   added and removed by reloads
    pc1 -- client                        a routed LAN behind the client host,
                                         which is its gateway (no NAT)
    pc2, pc3 -- client                   a LAN the client host masquerades

Each test that makes sense for both backends runs once per backend. The nft
ones need a kernel that takes nft's "queue" statement (CONFIG_NFT_QUEUE):
where it does not (this project's test kernels), they are skipped, and
test_backend_choice checks instead that auto picks iptables there, saying
why, and that backend = nft is refused with a clear error. Every transfer
is checked by sha256; uploads too.
"""

import json
import os
import re
import signal
import threading

import pytest

import slotbed
from slotbed import KiB

DIRECT_RTT = 60
RELAYS = {"relay1": (20, 20), "relay2": (20, 20)}
FILES = {"small": 64 * KiB, "mid": 384 * KiB, "big": 1024 * KiB}
BACKENDS = ["iptables", "nft"]
PROBE = ("table inet slot_probe {\n\tchain c {\n\t\ttcp dport 9 queue num 9 bypass\n"
         "\t}\n}\n")


@pytest.fixture(scope="module")
def sb():
    b = slotbed.SlotBed(RELAYS, direct_rtt=DIRECT_RTT,
                        lans=[{"name": "office", "gateway": "client", "hosts": ["pc1"],
                               "masquerade": False},
                              {"name": "home", "gateway": "client", "hosts": ["pc2", "pc3"],
                               "masquerade": True}]).up()
    try:
        for name, size in FILES.items():
            b.nginx.add_file(name, size)
        b.nginx.start()
        yield b
    finally:
        b.down()


def nft_queue_works(sb):
    """The kernel takes a queue rule (nft -c: checked, nothing installed)."""
    r = sb.bed.run("client", "nft", "-c", "-f", "-", input=PROBE, check=False)
    return r.returncode == 0


@pytest.fixture(params=BACKENDS)
def backend(request, sb):
    if request.param == "nft" and not nft_queue_works(sb):
        pytest.skip("this kernel takes no nft queue rule (no CONFIG_NFT_QUEUE): "
                    "test_backend_choice covers it")
    return request.param


@pytest.fixture
def slotd(sb, request):
    """Factory: slotd(backend, relays=("relay1",), overrides=None) started; stopped
    (SIGTERM) at the end, leftovers removed, logs printed on failure."""
    started = []

    def start(backend, relays=("relay1",), overrides=None, wait=True):
        s = sb.slotd([sb.relay(n) for n in relays])
        s.update({"hijack": {"backend": backend}})
        s.update(overrides or {})
        started.append(s)
        return s.start(wait=wait)

    yield start
    for s in started:
        s.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for s in started:
            print("---- slotd %d (%s) ----\n%s" % (s.n, s.log_path, s.log()[-15000:]))
    sb.remove_slot_rules()


# ---------------------------------------------------------------- helpers

def saved(sb, tool, table):
    r = sb.bed.run("client", tool, "-t", table, check=False)
    return [re.sub(r"\[\d+:\d+\]", "", l) for l in r.stdout.splitlines()
            if not l.startswith("#")]


def iptables_state(sb):
    """Every line of both families' mangle and nat tables (no counters)."""
    return {(tool, t): saved(sb, tool, t) for tool in ("iptables-save", "ip6tables-save")
            for t in ("mangle", "nat")}


def slot_lines(sb):
    """Our iptables lines, both families."""
    return [l for lines in iptables_state(sb).values() for l in lines if "SLOT_" in l]


def nft_table(sb):
    """nft list table inet slot, or None if absent."""
    r = sb.bed.run("client", "nft", "list", "table", "inet", "slot", check=False)
    return r.stdout if r.returncode == 0 else None


def installed(sb, backend):
    """Whether the backend's hijack rules are in the kernel, both families."""
    if backend == "nft":
        t = nft_table(sb)
        return t is not None and " queue " in t and "jump hijack" in t
    st = iptables_state(sb)
    return all(any("-j NFQUEUE" in l for l in st[(tool, "mangle")]) and
               "-A OUTPUT -j SLOT_HIJACK" in st[(tool, "mangle")] and
               "-A OUTPUT -j SLOT_DNAT" in st[(tool, "nat")]
               for tool in ("iptables-save", "ip6tables-save"))


def nothing_left(sb):
    return slot_lines(sb) == [] and nft_table(sb) is None


def fetch(sb, tag, name="mid", timeout=60, host="client"):
    r = sb.curl(sb.nginx.url(name, query="id=" + tag), timeout=timeout, host=host)
    size, sha = sb.nginx.files[name]
    assert r.rc == 0 and r.status == 200 and r.size == size and r.sha == sha, r
    r.peer = sb.nginx.peer_of("id=%s " % tag)
    return r


def upload(sb, tag, size=384 * KiB, host="client"):
    path, sha = sb.random_file("up-%s.bin" % tag, size)
    r = sb.upload(path, sb.nginx.upload_url(tag), host=host)
    assert r.rc == 0 and r.status == 201 and r.size == size, r
    assert slotbed.sha256_file(sb.nginx.upload_path(tag)) == sha
    r.peer = sb.nginx.peer_of("PUT /up/%s " % tag)
    return r


def operator_rules(sb, add):
    """Rules of the operator's own, in both families and (where nft runs) a
    table of theirs, which slotd must leave alone."""
    op = "-A" if add else "-D"
    for tool in ("iptables", "ip6tables"):
        for t in ("mangle", "nat"):
            sb.run_client(tool, "-w", "-t", t, op, "OUTPUT", "-p", "udp", "--dport", "9",
                          "-j", "ACCEPT", check=add)
    if add:
        sb.bed.run("client", "nft", "-f", "-", input="table inet operator {\n\tchain o {\n"
                   "\t\ttype filter hook output priority 10; policy accept;\n"
                   "\t\tudp dport 9 counter accept\n\t}\n}\n")
    else:
        sb.run_client("nft", "delete", "table", "inet", "operator", check=False)


# ---------------------------------------------------------------- the choice

def test_backend_choice(sb, slotd):
    """auto says which backend and why; a backend whose tool is missing, or
    nft on a kernel without nft's queue, is refused with a clear error and
    installs nothing."""
    queue = nft_queue_works(sb)
    s = slotd("auto")
    want = "nft" if queue else "iptables"
    m = re.search(r"rules: (\w+) backend \(auto: ([^)]*)\)", s.log())
    assert m and m.group(1) == want, s.log()[-3000:]
    if not queue:
        assert "CONFIG_NFT_QUEUE" in m.group(2), m.group(0)
    assert installed(sb, want)
    assert s.stop() == 0
    assert nothing_left(sb)

    bad = [({"hijack": {"backend": "nft"}, "slotd": {"nft": "/nonexistent/nft"}},
            "[hijack] backend = nft: '/nonexistent/nft list tables' does not run"),
           ({"hijack": {"backend": "iptables"}, "slotd": {"iptables": "/nonexistent/iptables"}},
            "[hijack] backend = iptables: '/nonexistent/iptables -V' does not run")]
    if not queue:
        bad.append(({"hijack": {"backend": "nft"}}, "lacks CONFIG_NFT_QUEUE"))
    for overrides, msg in bad:
        s = sb.slotd([sb.relay("relay1")], overrides)
        r = sb.bed.run("client", slotbed.SLOTD, "-c", s.conf_path, check=False, timeout=30)
        assert r.returncode != 0 and msg in r.stderr, (overrides, r.stderr)
        assert nothing_left(sb)


# ---------------------------------------------------------------- per backend

def test_rules_transfers_and_removal(sb, slotd, backend):
    """The backend's rules in both families, a download and an upload
    through the relay (sha256), slotctl rules reading them back with their
    counters, and a stop that removes them all and nothing else."""
    operator_rules(sb, True)
    try:
        before = iptables_state(sb), sb.run_client("nft", "list", "table", "inet",
                                                   "operator").stdout
        r1 = sb.relay("relay1")
        s = slotd(backend, ["relay1"])
        assert installed(sb, backend)
        if backend == "nft":
            t = nft_table(sb)
            assert "dnat ip to %s:%d" % (r1.ip, r1.data_port) in t, t
            assert "queue flags bypass to 7600" in t or "queue num 7600 bypass" in t, t
            assert slot_lines(sb) == []          # nothing of ours in xtables
        else:
            assert nft_table(sb) is None
            assert any("--to-destination %s:%d" % (r1.ip, r1.data_port) in l
                       for l in slot_lines(sb))
        rc0 = r1.counters()
        a = fetch(sb, "rb-%s-down" % backend)
        b = upload(sb, "rb-%s-up" % backend)
        assert a.peer == r1.ip and b.peer == r1.ip, (a.peer, b.peer)
        rc1 = r1.wait_counter("pipes_open", lambda v: v == 0)
        assert rc1["pipes_total"] - rc0["pipes_total"] == 2, (rc0, rc1)
        assert rc1["bytes_client_to_server"] - rc0["bytes_client_to_server"] >= 384 * KiB
        assert rc1["bytes_server_to_client"] - rc0["bytes_server_to_client"] >= 384 * KiB
        # slotctl rules: what the kernel holds, with the queue rule's hits.
        out = slotbed.unix_request(s.sock, b"rules json\n")
        rows = json.loads(out)["rules"]
        fams = {r["family"] for r in rows}
        assert fams == ({"inet"} if backend == "nft" else {"ipv4", "ipv6"}), fams
        rows = [r for r in rows if "queue" in r["rule"].lower() and r["family"] != "ipv6"]
        assert rows and sum(r["packets"] for r in rows) >= 2, rows

        assert s.stop() == 0, s.log()
        assert nothing_left(sb)
        after = iptables_state(sb), sb.run_client("nft", "list", "table", "inet",
                                                  "operator").stdout
        assert after[0] == before[0]
        assert re.sub(r"packets \d+ bytes \d+", "", after[1]) == \
            re.sub(r"packets \d+ bytes \d+", "", before[1])
    finally:
        operator_rules(sb, False)


def test_reload_replaces_rules_atomically(sb, slotd, backend):
    """Reloads that change the relay set replace the rules while connections
    keep starting: every SYN is queued to slotd (none slipped by a moment
    without rules), every transfer is byte-exact, and a watcher never sees
    the rules absent."""
    r1, r2 = sb.relay("relay1"), sb.relay("relay2")
    s = slotd(backend, ["relay1"])
    c0 = s.counters()
    stop = threading.Event()
    seen = {"ok": 0, "missing": 0}

    def watch():
        while not stop.is_set():
            seen["ok" if installed(sb, backend) else "missing"] += 1

    def transfers(out):
        n = 0
        while not stop.is_set() or n < 3:
            try:
                fetch(sb, "rb-%s-reload-%d" % (backend, n), "small")
                out.append(True)
            except AssertionError as e:
                out.append(e)
            n += 1

    results = []
    threads = [threading.Thread(target=watch), threading.Thread(target=transfers,
                                                               args=(results,))]
    for t in threads:
        t.start()
    try:
        for i in range(6):
            s.relays = [r1, r2] if i % 2 == 0 else [r1]
            s.write(s.text())
            before = s.counters()["rules_applied"]
            s.signal(signal.SIGHUP)
            slotbed.wait_for(lambda: s.counters()["rules_applied"] > before and
                             s.counters()["rules_pending"] == 0, 20, "the new rules")
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    c1 = s.counters()
    errors = [r for r in results if r is not True]
    assert not errors, errors[:3]
    assert len(results) >= 3
    assert seen["missing"] == 0 and seen["ok"] > 0, seen
    d = slotbed.deltas(c0, c1)
    # Every connection's SYN reached slotd (retransmissions aside).
    assert d["syn_received"] - d["syn_retransmits_dropped"] == len(results), (d, len(results))
    assert d["reloads"] == 6 and c1["rules_failures"] == 0, (d, c1)
    # One queue rule for the SYNs (the relays' SYN-ACKs have one each).
    if backend == "nft":
        assert syn_queue_rules(nft_table(sb).splitlines()) == 1
    else:
        assert all(syn_queue_rules(saved(sb, tool, "mangle")) == 1
                   for tool in ("iptables-save", "ip6tables-save"))


def syn_queue_rules(lines):
    """The queue rules for the hijacked ports' SYNs (SLOT_HIJACK's, nft's
    hijack chain), not those for the relays' SYN-ACKs (SLOT_SYNACK's, by
    source address) nor the one for sockets offered by [lib] mark (its
    default, 0x20000000) and slotctl run's cgroup (lib_queue_rules)."""
    return sum((("-A SLOT_HIJACK" in l and "-j NFQUEUE" in l) or
                (" queue " in l and "saddr" not in l and not l.lstrip().startswith("-A")))
               and "0x20000000" not in l and "cgroupv2" not in l for l in lines)


def lib_queue_rules(lines):
    """The queue rule for sockets offered by [lib] mark (libslot)."""
    return sum(" queue" in l.replace("NFQUEUE", " queue") and "0x20000000" in l
               for l in lines)


STATEFUL = ["INPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"]


@pytest.fixture
def stateful_firewall(sb):
    """A stateful rule of the operator's, as nearly every host has: it keeps
    conntrack hooked in the namespace once slotd's rules are gone (without
    any such rule the kernel unhooks conntrack, and pipes in flight lose
    their DNAT: docs/slotd.md, "Stopping")."""
    for tool in ("iptables", "ip6tables"):
        sb.run_client(tool, "-w", "-A", *STATEFUL)
    yield
    for tool in ("iptables", "ip6tables"):
        sb.run_client(tool, "-w", "-D", *STATEFUL, check=False)


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_stopped_mid_transfer_fails_open(sb, slotd, backend, how, stateful_firewall):
    """slotd killed (SIGKILL: its rules stay, behind the queue's bypass) or
    stopped (SIGTERM: its rules go) during a relayed transfer: the transfer
    in flight completes through the relay, byte-exact; new connections go
    direct at once, download and upload byte-exact; after a SIGKILL a new
    start replaces the leftovers (one queue rule) and relays again."""
    r1 = sb.relay("relay1")
    s = slotd(backend, ["relay1"])
    rc0 = r1.counters()
    tag = "rb-%s-%s-inflight" % (backend, how)
    out = os.path.join(sb.dir, "inflight.out")
    p = sb.curl_popen(sb.nginx.url("big", query="id=" + tag), out, args=["--limit-rate", "256K"])
    try:
        r1.wait_counter("pipes_open", lambda v: v == 1, timeout=10)
        slotbed.wait_for(lambda: os.path.exists(out) and os.path.getsize(out) > 0, 10,
                         "bytes to arrive")
        if how == "sigkill":
            s.kill()
            assert installed(sb, backend)       # left behind, harmless
        else:
            assert s.stop() == 0, s.log()
            assert nothing_left(sb)
        assert p.poll() is None, "the transfer ended before slotd stopped: make it slower"
        n = fetch(sb, "rb-%s-%s-direct" % (backend, how), "mid", timeout=20)
        assert n.peer == sb.ip("client"), n.peer
        u = upload(sb, "rb-%s-%s-up" % (backend, how))
        assert u.peer == sb.ip("client"), u.peer
    finally:
        res = sb.finish_curl(p, out)
    size, sha = sb.nginx.files["big"]
    # The kernel keeps steering the pipe: its DNAT lives in conntrack.
    assert res.rc == 0 and res.status == 200 and res.size == size and res.sha == sha, res
    assert sb.nginx.peer_of("id=%s " % tag) == r1.ip
    assert r1.counters()["pipes_total"] - rc0["pipes_total"] == 1
    if how == "sigkill":
        s2 = slotd(backend, ["relay1"])
        if backend == "nft":
            assert syn_queue_rules(nft_table(sb).splitlines()) == 1
        else:
            for tool in ("iptables-save", "ip6tables-save"):
                m = saved(sb, tool, "mangle")
                assert m.count("-A OUTPUT -j SLOT_HIJACK") == 1, m
                assert m.count("-A INPUT -j SLOT_SYNACK") == 1, m
                assert syn_queue_rules(m) == 1, m
        r = fetch(sb, "rb-%s-restart" % backend)
        assert r.peer == r1.ip
        assert s2.stop() == 0
        assert nothing_left(sb)


# ---------------------------------------------------------------- gateway

def lan_if(sb, k=0):
    return sb.bed.lan_bridge(sb.bed.topo.lans[k])


def test_gateway_routed_lan_host(sb, slotd, backend, stateful_firewall):
    """slotd on the LAN's gateway (mode both): a LAN host with nothing of
    slot on it downloads and uploads through the relay (sha256; the relay's
    data connection comes from the LAN host's own address, matched as
    today), the gateway's own connections too; killed, the LAN host's new
    connections go direct; stopped, nothing is left."""
    r1 = sb.relay("relay1")
    br = lan_if(sb)
    s = slotd(backend, ["relay1"], {"hijack": {"mode": "both", "lan_interfaces": br}})
    if backend == "nft":
        t = nft_table(sb)
        assert 'iifname { "%s" } jump hijack' % br in t and "hook prerouting" in t, t
    else:
        for tool in ("iptables-save", "ip6tables-save"):
            m, n = saved(sb, tool, "mangle"), saved(sb, tool, "nat")
            assert "-A PREROUTING -j SLOT_GW" in m and "-A SLOT_GW -i %s -j SLOT_HIJACK" % br \
                in m, m
            assert "-A PREROUTING -j SLOT_DNAT" in n, n
    rc0 = r1.counters()
    a = fetch(sb, "rb-%s-gw-down" % backend, host="pc1")
    b = upload(sb, "rb-%s-gw-up" % backend, host="pc1")
    assert a.peer == r1.ip and b.peer == r1.ip, (a.peer, b.peer)
    d = s.decision(client="%s:%d" % (sb.ip("pc1"), a.local_port))
    assert d["verdict"] == "relay" and d["relay"] == r1.control, d
    c = fetch(sb, "rb-%s-gw-self" % backend)
    assert c.peer == r1.ip
    rc1 = r1.wait_counter("pipes_open", lambda v: v == 0)
    assert rc1["pipes_total"] - rc0["pipes_total"] == 3, (rc0, rc1)
    assert rc1["data_rejected"] == rc0["data_rejected"], (rc0, rc1)
    # The LAN host is untouched.
    for tool in ("iptables-save", "ip6tables-save"):
        assert "SLOT_" not in sb.bed.run("pc1", tool).stdout
    assert sb.bed.run("pc1", "nft", "list", "ruleset").stdout.strip() == ""

    s.kill()
    assert installed(sb, backend)
    n = fetch(sb, "rb-%s-gw-direct" % backend, host="pc1", timeout=20)
    assert n.peer == sb.ip("pc1"), n.peer
    u = upload(sb, "rb-%s-gw-direct-up" % backend, host="pc1")
    assert u.peer == sb.ip("pc1"), u.peer
    s2 = slotd(backend, ["relay1"], {"hijack": {"mode": "gateway", "lan_interfaces": br}})
    e = fetch(sb, "rb-%s-gw-again" % backend, host="pc1")
    assert e.peer == r1.ip
    f = fetch(sb, "rb-%s-gw-self-direct" % backend)    # gateway mode alone
    assert f.peer == sb.ip("client"), f.peer
    assert s2.stop() == 0
    assert nothing_left(sb)


def test_gateway_masquerading_lan(sb, slotd, backend, stateful_firewall):
    """slotd on a gateway that masquerades its LAN: the relay sees the
    gateway's address (and maybe another port), so the connections of pc2
    and pc3, at once, are matched by NAT traversal's pipe tokens; both
    download and upload through the relay, byte-exact. Needs the pipe
    tokens ([nat], docs/slotd.md "Clients behind NAT"): skipped on a tree
    without them."""
    r1 = sb.relay("relay1")
    s = slotd(backend, ["relay1"], {"hijack": {"mode": "gateway",
                                               "lan_interfaces": lan_if(sb, 1)}})
    if "token_pipes" not in s.counters():
        pytest.skip("this tree has no pipe tokens (NAT traversal): a masquerading "
                    "gateway's connections cannot be matched by the relay")
    rc0, c0 = r1.counters(), s.counters()
    out = {}

    def both(h):
        try:
            out[h] = (fetch(sb, "rb-%s-masq-%s" % (backend, h), host=h),
                      upload(sb, "rb-%s-masq-up-%s" % (backend, h), host=h))
        except AssertionError as e:
            out[h] = e

    ts = [threading.Thread(target=both, args=(h,)) for h in ("pc2", "pc3")]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    for h in ("pc2", "pc3"):
        assert not isinstance(out[h], AssertionError), (h, out[h])
        assert all(r.peer == r1.ip for r in out[h]), (h, [r.peer for r in out[h]])
    rc1 = r1.wait_counter("pipes_open", lambda v: v == 0)
    d = slotbed.deltas(c0, s.counters())
    assert d["token_pipes"] == 4 and d["decisions_relay"] == 4, d
    assert rc1["data_token"] - rc0["data_token"] == 4, (rc0, rc1)
    assert rc1["data_rejected"] == rc0["data_rejected"], (rc0, rc1)
    assert s.stop() == 0
    assert nothing_left(sb)

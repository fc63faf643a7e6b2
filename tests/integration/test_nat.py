"""Clients behind NAT (docs/slotd.md, "Clients behind NAT"): the pipe token
in the hijacked SYN.

One bed for the module: a client with its own address ("client"), and a home
NAT ("nat", MASQUERADE) with two LAN hosts behind it (c1, c2), all with the
same delays: relay1 is 10 + 10 ms away from everything, the server 80 ms
direct. Downloads and uploads with unmodified curl and wget, sha256 checked;
the relay's counters show the data connections matched by token, nginx sees
the relay's address. Two LAN hosts using one source port at once through the
same relay (the NAT must remap one: the endpoint they announce could never
match); a carrier-grade NAT's random ports from a block; with tokens off the
relay cannot match them; [nat] mode auto turns tokens on behind the NAT, off
with an address of one's own. The edges: a lost first SYN (its
retransmission carries the same token), a late one (unknown token: reset and
counted), an option stripped on the way (the fallback by address), a SYN
with no room for the option (direct); slotd and the relay under valgrind; and
IPv6 behind a NAT66.
"""

import json
import os
import re
import shutil
import threading

import pytest

from slotbed import SlotBed, deltas, hostport, sha256_file, unix_request

KiB = 1024
SIZE = 384 * KiB
LAN = ("c1", "c2")


@pytest.fixture(scope="module")
def sb():
    bed = SlotBed({"relay1": (20, 20)}, direct_rtt=160, other_rtt=20,
                  extra_hosts=("nat",),
                  extra_pairs=[("nat", "relay1", 20), ("nat", "server", 160)],
                  lans=[{"name": "home", "gateway": "nat", "hosts": list(LAN),
                         "masquerade": True}])
    with bed:
        bed.nginx.start()
        bed.nginx.add_file("down.bin", SIZE)
        yield bed


def slotd(sb, host, mode="auto"):
    s = sb.slotd([sb.relay("relay1")], {"nat": {"mode": mode}}, host=host)
    return s.start()


def curl(sb, host, url, out, *args):
    """curl in host: (exit code, its output, sha256 of the body)."""
    r = sb.curl(url, out=out, args=args, timeout=60, host=host)
    return r.rc, r.out + r.err, r.sha


def test_download_and_upload_behind_nat(sb):
    s = slotd(sb, "c1")
    try:
        relay = sb.relay("relay1")
        r0, s0 = relay.counters(), s.counters()
        want = sb.nginx.files["down.bin"][1]

        out = os.path.join(sb.dir, "c1-curl.out")
        rc, err, sha = curl(sb, "c1", sb.nginx.url("down.bin", query="c1curl"), out)
        assert rc == 0 and sha == want, err + s.log()
        # nginx saw the relay, not the NAT
        assert sb.nginx.peer_of("c1curl") == relay.ip

        r = sb.wget(sb.nginx.url("down.bin", query="c1wget"), timeout=60, host="c1")
        assert r.rc == 0 and r.sha == want, r
        assert sb.nginx.peer_of("c1wget") == relay.ip

        path, up_sha = sb.random_file("c1-up.bin", SIZE)
        r = sb.upload(path, sb.nginx.upload_url("c1-up.bin"), timeout=60, host="c1")
        assert r.rc == 0 and r.status in (201, 204) and r.size == SIZE, r
        assert sha256_file(sb.nginx.upload_path("c1-up.bin")) == up_sha
        assert sb.nginx.peer_of("c1-up.bin") == relay.ip

        d = deltas(r0, relay.counters())
        ds = deltas(s0, s.counters())
        # three pipes, each requested with a token and joined by it
        assert d["pipes_tokened"] == 3 and d["data_token"] == 3, d
        assert d["pipes_total"] == 3 and d["data_rejected"] == 0, d
        assert d["data_token_unknown"] == 0 and d["data_token_fallback"] == 0, d
        assert ds["token_pipes"] == 3 and ds["decisions_relay"] == 3, ds
        assert ds["token_no_room"] == 0, ds
        assert "sees us from %s:" % sb.ip("nat") in s.log()
        seen = {x["relay"]: x["observed"] for x in
                json.loads(unix_request(s.sock, b"relays json\n"))["relays"]}
        assert seen[relay.control].startswith(sb.ip("nat") + ":"), seen
    finally:
        s.stop()


def test_two_clients_one_source_port(sb):
    """c1 and c2 connect from the same local port at the same time: the NAT
    keeps one mapping and remaps the other, so neither endpoint announced
    (192.168.1.x:40000) is what the relay sees; the tokens match both."""
    s1, s2 = slotd(sb, "c1"), slotd(sb, "c2")
    try:
        relay = sb.relay("relay1")
        r0 = relay.counters()
        want = sb.nginx.files["down.bin"][1]
        res = {}

        def get(host):
            out = os.path.join(sb.dir, "%s-both.out" % host)
            # slow enough that the two transfers overlap
            res[host] = curl(sb, host, sb.nginx.url("down.bin", query="both-" + host), out,
                             "--local-port", "40000", "--limit-rate", "192k")

        ts = [threading.Thread(target=get, args=(h,)) for h in LAN]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for h in LAN:
            rc, err, sha = res[h]
            assert rc == 0 and sha == want, (h, err, s1.log(), s2.log())
            assert sb.nginx.peer_of("both-" + h) == relay.ip
        d = deltas(r0, relay.counters())
        assert d["data_token"] == 2 and d["pipes_total"] == 2, d
        # the NAT's two mappings to the relay's data port: one port kept,
        # the other remapped
        ports = sorted(e.rdport for e in sb.conntrack(host="nat", dport=relay.data_port)
                       if e.sport == 40000)
        assert len(ports) == 2 and ports[0] != ports[1] and 40000 in ports, ports
    finally:
        s1.stop()
        s2.stop()


def test_tokens_off_behind_nat_fails(sb):
    """What tokens fix: with [nat] mode off the relay sees the NAT's address,
    matches no pipe, and resets the connection."""
    s = slotd(sb, "c2", mode="off")
    try:
        relay = sb.relay("relay1")
        r0 = relay.counters()
        rc, err, _ = curl(sb, "c2", sb.nginx.url("down.bin", query="off"),
                          os.path.join(sb.dir, "c2-off.out"))
        assert rc != 0, err
        d = deltas(r0, relay.counters())
        assert d["data_rejected"] == 1 and d["pipes_tokened"] == 0, d
        assert s.counters()["token_pipes"] == 0
    finally:
        s.stop()


def test_auto_off_with_own_address(sb):
    """Auto: the relay sees "client" from its own address, so its pipes
    are matched by endpoint as before, no token in the SYN."""
    s = slotd(sb, "client")
    try:
        relay = sb.relay("relay1")
        r0 = relay.counters()
        want = sb.nginx.files["down.bin"][1]
        rc, err, sha = curl(sb, "client", sb.nginx.url("down.bin", query="public-client"),
                            os.path.join(sb.dir, "own.out"))
        assert rc == 0 and sha == want, err
        assert sb.nginx.peer_of("public-client") == relay.ip
        d = deltas(r0, relay.counters())
        assert d["pipes_total"] == 1 and d["pipes_tokened"] == 0 and d["data_token"] == 0, d
        c = s.counters()
        assert c["token_pipes"] == 0 and c["decisions_relay"] == 1, c
        assert "sees us from %s:" % sb.ip("client") in s.log()
    finally:
        s.stop()


class FirstSynDropped:
    """Drops the first SYN from the LAN to the relay's data port at the NAT
    (an xt_quota of one SYN), as a lossy path would."""

    def __init__(self, sb):
        r = sb.relay("relay1")
        self.sb = sb
        self.rule = ["FORWARD", "-p", "tcp", "--syn", "-d", r.ip, "--dport", str(r.data_port),
                     "-m", "quota", "--quota", "100", "-m", "comment", "--comment",
                     "test_nat " + sb.bed.tag, "-j", "DROP"]

    def __enter__(self):
        self.sb.bed.run("nat", "iptables", "-w", "-I", *self.rule)
        return self

    def dropped(self):
        out = self.sb.bed.run("nat", "iptables", "-w", "-L", "FORWARD", "-v", "-x", "-n").stdout
        line = next(l for l in out.splitlines() if "test_nat" in l)
        return int(line.split()[0])

    def __exit__(self, *exc):
        self.sb.bed.run("nat", "iptables", "-w", "-D", *self.rule, check=False)
        return False


def test_retransmitted_syn_carries_the_token(sb):
    """The first SYN is lost after the NAT: the kernel's retransmission
    (a new packet, queued again) must carry the same token to be joined."""
    s = slotd(sb, "c1")
    try:
        relay = sb.relay("relay1")
        r0, s0 = relay.counters(), s.counters()
        with FirstSynDropped(sb) as drop:
            rc, err, sha = curl(sb, "c1", sb.nginx.url("down.bin", query="retrans"),
                                os.path.join(sb.dir, "retrans.out"))
            assert drop.dropped() == 1
        assert rc == 0 and sha == sb.nginx.files["down.bin"][1], err + s.log()
        assert sb.nginx.peer_of("retrans") == relay.ip
        d, ds = deltas(r0, relay.counters()), deltas(s0, s.counters())
        assert d["data_token"] == 1 and d["pipes_tokened"] == 1, d
        # one pipe: the retransmission was answered from the decision
        assert ds["token_pipes"] == 1 and ds["syn_received"] == 2, ds
    finally:
        s.stop()


def test_unknown_token_is_reset(sb):
    """A token whose pipe has expired (the SYN came late) is reset and
    counted, never matched otherwise."""
    relay = sb.relay("relay1")
    relay.reload({"limits": {"pending_timeout": "200ms"}})
    s = slotd(sb, "c1")
    try:
        r0 = relay.counters()
        with FirstSynDropped(sb) as drop:
            rc, err, _ = curl(sb, "c1", sb.nginx.url("down.bin", query="late"),
                              os.path.join(sb.dir, "late.out"))
            assert drop.dropped() == 1
        assert rc != 0, err
        d = deltas(r0, relay.counters())
        assert d["pipes_tokened"] == 1 and d["pipes_expired"] == 1, d
        assert d["data_token_unknown"] == 1 and d["data_token"] == 0, d
        assert d["data_token_fallback"] == 0 and d["pipes_total"] == 0, d
    finally:
        s.stop()
        relay.reload({"limits": {"pending_timeout": "5s"}})


def test_option_stripped_falls_back(sb):
    """A middlebox strips the option (TCPOPTSTRIP at the NAT): the relay
    joins the connection to the one tokened pipe pending from its address."""
    r = sb.relay("relay1")
    rule = ["FORWARD", "-p", "tcp", "--syn", "-d", r.ip, "--dport", str(r.data_port),
            "-j", "TCPOPTSTRIP", "--strip-options", "253"]
    s = slotd(sb, "c1")
    sb.bed.run("nat", "iptables", "-w", "-t", "mangle", "-I", *rule)
    try:
        r0, s0 = r.counters(), s.counters()
        rc, err, sha = curl(sb, "c1", sb.nginx.url("down.bin", query="stripped"),
                            os.path.join(sb.dir, "stripped.out"))
        assert rc == 0 and sha == sb.nginx.files["down.bin"][1], err
        assert sb.nginx.peer_of("stripped") == r.ip
        d = deltas(r0, r.counters())
        assert d["pipes_tokened"] == 1 and d["data_token_fallback"] == 1, d
        assert d["data_token"] == 0 and d["pipes_total"] == 1, d
        assert deltas(s0, s.counters())["token_pipes"] == 1
    finally:
        sb.bed.run("nat", "iptables", "-w", "-t", "mangle", "-D", *rule, check=False)
        s.stop()


@pytest.mark.serial     # under valgrind: alone (run.sh)
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")
def test_under_valgrind(sb):
    """slotd (the option written into SYNs and their retransmissions) and
    the relay (saved SYNs, the token table, an unknown token) under valgrind:
    no memory errors, no definite or indirect leaks."""
    relay = sb.relay("relay1")
    logs = {n: os.path.join(sb.dir, "%s.valgrind" % n) for n in ("slotd", "relay")}

    def wrapper(name):
        return ["valgrind", "--vgdb=no", "--leak-check=full",
                "--errors-for-leak-kinds=definite,indirect", "--error-exitcode=99",
                "--log-file=" + logs[name]]

    relay.stop()
    relay.wrapper = wrapper("relay")
    relay.start(timeout=60)
    # Memory is checked here, not timing: with slotd and the relay both under
    # valgrind the relay's answer can miss 1.25 x the direct RTT, and a first
    # download gone direct is cached, so the later asserts (the token, the
    # late SYN's reset) would see no relay at all. Hence the wide deadline.
    s = sb.slotd([relay], {"nat": {"mode": "auto"}, "select": {"c_wait": 10}},
                 host="c1", wrapper=wrapper("slotd"))
    try:
        s.start(timeout=60)
        want = sb.nginx.files["down.bin"][1]
        for i in range(2):
            rc, err, sha = curl(sb, "c1", sb.nginx.url("down.bin", query="vg%d" % i),
                                os.path.join(sb.dir, "vg.out"))
            assert rc == 0 and sha == want, err
            if i == 0:
                d = s.recent()[-1]
                assert d["verdict"] == "relay", (d, s.log()[-4000:])
        with FirstSynDropped(sb):
            rc, err, sha = curl(sb, "c1", sb.nginx.url("down.bin", query="vg-retrans"),
                                os.path.join(sb.dir, "vg.out"))
            assert rc == 0 and sha == want, err
        relay.reload({"limits": {"pending_timeout": "200ms"}})
        with FirstSynDropped(sb):
            rc, _, _ = curl(sb, "c1", sb.nginx.url("down.bin", query="vg-late"),
                            os.path.join(sb.dir, "vg.out"))
            assert rc != 0
        relay.reload({"limits": {"pending_timeout": "5s"}})
        c = relay.counters()
        assert c["data_token"] >= 3 and c["data_token_unknown"] >= 1, c
        src = s.stop(timeout=60)
        rrc = relay.stop(timeout=60)
        for name, rc in (("slotd", src), ("relay", rrc)):
            log = open(logs[name], errors="replace").read()
            assert rc == 0, "%s exited %r under valgrind:\n%s" % (name, rc, log[-5000:])
            assert re.search(r"ERROR SUMMARY: 0 errors", log), log[-5000:]
            assert "definitely lost" not in log or \
                re.search(r"definitely lost: 0 bytes", log), log
    finally:
        if s.running:
            s.stop()
        relay.stop()
        relay.wrapper = []
        relay.start()


# A connect with a TCP MD5 signature option (RFC 2385) for the server: with
# Linux's 20 option bytes it fills the SYN's 40, leaving no room for a token.
MD5_CONNECT = r'''
import socket, struct, sys
ip, port = sys.argv[1], int(sys.argv[2])
sa = struct.pack("=H", socket.AF_INET) + struct.pack("!H", 0) + socket.inet_aton(ip)
sa = sa.ljust(128, b"\0")
key = b"slot-test-md5"
sig = sa + struct.pack("=BBHI", 0, 0, len(key), 0) + key.ljust(80, b"\0")
s = socket.socket()
s.setsockopt(socket.IPPROTO_TCP, 14, sig)      # TCP_MD5SIG
s.settimeout(3)
try:
    s.connect((ip, port))
    print("connected")
except OSError as e:
    print("not connected: %s" % e)
'''


def test_no_room_for_the_token_goes_direct(sb):
    """A SYN whose options leave no room (here an MD5 signature) is sent
    direct and counted, and no pipe is asked for."""
    s = slotd(sb, "c1")
    try:
        relay = sb.relay("relay1")
        r0, s0 = relay.counters(), s.counters()
        sb.bed.run("c1", "/usr/bin/python3", "-c", MD5_CONNECT, sb.ip("server"), "80",
                   timeout=30)
        ds = deltas(s0, s.counters())
        assert ds["token_no_room"] == 1 and ds["decisions_direct"] == 1, ds
        assert ds["token_pipes"] == 0 and ds["decisions_relay"] == 0, ds
        d = deltas(r0, relay.counters())
        assert d["pipes_tokened"] == 0 and d["pipes_total"] == 0, d
        assert "no room for the pipe token in the SYN" in s.log()
    finally:
        s.stop()


def test_cgnat_port_block(sb):
    """Carrier-grade NAT style: the subscriber's connections leave from a
    block of 100 ports, each one picked at random (SNAT --random-fully), so
    the relay never sees the client's own port; download and upload match
    by token."""
    nat = sb.bed.hosts["nat"]
    relay = sb.relay("relay1")
    rule = ["POSTROUTING", "-s", "192.168.1.0/24", "-o", nat.dev, "-p", "tcp",
            "-j", "SNAT", "--to-source", "%s:20000-20099" % nat.ip, "--random-fully"]
    sb.bed.run("nat", "iptables", "-w", "-t", "nat", "-I", *rule)
    s = slotd(sb, "c2")
    try:
        r0 = relay.counters()
        rc, err, sha = curl(sb, "c2", sb.nginx.url("down.bin", query="cgnat"),
                            os.path.join(sb.dir, "cgnat.out"), "--local-port", "41000")
        assert rc == 0 and sha == sb.nginx.files["down.bin"][1], err
        assert sb.nginx.peer_of("cgnat") == relay.ip
        path, up_sha = sb.random_file("cgnat-up.bin", SIZE)
        r = sb.upload(path, sb.nginx.upload_url("cgnat-up.bin"), timeout=60, host="c2")
        assert r.rc == 0 and r.status in (201, 204), r
        assert sha256_file(sb.nginx.upload_path("cgnat-up.bin")) == up_sha
        # what the relay saw of the download: a port of the block
        seen = [e.rdport for e in sb.conntrack(host="nat", dport=relay.data_port)
                if e.sport == 41000]
        assert len(seen) == 1 and 20000 <= seen[0] <= 20099, seen
        d = deltas(r0, relay.counters())
        assert d["data_token"] == 2 and d["pipes_total"] == 2 and d["data_rejected"] == 0, d
    finally:
        s.stop()
        sb.bed.run("nat", "iptables", "-w", "-t", "nat", "-D", *rule, check=False)


def test_ipv6_behind_nat66(sb):
    """IPv6 through a masquerading gateway (NAT66): the relay on [::] sees the
    NAT's address; the pipe is joined by the token in the IPv6 SYN. Last in
    the module: it leaves relay1 on [::]."""
    r = sb.relay("relay1")
    r.stop()
    r.update({"relay": {"probe_listen": "[::]:%d" % r.probe_port,
                        "control_listen": "[::]:%d" % r.ctl_port,
                        "data_listen": "[::]:%d" % r.data_port}})
    r.start()
    line = "%s data=%d group=1" % (hostport(sb.ip6("relay1"), r.ctl_port), r.data_port)
    s = sb.slotd([line], {"nat": {"mode": "auto"}}, host="c1").start(relays_up=1)
    try:
        r0 = r.counters()
        url = sb.nginx.url("down.bin", query="v6nat", family=6)
        res = sb.curl(url, timeout=60, host="c1")
        assert res.rc == 0 and res.sha == sb.nginx.files["down.bin"][1], (res, s.log()[-3000:])
        assert sb.nginx.peer_of("v6nat") == sb.ip6("relay1")
        d = deltas(r0, r.counters())
        assert d["data_token"] == 1 and d["pipes_tokened"] == 1, d
        assert "sees us from [%s]:" % sb.ip6("nat") in s.log()
    finally:
        s.stop()

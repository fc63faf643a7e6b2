"""The slot layer of the test bed (slotbed.py) over IPv6 and on LANs: what the
tests of issue 15 build on. One SlotBed, no slotd:

    client   gateway of LAN "home" (pc1, pc2), masqueraded
    relay1   its relay started again on its IPv6 address
    server   nginx on its IPv4 and IPv6 addresses

Checks that nginx answers on both families, that curl, wget and uploads run
in LAN hosts (sha256 of every transfer), that the server sees the
gateway's address for them, and that a Relay listens on IPv6. Also the
helpers a newcomer reaches for: up() starts nginx (one request per
connection unless keepalive_timeout says otherwise), sshd() serves ssh and
rsync with a key, and the documents name every place the RTT data is read
from. About 10 s.
"""

import os
import re
import subprocess
import sys

import pytest

import slotbed

KiB = 1024


@pytest.fixture(scope="module")
def sb():
    for b in (slotbed.RELAYD, slotbed.NGINX, slotbed.KEYGEN):
        if not os.access(b, os.X_OK):
            pytest.skip("%s is missing" % b)
    s = slotbed.SlotBed({"relay1": (20, 20)}, direct_rtt=40,
                        lans=[{"name": "home", "gateway": "client", "hosts": ["pc1", "pc2"],
                               "masquerade": True}])
    s.up()                          # starts nginx too
    yield s
    s.down()


def test_nginx_both_families_from_lan_hosts(sb):
    """Downloads over IPv4 and IPv6 from the gateway and a LAN host (curl),
    and wget from the other LAN host: every body whole; nginx logs the
    gateway's address of that family for all of them."""
    sha = sb.nginx.add_file("f1", 300 * KiB)
    assert sb.nginx.url("f1", family=6).startswith("http://[%s]/" % sb.ip6("server"))
    runs = []
    for fam in (4, 6):
        for host in ("client", "pc1"):
            q = "%s-%d" % (host, fam)
            runs.append((q, fam, sb.curl(sb.nginx.url("f1", family=fam, query=q), host=host)))
        q = "pc2-wget-%d" % fam
        runs.append((q, fam, sb.wget(sb.nginx.url("f1", family=fam, query=q), host="pc2")))
    for q, fam, r in runs:
        assert r.rc == 0 and r.sha == sha, (q, r)
        assert sb.nginx.peer_of(q) == sb.bed.addr("client", fam), q


def test_upload_from_lan_host_over_ipv6(sb):
    """curl -T from pc2 to the server's IPv6 address: the stored file has the
    sha256 of what was sent, and came from the gateway's address."""
    path, sha = sb.random_file("up6", 200 * KiB)
    r = sb.upload(path, sb.nginx.upload_url("u6", family=6), host="pc2")
    assert r.rc == 0 and r.status == 201 and r.size == 200 * KiB, r
    assert slotbed.sha256_file(sb.nginx.upload_path("u6")) == sha
    assert sb.nginx.peer_of("PUT /up/u6") == sb.ip6("client")


def test_relay_on_ipv6(sb):
    """A Relay with family=6 is configured and listens on the relay host's
    IPv6 address; its relay line brackets it."""
    sb.relays["relay1"].stop()
    r = slotbed.Relay(sb, "relay1", sb.relay_key, family=6)
    sb.relays["relay1"] = r         # stopped at down()
    r.start()
    assert r.ip == sb.ip6("relay1")
    assert r.control == "[%s]:%d" % (sb.ip6("relay1"), slotbed.RELAY_PORT)
    assert r.relay_line(1).startswith("[%s]:%d data=" % (sb.ip6("relay1"), slotbed.RELAY_PORT))
    assert "fd00:%x::/32" % sb.bed.subnet in r.conf["policy"]["allow_destinations"]
    out = sb.bed.run("relay1", "ss", "-Hltn").stdout
    assert "[%s]:%d" % (sb.ip6("relay1"), r.data_port) in out, out
    r.counters()                    # and answers on its stats socket


def listening(sb, host):
    """{"addr:port"} of the TCP listeners in host."""
    out = sb.bed.run(host, "ss", "-Hltn").stdout
    return {l.split()[3] for l in out.splitlines() if len(l.split()) > 3}


def test_up_starts_nginx(sb):
    """No nginx.start() in the fixture: up() started nginx on both ports and
    both families; start() again is a no-op (the same process)."""
    assert sb.nginx.running
    got = listening(sb, "server")
    for port in (80, 8080):
        for addr in ("%s:%d" % (sb.ip("server"), port), "[%s]:%d" % (sb.ip6("server"), port)):
            assert addr in got, (addr, got)
    pid = sb.nginx.proc.pid
    assert sb.nginx.start() is sb.nginx and sb.nginx.proc.pid == pid
    sha = sb.nginx.add_file("after-up", 10 * KiB)     # served at once
    r = sb.curl(sb.nginx.url("after-up", port=8080))
    assert r.rc == 0 and r.sha == sha, r


def test_nginx_not_started_when_asked(tmp_path):
    b = slotbed.SlotBed({"relay1": (10, 10)}, direct_rtt=20, nginx=False).up()
    try:
        assert b.nginx is not None and not b.nginx.running
        assert not [a for a in listening(b, "server") if a.endswith((":80", ":8080"))]
        b.nginx.start()
        assert b.nginx.running
    finally:
        b.down()


def peer_ports(sb, tag):
    return [r["peer_port"] for r in sb.nginx.requests(tag)]


def test_nginx_keepalive_timeout(sb):
    """keepalive_timeout 0 by default: curl's two requests on two
    connections. Raised (start() restarts nginx with it), the same two
    requests share one connection; then back to 0."""
    sb.nginx.add_file("ka", 4 * KiB)
    assert "keepalive_timeout 0;" in sb.nginx.config()

    def two(tag):
        u = [sb.nginx.url("ka", query="%s-%d" % (tag, i)) for i in (1, 2)]
        r = sb.run_client("curl", "-sS", "-o", "/dev/null", "-o", "/dev/null", *u,
                          check=False, timeout=60)
        assert r.returncode == 0, r.stderr
        slotbed.wait_for(lambda: len(peer_ports(sb, tag)) == 2, 5, "nginx's log of " + tag)
        return peer_ports(sb, tag)

    a, b = two("ka0")
    assert a != b, (a, b)              # two connections
    pid = sb.nginx.proc.pid
    sb.nginx.keepalive_timeout = 30
    try:
        sb.nginx.start()
        assert sb.nginx.proc.pid != pid and "keepalive_timeout 30s;" in sb.nginx.config()
        a, b = two("ka30")
        assert a == b, (a, b)          # one connection, two requests
    finally:
        sb.nginx.keepalive_timeout = 0
        sb.nginx.start()
    a, b = two("ka0again")
    assert a != b, (a, b)


def test_sshd_helper(sb):
    """sb.sshd(): ssh with its key runs a command in the server, from the
    client and from a LAN host (the server sees the gateway); rsync over it
    copies a file whole; scp to the IPv6 address; nothing asked."""
    h = sb.sshd("server")
    assert os.path.exists(h.key) and os.path.exists(h.key + ".pub")
    r = sb.run_client(*h.ssh_argv(), h.login(), "echo hello; echo $SSH_CONNECTION",
                      check=False, timeout=60)
    assert r.returncode == 0, r.stderr + h.log()
    hello, conn = r.stdout.splitlines()
    assert hello == "hello" and conn.split()[0] == sb.ip("client"), r.stdout
    r = sb.bed.run("pc1", *h.ssh_argv(), h.login(family=6), "echo $SSH_CONNECTION",
                   check=False, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == sb.ip6("client"), r.stdout
    src, sha = sb.random_file("ssh-src", 300 * KiB)
    out = os.path.join(sb.dir, "ssh-dst")
    r = sb.run_client("rsync", "-e", h.ssh_command(), h.target(src), out, check=False,
                      timeout=60)
    assert r.returncode == 0, r.stderr
    assert slotbed.sha256_file(out) == sha
    out6 = os.path.join(sb.dir, "ssh-dst6")
    r = sb.run_client("scp", "-q", *h.ssh_argv()[1:], h.target(src, family=6), out6,
                      check=False, timeout=60)
    assert h.target(src, family=6).startswith("root@[%s]:" % sb.ip6("server"))
    assert r.returncode == 0, r.stderr
    assert slotbed.sha256_file(out6) == sha
    # a password is never tried (no prompt, no hang): a wrong key is refused
    r = sb.run_client(*[x if x != h.key else h.key + ".pub" for x in h.ssh_argv()],
                      h.login(), "true", check=False, timeout=60)
    assert r.returncode == 255, r


def test_docs_name_every_place_of_the_rtt_data():
    """topo.data_dir() reads $SLOT_DATA, data/ in the repository, ../shared/data
    beside it and /work/shared/data, in that order: docs/testbed.md (twice),
    topo.py's --data help and its error when none has the data say so."""
    import topo
    src = open(topo.__file__).read()
    body = src[src.index("def data_dir"):src.index("def read_matrix_file")]
    assert re.search(r'os\.environ\.get\("SLOT_DATA"\).*"data"\).*"\.\.", "shared", "data"'
                     r'\).*"/work/shared/data"', body, re.S), body
    doc = " ".join(open(os.path.join(slotbed.ROOT, "docs", "testbed.md")).read().split())
    places = [r"\$SLOT_DATA", r"data/` in the repository", r"\.\./shared/data` beside it",
              r"/work/shared/data"]
    assert len(re.findall(r"[^.]*".join(places), doc)) == 2, "docs/testbed.md"
    r = subprocess.run([sys.executable, topo.__file__, "cities", "-h"], capture_output=True,
                       text=True)
    told = {"--data help": " ".join(r.stdout.split()),
            "error": " ".join(re.search(r'raise RuntimeError\((.*?)\)\n', body, re.S)
                              .group(1).split())}
    for what, text in told.items():
        for p in ("SLOT_DATA", "data/", "../shared/data", "/work/shared/data"):
            assert p in text, (what, p, text)

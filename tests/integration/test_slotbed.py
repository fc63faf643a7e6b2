"""The slot layer of the test bed (slotbed.py) over IPv6 and on LANs: what the
tests of issue 15 build on. One SlotBed, no slotd:

    client   gateway of LAN "home" (pc1, pc2), masqueraded
    relay1   its relay started again on its IPv6 address
    server   nginx on its IPv4 and IPv6 addresses

Checks that nginx answers on both families, that curl, wget and uploads run
in LAN hosts (sha256 of every transfer), that the server sees the
gateway's address for them, and that a Relay listens on IPv6. About 5 s.
"""

import os

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
    s.up()
    s.nginx.start()
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

"""A relay beside the server ([select] server_prefix) on the emulated WAN,
the whole deployment (relays measuring each other through slot-dird, the
landmark rows in slotd's listing), cover with k = 1:

    client -- server 100 ms direct
    relay-x:    20 ms from the client, 80 from the server: path 80; the way
                to site C (20 ms), where most landmarks are
    site C:     relay-c1, relay-c2, 100 ms from the client
    relay-y:    30 ms from the client and from the server: path 30
    relay-near: 2 ms from the server (its network), 100 from the client

The cover ranking, which knows no server, puts relay-x first: it cuts the
paths to both landmarks of site C. For this server, though, relay-y is the
way. slotd does not know the server's place, but it knows that the server
shares its address prefix with relay-near, a landmark: so its one probe goes
by relay-near's row, to relay-y. With server_prefix = 0 it goes to relay-x,
which still beats the direct path by min_gain (100 / 80)."""

import ipaddress

import pytest

import slotbed

PATHS = {"relay-x": (20, 80), "relay-y": (30, 30), "relay-c1": (100, 100),
         "relay-c2": (100, 100), "relay-near": (100, 2)}
PAIRS = [("relay-x", "relay-c1", 20), ("relay-x", "relay-c2", 20),
         ("relay-c1", "relay-c2", 2), ("relay-y", "relay-near", 30),
         ("relay-x", "relay-near", 80), ("relay-x", "relay-y", 50),
         ("relay-y", "relay-c1", 90), ("relay-y", "relay-c2", 90),
         ("relay-near", "relay-c1", 100), ("relay-near", "relay-c2", 100)]


def wait_for(pred, timeout, what):
    return slotbed.wait_for(pred, timeout, what, interval=0.2)


def common_bits(a, b):
    x = int(ipaddress.ip_address(a)) ^ int(ipaddress.ip_address(b))
    return 32 - x.bit_length()


@pytest.fixture(scope="module")
def bed():
    yield from slotbed.directory_bed(PATHS, PAIRS, direct_rtt=100, other_rtt=90)


def prefix_of_near(bed):
    """The prefix length that relay-near alone shares with the server: the
    test bed numbers hosts in order, relay-near last before the server."""
    srv = bed.ip("server")
    bits = {r: common_bits(bed.ip(r), srv) for r in PATHS}
    best = bits["relay-near"]
    assert all(v < best for r, v in bits.items() if r != "relay-near"), bits
    return best


def transfer(bed, tag):
    size, sha = bed.nginx.files["f"]
    q = "id=%s" % tag
    res = bed.curl(bed.nginx.url("f", query=q), timeout=60)
    assert res.rc == 0 and res.sha == sha, res
    return bed.nginx.peer_of(q)


@pytest.mark.parametrize("on", [True, False])
def test_the_probe_goes_by_the_relay_beside_the_server(bed, on):
    d = bed.dird_measuring
    wait_for(lambda: bed.relays_measured(d), 40, "every relay measuring the others")
    bits = prefix_of_near(bed)
    s = bed.cover_slotd(d, "beside%d" % on, server_prefix=bits if on else 0)
    try:
        x = bed.relay("relay-x").control
        # Ranked by the landmarks: relay-x first, whatever the server.
        wait_for(lambda: s.counters()["relays_ranked_by_landmarks"] >= 1, 30,
                 "a ranking by the landmarks")
        wait_for(lambda: slotbed.relays_ranks(s).get(x) == 0, 30, "relay-x ranked first")
        # Without relay-y's RTT, relay-x would win the probe.
        wait_for(lambda: slotbed.ranked_with_every_rtt(s), 30, "a ranking with every relay's RTT")
        peer = transfer(bed, "beside%d" % on)
        c = s.counters()
        last = s.json()["recent"][-1]
        assert last["verdict"] == "relay", last
        assert c["probes_sent"] == 1 and c["decisions_relay"] == 1, c
        if on:
            assert c["probes_beside"] == 1, c
            assert last["beside"] == bed.relay("relay-near").control, last
            assert peer == bed.ip("relay-y")
        else:
            assert c["probes_beside"] == 0, c
            assert last["beside"] is None, last
            assert peer == bed.ip("relay-x")
    finally:
        s.stop()

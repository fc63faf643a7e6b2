"""The cover strategy on the emulated WAN, the whole deployment: relays register
with slot-dird and measure each other, slot-dird sends landmarks with its
listing, slotd ranks its relays from its own RTTs and those landmark rows, and
with k = 1 probes only its first choice.

    site A: relay-a1 --15 ms-- relay-a2     one group (within 50 ms)
    site B: relay-b1 --2 ms--- relay-b2     near the server, far from the client
    client -- server 100 ms direct
    relay-a2: 20 ms from the client but 65 from site B and the server: path 65
    relay-a1: 35 ms from the client, 35 from site B and the server: path 35
    site B:   70 ms from the client, 5 from the server: path 70

relay-a2 is the nearer member of site A's group, relay-a1 the one on the way
to where servers are (site B stands for them): RandGroup-k draws either
member, nearest-first takes relay-a2, cover must take relay-a1.
"""

import pytest

import slotbed

SITE_A, SITE_B = ["relay-a1", "relay-a2"], ["relay-b1", "relay-b2"]
PATHS = {"relay-a1": (35, 35), "relay-a2": (20, 65), "relay-b1": (70, 5),
         "relay-b2": (70, 5)}
PAIRS = [("relay-a1", "relay-a2", 15), ("relay-b1", "relay-b2", 2),
         ("relay-a1", "relay-b1", 35), ("relay-a1", "relay-b2", 35),
         ("relay-a2", "relay-b1", 65), ("relay-a2", "relay-b2", 65)]


def wait_for(pred, timeout, what):
    return slotbed.wait_for(pred, timeout, what, interval=0.2)


@pytest.fixture(scope="module")
def bed():
    yield from slotbed.directory_bed(PATHS, PAIRS, direct_rtt=100, other_rtt=90)


def measured(bed):
    return bed.relays_measured(bed.dird_measuring)


def start_slotd(bed, tag, **select):
    return bed.cover_slotd(bed.dird_measuring, tag, **select)


relays_table, ranks = slotbed.relays_table, slotbed.relays_ranks


def test_cover_takes_the_member_on_the_way(bed):
    wait_for(lambda: measured(bed), 40, "every relay measuring the others")
    size, sha = bed.nginx.files["f"]
    s = start_slotd(bed, "cover")
    try:
        a1, a2 = bed.relay("relay-a1").control, bed.relay("relay-a2").control
        # Ranked once the landmark rows and the links' RTTs are in: relay-a1
        # first, for the landmarks of site B it brings to 35 ms.
        wait_for(lambda: ranks(s).get(a1) == 0, 30, "relay-a1 ranked first")
        wait_for(lambda: slotbed.ranked_with_every_rtt(s), 30, "a ranking with every relay's RTT")
        c = s.counters()
        assert c["relays_ranked_by_landmarks"] >= 1, c
        est = {c: x.get("rtt_est_us") for c, x in relays_table(s).items()}
        # slotd's own RTT estimates come from its control links.
        assert 15000 <= est[a2] <= 30000 and 30000 <= est[a1] <= 45000, est
        for i in range(3):
            q = "id=cover%d" % i
            res = bed.curl(bed.nginx.url("f", query=q), timeout=60)
            assert res.rc == 0 and res.sha == sha, res
            assert bed.nginx.peer_of(q) == bed.ip("relay-a1"), q
        c = s.counters()
        assert c["decisions_relay"] >= 1 and c["probes_sent"] == 1, c
    finally:
        s.stop()


def test_without_landmarks_nearest_first(bed):
    # The same relays listed statically by a slotd with no directory: no
    # landmark rows, so the ranking is nearest first and k = 1 probes
    # relay-a2 (path 65 ms, still better than 100 direct). What cover gains
    # over that is the landmarks.
    wait_for(lambda: measured(bed), 40, "every relay measuring the others")
    size, sha = bed.nginx.files["f"]
    s = bed.slotd([bed.relay(n) for n in PATHS], overrides={"select": {"strategy": "cover", "k": 1}})
    s.start(wait=False)
    try:
        s.wait_ready()
        s.wait_relays_up(4, timeout=20)
        a2 = bed.relay("relay-a2").control
        wait_for(lambda: ranks(s).get(a2) == 0, 30, "relay-a2 ranked first")
        wait_for(lambda: slotbed.ranked_with_every_rtt(s), 30, "a ranking with every relay's RTT")
        assert s.counters()["relays_ranked_by_landmarks"] == 0
        res = bed.curl(bed.nginx.url("f", query="id=nearest"), timeout=60)
        assert res.rc == 0 and res.sha == sha, res
        assert bed.nginx.peer_of("id=nearest") == bed.ip("relay-a2")
    finally:
        s.stop()

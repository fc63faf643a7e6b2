"""slot-relayd and slot-dird together on the emulated WAN: relays register,
send heartbeats, measure their RTTs to each other with the probe messages and
report them; the directory groups them by those RTTs.

    site A: relay-a1 --2 ms-- relay-a2     site B: relay-b1 --2 ms-- relay-b2
    every pair across the sites: 60 ms     the directory in host "dir"
    client --80 ms-- server; through relay-a1 30 + 30 ms, relay-a2 40 + 40,
    the site B relays 60 + 60 (the last test runs slotd on the directory)

The relays learn the directory's URL after the bed is up (its address comes
from the bed), so each test module restarts them with a [directory] section.
"""

import os
import re
import signal

import pytest

import slotbed
from slotbed import unix_request

SITE_A, SITE_B = ["relay-a1", "relay-a2"], ["relay-b1", "relay-b2"]
NEAR, FAR = 2, 60            # ms
DIRECT = 80
PATHS = {"relay-a1": (30, 30), "relay-a2": (40, 40), "relay-b1": (FAR, FAR),
         "relay-b2": (FAR, FAR)}
DIRD_CONF = {"relays": {"heartbeat_interval": "1s", "expire_after": "4s"},
             "groups": {"regroup_interval": "200ms"}}


def dir_conf(d, **kw):
    c = {"urls": d.url, "list_interval": "500ms", "measure_interval": "3s",
         "measure_rate": 50, "timeout": "2s"}
    c.update(kw)
    return {"directory": c}


def peers_of(r):
    """{peer: (rtt_us or None, samples)} from the relay's "peers" command."""
    out = {}
    for line in unix_request(r.stats, b"peers\n").splitlines():
        ep, rtt, n = line.split()
        out[ep] = (None if rtt == "-" else int(rtt), int(n))
    return out


def wait_for(pred, timeout, what):
    return slotbed.wait_for(pred, timeout, what, interval=0.1)


@pytest.fixture(scope="module")
def bed():
    # Shared mode: some tests here are about the key of the directory's calls
    # (identity mode: test_dird_identity.py).
    b = slotbed.SlotBed(PATHS, direct_rtt=DIRECT, other_rtt=FAR, extra_hosts=["dir"],
                        extra_pairs=[(SITE_A[0], SITE_A[1], NEAR),
                                     (SITE_B[0], SITE_B[1], NEAR)], auth="shared").up()
    try:
        b.nginx.add_file("full", 1 << 20)
        b.nginx.start()
        yield b
    finally:
        b.down()


@pytest.fixture
def dird(bed):
    """A fresh directory with every relay restarted to use it."""
    for d in bed.dirds:
        d.stop()
    bed.dirds.clear()
    for f in os.listdir(bed.dir):
        if f.startswith("dird-"):
            os.unlink(os.path.join(bed.dir, f))
    d = bed.dird(overrides=DIRD_CONF)
    for r in bed.relays.values():
        r.stop()
        r.update(dir_conf(d))
        r.start()
    yield d


def grouped(d, names, bed):
    """{relay name: group} once every relay in names is listed."""
    listing = d.listing()
    out = {}
    for n in names:
        ctl = bed.relay(n).control
        if ctl not in listing:
            return None
        out[n] = listing[ctl]
    return out


def sites_apart(d, bed):
    g = grouped(d, SITE_A + SITE_B, bed)
    return g if (g and g[SITE_A[0]] == g[SITE_A[1]] and g[SITE_B[0]] == g[SITE_B[1]]
                 and g[SITE_A[0]] != g[SITE_B[0]]) else None


def test_register_measure_report_group(bed, dird):
    # Every relay registers, measures the three others and reports; the
    # directory then puts each site in a group of its own.
    g = wait_for(lambda: sites_apart(dird, bed), 30, "the two sites as two groups")
    assert len(set(g.values())) == 2
    # One direction of a pair is enough to group: the other reports may lag.
    wait_for(lambda: all(bed.relay(n).counters()["dir_reports"] >= 1 for n in PATHS), 20,
             "every relay's report")
    for n in SITE_A + SITE_B:
        r = bed.relay(n)
        c = r.counters()
        assert c["dir_registered"] == 1 and c["dir_registrations"] >= 1, c
        assert c["peers"] == 3 and c["peer_probes_answered"] >= 3, c
        assert c["dir_reports"] >= 1 and c["dir_report_entries"] >= 3, c
        assert c["peer_pings"] >= 3, c       # the others measured us
        # The RTTs measured are the bed's: near inside a site, far across.
        peers = peers_of(r)
        assert len(peers) == 3
        site = SITE_A if n in SITE_A else SITE_B
        for m in SITE_A + SITE_B:
            if m == n:
                continue
            rtt, samples = peers[bed.relay(m).control]
            assert rtt is not None and samples >= 1
            want = NEAR if m in site else FAR
            # Both ends answer in user space: a loaded machine adds its
            # scheduling delay (7.6 ms once for a 2 ms pair in CI), still far
            # below the other site's 60 ms.
            assert want * 1000 * 0.9 <= rtt <= want * 1000 * 1.5 + 15000, (n, m, rtt)
    # The probes were pings: no relay connected to itself or anyone.
    dc = dird.counters()
    assert dc["faults_auth"] == 0 and dc["faults_malformed"] == 0, dc
    assert dc["calls_report"] >= 4


def test_heartbeats_and_register_again_after_directory_loses_state(bed, dird):
    wait_for(lambda: sites_apart(dird, bed), 30, "the two sites as two groups")
    r = bed.relay(SITE_A[0])
    hb = r.counters()["dir_heartbeats"]
    wait_for(lambda: r.counters()["dir_heartbeats"] >= hb + 2, 10, "heartbeats")
    # A directory restarted without its state answers heartbeats with
    # UNKNOWN_RELAY: the relays register again and send their reports again,
    # so the groups come back without waiting for a new measurement round.
    dird.stop()
    os.unlink(dird.state)
    regs = {n: bed.relay(n).counters()["dir_registrations"] for n in SITE_A + SITE_B}
    dird.start()
    wait_for(lambda: all(bed.relay(n).counters()["dir_registrations"] > regs[n]
                         for n in regs), 20, "registrations again")
    wait_for(lambda: sites_apart(dird, bed), 20, "the groups again")


def test_stopped_relay_expires_and_peers_forget_it(bed, dird):
    wait_for(lambda: sites_apart(dird, bed), 30, "the two sites as two groups")
    gone = bed.relay(SITE_B[1])
    gone.stop()
    try:
        wait_for(lambda: gone.control not in dird.listing(), 15, "expiry")
        other = bed.relay(SITE_A[0])
        wait_for(lambda: other.counters()["peers"] == 2, 10, "peers without the stopped relay")
        assert gone.control not in peers_of(other)
        assert dird.counters()["relays_expired"] >= 1
    finally:
        gone.start()
    # Back: registered and measured again.
    wait_for(lambda: sites_apart(dird, bed), 30, "the two sites again")


def test_directory_down_at_relay_start(bed, dird):
    dird.stop()
    r = bed.relay(SITE_A[1])
    r.stop()
    r.start()              # starts and serves without its directory
    # its first register has failed: counted, then said (a list call's
    # failure counts too, hence the log line)
    wait_for(lambda: r.counters()["dir_calls_failed"] >= 1 and "register failed" in r.log(),
             20, "the failed register")
    c = r.counters()
    assert c["dir_registered"] == 0, c
    dird.start()
    # Registration retries back off from 1 s, at most a minute.
    wait_for(lambda: r.counters()["dir_registered"] == 1, 20, "registration once it is up")
    wait_for(lambda: sites_apart(dird, bed), 30, "the groups")


def test_wrong_key_is_refused(bed, dird):
    r = bed.relay(SITE_B[0])
    wrong = os.path.join(bed.dir, "wrong.key")
    slotbed.netns.write_key(wrong, os.urandom(32).hex(), owner="nobody")
    r.stop()
    r.update({"relay": {"key_file": wrong}})
    try:
        before = dird.counters()["faults_auth"]
        r.start()
        wait_for(lambda: dird.counters()["faults_auth"] > before, 10, "AUTH faults")
        wait_for(lambda: "register failed" in r.log(), 10, "the relay's log line")
        assert r.counters()["dir_registered"] == 0
    finally:
        r.stop()
        r.update({"relay": {"key_file": bed.relay_key}})
        r.start()
    wait_for(lambda: r.counters()["dir_registered"] == 1, 20, "registration with the key")


def test_sighup_changes_key_for_the_directory_calls(bed, dird):
    # A reload with a new key file signs the next calls with it: the
    # directory (still on the old key) refuses them.
    r = bed.relay(SITE_A[0])
    wait_for(lambda: r.counters()["dir_registered"] == 1, 20, "registered")
    other = os.path.join(bed.dir, "other.key")
    slotbed.netns.write_key(other, os.urandom(32).hex(), owner="nobody")
    before = dird.counters()["faults_auth"]
    r.update({"relay": {"key_file": other}})
    try:
        r.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: dird.counters()["faults_auth"] > before, 10, "AUTH faults after reload")
    finally:
        r.update({"relay": {"key_file": bed.relay_key}})
        r.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: r.counters()["dir_heartbeats"] > 0 and
             r.control in dird.listing(), 10, "listed again")


@pytest.mark.serial     # under valgrind: alone (run.sh)
def test_relay_with_directory_under_valgrind(bed, dird):
    # The directory thread, the peer measurements and a key reload, then a
    # clean exit: no memory errors, no definite or indirect leaks.
    r = bed.relay(SITE_B[1])
    vg_log = os.path.join(bed.dir, "relay.valgrind")
    r.stop()
    r.wrapper = ["valgrind", "--vgdb=no", "--leak-check=full",
                 "--errors-for-leak-kinds=definite,indirect", "--error-exitcode=99",
                 "--log-file=" + vg_log]
    try:
        r.start(timeout=60)
        wait_for(lambda: r.counters()["dir_reports"] >= 1 and
                 r.counters()["peer_probes_answered"] >= 3, 60, "a report under valgrind")
        n = r.log().count("configuration reloaded")
        r.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: r.log().count("configuration reloaded") > n, 20, "the reload")
        rc = r.stop(timeout=60)
    finally:
        r.wrapper = []
    log = open(vg_log, errors="replace").read()
    assert rc == 0, "slot-relayd exited %r under valgrind:\n%s" % (rc, log[-5000:])
    assert re.search(r"ERROR SUMMARY: 0 errors", log), log[-5000:]
    assert "definitely lost" not in log or re.search(r"definitely lost: 0 bytes", log), log
    r.start()
    wait_for(lambda: sites_apart(dird, bed), 30, "the groups")


def test_slotd_follows_the_directory(bed, dird):
    # The whole deployment: relays register and measure each other, slotd
    # knows only the directory's URL, samples one relay per group (so either
    # site A relay, path 30 or 40 ms: RandGroup-k trades the best relay of a
    # group for fewer probes) and takes site A over site B (60 ms),
    # byte-exact; a relay that goes away leaves slotd's set without a restart.
    g = wait_for(lambda: sites_apart(dird, bed), 30, "the two sites as two groups")
    size, sha = bed.nginx.files["full"]
    s = bed.slotd([], overrides={"directory": {
        "urls": dird.url, "refresh": "500ms", "retry": "500ms",
        "cache_file": os.path.join(bed.dir, "slotd.relays")}})
    s.start(wait=False)
    try:
        s.wait_ready()
        s.wait_relays_up(4, timeout=20)
        relays = {x["control"]: x for x in s.json()["relays"]}
        assert set(relays) == {bed.relay(n).control for n in PATHS}
        # Directory groups keep apart from static ones, one per site here.
        a = {relays[bed.relay(n).control]["group"] for n in SITE_A}
        b = {relays[bed.relay(n).control]["group"] for n in SITE_B}
        assert len(a) == 1 and len(b) == 1 and a != b, relays
        assert min(a) >= 0x80000000 and g[SITE_A[0]] == min(a) - 0x80000000
        r = bed.curl(bed.nginx.url("full", query="id=fullstack"), timeout=60)
        assert r.rc == 0 and r.sha == sha, r
        assert bed.nginx.peer_of("id=fullstack") in {bed.ip(n) for n in SITE_A}
        c = s.counters()
        assert c["decisions_relay"] >= 1 and c["dir_fetches_ok"] >= 1, c

        gone = bed.relay(SITE_B[1])
        gone.stop()
        try:
            wait_for(lambda: gone.control not in {x["control"] for x in s.json()["relays"]},
                     30, "slotd dropping the expired relay")
        finally:
            gone.start()
        wait_for(lambda: gone.control in {x["control"] for x in s.json()["relays"]},
                 30, "slotd taking the relay back")
    finally:
        s.stop()

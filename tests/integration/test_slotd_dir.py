"""slotd with relays from slot-dird, on the emulated WAN test bed
(tests/integration/slotbed.py):

    client --80 ms-- server              (direct)
    client --40-- relay1 --40-- server   path 40 ms
    client --80-- relay2 --80-- server   path 80 ms: no gain
    client --10-- relay3 --10-- server   path 10 ms: the best
    client --10-- dir                    slot-dird

slot-relayd does not register itself yet: the tests register the relays from
Python (signed calls from inside the client host) and heartbeat them where
expiry matters. Each test starts its own slot-dird (empty state) and slotd,
with refresh = 1s so that changes show within seconds. Every transfer is
checked by sha256; the waits are generous and no test measures time.
"""

import os
import re
import stat
import subprocess
import threading

import pytest

import slotbed
from slotbed import KiB, MiB

# relay3 well ahead of relay1 (10 vs 40 ms; it was 30): a relay's RTT as slotd
# measures it grows by up to ~20 ms on a loaded machine, and relay1 must not
# come out first
RELAYS = {"relay1": (40, 40), "relay2": (80, 80), "relay3": (10, 10)}
FILES = {"small": 100 * KiB, "big": 4 * MiB}
DIR_GROUP = 0x80000000
WAIT = 30           # seconds: generous, the machine is shared
DEAD_PORT = 7699    # nothing listens there in the directory's host


def need_binaries():
    for b in (slotbed.SLOTD, slotbed.DIRD):
        if not os.access(b, os.X_OK):
            pytest.fail("%s is missing: build it first (make all)" % b)


@pytest.fixture(scope="module")
def sb():
    need_binaries()
    # Shared mode: the cache file of format 1 and the MAC-signed calls these
    # tests look at; identity mode (signed listings, the signed cache):
    # test_dird_identity.py.
    b = slotbed.SlotBed(RELAYS, direct_rtt=80, extra_hosts=["dir"], auth="shared").up()
    try:
        for name, size in FILES.items():
            b.nginx.add_file(name, size)
        b.nginx.start()
        yield b
    finally:
        b.down()


@pytest.fixture
def tags(request):
    base = re.sub(r"[^A-Za-z0-9_-]", "_", request.node.name)[:60]
    n = [0]

    def make():
        n[0] += 1
        return "%s-%d" % (base, n[0])
    return make


class Heartbeats:
    """Keeps relays listed: a heartbeat for each every `every` seconds, from a
    thread, until stop(); drop(relay) lets one expire."""

    def __init__(self, d, relays, every=0.5):
        self.d, self.relays, self.every = d, set(relays), every
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.errors = []
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.done.wait(self.every):
            with self.lock:
                relays = list(self.relays)
            for r in relays:
                try:
                    self.d.heartbeat(r)
                except Exception as e:      # reported by stop()
                    self.errors.append("%s: %r" % (r, e))

    def drop(self, relay):
        with self.lock:
            self.relays.discard(relay)

    def stop(self):
        self.done.set()
        self.t.join(10)
        return self.errors


@pytest.fixture
def dird(sb, request):
    """Factory: dird(overrides) starts slot-dird in host "dir" with an empty
    state; stopped at the end of the test."""
    started = []

    def start(overrides=None):
        state = os.path.join(sb.dir, "dird-dir.state")     # BedDird's, in host "dir"
        if os.path.exists(state):
            os.unlink(state)
        d = sb.dird(overrides=overrides)
        started.append(d)
        return d

    yield start
    rep = getattr(request.node, "rep_call", None)
    for d in started:
        if rep is not None and rep.failed:
            print("---- slot-dird (%s) ----\n%s" % (d.log_path, d.log()[-8000:]))
        d.stop()
        if d in sb.dirds:
            sb.dirds.remove(d)


@pytest.fixture
def slotd(sb, request):
    """Factory: slotd(directory, relays=(), overrides=None) starts slotd with
    those [directory] keys (refresh 1s by default) and static relays."""
    started = []

    def start(directory, relays=(), overrides=None, wait=True, wrapper=None):
        s = sb.slotd([sb.relay(n) for n in relays], wrapper=wrapper)
        conf = {"directory": dict({"refresh": "1s", "retry": "500ms", "timeout": "5s"},
                                  **directory),
                # c_wait 2: relay1's answer (40 + 40 ms) comes within 2 x
                # the direct 80 ms with room to spare (1.25: 20 ms)
                "select": {"cache_ttl": 0, "c_wait": 2}}
        for sec, kv in (overrides or {}).items():
            conf.setdefault(sec, {}).update(kv)
        s.update(conf)
        started.append(s)
        s.start(wait=False)
        if wait:
            # only ready: relays come later (or at once, from the cache file)
            s.wait_ready(WAIT)
        return s

    yield start
    rep = getattr(request.node, "rep_call", None)
    bad = []
    for s in started:
        rc = s.stop()
        if rc != 0:
            bad.append((s.n, rc, s.log()[-5000:]))
        if rep is not None and rep.failed:
            print("---- slotd %d (%s), exit %r ----\n%s" % (s.n, s.log_path, rc,
                                                           s.log()[-15000:]))
    sb.remove_slot_rules()
    # SIGTERM must end slotd cleanly, directory thread included
    assert bad == [], bad


# ---------------------------------------------------------------- helpers

def cache_path(sb, request_name):
    """A cache file in a directory that does not exist yet (slotd makes it)."""
    return os.path.join(sb.dir, "cache-" + re.sub(r"[^A-Za-z0-9_-]", "_", request_name),
                        "slotd.relays")


def fetch(sb, tag, name="small", args=(), timeout=60):
    url = sb.nginx.url(name, query="id=" + tag)
    r = sb.curl(url, args=args, timeout=timeout)
    size, sha = sb.nginx.files[name]
    assert r.rc == 0 and r.status == 200, r
    assert r.size == size and r.sha == sha, r
    r.peer = sb.nginx.peer_of("id=%s " % tag)
    return r


def assert_relayed(sb, s, r, relay):
    d = s.decision(client="%s:%d" % (sb.ip("client"), r.local_port))
    assert d["verdict"] == "relay" and d["relay"] == relay.control, d
    ct = sb.ct_entry(r.local_port, dst=sb.ip("server"), dport=80)
    assert ct is not None and ct.dnat == (relay.ip, relay.data_port), ct
    assert r.peer == relay.ip, (r.peer, relay.ip)


def register(d, *relays):
    for r in relays:
        d.register(r.control, r.data_port)


def wait_relays(s, want, timeout=WAIT):
    """Waits until slotd's relay set is exactly `want` ({control: source})
    with each relay up and its rules in; returns {control: json entry}."""
    got = {}

    def ok():
        got.clear()
        got.update(s.relays_state())
        if {c: x.get("source") for c, x in got.items()} != want or \
                any(x["state"] != "up" for x in got.values()):
            return False
        # Probed only once its DNAT rule is in (relay_usable).
        c = s.counters()
        return c["rules_pending"] == 0 and c["relays_waiting_rules"] == 0
    try:
        slotbed.wait_for(ok, timeout, "relays %r" % want, interval=0.2)
    except AssertionError as e:
        raise AssertionError("%s; slotd has %r" % (e, got))
    return dict(got)


def dnat_targets(sb):
    """The --to-destination of every rule in SLOT_DNAT, in the client host."""
    return set(re.findall(r"-A SLOT_DNAT .*--to-destination (\S+)", sb.iptables_save("nat")))


def wait_dnat(sb, want):
    """Waits until SLOT_DNAT holds exactly `want`: slotd installs the rules
    off its loop, after the relay is up (rules_pending)."""
    got = set()

    def ok():
        got.clear()
        got.update(dnat_targets(sb))
        return got == want
    try:
        slotbed.wait_for(ok, WAIT, "DNAT rules to %r" % sorted(want), interval=0.2)
    except AssertionError as e:
        raise AssertionError("%s; SLOT_DNAT has %r" % (e, sorted(got)))


def slotctl_relays(s):
    ctl = os.path.join(slotbed.BUILD, "slotctl")
    r = subprocess.run([ctl, "-s", s.sock, "relays"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["relay", "data", "group", "state", "fails", "probes",
                                "pipes", "failed", "source", "rtt", "quarantine", "rank",
                                "rtt_est", "seen_as", "chains"], lines[0]
    return {l.split()[0]: l.split() for l in lines[1:]}


def read(path):
    with open(path) as f:
        return f.read()


# ---------------------------------------------------------------- 1: relays from the directory

def test_relay_from_the_directory_carries_a_download(sb, dird, slotd, tags, request):
    """No static relays: slotd learns relay1 from the directory, relays a
    4 MiB download through it, and lists it with its group and source."""
    r1 = sb.relay("relay1")
    d = dird()
    register(d, r1)
    group = d.listing()[r1.control]
    cache = cache_path(sb, request.node.name)
    s = slotd({"urls": d.url, "cache_file": cache})
    rel = wait_relays(s, {r1.control: "directory"})
    assert rel[r1.control]["group"] == DIR_GROUP + group, rel
    assert rel[r1.control]["data_port"] == r1.data_port, rel

    r = fetch(sb, tags(), "big")
    assert_relayed(sb, s, r, r1)

    row = slotctl_relays(s)[r1.control]
    assert int(row[1]) == r1.data_port and int(row[2]) == DIR_GROUP + group, row
    assert row[3] == "up" and row[8] == "directory", row

    c = s.counters()
    assert c["dir_fetches_ok"] >= 1 and c["dir_fetches_failed"] == 0, c
    assert c["dir_relays"] == 1 and c["dir_cache_loaded"] == 0, c
    assert c["relays_configured"] == 1, c
    # one listing, then "unchanged" at every refresh
    slotbed.wait_for(lambda: s.counters()["dir_fetches_unchanged"] >= 2, WAIT,
                     "unchanged fetches")
    assert s.counters()["dir_fetches_ok"] == c["dir_fetches_ok"]
    j = s.json()
    version = d.list("")["version"]
    assert j["directory"] == {"version": version, "url": d.url}, j["directory"]
    # the disk copy: made with its directory, whole, readable
    assert read(cache) == "slot-relays 1 %s\n%s %d %d\n" % (version, r1.control, r1.data_port,
                                                          group)
    assert os.stat(cache).st_mode & 0o777 == 0o644
    assert not os.path.exists(cache + ".tmp")
    assert dnat_targets(sb) == {"%s:%d" % (r1.ip, r1.data_port)}
    # the directory's thread holds no more privilege than the daemon
    tasks = os.listdir("/proc/%d/task" % s.pid)
    assert len(tasks) >= 2, tasks
    for t in tasks:
        caps = task_caps(s.pid, t)
        assert caps["CapEff"] == caps["CapPrm"] == caps["CapBnd"] == 1 << 12, (t, caps)


def task_caps(pid, tid):
    out = {}
    with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
        for line in f:
            if line.startswith("Cap"):
                k, v = line.split(":")
                out[k] = int(v.strip(), 16)
    return out


# ---------------------------------------------------------------- 2: a new relay, live pipes

def test_new_relay_appears_while_a_transfer_runs(sb, dird, slotd, tags, request):
    """relay3 registers while a slow download runs through relay1: slotd adds
    it without a restart, relay1 keeps its mark and its control connection,
    the download completes byte-exact through relay1, and the next
    connection takes relay3 (the shorter path)."""
    r1, r3 = sb.relay("relay1"), sb.relay("relay3")
    d = dird()
    register(d, r1)
    s = slotd({"urls": d.url, "cache_file": cache_path(sb, request.node.name)})
    before = wait_relays(s, {r1.control: "directory"})
    rc0 = r1.counters()
    c0 = s.counters()

    tag = tags()
    out = os.path.join(sb.dir, "inflight.out")
    p = sb.curl_popen(sb.nginx.url("big", query="id=" + tag), out,
                      args=["--limit-rate", "400K"])
    try:
        r1.wait_counter("pipes_open", lambda v: v == 1, timeout=WAIT)
        slotbed.wait_for(lambda: os.path.exists(out) and os.path.getsize(out) > 0, WAIT,
                         "bytes to arrive")
        register(d, r3)
        after = wait_relays(s, {r1.control: "directory", r3.control: "directory"})
        assert p.poll() is None, "the transfer ended before relay3 came: make it slower"
        assert after[r1.control]["mark"] == before[r1.control]["mark"], (before, after)
        wait_dnat(sb, {"%s:%d" % (r1.ip, r1.data_port), "%s:%d" % (r3.ip, r3.data_port)})
    finally:
        res = sb.finish_curl(p, out)
    size, sha = sb.nginx.files["big"]
    assert res.rc == 0 and res.status == 200 and res.size == size and res.sha == sha, res
    assert sb.nginx.peer_of("id=%s " % tag) == r1.ip
    rc1 = r1.counters()
    assert rc1["pipes_total"] - rc0["pipes_total"] == 1, (rc0, rc1)
    assert rc1["pipes_failed"] == rc0["pipes_failed"], (rc0, rc1)
    c1 = s.counters()
    assert c1["dir_fetches_ok"] - c0["dir_fetches_ok"] == 1, slotbed.deltas(c0, c1)
    assert c1["dir_relays"] == 2 and c1["relays_up"] == 2, c1
    # relay1's control connection stayed up throughout
    log = s.log()
    assert log.count("relay %s: control connection up" % r1.control) == 1, log
    assert "relay %s: control connection lost" % r1.control not in log, log

    r = fetch(sb, tags(), "small")
    assert_relayed(sb, s, r, r3)


# ---------------------------------------------------------------- 3: expiry

def test_silent_relay_expires_and_leaves_the_set(sb, dird, slotd, request):
    r1, r2 = sb.relay("relay1"), sb.relay("relay2")
    d = dird({"relays": {"heartbeat_interval": "1s", "expire_after": "3s"}})
    register(d, r1, r2)
    hb = Heartbeats(d, [r1.control, r2.control])
    try:
        s = slotd({"urls": d.url, "cache_file": cache_path(sb, request.node.name)})
        wait_relays(s, {r1.control: "directory", r2.control: "directory"})
        wait_dnat(sb, {"%s:%d" % (r1.ip, r1.data_port), "%s:%d" % (r2.ip, r2.data_port)})
        hb.drop(r2.control)
        slotbed.wait_for(lambda: r2.control not in d.listing(), WAIT, "relay2 to expire")
        wait_relays(s, {r1.control: "directory"})
        wait_dnat(sb, {"%s:%d" % (r1.ip, r1.data_port)})
        assert s.counters()["dir_relays"] == 1
    finally:
        assert hb.stop() == []


# ---------------------------------------------------------------- 4: directory down at start

def test_directory_down_at_start_uses_the_disk_copy(sb, dird, slotd, tags, request):
    r1 = sb.relay("relay1")
    d = dird()          # expire_after 120s: relay1 outlives the downtime
    register(d, r1)
    cache = cache_path(sb, request.node.name)
    s1 = slotd({"urls": d.url, "cache_file": cache})
    wait_relays(s1, {r1.control: "directory"})
    version = s1.json()["directory"]["version"]
    assert s1.stop() == 0
    assert read(cache).startswith("slot-relays 1 %s\n" % version)
    d.stop()

    s2 = slotd({"urls": d.url, "cache_file": cache})
    wait_relays(s2, {r1.control: "directory"})
    c = s2.counters()
    assert c["dir_cache_loaded"] == 1 and c["dir_relays"] == 1, c
    assert s2.json()["directory"]["version"] == version
    slotbed.wait_for(lambda: s2.counters()["dir_fetches_failed"] >= 2, WAIT,
                     "failed fetches")
    r = fetch(sb, tags(), "big")
    assert_relayed(sb, s2, r, r1)
    assert "directory: no answer" in s2.log()

    # The directory comes back with the same listing (a clean restart keeps
    # the version). The cache file holds no landmarks, so the first answer
    # is asked for whole; then "unchanged", and the set stays.
    d.start()
    slotbed.wait_for(lambda: s2.counters()["dir_fetches_unchanged"] >= 1, WAIT,
                     "an unchanged fetch")
    c = s2.counters()
    assert c["dir_fetches_ok"] == 1 and c["dir_relays"] == 1, c
    assert s2.json()["directory"]["version"] == version
    assert s2.json()["directory"]["url"] == d.url


# ---------------------------------------------------------------- 5: several URLs

def test_first_url_dead_second_answers(sb, dird, slotd, tags, request):
    r1 = sb.relay("relay1")
    d = dird()
    register(d, r1)
    dead = "http://%s:%d/RPC2" % (d.ip, DEAD_PORT)
    s = slotd({"urls": "%s, %s" % (dead, d.url), "cache_file": cache_path(sb, request.node.name)})
    wait_relays(s, {r1.control: "directory"})
    slotbed.wait_for(lambda: s.counters()["dir_fetches_unchanged"] >= 1, WAIT,
                     "a second fetch")
    c = s.counters()
    assert c["dir_fetches_failed"] == 0 and c["dir_fetches_ok"] == 1, c
    assert s.json()["directory"]["url"] == d.url
    r = fetch(sb, tags(), "small")
    assert_relayed(sb, s, r, r1)

    # Both dead: the fetch fails, and the set stays as it was.
    d.stop()
    slotbed.wait_for(lambda: s.counters()["dir_fetches_failed"] >= 1, WAIT, "a failed fetch")
    assert set(s.relays_state()) == {r1.control}
    assert ":%d/RPC2" % DEAD_PORT in s.log()


# ---------------------------------------------------------------- 6: a corrupt disk copy

def test_corrupt_cache_file_is_ignored(sb, dird, slotd, request):
    r1 = sb.relay("relay1")
    d = dird()
    register(d, r1)
    cache = cache_path(sb, request.node.name)
    os.makedirs(os.path.dirname(cache))
    with open(cache, "w") as f:
        f.write("slot-relays 1 v1\n%s %d\n" % (sb.relay("relay2").control, 7601))
    s = slotd({"urls": d.url, "cache_file": cache})
    wait_relays(s, {r1.control: "directory"})
    log = s.log()
    assert "ignoring the cache file: %s:2:" % cache in log, log
    c = s.counters()
    assert c["dir_cache_loaded"] == 0 and c["dir_fetches_ok"] >= 1, c
    # replaced by the directory's listing
    assert read(cache) == "slot-relays 1 %s\n%s %d %d\n" % (
        d.list("")["version"], r1.control, r1.data_port, d.listing()[r1.control])


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_cache_file_not_a_regular_file_is_skipped(sb, dird, slotd, request, kind):
    """slotd reads the cache file as root, from a directory group slot may
    write: a FIFO there blocked its start for good, a symlink to /dev/zero
    grew its memory without bound. Both are skipped, saying what they are,
    and the directory's listing replaces them."""
    r1 = sb.relay("relay1")
    d = dird()
    register(d, r1)
    cache = cache_path(sb, request.node.name)
    os.makedirs(os.path.dirname(cache))
    if kind == "fifo":
        os.mkfifo(cache, 0o644)
        why = "%s: a FIFO, not read" % cache
    else:
        os.symlink("/dev/zero", cache)
        why = "%s: a symbolic link, not followed" % cache
    s = slotd({"urls": d.url, "cache_file": cache})
    wait_relays(s, {r1.control: "directory"})
    log = s.log()
    assert "ignoring the cache file: " + why in log, log
    assert s.counters()["dir_cache_loaded"] == 0
    assert read(cache) == "slot-relays 1 %s\n%s %d %d\n" % (
        d.list("")["version"], r1.control, r1.data_port, d.listing()[r1.control])
    assert stat.S_ISREG(os.lstat(cache).st_mode)


# ---------------------------------------------------------------- static and directory, reload

def test_static_relays_win_and_reload_keeps_directory_relays(sb, dird, slotd, request):
    """relay2 is static (group 1) and also in the directory: the static line
    wins. SIGHUP with relay2's line gone keeps relay1 (directory) and brings
    relay2 back from the directory; [directory] changes wait for a restart."""
    r1, r2 = sb.relay("relay1"), sb.relay("relay2")
    d = dird()
    register(d, r1, r2)
    s = slotd({"urls": d.url, "cache_file": cache_path(sb, request.node.name)},
              relays=["relay2"])
    rel = wait_relays(s, {r2.control: "static", r1.control: "directory"})
    assert rel[r2.control]["group"] == 1, rel
    assert [x["control"] for x in s.json()["relays"]] == [r2.control, r1.control]
    mark1 = rel[r1.control]["mark"]

    s.relays = []
    s.update({"directory": {"refresh": "2s"}})
    c = s.hup("reloads")
    assert c["reload_failures"] == 0, c
    rel = wait_relays(s, {r2.control: "directory", r1.control: "directory"})
    assert rel[r1.control]["mark"] == mark1, rel
    assert rel[r2.control]["group"] == DIR_GROUP + d.listing()[r2.control], rel
    assert "[directory] changes need a restart" in s.log()
    assert len(dnat_targets(sb)) == 2

    # Static groups are below 2^31: the directory's start there.
    s.relays = ["%s group=2147483648" % r2.relay_line(0).split(" group=")[0]]
    s.write(s.text())
    s.hup("reload_failures")
    assert "groups above 2147483647 are the directory's" in s.log()
    assert set(s.relays_state()) == {r1.control, r2.control}


# ---------------------------------------------------------------- rules that fail

FAKE_RESTORE = """#!/bin/sh
# iptables-restore that fails while %(flag)s exists
if [ -e %(flag)s ]; then echo "refused by the test" >&2; exit 1; fi
exec %(real)s "$@"
"""


def test_listing_whose_rules_fail_is_retried(sb, dird, slotd, request):
    """While iptables-restore fails, a new listing's relay joins the set but
    is not used (its DNAT rule is not in the kernel) and the old rules stay;
    slotd retries the restore (off its event loop, docs/slotd.md) and puts
    the rules in once it works again, without fetching the listing again."""
    r1, r3 = sb.relay("relay1"), sb.relay("relay3")
    real = subprocess.run(["sh", "-c", "command -v iptables-restore"], capture_output=True,
                          text=True, check=True).stdout.strip()
    fake_dir = os.path.join(sb.dir, "fakebin")
    flag = os.path.join(sb.dir, "restore-fails")
    os.makedirs(fake_dir, exist_ok=True)
    with open(os.path.join(fake_dir, "iptables-restore"), "w") as f:
        f.write(FAKE_RESTORE % {"flag": flag, "real": real})
    os.chmod(os.path.join(fake_dir, "iptables-restore"), 0o755)

    d = dird()
    register(d, r1)
    s = slotd({"urls": d.url, "cache_file": cache_path(sb, request.node.name)},
              wrapper=["env", "PATH=%s:%s" % (fake_dir, os.environ.get("PATH", ""))])
    wait_relays(s, {r1.control: "directory"})
    open(flag, "w").close()
    try:
        c0 = s.counters()
        register(d, r3)
        slotbed.wait_for(lambda: "refused by the test; rules not updated, retrying" in s.log(),
                         WAIT, "the failed restore")
        assert set(s.relays_state()) == {r1.control, r3.control}
        assert dnat_targets(sb) == {"%s:%d" % (r1.ip, r1.data_port)}
        c1 = s.counters()
        assert c1["dir_relays"] == 2 and c1["rules_applied"] == c0["rules_applied"], c1
        assert c1["relays_waiting_rules"] == 1 and c1["rules_pending"] == 1, c1
        assert c1["rules_failures"] >= 1, c1
    finally:
        os.unlink(flag)
    wait_relays(s, {r1.control: "directory", r3.control: "directory"})
    c2 = slotbed.wait_for(lambda: (lambda c: c if c["relays_waiting_rules"] == 0 else None)(
        s.counters()), WAIT, "the retried restore")
    assert c2["rules_pending"] == 0 and c2["rules_applied"] == c0["rules_applied"] + 1, c2
    assert dnat_targets(sb) == {"%s:%d" % (r1.ip, r1.data_port), "%s:%d" % (r3.ip, r3.data_port)}

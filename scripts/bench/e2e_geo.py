#!/usr/bin/python3
"""Scenario 5 of issue 7: real geography. A client in Shanghai, 40 relays in
cities on every continent and servers in 5 far cities, every pair at its
measured RTT from the WonderNetwork data (../shared/data/wondernetwork,
tests/testbed/topo.py CityData), 0.5% loss each way on every pair, 100 Mbit/s
access links, cubic, receive buffers capped at 256 KiB.

Shanghai is a case where slot should matter: its paths abroad are long and
inflated (Singapore 205 ms, Seoul 202 ms) while Hong Kong (38 ms), Tokyo
(71 ms), Jakarta (112 ms) and Moscow (140 ms) are near, so a relay there
shortens every loop to a far server by 3-6x.

The whole deployment runs: slot-relayd in every relay city registers with
slot-dird (host "dir"), the relays measure each other and report, the
directory groups them and sends with its listing the relays' RTTs to a set of
landmarks, and slotd in the client knows only the directory's URL: with its
product default, strategy cover with k = 20, it ranks its relays from its own
control-link RTTs and those relay-to-landmark rows (src/client/rank.c,
src/core/cover.c), and for every new server probes the first k usable relays
of that ranking, the same set whatever the server (the ranking is made before
any server is known).

Per server, side by side, all at once in each repetition (15 transfers: the
paths are loss-limited at a few Mbit/s, far below the access links, so they
do not compete): curl downloads a 64 MiB file of random bytes from nginx for
T seconds (--max-time; the rate is taken from the first byte on, and the
bytes received are checked against the file's first bytes with sha256)
  - direct: to a port slotd does not hijack;
  - slot: to port 80, hijacked by slotd and carried by the relay it chose;
  - HAProxy: through the best relay possible by the data (minimum of
    max(RTT(client, r), RTT(r, server)) over the 40 relays), HAProxy in that
    relay's host statically configured for that server: what a sysadmin who
    knew the RTT matrix would set up by hand.
and the relay slotd chose against the best one. slotd runs with
[select] max_chain = 1 unless --chains is given: the targets (issue 13) are
about the one relay it picks, and HAProxy is a single relay too; with chains
(slotd's default) a chain is named by its first relay and listed apart.

Why not iperf3: its server serves one test at a time and blocks reading the
first bytes of whatever connection it accepts. slot's TCP connect probes
(slotd's direct probe and the sampled relays' probes of the server) are reset
as soon as they connect; when that RST is lost (0.5% here) the server holds a
half-open connection that never sends, and iperf3 waits on it for good (this
froze the first full run). nginx, like any concurrent server, times it out.

usage: e2e_geo.py [--reps 5] [--seconds 20] [--quick] [--out docs/bench/e2e_geo.md]
       [--build DIR] [--chains] [--select KEY=VALUE]...
"""

import argparse
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

import _needs  # scripts/bench/_needs.py: checked before measuring; figures that may fail

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

CLIENT = "Shanghai"
SERVERS = ["Hanoi", "Dagupan", "Roseburg", "Melbourne", "Beirut"]
RELAYS = ["HongKong", "Tokyo", "Seoul", "Singapore", "Bangkok", "Manila", "Jakarta",
          "NewDelhi", "Dubai", "Moscow", "Istanbul", "TelAviv", "Cairo", "Warsaw", "Stockholm",
          "Frankfurt", "Amsterdam", "London", "Paris", "Madrid", "Lagos", "Nairobi",
          "Johannesburg", "Sydney", "Perth", "Auckland", "Honolulu", "Seattle", "SanFrancisco",
          "LosAngeles", "Dallas", "Chicago", "Toronto", "NewYork", "Miami", "Mexico", "Lima",
          "SaoPaulo", "BuenosAires", "Santiago"]
LOSS = 0.005            # each way, every pair among client, relays and servers
RATE = 100              # Mbit/s, every host, both ways
RMEM = "4096 131072 262144"
DIR_RTT = 20            # the directory host: 20 ms from everybody, no loss
PORT_SLOT, PORT_DIRECT, PORT_HAPROXY = 80, 8080, 8081
HAPROXY_BASE = 9000
FILE_MIB = 64           # served file; a transfer stops at --max-time, long before its end
MODES = ["direct", "slot", "haproxy"]
MIN_GAIN = 1.1          # slotd's [select] min_gain (default)

slotbed = None
topo = None


def fmt_range(vals, f="%.2f"):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "n/a"
    return (f + " (" + f + " - " + f + ")") % (statistics.median(vals), min(vals), max(vals))


def med(v):
    return statistics.median(v)


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class Geo:
    def __init__(self, args):
        self.args = args
        self.data = topo.CityData()
        self.cid = {c: self.data.find(c) for c in [CLIENT] + RELAYS + SERVERS}
        self.host = {c: self.data.host_name(self.cid[c]) for c in [CLIENT] + RELAYS}
        self.host[CLIENT] = "client"
        for s in SERVERS:
            self.host[s] = "srv-" + self.data.host_name(self.cid[s])
        self.city_of = {h: c for c, h in self.host.items()}
        self.sb = None
        self.dird = None
        self.slotd = None
        self.ttl_ms = int(1000 * max(4.0, min(10.0, args.seconds / 3)))
        self.select_extra = dict(kv.split("=", 1) for kv in args.select)
        self.seen = set()

    def rtt(self, a, b):
        """Data RTT in ms between two cities."""
        return self.data.rtt(self.cid[a], self.cid[b])

    def path(self, relay, server):
        return max(self.rtt(CLIENT, relay), self.rtt(relay, server))

    def ranking(self, server):
        """[(path RTT, relay)] over every relay, best first."""
        return sorted((self.path(r, server), r) for r in RELAYS)

    # -- the bed --

    def spec_edit(self, spec):
        cities = [CLIENT] + RELAYS + SERVERS
        pairs = []
        for i, a in enumerate(cities):
            for b in cities[i + 1:]:
                pairs.append({"a": self.host[a], "b": self.host[b], "rtt": round(self.rtt(a, b), 3),
                              "loss": LOSS})
        spec["pairs"] = pairs                    # every other pair: the directory's
        spec["default"] = {"rtt": DIR_RTT}
        hd = spec.setdefault("host_defaults", {})
        hd["rate"] = RATE
        hd["gso"] = False       # loss hits single segments (docs/testbed.md)
        hd.setdefault("sysctls", {}).update({
            "net.ipv4.tcp_congestion_control": "cubic",
            "net.ipv4.tcp_rmem": RMEM,
        })

    def up(self):
        relay_conf = {"relay": {"log_level": "info"},
                      "limits": {"connect_timeout": "5s", "pending_timeout": "10s"}}
        servers = [self.host[s] for s in SERVERS]
        self.sb = slotbed.SlotBed({self.host[r]: (0, 0) for r in RELAYS}, direct_rtt=0,
                                  other_rtt=DIR_RTT, extra_hosts=["dir"] + servers,
                                  relay_conf=relay_conf, spec_edit=self.spec_edit,
                                  nginx=False)
        # slotbed's own "server" host stays unused (every pair of it: 20 ms).
        t = time.monotonic()
        self.sb.up()
        log("bed up: %d hosts in %.1f s" % (len(self.sb.bed.hosts), time.monotonic() - t))

    def down(self):
        if self.sb:
            self.sb.down()

    # -- the deployment: directory, self-registering relays, slotd --

    def deploy(self):
        t = time.monotonic()
        self.dird = self.sb.dird(overrides={
            "dird": {"log_level": "info"},
            "relays": {"heartbeat_interval": "2s", "expire_after": "20s"},
            "groups": {"regroup_interval": "500ms"}})
        conf = {"directory": {"urls": self.dird.url, "list_interval": "1s",
                              "measure_interval": "4s", "measure_rate": 100, "timeout": "3s"}}
        threads = []
        errors = []

        def restart(r):
            try:
                r.stop()
                r.update(conf)
                r.start(timeout=20)
            except Exception as e:      # reported below
                errors.append(e)
        for r in self.sb.relays.values():
            th = threading.Thread(target=restart, args=(r,))
            th.start()
            threads.append(th)
        for th in threads:
            th.join()
        if errors:
            raise errors[0]
        n = len(RELAYS)

        def converged():
            listing = self.dird.listing()
            if len(listing) != n:
                return None
            if any(r.counters()["dir_reports"] < 1 for r in self.sb.relays.values()):
                return None
            return listing
        listing = slotbed.wait_for(converged, 90, "every relay registered and reporting",
                                   interval=0.5)
        # Groups settle as reports come in: wait until two listings 3 s apart agree.
        while True:
            time.sleep(3)
            again = self.dird.listing()
            if again == listing:
                break
            listing = again
        self.listing = listing
        log("directory: %d relays in %d groups after %.1f s" % (
            len(listing), len(set(listing.values())), time.monotonic() - t))

        self.slotd = self.sb.slotd([], overrides={
            "slotd": {"log_level": "info"},
            "hijack": {"ports": str(PORT_SLOT)},
            # A fresh choice in every repetition (the TTL is shorter than a
            # repetition): probes and the ranking as they are then.
            "select": dict({"cache_ttl": "%dms" % self.ttl_ms}, **self.select_extra),
            "directory": {"urls": self.dird.url, "refresh": "2s", "retry": "500ms",
                          "cache_file": os.path.join(self.sb.dir, "slotd.relays")}})
        self.slotd.start(wait=False)
        self.slotd.wait_ready(timeout=20)
        self.slotd.wait_relays_up(n, timeout=60)
        log("slotd: %d relays up after %.1f s" % (n, time.monotonic() - t))

    def services(self):
        """nginx in every server host (one per host, three ports: one per mode,
        the same file), and the HAProxy peers."""
        self.file = self.sb.serve_random_file(FILE_MIB, {
            self.host[s]: (PORT_SLOT, PORT_DIRECT, PORT_HAPROXY) for s in SERVERS})
        self.best = {s: self.ranking(s)[0][1] for s in SERVERS}
        self.hport = {s: HAPROXY_BASE + i for i, s in enumerate(SERVERS)}
        by_relay = {}
        for s in SERVERS:
            by_relay.setdefault(self.best[s], {})[self.hport[s]] = (
                self.sb.ip(self.host[s]), PORT_HAPROXY)
        for r, routes in by_relay.items():
            self.sb.haproxy(self.host[r], routes)

    # -- transfers --

    def target(self, mode, s):
        h = self.host[s]
        if mode == "direct":
            return self.sb.ip(h), PORT_DIRECT
        if mode == "slot":
            return self.sb.ip(h), PORT_SLOT
        return self.sb.ip(self.host[self.best[s]]), self.hport[s]

    def prefix_sha(self, n):
        h = hashlib.sha256()
        with open(self.file, "rb") as f:
            while n > 0:
                b = f.read(min(n, 4 << 20))
                if not b:
                    break
                h.update(b)
                n -= len(b)
        return h.hexdigest()

    def curl(self, mode, s, seconds, out):
        """Downloads the file for `seconds` (curl --max-time): the rate from
        the first byte to the stop, in Mbit/s, after checking that the bytes
        received are the file's first bytes (sha256 of both)."""
        ip, port = self.target(mode, s)
        path = os.path.join(self.sb.dir, "dl-%s-%s" % (mode, self.host[s]))
        err = None
        try:
            for attempt in range(3):
                if os.path.exists(path):
                    os.unlink(path)
                r = self.sb.bed.run(
                    "client", "curl", "-sS", "-o", path, "--max-time", "%g" % (seconds + 2),
                    "-w", "%{http_code} %{size_download} %{time_starttransfer} %{time_total}",
                    "http://%s:%d/f/big" % (ip, port), check=False, timeout=seconds + 60)
                w = r.stdout.split()
                # 28: stopped at --max-time, as intended (the file is larger)
                if r.returncode in (0, 28) and len(w) == 4 and w[0] == "200" and \
                        float(w[3]) - float(w[2]) >= seconds / 2:
                    size = int(w[1])
                    got = hashlib.sha256(open(path, "rb").read()).hexdigest()
                    if size != os.path.getsize(path) or got != self.prefix_sha(size):
                        raise RuntimeError("%s %s: the bytes received are not the file's"
                                           % (mode, s))
                    out[(mode, s)] = size * 8 / (float(w[3]) - float(w[2])) / 1e6
                    out[("bytes", mode, s)] = size
                    return
                err = "curl exit %d: %s %s" % (r.returncode, r.stdout, r.stderr[-300:])
                time.sleep(1)
            out[(mode, s)] = RuntimeError("%s %s: %s" % (mode, s, err))
        except Exception as e:              # handed to round()
            out[(mode, s)] = e
        finally:
            if os.path.exists(path):
                os.unlink(path)

    def round(self, seconds, modes=MODES):
        out = {}
        ths = [threading.Thread(target=self.curl, args=(m, s, seconds, out))
               for s in SERVERS for m in modes]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        for v in out.values():
            if isinstance(v, Exception):
                raise v
        return out

    def rank_snapshot(self):
        """slotd's relays now ("relays json"): {relay city: {"rank": 0-based
        rank in the cover ranking or None, "est": RTT(client, relay) in ms the
        ranking took or None, "state": up/connecting/down/quarantine,
        "probes": probes sent to it so far}}."""
        t = json.loads(slotbed.unix_request(self.slotd.sock, b"relays json\n"))
        ctl = {self.sb.relay(self.host[r]).control: r for r in RELAYS}
        out = {}
        for x in t["relays"]:
            if x.get("relay") in ctl:
                est = x.get("rtt_est_us")
                out[ctl[x["relay"]]] = {"rank": x.get("rank"),
                                        "est": est / 1000 if est else None,
                                        "state": x.get("state"),
                                        "probes": x.get("probes") or 0}
        return out

    def status(self):
        """slotd's "status json" and counters: strategy, k, relays ranked."""
        st = json.loads(slotbed.unix_request(self.slotd.sock, b"status json\n"))
        c = self.slotd.counters()
        return {"strategy": st.get("strategy"), "k": st.get("k"),
                "ranked": c.get("relays_ranked"),
                "by_landmarks": c.get("relays_ranked_by_landmarks")}

    def cache_snapshot(self):
        """{(relay city, server city): RTT in ms} from every relay's RTT cache
        (its connect probes of the servers, kept rtt_cache_ttl)."""
        by_ep = {"%s:%d" % (self.sb.ip(self.host[s]), PORT_SLOT): s for s in SERVERS}
        out = {}
        for r in RELAYS:
            try:
                j = json.loads(slotbed.unix_request(self.sb.relay(self.host[r]).stats,
                                                    b"cache json\n"))
            except (OSError, ValueError):
                continue
            for e in j.get("cache", []):
                if e.get("target") in by_ep and e.get("status") == "ok":
                    out[(r, by_ep[e["target"]])] = e["rtt_us"] / 1000
        return out

    def sample_choices(self, rounds):
        """slotd again with a 1 s cache: `rounds` more choices per server
        (short curls, all servers at once): {server: [(relay city or None,
        slotd's relays just before (rank_snapshot), {relay city: probes sent
        to it during the round, all servers' choices}, the decision)]}."""
        self.slotd.stop()
        self.slotd.update({"select": {"cache_ttl": "1s"}})
        self.slotd.start(wait=False)
        self.slotd.wait_ready(timeout=20)
        self.slotd.wait_relays_up(len(RELAYS), timeout=60)
        self.new_decisions()
        out = {s: [] for s in SERVERS}

        def one(s):
            self.sb.bed.run("client", "curl", "-s", "-o", "/dev/null", "--max-time", "2",
                            "http://%s:%d/f/big" % (self.sb.ip(self.host[s]), PORT_SLOT),
                            check=False, timeout=30)
        for _ in range(rounds):
            snap = self.rank_snapshot()
            ths = [threading.Thread(target=one, args=(s,)) for s in SERVERS]
            for th in ths:
                th.start()
            for th in ths:
                th.join()
            probed = probed_between(snap, self.rank_snapshot())
            time.sleep(1.1)                 # the choices expire
            for s, ds in self.new_decisions().items():
                out[s] += [(d["relay_city"], snap, probed, d) for d in ds]
        return out

    def new_decisions(self):
        """{server city: [decisions]}: slotd's choices (cache misses) for the
        servers since the last call, each with relay_city (None: direct)."""
        out = {s: [] for s in SERVERS}
        ip_relay = {self.sb.relay(self.host[r]).control: r for r in RELAYS}
        by_server = {"%s:%d" % (self.sb.ip(self.host[s]), PORT_SLOT): s for s in SERVERS}
        for d in self.slotd.recent():
            key = (d["client"], d["server"])
            if d["cached"] or d["server"] not in by_server or key in self.seen:
                continue
            self.seen.add(key)
            d = dict(d)
            d["relay_city"] = ip_relay.get(d.get("relay")) if d["verdict"] == "relay" else None
            # a chain's relays after the first ([select] max_chain)
            d["chain_cities"] = [ip_relay.get(x, x) for x in d.get("chain") or []]
            out[by_server[d["server"]]].append(d)
        return out


# ---------------------------------------------------------------- report

def expected_probed(snap, k):
    """The relays cover-k probes with this ranking: the first k usable (state
    up) relays by rank (fewer ranked: random unranked ones make up k, shown as
    None)."""
    up = [r for r, x in snap.items() if x["state"] == "up"]
    ranked = sorted((snap[r]["rank"], r) for r in up if snap[r]["rank"] is not None)
    out = [r for _, r in ranked[:k]]
    return tuple(sorted(out)) + ((None,) * (min(k, len(up)) - len(out)))


def probed_between(before, after):
    """{relay city: probes sent to it} between two rank snapshots."""
    return {r: after[r]["probes"] - before[r]["probes"] for r in after
            if r in before and after[r]["probes"] > before[r]["probes"]}


def via(d):
    """A decision's relay, or its chain: "HongKong", "HongKong+Tokyo"."""
    if not d.get("relay_city"):
        return "direct"
    return "+".join([d["relay_city"]] + list(d.get("chain_cities") or []))


def chain_path(g, cities, s):
    """Path RTT (data) of client -> cities... -> s: its longest loop."""
    hops = [CLIENT] + list(cities) + [s]
    return max(g.rtt(a, b) for a, b in zip(hops, hops[1:]))


def chains_text(g, decs, sampled):
    """slotd's chains, when it took any: what each was against the best
    single relay, by the data. The single-relay figures count a chain by its
    first relay."""
    per = {}
    for s in SERVERS:
        for _, _, _, d in all_choices(g, decs, sampled, s):
            if d and d.get("chain_cities"):
                per.setdefault(s, []).append(via(d))
    if not per:
        return None
    n = sum(len(v) for v in per.values())
    tot = sum(len(all_choices(g, decs, sampled, s)) for s in SERVERS)
    items = []
    for s, v in per.items():
        counts = sorted(((v.count(x), x) for x in set(v)), reverse=True)
        items.append("%s: %s (best single relay %s, %.0f ms)" % (
            s, ", ".join("%s %d, path %.0f ms" % (x, c, chain_path(g, x.split("+"), s))
                         for c, x in counts), g.best[s], g.ranking(s)[0][0]))
    return ("slotd took a chain of relays (`[select] max_chain` %s) in %d of its %d choices: "
            "%s. The tables above name a chain by its first relay, and compare it with "
            "HAProxy on the best single relay." % (
                g.select_extra.get("max_chain", "3, the default"), n, tot, "; ".join(items)))


def chosen_path(g, d, s):
    """Path RTT (data) of a decision: via its relay (or chain), or direct."""
    if d.get("chain_cities"):
        return chain_path(g, [d["relay_city"]] + d["chain_cities"], s)
    return g.path(d["relay_city"], s) if d["relay_city"] else g.rtt(CLIENT, s)


def rank(g, d, s):
    return [r for _, r in g.ranking(s)].index(d["relay_city"]) + 1 if d["relay_city"] else None


def inflated(g, caches):
    """{(relay, server): (max RTT ms, snapshots)} of cache entries above 1.5x
    the data's RTT plus 5 ms."""
    out = {}
    for c in caches:
        for (r, sv), rtt in c.items():
            if rtt > 1.5 * g.rtt(r, sv) + 5:
                mx, n = out.get((r, sv), (0, 0))
                out[(r, sv)] = (max(mx, rtt), n + 1)
    return out


def all_choices(g, decs, sampled, s):
    """[(relay city or None, slotd's relays just before (rank_snapshot),
    {relay city: probes sent to it in that round}, the decision)]: the
    choices of the transfers, then the sampled ones."""
    return [(d[s]["relay_city"], d["_snap"], d["_probed"], d[s]) for d in decs] + \
        list(sampled.get(s, []))


def best_of(g, s, relays):
    """What slotd takes from the answers of these relays if every one came in
    time and told the data's path: the best path, if the direct RTT is at
    least min_gain times it; else None (direct)."""
    cand = sorted((g.path(r, s), r) for r in relays if r)
    if cand and g.rtt(CLIENT, s) >= MIN_GAIN * cand[0][0]:
        return cand[0][1]
    return None


def rank_of(snap, relay):
    """1-based rank of a relay in slotd's cover ranking, or None (unranked)."""
    x = snap.get(relay)
    return x["rank"] + 1 if x and x["rank"] is not None else None


def expected(g, s, choices):
    """(share of choices whose probes included the best relay, mean path RTT
    of the best of the probed relays by the data): what slotd would have got
    from the relays it probed if every answer came in time and true."""
    pb, mp = [], []
    for _, _, probed, _ in choices:
        pb.append(1.0 if g.best[s] in probed else 0.0)
        b = best_of(g, s, probed)
        mp.append(g.path(b, s) if b else g.rtt(CLIENT, s))
    return statistics.mean(pb), statistics.mean(mp)


def plot_throughput(g, res, path, args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(10, 4.8))
    colors = {"direct": "#7f7f7f", "slot": "#1f77b4", "haproxy": "#ff7f0e"}
    labels = {"direct": "direct", "slot": "slot (relay chosen by slotd)",
              "haproxy": "HAProxy via the best relay"}
    w = 0.27
    for k, m in enumerate(MODES):
        meds, lo, hi = [], [], []
        for s in SERVERS:
            v = [r[(m, s)] for r in res]
            meds.append(med(v))
            lo.append(med(v) - min(v))
            hi.append(max(v) - med(v))
        xs = [i + (k - 1) * w for i in range(len(SERVERS))]
        ax.bar(xs, meds, w, yerr=[lo, hi], capsize=3, color=colors[m], label=labels[m])
    ax.set_xticks(range(len(SERVERS)))
    ax.set_xticklabels(["%s\n%.0f ms direct" % (s, g.rtt(CLIENT, s)) for s in SERVERS])
    ax.set_xlabel("server (client in %s)" % CLIENT)
    ax.set_ylabel("download rate (Mbit/s), curl %g s" % args.seconds)
    ax.set_title("Client in %s, %d relays, %.1f%% loss per pair, cubic, 256 KiB rcvbuf: "
                 "median of %d (bars: min-max)" % (CLIENT, len(RELAYS), LOSS * 100, args.reps),
                 fontsize=10)
    ax.legend(fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_paths(g, decs, sampled, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(10, 5.6))
    w = 0.27
    xs = list(range(len(SERVERS)))
    direct = [g.rtt(CLIENT, s) for s in SERVERS]
    best = [g.ranking(s)[0][0] for s in SERVERS]
    ch = [[chosen_path(g, d[s], s) for d in decs] for s in SERVERS]
    ax.bar([x - w for x in xs], direct, w, color="#7f7f7f", label="direct RTT")
    ax.bar(xs, [med(v) for v in ch], w, color="#1f77b4",
           yerr=[[med(v) - min(v) for v in ch], [max(v) - med(v) for v in ch]], capsize=3,
           label="path via the relay slotd chose (median, min-max of %d)" % len(decs))
    ax.bar([x + w for x in xs], best, w, color="#2ca02c", label="path via the best relay")
    meas = [med([d[s]["path_rtt_us"] / 1000 for d in decs]) for s in SERVERS]
    ax.plot(xs, meas, "k_", markersize=18, mew=2, label="slotd's measured path RTT (median)")
    exp = [expected(g, s, all_choices(g, decs, sampled, s))[1] for s in SERVERS]
    ax.plot(xs, exp, "rD", markersize=6,
            label="best of the relays slotd probed (data): mean path RTT")
    for i, s in enumerate(SERVERS):
        names = [d[s]["relay_city"] or "direct" for d in decs]
        top = max(set(names), key=names.count)
        ax.annotate("%s %d/%d" % (top, names.count(top), len(names)), (i, max(ch[i])),
                    textcoords="offset points", xytext=(0, 4), ha="center", va="bottom",
                    fontsize=8, color="#1f77b4", rotation=90)
        ax.annotate(g.best[s], (i + w, best[i]), textcoords="offset points", xytext=(0, 4),
                    ha="center", va="bottom", fontsize=8, color="#2ca02c", rotation=90)
    ax.set_xticks(xs)
    ax.set_xticklabels(SERVERS)
    ax.set_xlabel("server (client in %s)" % CLIENT)
    ax.set_ylabel("RTT (ms): direct, or max(client-relay, relay-server)")
    ax.set_title("Client in %s: path RTT via the relay slotd chose vs the best of %d "
                 "(WonderNetwork data)" % (CLIENT, len(RELAYS)), fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(g, res, decs, args, info):
    out = []
    out.append("## Real geography: a client in %s, %d relays, 5 far servers (scenario 5)\n"
               % (CLIENT, len(RELAYS)))
    out.append(
        "%d hosts of the test bed, each in a city of the WonderNetwork data "
        "(../shared/data/wondernetwork, 2020-07-19/20): the client in %s, slot-relayd in %d "
        "cities on every continent (%s), servers in %s; every pair of them at its measured RTT, "
        "with %.1f%% loss each way on every pair (one segment per packet: GSO off), %d Mbit/s "
        "access links both ways, cubic, `net.ipv4.tcp_rmem = %s` (receive buffers capped at "
        "256 KiB; wmem the kernel's default) on every host. Shanghai's paths abroad are long and "
        "inflated (Singapore 205 ms, Seoul 202 ms) while Hong Kong (38 ms), Tokyo (71 ms), "
        "Jakarta (112 ms) and Moscow (140 ms) are near, so each far server is 3-6x closer, in "
        "loop length, through one of them. The whole deployment runs: slot-dird in host `dir` "
        "(%d ms from everybody, no loss), every relay registers with it, measures the others and "
        "reports (list every 1 s, measure every 4 s), and the directory sends with its listing "
        "landmarks: relays picked by farthest point over the reported RTTs, each weighted by "
        "the relays it stands for, and every relay's RTT to each (it also groups the %d relays, "
        "%d groups when slotd started, which this strategy does not use). slotd in the client "
        "has no static relay, only the directory's URL, hijacks port %d and runs its default "
        "selection, strategy %s with k = %s: every 10 s it ranks its relays from its own "
        "control links' RTTs and the landmark rows (greedy: the next relay is the one that adds "
        "most to the weighted path-RTT reduction over the landmarks, then the rest nearest "
        "first; %s of the %d relays ranked, %s of them by the landmarks, when the transfers "
        "began), and for every new server it probes the direct path and the first k usable "
        "relays of that ranking, the same set whatever the server, waits for the answers until "
        "all are in, or the answers still due cannot win (one due t after the probes left has "
        "a path above t/2), or c_wait 1.25 x the direct RTT, and takes the best path if the "
        "direct RTT "
        "is at least min_gain 1.1 x it.%s Its cache TTL is %g s so that every repetition gets a "
        "fresh choice. Peer: HAProxy (mode tcp, splice) in the best relay for each server by "
        "the data (min over the %d relays of max(RTT(client, r), RTT(r, server))), statically "
        "set up for that server: what a sysadmin who knew the whole RTT matrix would do. Each "
        "of %d repetitions runs the 15 transfers at once, per server and mode: direct (a port "
        "slotd leaves alone), slot, HAProxy; each is curl downloading a %d MiB file of random "
        "bytes from nginx in the server for %g s (`--max-time`; the rate counts from the first "
        "byte, and the bytes received are checked against the file's first bytes by sha256). "
        "The paths are loss-limited at a few Mbit/s, far below the links, so they do not "
        "compete. Figures: median (min - max); ratios per repetition. (iperf3 was dropped: "
        "its server blocks on a half-open connection, which slot's connect probes leave "
        "behind when their reset is lost, as 0.5%% of packets are.)"
        % (info["hosts"], CLIENT, len(RELAYS), ", ".join(RELAYS), ", ".join(SERVERS),
           LOSS * 100, RATE, RMEM, DIR_RTT, len(RELAYS), info["groups"], PORT_SLOT,
           info["status"]["strategy"], info["status"]["k"], info["status"]["ranked"],
           len(RELAYS), info["status"]["by_landmarks"],
           " Set for this run: %s." % ", ".join(
               "`[select] %s = %s`%s" % (k, v, " (one relay per path: issue 13's targets are "
                                         "about the single relay slotd picks; chains, on by "
                                         "default, are measured in scenario 8)"
                                         if k == "max_chain" and v == "1" else "")
               for k, v in sorted(g.select_extra.items())) if g.select_extra else "",
           g.ttl_ms / 1000, len(RELAYS), args.reps, FILE_MIB, args.seconds))
    out.append("")
    out.append("| server | direct RTT ms | direct Mbit/s | slot Mbit/s | slot / direct | "
               "HAProxy via best Mbit/s | slot / HAProxy |")
    out.append("|---|---|---|---|---|---|---|")
    for s in SERVERS:
        d = [r[("direct", s)] for r in res]
        sl = [r[("slot", s)] for r in res]
        h = [r[("haproxy", s)] for r in res]
        out.append("| %s | %.0f | %s | %s | %s | %s | %s |" % (
            s, g.rtt(CLIENT, s), fmt_range(d), fmt_range(sl),
            fmt_range([a / b for a, b in zip(sl, d)]), fmt_range(h),
            fmt_range([a / b for a, b in zip(sl, h)])))
    out.append("")
    out.append(info.get("png_tp_note") or
               "![throughput per server](img/%s)\n" % os.path.basename(info["png_tp"]))
    sampled = info.get("sampled") or {}
    nmore = max([len(v) for v in sampled.values()] or [0])
    k = info["status"]["k"] or 20
    # One entry per round of choices (all servers at once): the ranking just
    # before, and the relays that got probes during it.
    rounds = [(d["_snap"], d["_probed"]) for d in decs]
    seen_ids = set()
    for v in sampled.values():
        for _, snap, probed, _ in v:
            if id(snap) not in seen_ids:
                seen_ids.add(id(snap))
                rounds.append((snap, probed))
    sets = [tuple(sorted(p)) for _, p in rounds]
    match = sum(1 for snap, p in rounds if tuple(sorted(p)) == expected_probed(snap, k))
    first = decs[0]["_snap"]
    order = sorted((x["rank"], r) for r, x in first.items() if x["rank"] is not None)
    out.append("slotd's ranking when the transfers began (\"relays json\": rank, and rtt_est, "
               "the RTT to the relay the ranking took; data: the data set's RTT(client, relay)); "
               "the first k = %d are the relays it probes for every new server, **bold**: the "
               "best relay for some server:\n" % k)
    bests = set(g.best.values())
    out.append(", ".join(
        "%d %s (%s / %.0f ms)" % (
            rk + 1, ("**%s**" % r) if r in bests else r,
            "%.0f" % first[r]["est"] if first[r]["est"] else "-", g.rtt(CLIENT, r))
        for rk, r in order[:k]) + ("; then %s." % ", ".join(
            "%d %s" % (rk + 1, ("**%s**" % r) if r in bests else r) for rk, r in order[k:])
            if order[k:] else "."))
    out.append("")
    common = max(set(sets), key=sets.count)
    others = [x for x in sorted(set(sets), key=lambda x: -sets.count(x)) if x != common]
    out.append("Over the %d rounds of choices (%d with the transfers, %d after; all servers at "
               "once in each), slotd probed %d different sets of relays: the same %d relays in "
               "%d rounds%s; the set was the first k usable relays of the ranking read just "
               "before the round in %d of the %d rounds (probes counted per relay, slotd's "
               "\"probes\" column, before and after each round; a round whose ranking moved "
               "between its choices shows the union)."
               % (len(rounds), len(decs), len(rounds) - len(decs), len(set(sets)), len(common),
                  sets.count(common),
                  "".join(", %s in %d" % (" ".join(
                      ["+" + r for r in sorted(set(x) - set(common))] +
                      ["-" + r for r in sorted(set(common) - set(x))]) or "the same",
                      sets.count(x)) for x in others),
                  match, len(rounds)))
    out.append("")
    out.append("The relay slotd chose against the best one possible. Path RTT = max(RTT(client, "
               "relay), RTT(relay, server)) from the data (the test bed reproduces it to within "
               "a millisecond); rank among the %d relays by that path RTT (1 = best). slotd chose "
               "once per repetition (the transfers above), and about %d more times per server "
               "after them (slotd restarted with a 1 s cache, short downloads). \"Best probed\": "
               "in how many choices the best relay was among the relays slotd probed; \"best of "
               "probed\": the mean path RTT of the best of the probed relays by the data, what "
               "slotd takes if every answer comes in time and tells the data's RTTs. slotd's own "
               "figures come from its probes (a TCP connect to the server for the direct RTT, "
               "the relay's answer for the path), across the same lossy links; select: SYN to "
               "choice.\n" % (len(RELAYS), nmore))
    out.append("| server | best relay: path ms (next best) | its rank in slotd's ranking | best "
               "probed: all choices | slotd's choices in the transfers | their path ms (data), "
               "rank | choices after | best taken: transfers, all choices | mean path ms: all "
               "choices / best of probed | slotd measured direct / path ms | select ms |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for s in SERVERS:
        ds = [d[s] for d in decs]
        names = [d["relay_city"] or "direct" for d in ds]
        counts = sorted(set(names), key=lambda n: (-names.count(n), n))
        ranks = [rank(g, d, s) for d in ds if d["relay_city"]]
        allc = all_choices(g, decs, sampled, s)
        more = [c or "direct" for c, _, _, _ in sampled.get(s, [])]
        mcounts = sorted(set(more), key=lambda n: (-more.count(n), n))
        pbest, mpath = expected(g, s, allc)
        branks = [rank_of(snap, g.best[s]) for _, snap, _, _ in allc]
        pth = lambda c: g.path(c, s) if c else g.rtt(CLIENT, s)
        nxt = g.ranking(s)[1]
        out.append("| %s | %s: %.0f (%s %.0f) | %s | %d/%d | %s | %s, %s | %s | %d/%d, %d/%d | "
                   "%.0f / %.0f | %s / %s | %s |" % (
                       s, g.best[s], g.ranking(s)[0][0], nxt[1], nxt[0],
                       fmt_range([x for x in branks if x], "%d") +
                       ("" if all(branks) else " (unranked in %d)" % sum(
                           1 for x in branks if not x)),
                       round(pbest * len(allc)), len(allc),
                       ", ".join("%s %d" % (n, names.count(n)) for n in counts),
                       fmt_range([chosen_path(g, d, s) for d in ds], "%.0f"),
                       fmt_range(ranks, "%d") if ranks else "-",
                       ", ".join("%s %d" % (n, more.count(n)) for n in mcounts) or "-",
                       sum(1 for d in ds if d["relay_city"] == g.best[s]), len(ds),
                       sum(1 for c, _, _, _ in allc if c == g.best[s]), len(allc),
                       statistics.mean(pth(c) for c, _, _, _ in allc), mpath,
                       fmt_range([d["rtt_direct_us"] / 1000 for d in ds if d["rtt_direct_us"]],
                                 "%.0f") + ("" if all(d["rtt_direct_us"] for d in ds) else
                                            " (%d decided before it answered)" % sum(
                                                1 for d in ds if not d["rtt_direct_us"])),
                       fmt_range([d["path_rtt_us"] / 1000 for d in ds], "%.0f"),
                       fmt_range([d["select_us"] / 1000 for d in ds], "%.0f")))
    out.append("")
    if info.get("reused"):
        out.append("Bookkeeping: slotd's recent decisions held no new choice for %s, though "
                   "the relays' probe counters show that round's choices were made; the table "
                   "counts the repetition before's choice again there.\n" % "; ".join(
                       "%s in repetition %d" % x for x in info["reused"]))
    out.append(info.get("png_paths_note") or
               "![path RTT chosen vs best](img/%s)\n" % os.path.basename(info["png_paths"]))
    infl = inflated(g, info["caches"])
    nent = len(set(k for c in info["caches"] for k in c))
    if info["caches"]:
        out.append("The relays' own RTTs to the servers (each relay measures with a TCP connect "
                   "and caches the result for `rtt_cache_ttl`, 5 min), read from their caches "
                   "after each repetition and at the end (%d snapshots, %d relay-server "
                   "entries): %s" % (
                       len(info["caches"]), nent,
                       ("%d %s inflated by more than half its RTT, all by about a "
                        "second, the initial retransmission timeout of a lost SYN or SYN-ACK: "
                        "%s. A relay whose entry is inflated so reports a path of over a second "
                        "and is not chosen for that server until the entry expires." % (
                            len(infl), "entry was" if len(infl) == 1 else "entries were",
                            "; ".join(
                                "%s -> %s %.0f ms (data %.0f; %d of %d snapshots)%s" % (
                                    r, sv, mx, g.rtt(r, sv), n, len(info["caches"]),
                                    ", the best relay for %s" % sv if g.best[sv] == r else "")
                                for (r, sv), (mx, n) in sorted(infl.items())))
                        if infl else "none was inflated.")) +
                   (" Measurements the relays answered but did not cache (a retransmitted SYN, "
                    "whose time holds a retransmission timeout; relays' probes_uncached counter "
                    "at the end): %s." % (", ".join("%s %d" % (r, n) for r, n in sorted(
                        info.get("uncached", {}).items())) or "none")) + "\n")

    gains = {s: med([r[("slot", s)] / r[("direct", s)] for r in res]) for s in SERVERS}
    vs_h = {s: [r[("slot", s)] / r[("haproxy", s)] for r in res] for s in SERVERS}
    allh = [x for s in SERVERS for x in vs_h[s]]
    below = [s for s in SERVERS if med(vs_h[s]) < 1.0]
    same = [r[("slot", s)] / r[("haproxy", s)] for r, d in zip(res, decs) for s in SERVERS
            if d[s]["relay_city"] == g.best[s]]
    other = [r[("slot", s)] / r[("haproxy", s)] for r, d in zip(res, decs) for s in SERVERS
             if d[s]["relay_city"] != g.best[s]]
    n_taken = sum(1 for d in decs for s in SERVERS if d[s]["relay_city"] == g.best[s])
    n_dec = len(decs) * len(SERVERS)
    want_taken = round(20 * n_dec / 25)
    all_taken = sum(1 for s in SERVERS for c, _, _, _ in all_choices(g, decs, sampled, s)
                    if c == g.best[s])
    all_n = sum(len(all_choices(g, decs, sampled, s)) for s in SERVERS)
    out.append("Targets (issue 13; a ratio target is met when the median of the per-repetition "
               "ratios, to the two decimals shown, is at least the bound):\n")
    out.append("- **slot / HAProxy on the best relay, median >= 0.95: %s** (median of the %d "
               "per-repetition ratios over all servers %.2f; per server %s). Split by slotd's "
               "choice: %s; %s. (Issue 7's slot >= HAProxy's relay, median >= 1: %s.)" % (
                   "met" if round(med(allh), 2) >= 0.95 else "not met", len(allh), med(allh),
                   ", ".join("%s %.2f" % (s, med(vs_h[s])) for s in SERVERS),
                   "with the best relay %s over %d transfers" % (fmt_range(same), len(same))
                   if same else "never the best relay",
                   "with another relay %s over %d" % (fmt_range(other), len(other))
                   if other else "never another relay",
                   "met" if round(med(allh), 2) >= 1.0 else
                   "not met, below 1 for %s" % ", ".join(below) if below else "not met"))
    out.append("- **best relay taken in >= %d of %d choices: %s** (%d of %d in the transfers; "
               "per server %s; over all %d choices, the sampled ones included, %d, %.0f%%)." % (
                   want_taken, n_dec, "met" if n_taken >= want_taken else "not met",
                   n_taken, n_dec, ", ".join("%s %d/%d" % (
                       s, sum(1 for d in decs if d[s]["relay_city"] == g.best[s]), len(decs))
                       for s in SERVERS),
                   all_n, all_taken, 100.0 * all_taken / max(1, all_n)))
    out.append("- Gain of slot over direct, median per server: %s (min %.2fx, max %.2fx).\n" % (
        ", ".join("%s %.2fx" % (s, gains[s]) for s in SERVERS), min(gains.values()),
        max(gains.values())))
    out.append(info["meaning"] + "\n")
    ct = chains_text(g, decs, info.get("sampled") or {})
    if ct:
        out.append(ct + "\n")
    out.append("Reproduce: `make bench` (root), or `/usr/bin/python3 scripts/bench/e2e_geo.py "
               "--reps %d --seconds %g%s` after `make all` (this run: %.0f s, of which %.0f s "
               "setting up the %d namespaces, the directory and slotd; binaries built from "
               "%s).\n"
               % (args.reps, args.seconds, " --chains" if args.chains else "".join(
                   " --select %s" % kv for kv in args.select if kv != "max_chain=1"),
                  info["elapsed"], info["setup_s"], info["hosts"],
                  info.get("tree", "unknown")))
    return "\n".join(out) + "\n"


def misses(g, decs, info):
    """The choices (transfers and sampled) that did not take the best relay,
    sorted by cause: {"unprobed": [(server, rank of the best relay or None,
    its state)], "tie": [(server, taken, its data path, slotd's measured
    path)], "other": [(server, taken or None, data path, measured path)]}.
    A tie: slotd measured the relay it took at or below the best relay's
    data path, or the two data paths are within 10% of each other."""
    sampled = info.get("sampled") or {}
    k = info["status"]["k"] or 20
    out = {"cold": [], "unprobed": [], "tie": [], "other": []}
    for s in SERVERS:
        bp = g.ranking(s)[0][0]
        for c, snap, probed, d in all_choices(g, decs, sampled, s):
            if c == g.best[s]:
                continue
            if None in expected_probed(snap, k):
                # Fewer than k ranked: slotd draws the rest at random, a draw
                # per choice, so the round's probes are a union of draws.
                out["cold"].append((s, c, sum(1 for x in snap.values()
                                              if x["rank"] is not None)))
                continue
            if g.best[s] not in probed:
                x = snap.get(g.best[s], {})
                out["unprobed"].append((s, rank_of(snap, g.best[s]), x.get("state")))
                continue
            dp = g.path(c, s) if c else g.rtt(CLIENT, s)
            mp = d["path_rtt_us"] / 1000 if d and d.get("path_rtt_us") else None
            if c and ((mp is not None and mp <= bp) or dp <= 1.1 * bp):
                out["tie"].append((s, c, dp, mp))
            else:
                out["other"].append((s, c, dp, mp))
    return out


def meaning(g, res, decs, info):
    n = len(decs) * len(SERVERS)
    best_n = sum(1 for d in decs for s in SERVERS if d[s]["relay_city"] == g.best[s])
    gains = [med([r[("slot", s)] / r[("direct", s)] for r in res]) for s in SERVERS]
    k = info["status"]["k"] or 20
    parts = ["What it means: with loss on every pair a cubic flow's rate falls with its RTT, "
             "so cutting each loop from %.0f-%.0f ms to the %.0f-%.0f ms of the best relays pays: "
             "slot moved %.2f-%.2fx the direct rate (medians per server)." % (
                 min(g.rtt(CLIENT, s) for s in SERVERS), max(g.rtt(CLIENT, s) for s in SERVERS),
                 min(g.ranking(s)[0][0] for s in SERVERS),
                 max(g.ranking(s)[0][0] for s in SERVERS), min(gains), max(gains))]
    sampled = info.get("sampled") or {}
    allc = {s: all_choices(g, decs, sampled, s) for s in SERVERS}
    taken = {s: sum(1 for c, _, _, _ in allc[s] if c == g.best[s]) for s in SERVERS}
    probed = {s: sum(1 for _, _, p, _ in allc[s] if g.best[s] in p) for s in SERVERS}
    tot = {s: len(allc[s]) for s in SERVERS}
    first = decs[0]["_snap"]
    parts.append("slotd took the best relay in %d of its %d choices during the transfers, and "
                 "over all its choices %s. Cover-%d probes the first %d relays of one ranking "
                 "for every server, so what matters is whether each server's best relay is in "
                 "that prefix: %s; it was among the relays probed in %s of the choices." % (
                     best_n, n, ", ".join("%s %d/%d" % (s, taken[s], tot[s]) for s in SERVERS),
                     k, k, ", ".join("%s ranked %s" % (
                         r, rank_of(first, r) or "not at all")
                         for r in sorted(set(g.best.values()),
                                         key=lambda r: rank_of(first, r) or 999)),
                     ", ".join("%s %d/%d" % (s, probed[s], tot[s]) for s in SERVERS)))
    m = misses(g, decs, info)
    if m["cold"]:
        parts.append("In %d choice(s) slotd's ranking was not ready (%s): fewer than k relays "
                     "ranked, so cover made up the k probes with relays drawn at random, a "
                     "draw per choice; %d of them in the transfers, the others right after "
                     "slotd restarted for the sampled choices (with all %d relays up). A "
                     "relay is ranked only once its control link has an RTT, so a freshly "
                     "started slotd probes at random until a ranking has seen the links' "
                     "RTTs." % (
                         len(m["cold"]), "; ".join("%s: took %s, %d ranked" % (
                             s, c or "direct", n) for s, c, n in m["cold"]),
                         sum(1 for d in decs for s in SERVERS
                             if d[s]["relay_city"] != g.best[s] and
                             None in expected_probed(d["_snap"], k)), len(RELAYS)))
    if m["unprobed"]:
        parts.append("In %d choice(s) the best relay was not probed (%s): outside the first k "
                     "usable relays of the ranking, or not usable then (its control link not "
                     "up)." % (len(m["unprobed"]), "; ".join(
                         "%s: rank %s, %s" % (s, rk if rk else "none", st or "?")
                         for s, rk, st in m["unprobed"])))
    if m["tie"]:
        parts.append("In %d choice(s) slotd probed the best relay and took one whose path is "
                     "about as short (%s): with paths a few ms apart, which one wins depends "
                     "on the probes, slotd's RTT to the relay over its probe and the relay's "
                     "connect to the server, each a few ms off the data, and the rate "
                     "difference between the two is small." % (len(m["tie"]), "; ".join(
                         "%s: %s, path %.0f ms by the data%s against %.0f" % (
                             s, c, dp, ", measured %.0f" % mp if mp else "",
                             g.ranking(s)[0][0]) for s, c, dp, mp in m["tie"])))
    if m["other"]:
        hidden = {sv: v for (r, sv), v in inflated(g, info["caches"]).items()
                  if g.best[sv] == r}
        parts.append("In %d choice(s) slotd probed the best relay but took a clearly worse "
                     "path (%s): the best relay's answer was missing at the deadline (c_wait "
                     "1.25 x the direct RTT; its probe or reply lost, or the relay's connect to "
                     "the server retransmitted its SYN, 0.5%% loss per packet) or reported a "
                     "longer path than it is.%s" % (len(m["other"]), "; ".join(
                         "%s: %s, path %.0f ms by the data%s against %.0f" % (
                             s, c or "direct", dp, ", measured %.0f" % mp if mp else "",
                             g.ranking(s)[0][0]) for s, c, dp, mp in m["other"]),
                         (" The relays' caches show the best relay's entry inflated for %s."
                          % "; ".join("%s (%s: %.0f ms instead of %.0f, %d of %d snapshots)" % (
                              sv, g.best[sv], mx, g.rtt(g.best[sv], sv), cnt,
                              len(info["caches"])) for sv, (mx, cnt) in sorted(hidden.items())))
                         if hidden else ""))
    if not (m["unprobed"] or m["tie"] or m["other"]):
        parts.append("slotd took the best relay in every choice.")
    sel = [decs[i][s]["select_us"] / 1000 for i in range(len(decs)) for s in SERVERS]
    early = sum(1 for d in decs for s in SERVERS if not d[s]["rtt_direct_us"])
    pr0 = decs[0]["_probed"]
    if pr0:
        slow = max(pr0, key=lambda r: g.rtt(CLIENT, r))
        parts.append("The wait: slotd chose in a median %.0f ms (%.0f - %.0f) from the SYN "
                     "in the transfers, before its direct probe answered in %d of %d choices "
                     "(with the direct probe pending, a relay wins once min_gain x its path "
                     "has passed and no answer still due can beat it: at twice its path), "
                     "without waiting for the slowest of the k probed relays (%s, %.0f ms from "
                     "the client, ranked %s), which the choice waited for before (262 ms)."
                     % (med(sel), min(sel), max(sel), early, n, slow,
                        g.rtt(CLIENT, slow), rank_of(decs[0]["_snap"], slow)))
    parts.append("HAProxy's column is an oracle's static choice of the best relay, so slot's "
                 "ratio to it is 1 at best where slotd took the same relay (up to the noise of "
                 "loss-limited transfers, wide at these rates: min-max columns) and below 1 "
                 "where it took a worse one.")
    return " ".join(parts)


# ---------------------------------------------------------------- main

def main():
    global slotbed, topo
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--quick", action="store_true", help="2 repetitions of 8 s (a smoke run)")
    ap.add_argument("--sample", type=int, default=20,
                    help="more choices of slotd per server after the transfers (0: none)")
    ap.add_argument("--build", default=os.environ.get("SLOT_BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench", "e2e_geo.md"))
    ap.add_argument("--select", action="append", default=[], metavar="KEY=VALUE",
                    help="a [select] setting of slotd's other than the default (A/B runs)")
    ap.add_argument("--chains", action="store_true",
                    help="let slotd take chains of relays (its default max_chain); without "
                         "it max_chain = 1: issue 13's targets are about the one relay it picks")
    ap.add_argument("--check", action="store_true",
                    help="check what the run and its report need, then exit")
    args = ap.parse_args()
    if not args.chains and not any(kv.startswith("max_chain=") for kv in args.select):
        args.select.append("max_chain=1")
    if args.quick:
        args.reps, args.seconds, args.sample = min(args.reps, 2), 8, min(args.sample, 5)
    args.build = os.path.abspath(args.build)
    # cryptography: the directory's listing, asked as a client with an identity
    _needs.check("e2e_geo", args, modules=("matplotlib", "cryptography"),
                 tools=("haproxy", "curl", "nginx"),
                 files=[os.path.join(args.build, b)
                        for b in ("slot-relayd", "slotd", "slot-dird", "slot-wanem")])
    os.environ["SLOT_BUILD"] = args.build
    sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
    sys.path.insert(0, os.path.join(ROOT, "tests", "testbed"))
    import slotbed as sbmod
    import topo as topomod
    slotbed, topo = sbmod, topomod

    t0 = time.monotonic()
    tree = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip() or "unknown"
    if subprocess.run(["git", "-C", ROOT, "diff", "--quiet", "HEAD", "--", "src", "include"],
                      capture_output=True).returncode != 0:
        tree += " + local changes in src/ or include/"
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    g = Geo(args)
    info = {"caches": [], "tree": tree, "reused": []}
    res, decs = [], []
    try:
        g.up()
        g.deploy()
        g.services()
        info["hosts"] = len(g.sb.bed.hosts)
        info["groups"] = len(set(g.listing.values()))
        g.round(3)                  # warm-up, not counted
        g.new_decisions()
        time.sleep(g.ttl_ms / 1000)         # the warm-up's choices expire
        info["setup_s"] = time.monotonic() - t0
        last = {}
        info["status"] = g.status()
        for rep in range(args.reps):
            snap = g.rank_snapshot()
            r = g.round(args.seconds)
            probed = probed_between(snap, g.rank_snapshot())
            nd = g.new_decisions()
            d = {}
            for s in SERVERS:
                if nd[s]:
                    d[s] = nd[s][0]
                    if len({x["relay_city"] for x in nd[s]}) > 1:
                        log("warning: %s: slotd chose %s in one repetition" % (
                            s, [x["relay_city"] for x in nd[s]]))
                elif s in last:
                    d[s] = last[s]
                    log("warning: %s: no new choice in repetition %d" % (s, rep + 1))
                    info["reused"].append((s, rep + 1))
                else:
                    raise RuntimeError("no choice of slotd for %s: %r" % (s, g.slotd.recent()))
            d["_snap"], d["_probed"] = snap, probed
            info["caches"].append(g.cache_snapshot())
            last = d
            res.append(r)
            decs.append(d)
            log("rep %d: probed %d relays (%s)" % (rep + 1, len(probed), ", ".join(
                "%s %d" % (c, n) for c, n in sorted(probed.items(), key=lambda x: (
                    snap[x[0]]["rank"] if snap[x[0]]["rank"] is not None else 999, x[0])))))
            log("rep %d: " % (rep + 1) + "; ".join(
                "%s %.2f/%.2f(%s)/%.2f" % (s, r[("direct", s)], r[("slot", s)],
                                          via(d[s]), r[("haproxy", s)])
                for s in SERVERS) + " Mbit/s (direct/slot(relay)/haproxy)")
        if args.sample:
            t = time.monotonic()
            info["sampled"] = g.sample_choices(args.sample)
            log("%d more choices per server in %.0f s: %s" % (
                args.sample, time.monotonic() - t, "; ".join(
                    "%s %s" % (s, {c: [x[0] for x in v].count(c) for c in set(x[0] for x in v)})
                    for s, v in info["sampled"].items())))
        info["caches"].append(g.cache_snapshot())
        info["status_end"] = g.status()
        info["uncached"] = {}
        for rc in RELAYS:
            try:
                n = g.sb.relay(g.host[rc]).counters().get("probes_uncached", 0)
            except (OSError, ValueError):
                continue
            if n:
                info["uncached"][rc] = n
        info["snap_end"] = g.rank_snapshot()
    finally:
        g.down()
    info["elapsed"] = time.monotonic() - t0
    # The images go to img/ beside the markdown's parent (docs/img for
    # docs/bench/NAME.md), where benchmarks.md's "img/..." links point.
    img = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(args.out))), "img")
    os.makedirs(img, exist_ok=True)
    info["png_tp"] = os.path.join(img, "bench_geo_throughput.png")
    info["png_paths"] = os.path.join(img, "bench_geo_paths.png")
    _, info["png_tp_note"] = _needs.draw("e2e_geo", "throughput per server", plot_throughput,
                                         g, res, info["png_tp"], args)
    _, info["png_paths_note"] = _needs.draw("e2e_geo", "path RTT chosen vs best", plot_paths,
                                            g, decs, info.get("sampled") or {}, info["png_paths"])
    info["meaning"] = meaning(g, res, decs, info)
    text = report(g, res, decs, args, info)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()

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
directory groups them (Markov clustering), and slotd in the client knows
only the directory's URL: relays and groups come from it, and it picks a
relay for each server with RandGroup-50 (one random relay of each group).

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
and the relay slotd chose against the best one.

Why not iperf3: its server serves one test at a time and blocks reading the
first bytes of whatever connection it accepts. slot's TCP connect probes
(slotd's direct probe and the sampled relays' probes of the server) are reset
as soon as they connect; when that RST is lost (0.5% here) the server holds a
half-open connection that never sends, and iperf3 waits on it for good (this
froze the first full run). nginx, like any concurrent server, times it out.

usage: e2e_geo.py [--reps 5] [--seconds 20] [--quick] [--out docs/bench/e2e_geo.md]
       [--build DIR]
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
NGINX_CONF = """# written by scripts/bench/e2e_geo.py
daemon off;
master_process on;
worker_processes 1;
user nobody nogroup;
pid %(d)s/nginx.pid;
error_log %(d)s/error.log warn;
events {
    worker_connections 1024;
}
http {
    access_log off;
    client_body_temp_path %(d)s/tmp/body;
    proxy_temp_path %(d)s/tmp/proxy;
    fastcgi_temp_path %(d)s/tmp/fastcgi;
    uwsgi_temp_path %(d)s/tmp/uwsgi;
    scgi_temp_path %(d)s/tmp/scgi;
    default_type application/octet-stream;
    sendfile on;
    keepalive_timeout 0;
    server {
%(listen)s
        root %(www)s;
        location /f/ { }
    }
}
"""
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
                                  relay_conf=relay_conf, spec_edit=self.spec_edit)
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
            # repetition), so the figures sample RandGroup's random picks.
            "select": {"cache_ttl": "%dms" % self.ttl_ms},
            "directory": {"urls": self.dird.url, "refresh": "2s", "retry": "500ms",
                          "cache_file": os.path.join(self.sb.dir, "slotd.relays")}})
        self.slotd.start(wait=False)
        self.slotd.wait_ready(timeout=20)
        self.slotd.wait_relays_up(n, timeout=60)
        log("slotd: %d relays up after %.1f s" % (n, time.monotonic() - t))

    def services(self):
        """nginx in every server host (one per host, three ports: one per mode,
        the same file), and the HAProxy peers."""
        www = os.path.join(self.sb.dir, "www")
        os.makedirs(os.path.join(www, "f"))
        self.file = os.path.join(www, "f", "big")
        with open(self.file, "wb") as f:
            for _ in range(FILE_MIB // 4):
                f.write(os.urandom(4 << 20))
        for d in (www, os.path.join(www, "f")):
            os.chmod(d, 0o755)
        os.chmod(self.file, 0o644)
        for s in SERVERS:
            h = self.host[s]
            d = os.path.join(self.sb.dir, "nginx-" + h)
            os.makedirs(os.path.join(d, "tmp"))
            os.chmod(d, 0o755)
            conf = os.path.join(d, "nginx.conf")
            with open(conf, "w") as f:
                f.write(NGINX_CONF % {
                    "d": d, "www": www,
                    "listen": "\n".join("        listen %s:%d;" % (self.sb.ip(h), port)
                                        for port in (PORT_SLOT, PORT_DIRECT, PORT_HAPROXY))})
            p = self.sb.bed.popen(h, [slotbed.NGINX, "-p", d + "/", "-c", conf,
                                      "-e", os.path.join(d, "error.log")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for port in (PORT_SLOT, PORT_DIRECT, PORT_HAPROXY):
                self.sb.bed.wait_listen(h, port, p)
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

    def groups(self):
        """slotd's relay groups now (from the directory): a tuple of sorted
        tuples of relay cities (hashable, to count groupings)."""
        ctl = {self.sb.relay(self.host[r]).control: r for r in RELAYS}
        out = {}
        for x in self.slotd.json()["relays"]:
            if x["control"] in ctl:
                out.setdefault(x["group"], []).append(ctl[x["control"]])
        return tuple(sorted(tuple(sorted(v)) for v in out.values()))

    def odds(self, server, groups):
        """RandGroup-50 with these groups (fewer than 50: every group probed,
        one uniformly random member each), by the data's path RTTs:
        {relay city or None (direct): probability slotd takes it}. Every
        answer assumed in time (they come well within c_wait here)."""
        direct = self.rtt(CLIENT, server)
        out = {}
        for gi, members in enumerate(groups):
            for r in members:
                pr = self.path(r, server)
                p = 1.0 / len(members)
                for gj, other in enumerate(groups):
                    if gj != gi:
                        p *= sum(1 for o in other if (self.path(o, server), o) > (pr, r)) / len(other)
                if p:
                    who = r if direct >= MIN_GAIN * pr else None
                    out[who] = out.get(who, 0) + p
        return out

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
        slotd's groups then)]}."""
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
            groups = self.groups()
            ths = [threading.Thread(target=one, args=(s,)) for s in SERVERS]
            for th in ths:
                th.start()
            for th in ths:
                th.join()
            time.sleep(1.1)                 # the choices expire
            for s, ds in self.new_decisions().items():
                out[s] += [(d["relay_city"], groups) for d in ds]
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
            out[by_server[d["server"]]].append(d)
        return out


# ---------------------------------------------------------------- report

def chosen_path(g, d, s):
    """Path RTT (data) of a decision: via its relay, or direct."""
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
    """[(relay city or None, slotd's groups at the time)]: the choices of the
    transfers, then the sampled ones."""
    return [(d[s]["relay_city"], d["_groups"]) for d in decs] + list(sampled.get(s, []))


def expected(g, s, choices):
    """(P(best relay), mean path RTT) by RandGroup's odds, averaged over the
    groupings slotd had at each choice."""
    pb, mp = [], []
    for _, groups in choices:
        o = g.odds(s, groups)
        pb.append(o.get(g.best[s], 0))
        mp.append(sum(p * (g.path(c, s) if c else g.rtt(CLIENT, s)) for c, p in o.items()))
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
    ax.plot(xs, exp, "rD", markersize=6, label="RandGroup's odds: mean path RTT of its choice")
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
        "reports (list every 1 s, measure every 4 s), and the directory grouped the %d relays "
        "into %d groups (Markov clustering) by the time slotd started; slotd in the client has no "
        "static relay, only the "
        "directory's URL, hijacks port %d and picks with RandGroup-50 (one random relay of each "
        "group, c_wait 1.25, min_gain 1.1), its cache TTL %g s so that every repetition gets a "
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
    out.append("![throughput per server](img/%s)\n" % os.path.basename(info["png_tp"]))
    sampled = info.get("sampled") or {}
    nmore = max([len(v) for v in sampled.values()] or [0])
    snaps = [d["_groups"] for d in decs] + [x[1] for v in sampled.values() for x in v]
    out.append("The relay slotd chose against the best one possible. Path RTT = max(RTT(client, "
               "relay), RTT(relay, server)) from the data (the test bed reproduces it to within "
               "a millisecond); rank among the %d relays by that path RTT (1 = best). slotd chose "
               "once per repetition (the transfers above), and about %d more times per server "
               "after them (slotd restarted with a 1 s cache, short downloads). \"Odds\": what "
               "RandGroup-50 gives, by the data, with the groups slotd had at each choice (read "
               "just before each round of choices; one uniformly random member of each group "
               "probed, every answer in time): the chance of the best relay and "
               "the mean path RTT of the choice. The directory regroups as the relays' RTT "
               "reports come in (every 4 s here), and its Markov clustering does not settle on "
               "one grouping when relays are nearly equidistant: slotd saw %d different "
               "groupings over its %d choices; the best relay's groups are listed with how many "
               "choices each covered. slotd's own figures come from its probes (a TCP connect "
               "to the server for the direct RTT, the relay's answer for the path), across the "
               "same lossy links; select: SYN to choice.\n"
               % (len(RELAYS), nmore, len(set(snaps)), len(snaps)))
    out.append("| server | best relay: path ms | its group (choices) | slotd's choices in the "
               "transfers | their path ms (data), rank | choices after | best taken: all "
               "choices / odds | mean path ms: all choices / odds | slotd measured direct / "
               "path ms | select ms |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for s in SERVERS:
        ds = [d[s] for d in decs]
        names = [d["relay_city"] or "direct" for d in ds]
        counts = sorted(set(names), key=lambda n: (-names.count(n), n))
        ranks = [rank(g, d, s) for d in ds if d["relay_city"]]
        allc = all_choices(g, decs, sampled, s)
        bg = [next(m for m in grp if g.best[s] in m) for _, grp in allc]
        bgc = sorted(set(bg), key=lambda m: -bg.count(m))
        more = [c or "direct" for c, _ in sampled.get(s, [])]
        mcounts = sorted(set(more), key=lambda n: (-more.count(n), n))
        pbest, mpath = expected(g, s, allc)
        pth = lambda c: g.path(c, s) if c else g.rtt(CLIENT, s)
        out.append("| %s | %s: %.0f | %s | %s | %s, %s | %s | %d/%d / %.2f | %.0f / %.0f | "
                   "%s / %s | %s |" % (
                       s, g.best[s], g.ranking(s)[0][0],
                       ", ".join("{%s} %d" % (", ".join(m), bg.count(m)) for m in bgc),
                       ", ".join("%s %d" % (n, names.count(n)) for n in counts),
                       fmt_range([chosen_path(g, d, s) for d in ds], "%.0f"),
                       fmt_range(ranks, "%d") if ranks else "-",
                       ", ".join("%s %d" % (n, more.count(n)) for n in mcounts) or "-",
                       sum(1 for c, _ in allc if c == g.best[s]), len(allc), pbest,
                       statistics.mean(pth(c) for c, _ in allc), mpath,
                       fmt_range([d["rtt_direct_us"] / 1000 for d in ds if d["rtt_direct_us"]],
                                 "%.0f") + ("" if all(d["rtt_direct_us"] for d in ds) else
                                            " (%d unanswered)" % sum(
                                                1 for d in ds if not d["rtt_direct_us"])),
                       fmt_range([d["path_rtt_us"] / 1000 for d in ds], "%.0f"),
                       fmt_range([d["select_us"] / 1000 for d in ds], "%.0f")))
    out.append("")
    out.append("![path RTT chosen vs best](img/%s)\n" % os.path.basename(info["png_paths"]))
    infl = inflated(g, info["caches"])
    nent = len(set(k for c in info["caches"] for k in c))
    if info["caches"]:
        out.append("The relays' own RTTs to the servers (each relay measures with a TCP connect "
                   "and caches the result for `rtt_cache_ttl`, 5 min), read from their caches "
                   "after each repetition and at the end (%d snapshots, %d relay-server "
                   "entries): %s\n" % (
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
                        if infl else "none was inflated (no connect probe lost its SYN)")))

    gains = {s: med([r[("slot", s)] / r[("direct", s)] for r in res]) for s in SERVERS}
    vs_h = {s: [r[("slot", s)] / r[("haproxy", s)] for r in res] for s in SERVERS}
    allh = [x for s in SERVERS for x in vs_h[s]]
    below = [s for s in SERVERS if med(vs_h[s]) < 1.0]
    same = [r[("slot", s)] / r[("haproxy", s)] for r, d in zip(res, decs) for s in SERVERS
            if d[s]["relay_city"] == g.best[s]]
    other = [r[("slot", s)] / r[("haproxy", s)] for r, d in zip(res, decs) for s in SERVERS
             if d[s]["relay_city"] != g.best[s]]
    out.append("Targets:\n")
    out.append("- **slot >= HAProxy's relay: %s** (median of the per-repetition ratios over all "
               "servers %.2f; per server %s%s). Split by slotd's choice: %s; %s." % (
                   "met" if not below else "not met", med(allh),
                   ", ".join("%s %.2f" % (s, med(vs_h[s])) for s in SERVERS),
                   "; below 1 for %s" % ", ".join(below) if below else "",
                   "with the best relay %s over %d transfers" % (fmt_range(same), len(same))
                   if same else "never the best relay",
                   "with another relay %s over %d" % (fmt_range(other), len(other))
                   if other else "never another relay"))
    out.append("- Gain of slot over direct, median per server: %s (min %.2fx, max %.2fx).\n" % (
        ", ".join("%s %.2fx" % (s, gains[s]) for s in SERVERS), min(gains.values()),
        max(gains.values())))
    out.append(info["meaning"] + "\n")
    out.append("Reproduce: `make bench` (root), or `/usr/bin/python3 scripts/bench/e2e_geo.py "
               "--reps %d --seconds %g` after `make all` (this run: %.0f s, of which %.0f s "
               "setting up the %d namespaces, the directory and slotd).\n"
               % (args.reps, args.seconds, info["elapsed"], info["setup_s"], info["hosts"]))
    return "\n".join(out) + "\n"


def meaning(g, res, decs, info):
    n = len(decs) * len(SERVERS)
    best_n = sum(1 for d in decs for s in SERVERS if d[s]["relay_city"] == g.best[s])
    gains = [med([r[("slot", s)] / r[("direct", s)] for r in res]) for s in SERVERS]
    worse = {}
    for d in decs:
        for s in SERVERS:
            if d[s]["relay_city"] != g.best[s]:
                worse.setdefault(s, []).append(d[s]["relay_city"] or "direct")
    parts = ["What it means: with loss on every pair a cubic flow's rate falls with its RTT, "
             "so cutting each loop from %.0f-%.0f ms to the %.0f-%.0f ms of the best relays pays: "
             "slot moved %.2f-%.2fx the direct rate (medians per server)." % (
                 min(g.rtt(CLIENT, s) for s in SERVERS), max(g.rtt(CLIENT, s) for s in SERVERS),
                 min(g.ranking(s)[0][0] for s in SERVERS),
                 max(g.ranking(s)[0][0] for s in SERVERS), min(gains), max(gains))]
    sampled = info.get("sampled") or {}
    odds = {s: expected(g, s, all_choices(g, decs, sampled, s))[0] for s in SERVERS}
    taken = {s: sum(1 for c, _ in all_choices(g, decs, sampled, s) if c == g.best[s])
             for s in SERVERS}
    tot = {s: len(all_choices(g, decs, sampled, s)) for s in SERVERS}
    parts.append("slotd took the best relay in %d of its %d choices during the transfers, and "
                 "over all its choices %s, against RandGroup's odds with the groups it had of "
                 "%s." % (best_n, n, ", ".join("%s %d/%d" % (s, taken[s], tot[s]) for s in SERVERS),
                          ", ".join("%.2f" % odds[s] for s in SERVERS)))
    if worse:
        parts.append("The others (%s) are mostly RandGroup-50 at work: it probes one "
                     "random relay of each of the directory's groups (%d at the end), not all %d "
                     "relays, so "
                     "when the best relay shares its group with others slotd sees it only in "
                     "some choices and otherwise takes the best of what it sampled (compare the "
                     "choices with the odds in the table); docs/evaluation.md measures that price on the "
                     "whole data set. HAProxy's column is an oracle's static choice of the best "
                     "relay, so slot's ratio to it is 1 at best where slotd took the same relay "
                     "(up to the noise of loss-limited transfers, wide at these rates: min-max "
                     "columns) and below 1 where it took a worse one." % (
                         "; ".join("%s: %s" % (s, ", ".join(v)) for s, v in worse.items()),
                         len(g.groups_at_end), len(RELAYS)))
        hidden = {sv: v for (r, sv), v in inflated(g, info["caches"]).items()
                  if g.best[sv] == r}
        if hidden:
            parts.append("And some are not chance: %s. A relay measures its RTT to a server "
                         "as the time its connect takes and caches it for 5 minutes, so one "
                         "lost SYN (0.5%% of packets here) makes it report about a second more "
                         "and hides it for that long; the kernel's own RTT sample (TCP_INFO, "
                         "with timestamps), or measuring again when the SYN was retransmitted, "
                         "would not be fooled." % "; ".join(
                             "for %s the best relay, %s, had cached %.0f ms instead of %.0f "
                             "(in %d of %d snapshots)" % (sv, g.best[sv], mx, g.rtt(g.best[sv], sv),
                                                         n, len(info["caches"]))
                             for sv, (mx, n) in sorted(hidden.items())))
    else:
        parts.append("Where slot and HAProxy use the same relay they should move the same "
                     "bytes, so their ratio shows the spread of loss-limited transfers more "
                     "than any difference of the middle boxes.")
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
    args = ap.parse_args()
    if args.quick:
        args.reps, args.seconds, args.sample = min(args.reps, 2), 8, min(args.sample, 5)
    if os.geteuid() != 0:
        sys.exit("e2e_geo: must run as root (network namespaces)")
    args.build = os.path.abspath(args.build)
    os.environ["SLOT_BUILD"] = args.build
    for b in ("slot-relayd", "slotd", "slot-dird", "slot-wanem"):
        if not os.access(os.path.join(args.build, b), os.X_OK):
            sys.exit("e2e_geo: %s/%s missing (make all)" % (args.build, b))
    for tool in ("haproxy", "curl"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            sys.exit("e2e_geo: %s not installed" % tool)
    sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
    sys.path.insert(0, os.path.join(ROOT, "tests", "testbed"))
    import slotbed as sbmod
    import topo as topomod
    slotbed, topo = sbmod, topomod

    t0 = time.monotonic()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    g = Geo(args)
    info = {"caches": []}
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
        for rep in range(args.reps):
            groups = g.groups()
            r = g.round(args.seconds)
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
                else:
                    raise RuntimeError("no choice of slotd for %s: %r" % (s, g.slotd.recent()))
            d["_groups"] = groups
            info["caches"].append(g.cache_snapshot())
            last = d
            res.append(r)
            decs.append(d)
            log("rep %d: " % (rep + 1) + "; ".join(
                "%s %.2f/%.2f(%s)/%.2f" % (s, r[("direct", s)], r[("slot", s)],
                                          d[s]["relay_city"], r[("haproxy", s)])
                for s in SERVERS) + " Mbit/s (direct/slot(relay)/haproxy)")
        if args.sample:
            t = time.monotonic()
            info["sampled"] = g.sample_choices(args.sample)
            log("%d more choices per server in %.0f s: %s" % (
                args.sample, time.monotonic() - t, "; ".join(
                    "%s %s" % (s, {c: [x[0] for x in v].count(c) for c in set(x[0] for x in v)})
                    for s, v in info["sampled"].items())))
        info["caches"].append(g.cache_snapshot())
        g.groups_at_end = g.groups()
    finally:
        g.down()
    info["elapsed"] = time.monotonic() - t0
    # The images go to img/ beside the markdown's parent (docs/img for
    # docs/bench/NAME.md), where benchmarks.md's "img/..." links point.
    img = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(args.out))), "img")
    os.makedirs(img, exist_ok=True)
    info["png_tp"] = os.path.join(img, "bench_geo_throughput.png")
    info["png_paths"] = os.path.join(img, "bench_geo_paths.png")
    plot_throughput(g, res, info["png_tp"], args)
    plot_paths(g, decs, info.get("sampled") or {}, info["png_paths"])
    info["meaning"] = meaning(g, res, decs, info)
    text = report(g, res, decs, args, info)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""make demo: slot on an emulated WAN of real cities, end to end.

A client in Hanoi downloads a file from far servers with unmodified curl,
once directly and once through slot, on an emulated WAN whose round-trip
times are those measured between the same cities by WonderNetwork
(../shared/data/wondernetwork, docs/testbed.md "Real cities"):

    client      Hanoi
    relays      25 cities across Asia, Oceania, Europe, Africa and the Americas
    servers     Shanghai, Bangalore, Sapporo, Adelaide: far from Hanoi, and
                their direct paths are inflated (Hanoi-Shanghai 294 ms, but
                Hanoi-Hong Kong 50 ms and Hong Kong-Shanghai 38 ms)

Every host is a network namespace on the test bed (tests/testbed/topo.py,
slot-wanem); access links are 100 Mbit/s each way (tbf), TCP is cubic, and
every host caps its receive buffer at 256 KiB (net.ipv4.tcp_rmem max), so
that a long path is limited by its window, as on real long paths: about
window / RTT, 6 Mbit/s at 250 ms.

What runs, in order (the whole deployment, nothing faked):

  1. the emulated WAN;
  2. slot-dird (the directory) on the Frankfurt relay's host;
  3. slot-relayd in every relay city, pointed at the directory: they
     register, measure their RTTs to each other and report them, and the
     directory groups them (Markov clustering, groups at most 50 ms wide);
  4. nginx in every server city (port 80 and 8080, the same file on both);
  5. slotd in the client, knowing nothing but the directory's URL; it
     hijacks connections to port 80 only;
  6. per server: curl to port 8080 (not hijacked: the direct path), then curl
     to port 80 (hijacked: slotd probes the direct path and the first 20
     relays of its ranking, made from its own RTT to each relay and the
     relays' RTTs to the directory's landmarks; it picks the relay with the
     smallest max(RTT client-relay,
     RTT relay-server) and steers the connection there). Every file is
     checked by sha256, and nginx's log shows who connected: the relay, or
     the client;
  7. a table and a PNG (bars per server: direct and slot throughput).

The cleanup (daemons stopped, namespaces deleted) runs on every exit:
normal end, error, Ctrl-C, SIGTERM, SIGHUP. Run as root; `make demo` builds
first. --quick is the small version the tests run (3 relays, 2 servers,
1 MiB files). --nat (make demo NAT=1) puts the client behind a home NAT: slotd
and curl run on a host of a LAN that the client city's host masquerades, and
slotd names its pipes by a token in the SYN (docs/slotd.md, "Clients behind
NAT").

usage: demo.py [--quick] [--nat] [--size MIB] [--loss P] [--png FILE] [--json FILE]
               [--client CITY] [--servers A,B] [--relays A,B,...] [--dir-host CITY]
"""

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import types

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

CLIENT = "Hanoi"
SERVERS = ["Shanghai", "Bangalore", "Sapporo", "Adelaide"]
RELAYS = ["Hong Kong", "Singapore", "Malaysia", "Jakarta", "Manila", "Taipei", "Tokyo",
          "Osaka", "Seoul", "Ho Chi Minh City", "Phnom Penh", "Bangkok", "Chennai", "Perth",
          "Melbourne", "Sydney", "Auckland", "Dubai", "Frankfurt", "London", "Amsterdam",
          "New York", "Los Angeles", "Johannesburg", "Sao Paulo"]
# Three relays in three groups (more than 50 ms apart), fewer than k, so that
# slotd probes them all and the choice is known: Shanghai via Hong Kong, Adelaide
# via Perth.
QUICK_SERVERS = ["Shanghai", "Adelaide"]
QUICK_RELAYS = ["Hong Kong", "Perth", "Frankfurt"]
DIR_HOST = "Frankfurt"

RATE = 100                              # Mbit/s, every access link, both ways
RMEM_MAX = 262144                       # bytes: the receive buffer cap
CC = "cubic"
HTTP_SLOT, HTTP_DIRECT = 80, 8080       # slotd hijacks 80 only
MiB = 1 << 20

# The demo's directory timings are short, so that a fresh overlay converges in
# seconds (the defaults suit a deployment: minutes).
DIRD_CONF = {"relays": {"heartbeat_interval": "5s", "expire_after": "60s"},
             "groups": {"regroup_interval": "300ms"}, "dird": {"log_level": "info"}}
RELAY_DIR_CONF = {"list_interval": "1s", "measure_interval": "3s", "measure_rate": 100,
                  "timeout": "3s"}


# ---------------------------------------------------------------- output

T0 = time.monotonic()
_out_lock = threading.RLock()      # the signal handler may print too


def say(text="", end="\n"):
    with _out_lock:
        sys.stdout.write(text + end)
        sys.stdout.flush()


def stamp():
    return "[%5.1fs]" % (time.monotonic() - T0)


def line(text):
    say("%s %s" % (stamp(), text))


class Step:
    """One step of the demo on one line: what it does, a dot per second while
    it runs, then its result (set .result) and how long it took."""

    def __init__(self, what):
        self.what = what
        self.result = "done"
        self._stop = threading.Event()
        self._t = None

    def __enter__(self):
        self.t0 = time.monotonic()
        say("%s %s " % (stamp(), self.what), end="")
        self._t = threading.Thread(target=self._dots, daemon=True)
        self._t.start()
        return self

    def _dots(self):
        while not self._stop.wait(1.0):
            say(".", end="")

    def __exit__(self, et, ev, tb):
        self._stop.set()
        self._t.join()
        dt = time.monotonic() - self.t0
        if et is None:
            say(" %s (%.1f s)" % (self.result, dt))
        elif issubclass(et, Interrupted):
            say(" interrupted")
        else:
            say(" failed")
        return False


class Interrupted(BaseException):
    """A signal asked us to stop (raised from the handler in the main thread)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


_cleaning = False


def _on_signal(signum, frame):
    if _cleaning:
        say("\n%s (%s: still cleaning up, one moment)" % (stamp(), signal.Signals(signum).name))
        return
    raise Interrupted(signum)


def install_signal_handlers():
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _on_signal)


# ---------------------------------------------------------------- the plan

class Plan:
    """Cities, host names and the topology of one run."""

    def __init__(self, args):
        import topo
        self.data = topo.CityData()
        self.client_city = args.client
        self.servers = list(args.servers)
        self.relays = list(args.relays)
        self.dir_city = args.dir_host
        if self.dir_city not in self.relays:
            raise SystemExit("demo: the directory's host (%s) must be one of the relays"
                             % self.dir_city)
        cities = [self.client_city] + self.relays + self.servers
        if len({c.lower() for c in cities}) != len(cities):
            raise SystemExit("demo: a city is named twice")
        self.id = {}
        self.title = {}
        for c in cities:
            try:
                sid = self.data.find(c)
            except KeyError as e:
                raise SystemExit("demo: %s" % e.args[0])
            self.id[c] = sid
            self.title[c] = self.data.servers[sid]["title"]
        # The client's host is "client" (the harness's slotd lives there);
        # every other host is named after its city.
        self.host = {self.client_city: "client"}
        for c in self.relays + self.servers:
            self.host[c] = self.data.host_name(self.id[c])
        self.city_of = {h: c for c, h in self.host.items()}
        pairs, missing = [], []
        for a, b in itertools.combinations(cities, 2):
            v = self.data.rtt(self.id[a], self.id[b])
            if v is None:
                missing.append((a, b))
            else:
                pairs.append({"a": self.host[a], "b": self.host[b], "rtt": round(v, 3)})
        if missing:
            raise SystemExit("demo: no RTT data between %s" % ", ".join("%s and %s" % p
                                                                      for p in missing[:5]))
        if args.loss:
            for p in pairs:
                p["loss"] = args.loss
        sysctls = {
            "net.ipv4.tcp_congestion_control": CC,
            "net.ipv4.tcp_rmem": "4096 131072 %d" % args.rmem,
            "net.ipv4.tcp_no_metrics_save": 1,
            "net.core.somaxconn": 4096,
        }
        hd = {"rate": RATE, "sysctls": sysctls}
        if args.loss:
            hd["gso"] = False      # loss must hit single segments (docs/testbed.md)
        self.spec = {
            "_source": "WonderNetwork pings 2020-07-19/20 (scripts/demo.py)",
            "hosts": [{"name": self.host[c], "_city": self.title[c]} for c in cities],
            "pairs": pairs,
            "host_defaults": hd,
        }
        # --nat: slotd and curl on "home", behind the client city's host,
        # which masquerades it (a home router); home has its delays.
        self.nat = args.nat
        self.client_host = "home" if args.nat else "client"
        if args.nat:
            self.spec["lans"] = [{"name": "home-lan", "gateway": "client", "hosts": [
                {"name": "home", "sysctls": sysctls}], "masquerade": True}]

    def rtt(self, a, b):
        return self.data.rtt(self.id[a], self.id[b])

    def best_path(self, server):
        """(configured path RTT, relay city) of the best relay for a server."""
        return min((max(self.rtt(self.client_city, r), self.rtt(r, server)), r)
                   for r in self.relays)


# ---------------------------------------------------------------- the deployment

def import_harness():
    sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
    sys.path.insert(0, os.path.join(ROOT, "tests", "testbed"))
    import slotbed
    return slotbed


def make_bed_class(slotbed):
    class DemoBed(slotbed.SlotBed):
        """The harness's SlotBed (tests/integration/slotbed.py) with city
        hosts: several nginx servers, relays on the directory. down() stops
        the daemons gently, then deletes the namespaces."""

        def __init__(self, plan):
            super().__init__({})
            self.plan = plan
            self.spec = plan.spec
            self.nginxes = {}

        def build(self):
            import topo
            self.bed = topo.Testbed(self.spec)
            self.bed.up()
            self.dir = os.path.join(self.bed.dir, "slot")
            os.makedirs(self.dir)
            os.chmod(self.dir, 0o755)
            self.key_hex = os.urandom(32).hex()
            self.relay_key = slotbed.netns.write_key(os.path.join(self.dir, "relay.key"),
                                                     self.key_hex, owner="nobody")
            self.slotd_key = slotbed.netns.write_key(os.path.join(self.dir, "slotd.key"),
                                                     self.key_hex)
            # identity mode (docs/keys.md): a CA of the run, a certificate per daemon
            self.ids = slotbed.Identities(os.path.join(self.dir, "ids"))

        def start_relay(self, host, directory_url):
            conf = {"relay": {"log_level": "info"}, "probe": {"probe_timeout": "1s"},
                    "directory": dict(RELAY_DIR_CONF, urls=directory_url)}
            r = slotbed.Relay(self, host, self.relay_key, conf)
            self.relays[host] = r
            return r.start()

        def start_nginx(self, host, size):
            # One nginx per server host, each in a directory of its own.
            shim = types.SimpleNamespace(bed=self.bed, dir=os.path.join(self.dir, host))
            n = slotbed.Nginx(shim, host, ports=(HTTP_SLOT, HTTP_DIRECT))
            self.nginxes[host] = n
            n.add_file("demo.bin", size)
            return n.start()

        def down(self):
            for n in self.nginxes.values():
                try:
                    n.stop()
                except Exception:
                    pass
            super().down()

    return DemoBed


# ---------------------------------------------------------------- a download

def curl(sb, host, url, out, timeout):
    """Unmodified curl in the client host (the Step around it prints the dots).
    Returns {rc, status, local_port, size, seconds, connect_s, sha, err}."""
    if os.path.exists(out):
        os.unlink(out)
    p = sb.bed.popen(host, ["curl", "-sS", "--max-time", str(timeout), "-o", out, "-w",
                                "%{http_code} %{local_port} %{size_download} %{time_total} "
                                "%{time_connect}",
                                url],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        so, se = p.communicate(timeout=timeout + 10)
    except subprocess.TimeoutExpired:
        p.kill()
        so, se = p.communicate()
    except BaseException:
        p.kill()
        p.wait()
        raise
    res = {"rc": p.returncode, "err": se.decode(errors="replace").strip(), "status": None,
           "local_port": None, "size": 0, "seconds": None, "connect_s": None, "sha": None}
    parts = so.decode(errors="replace").split()
    if len(parts) == 5:
        res["status"], res["local_port"] = int(parts[0]), int(parts[1])
        res["size"], res["seconds"] = int(parts[2]), float(parts[3])
        res["connect_s"] = float(parts[4])
    if os.path.exists(out):
        res["sha"] = slotbed_mod.sha256_file(out)
        os.unlink(out)
    return res


class DemoError(Exception):
    pass


def check_download(res, want_sha, size, what):
    if res["rc"] != 0 or res["status"] != 200:
        raise DemoError("%s: curl exit %s, HTTP %s: %s" % (what, res["rc"], res["status"],
                                                           res["err"]))
    if res["size"] != size or res["sha"] != want_sha:
        raise DemoError("%s: %d bytes, sha256 %s, want %d bytes, %s"
                        % (what, res["size"], res["sha"], size, want_sha))


def mbps(res):
    return res["size"] * 8 / res["seconds"] / 1e6


# ---------------------------------------------------------------- the run

def run(args, plan, sb, results):
    slotbed = slotbed_mod
    ncity = 1 + len(plan.relays) + len(plan.servers)
    with Step("building the emulated WAN: %d namespaces around slot-wanem, %d city pairs"
              % (ncity + 1, len(plan.spec["pairs"]))) as st:
        sb.build()
        st.result = "up (tag %s, 10.%d.0.0/16)" % (sb.bed.tag, sb.bed.subnet)
    install_signal_handlers()     # ours again, over the test bed's

    dir_host = plan.host[plan.dir_city]
    with Step("starting slot-dird (the directory) in %s" % plan.dir_city) as st:
        d = sb.dird(dir_host, DIRD_CONF)
        st.result = "listening on %s" % d.url

    with Step("starting slot-relayd in %d cities" % len(plan.relays)) as st:
        for c in plan.relays:
            sb.start_relay(plan.host[c], d.url)
        st.result = "%d relays up" % len(plan.relays)

    n = len(plan.relays)
    ctl_city = {sb.relays[plan.host[c]].control: c for c in plan.relays}
    ip_city = {sb.ip(plan.host[c]): c for c in plan.relays}

    def converged():
        j = d.json()
        rs = j.get("relays", [])
        if len(rs) < n or any(r["rtts"] < n - 1 for r in rs):
            return None
        return j
    with Step("relays register with the directory and measure each other "
              "(%d RTTs)" % (n * (n - 1))) as st:
        end = time.monotonic() + args.converge_timeout
        while not converged():
            if time.monotonic() > end:
                j = d.json()
                raise DemoError("the relays did not all report within %ds: %d registered, "
                                "rtts %s" % (args.converge_timeout, len(j.get("relays", [])),
                                             sorted(r["rtts"] for r in j.get("relays", []))))
            time.sleep(0.2)
        # the directory regroups at most every regroup_interval after a change
        time.sleep(1.0)
        listing = d.listing()
        groups = {}
        for ctl, g in listing.items():
            groups.setdefault(g, []).append(ctl_city.get(ctl, ctl))
        group_of = {ctl_city[ctl]: g for ctl, g in listing.items()}
        st.result = "%d relays in %d groups" % (len(listing), len(groups))
    multi = sorted((sorted(plan.title[c] for c in g) for g in groups.values() if len(g) > 1),
                   key=lambda x: (-len(x), x))
    alone = sorted(plan.title[g[0]] for g in groups.values() if len(g) == 1)
    text = "groups: " + " ".join("[%s]" % ", ".join(g) for g in multi)
    if alone:
        text += "; alone: " + ", ".join(alone)
    for l in textwrap.wrap(text, 100, initial_indent=" " * 9, subsequent_indent=" " * 11):
        say(l)
    results["groups"] = sorted(sorted(plan.title[c] for c in g) for g in groups.values())

    size = args.size
    with Step("starting nginx in %s (one %s file each, ports %d and %d)"
              % (", ".join(plan.servers), fmt_size(size), HTTP_SLOT, HTTP_DIRECT)) as st:
        for c in plan.servers:
            sb.start_nginx(plan.host[c], size)

    with Step("starting slotd in the client (%s%s), given only the directory's URL"
              % (plan.client_city, ", behind its NAT" if plan.nat else "")) as st:
        s = sb.slotd([], host=plan.client_host, overrides={
            "slotd": {"log_level": "info"},
            "hijack": {"ports": str(HTTP_SLOT)},
            "directory": {"urls": d.url, "refresh": "1m", "retry": "500ms",
                          "cache_file": os.path.join(sb.dir, "slotd.relays")}})
        s.start(wait=False)
        s.wait_ready(timeout=15)
        end = time.monotonic() + 30
        while s.counters().get("relays_up") != n:
            if time.monotonic() > end:
                raise DemoError("slotd: %r relays up of %d\n%s"
                                % (s.counters().get("relays_up"), n, s.log()[-3000:]))
            time.sleep(0.2)
        st.result = "%d relays from the directory, all up; hijacking port %d" % (n, HTTP_SLOT)

    say("")
    say("Downloads: curl to port %d goes direct (slotd leaves it alone), to port %d "
        "through slot." % (HTTP_DIRECT, HTTP_SLOT))
    client_ip = sb.ip(plan.client_host)     # the SYN's source, as slotd sees it
    public_ip = sb.ip("client")             # what the servers see of a direct one
    out = os.path.join(sb.dir, "download")
    rows = []
    for c in plan.servers:
        host = plan.host[c]
        ng = sb.nginxes[host]
        fsize, sha = ng.files["demo.bin"]
        rtt = plan.rtt(plan.client_city, c)
        with Step("%s (%.0f ms): direct     " % (plan.title[c], rtt)) as st:
            url = ng.url("demo.bin", port=HTTP_DIRECT, query="via=direct")
            rd = curl(sb, plan.client_host, url, out, args.timeout)
            check_download(rd, sha, fsize, "%s direct" % c)
            peer = ng.peer_of("via=direct")
            if peer != public_ip:
                raise DemoError("%s: the direct download came from %s, not the client"
                                % (c, peer))
            st.result = "%6.2f Mbit/s, sha256 ok" % mbps(rd)
        with Step("%s (%.0f ms): through slot" % (plan.title[c], rtt)) as st:
            url = ng.url("demo.bin", port=HTTP_SLOT, query="via=slot")
            before = {x["control"]: x["probes"] for x in s.json()["relays"]}
            tokens = s.counters().get("token_pipes", 0)
            pipes = relay_pipes(sb, plan)
            rs = curl(sb, plan.client_host, url, out, args.timeout)
            probed = sorted(plan.title[ctl_city[x["control"]]] for x in s.json()["relays"]
                            if x["probes"] > before.get(x["control"], 0))
            # the relays that joined a pipe for it, by their own counters
            after = relay_pipes(sb, plan)
            carried = {plan.title[r]: after[r] - pipes[r] for r in after
                       if after[r] > pipes.get(r, 0)}
            check_download(rs, sha, fsize, "%s through slot" % c)
            tokened = s.counters().get("token_pipes", 0) > tokens
            dec = s.decision(client="%s:%d" % (client_ip, rs["local_port"]), timeout=5)
            peer = ng.peer_of("via=slot")
            relay = ctl_city.get(dec["relay"]) if dec["relay"] else None
            if relay is not None and peer != sb.ip(plan.host[relay]):
                raise DemoError("%s: slotd chose %s but nginx saw %s" % (c, relay, peer))
            if relay is None and peer != public_ip:
                raise DemoError("%s: slotd went direct but nginx saw %s" % (c, peer))
            st.result = "%6.2f Mbit/s, sha256 ok, via %s (%d relays probed, chosen in %.0f ms%s)" % (
                mbps(rs), plan.title[relay] if relay else "the direct path",
                dec["probes"], dec["select_us"] / 1000.0,
                ", pipe token in the SYN" if tokened else "")
        best_rtt, best = plan.best_path(c)
        rows.append({
            "server": plan.title[c],
            # slotd's direct probe, or, when slotd chose the relay before
            # that probe answered (no answer still due could beat the
            # relay), the direct download's own handshake
            "rtt_direct_ms": (dec["rtt_direct_us"] / 1000.0 if dec["rtt_direct_us"] else
                              rd["connect_s"] * 1000.0),
            "rtt_direct_by": "slotd" if dec["rtt_direct_us"] else "curl",
            "rtt_direct_configured_ms": rtt,
            "relay": plan.title[relay] if relay else None,
            "nginx_peer": ip_city.get(peer, "client" if peer == public_ip else peer),
            "nginx_peer_ip": peer,
            "path_rtt_ms": dec["path_rtt_us"] / 1000.0 if relay else None,
            "path_rtt_configured_ms": (max(plan.rtt(plan.client_city, relay),
                                           plan.rtt(relay, c)) if relay else None),
            "best_relay": plan.title[best], "best_path_configured_ms": best_rtt,
            "best_relay_group": sorted(plan.title[x] for x in groups[group_of[best]]),
            "probed": probed,
            "select_ms": dec["select_us"] / 1000.0, "probes": dec["probes"],
            "why": dec["why"], "token": tokened, "carried_by": carried,
            "decision_relay": plan.title[relay] if relay else None,
            "direct_mbps": mbps(rd), "slot_mbps": mbps(rs),
            "direct_s": rd["seconds"], "slot_s": rs["seconds"],
            "bytes": fsize, "speedup": mbps(rs) / mbps(rd),
        })
    results["rows"] = rows
    cnt = s.counters()
    results["slotd"] = {k: cnt.get(k) for k in ("decisions_relay", "decisions_direct",
                                               "probes_sent", "probe_replies", "pipes_ok",
                                               "token_pipes")}
    return rows


def relay_pipes(sb, plan):
    """{relay city: pipes_total}, each relay's count of pipes joined."""
    return {c: sb.relays[plan.host[c]].counters().get("pipes_total", 0) for c in plan.relays}


def row_notes(r, plan):
    """The notes under the table on one download through slot: which relay
    carried it (slotd's decision, nginx's peer, the relays' counters) and
    why slotd took it; then, if the data knows a better relay, which and why
    slotd did not take it."""
    if r["relay"]:
        direct = ("%.0f ms" % r["rtt_direct_ms"] if r["rtt_direct_by"] == "slotd" else
                  "not yet measured when it chose")
        n = ("%s: carried by %s. slotd's decision: via %s (path %.0f ms, direct %s; %s); "
             "nginx saw the download come from %s (%s)"
             % (r["server"], r["relay"], r["decision_relay"], r["path_rtt_ms"], direct,
                r["why"], plan.title.get(r["nginx_peer"], r["nginx_peer"]), r["nginx_peer_ip"]))
    else:
        n = ("%s: carried by no relay. slotd's decision: direct (%s); nginx saw the "
             "download come from the %s (%s)" % (r["server"], r["why"], r["nginx_peer"],
                                                  r["nginx_peer_ip"]))
    carried = r["carried_by"]
    if carried:
        n += "; pipes joined: %s" % ", ".join("%s %d" % (c, carried[c]) for c in sorted(carried))
    else:
        n += "; no relay joined a pipe"
    notes = [n + "."]
    if r["relay"] != r["best_relay"] and \
            r["best_path_configured_ms"] < (r["path_rtt_configured_ms"] or 1e9) - 1:
        if r["best_relay"] in r["probed"]:
            why = "it was probed, but measured no better"
        else:
            why = ("it was not among the relays slotd ranked first and probed (%d of "
                   "%d), judged by the landmarks the directory sent"
                   % (len(r["probed"]), len(plan.relays)))
        if r["relay"]:
            used = "%s (%.0f ms in the data%s)" % (
                r["relay"], r["path_rtt_configured_ms"],
                ", same group" if r["relay"] in r["best_relay_group"] else "")
        else:
            used = "the direct path (%.0f ms in the data)" % r["rtt_direct_configured_ms"]
        notes.append("%s: the best relay in the data is %s (%.0f ms), not %s: %s."
                     % (r["server"], r["best_relay"], r["best_path_configured_ms"], used, why))
    return notes


def fmt_size(b):
    return "%g MiB" % (b / MiB) if b >= MiB else "%g KiB" % (b / 1024)


def table(rows):
    head = ("server", "direct RTT", "relay chosen", "path RTT", "direct", "slot", "speedup")
    body = []
    for r in rows:
        body.append((r["server"], "%.0f ms" % r["rtt_direct_ms"],
                     r["relay"] or "(direct)",
                     "%.0f ms" % r["path_rtt_ms"] if r["path_rtt_ms"] else "-",
                     "%.2f Mbit/s" % r["direct_mbps"], "%.2f Mbit/s" % r["slot_mbps"],
                     "%.2fx" % r["speedup"]))
    w = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    left = (0, 2)

    def fmt(row):
        return "  ".join(v.ljust(w[i]) if i in left else v.rjust(w[i])
                         for i, v in enumerate(row))
    out = [fmt(head), "  ".join("-" * x for x in w)] + [fmt(b) for b in body]
    return "\n".join(out)


def plot(rows, plan, args, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 5.2), dpi=110)
    x = range(len(rows))
    wd = 0.38
    d = [r["direct_mbps"] for r in rows]
    s = [r["slot_mbps"] for r in rows]
    ax.bar([i - wd / 2 for i in x], d, wd, color="#8c8c8c", label="direct")
    ax.bar([i + wd / 2 for i in x], s, wd, color="#1f77b4", label="through slot")
    top = max(d + s)
    for i, r in enumerate(rows):
        ax.text(i - wd / 2, d[i] + top * 0.01, "%.1f" % d[i], ha="center", va="bottom",
                fontsize=8)
        ax.text(i + wd / 2, s[i] + top * 0.01, "%.1f\n%.1fx" % (s[i], r["speedup"]),
                ha="center", va="bottom", fontsize=8, fontweight="bold")
    labels = []
    for r in rows:
        via = ("via %s, %.0f ms" % (r["relay"], r["path_rtt_ms"]) if r["relay"]
               else "direct chosen")
        labels.append("%s\ndirect %.0f ms\n%s" % (r["server"], r["rtt_direct_ms"], via))
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_xlabel("server city (direct RTT; relay slotd chose, path RTT = max of the two legs)")
    ax.set_ylabel("throughput (Mbit/s)")
    ax.set_ylim(0, top * 1.22)
    ax.set_title("slot demo: curl from %s, direct vs. through slot (%s per download)\n"
                 "emulated WAN, WonderNetwork RTTs, %d relay cities, %d Mbit/s links, "
                 "%s, rcvbuf %d KiB%s"
                 % (plan.title[plan.client_city], fmt_size(args.size), len(plan.relays), RATE,
                    CC, args.rmem // 1024, ", loss %g%%" % (args.loss * 100) if args.loss else ""),
                 fontsize=10)
    ax.legend(loc="upper right", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def leftovers(tag):
    """Namespaces, links and run directories of this run still present."""
    import topo
    left = [ns for ns in topo._netns_list() if ns.startswith(tag + "-")]
    left += [l for l in topo._root_links() if l.startswith(tag)]
    left += [x for x in os.listdir("/tmp") if x.startswith(tag + "-")]
    return left


def parse_args(argv):
    ap = argparse.ArgumentParser(description="slot on an emulated WAN of real cities "
                                 "(the README's `make demo`)")
    ap.add_argument("--quick", action="store_true",
                    help="small: 3 relays, 2 servers, 1 MiB files (what the tests run)")
    ap.add_argument("--nat", action="store_true",
                    help="the client behind a home NAT (slotd's pipe tokens)")
    ap.add_argument("--client", default=CLIENT)
    ap.add_argument("--servers", default=None, help="comma-separated server cities")
    ap.add_argument("--relays", default=None, help="comma-separated relay cities")
    ap.add_argument("--dir-host", default=DIR_HOST, help="relay city running slot-dird")
    ap.add_argument("--size", type=float, default=None, help="file size in MiB (default 8; "
                    "quick 1)")
    ap.add_argument("--loss", type=float, default=0.0,
                    help="loss probability per packet on every pair, each way (default 0)")
    ap.add_argument("--rmem", type=int, default=RMEM_MAX,
                    help="receive buffer cap in bytes, tcp_rmem max (default %d)" % RMEM_MAX)
    ap.add_argument("--png", default=None, help="the chart (default $SLOT_BUILD/demo.png)")
    ap.add_argument("--json", default=None, help="results (default $SLOT_BUILD/demo.json)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per download")
    ap.add_argument("--converge-timeout", type=int, default=60)
    a = ap.parse_args(argv)
    a.servers = [x.strip() for x in a.servers.split(",")] if a.servers else \
        (QUICK_SERVERS if a.quick else SERVERS)
    a.relays = [x.strip() for x in a.relays.split(",")] if a.relays else \
        (QUICK_RELAYS if a.quick else RELAYS)
    a.size = int((a.size if a.size is not None else (1 if a.quick else 8)) * MiB)
    if not 0 <= a.loss < 0.2:
        ap.error("--loss: a probability below 0.2")
    return a


slotbed_mod = None


def main(argv=None):
    global slotbed_mod, _cleaning
    args = parse_args(sys.argv[1:] if argv is None else argv)
    install_signal_handlers()
    build = os.environ.get("SLOT_BUILD", os.path.join(ROOT, "build"))
    os.environ["SLOT_BUILD"] = build
    png = args.png or os.path.join(build, "demo.png")
    jpath = args.json or os.path.join(build, "demo.json")
    if os.geteuid() != 0:
        say("demo: must run as root (it builds network namespaces): make demo as root, "
            "or sudo make demo")
        return 1
    missing = [b for b in ("slot-relayd", "slotd", "slot-dird", "slot-wanem", "slot-keygen")
               if not os.access(os.path.join(build, b), os.X_OK)]
    missing += [p for p in ("/usr/sbin/nginx", "/usr/bin/curl") if not os.access(p, os.X_OK)]
    if missing:
        say("demo: missing %s: run `sudo make demo` (it installs packages and builds), "
            "or make all" % ", ".join(missing))
        return 1
    slotbed_mod = import_harness()
    try:
        plan = Plan(args)
    except RuntimeError as e:        # no RTT data
        say("demo: %s (the WonderNetwork data: ../shared/data/wondernetwork next to the "
            "clone, see README.md)" % e)
        return 1
    say("slot demo: a client in %s downloads from %d far servers with unmodified curl, "
        "directly and through slot." % (plan.title[plan.client_city], len(plan.servers)))
    say("Emulated WAN: %d cities with the RTTs WonderNetwork measured between them (2020), "
        "%d Mbit/s links," % (1 + len(plan.relays) + len(plan.servers), RATE))
    say("TCP %s, receive buffers capped at %d KiB (tcp_rmem) so that a long path is "
        "window-limited," % (CC, args.rmem // 1024))
    say("as real long paths are: about window/RTT%s." % (
        ", %g%% loss per packet each way" % (args.loss * 100) if args.loss else ""))
    for l in textwrap.wrap("Relays in %d cities: %s." % (len(plan.relays), ", ".join(
            plan.title[c] for c in plan.relays)), 100, subsequent_indent="  "):
        say(l)
    say("")
    DemoBed = make_bed_class(slotbed_mod)
    sb = DemoBed(plan)
    results = {"client": plan.title[plan.client_city], "servers": plan.servers,
               "relays": [plan.title[c] for c in plan.relays], "bytes": args.size,
               "rate_mbit": RATE, "rmem_max": args.rmem, "cc": CC, "loss": args.loss,
               "quick": args.quick, "nat": args.nat}
    rc = 0
    tag = None
    try:
        rows = run(args, plan, sb, results)
        tag = sb.bed.tag
        say("")
        say(table(rows))
        say("")
        notes = ["direct RTT: slotd's own measurement (TCP connect); path RTT: "
                 "max(client-relay, relay-server) as the relay's probe answer measured it. "
                 "Throughput: file size / curl's total time (the slot figure includes the "
                 "relay selection and pipe set-up of the first connection)."]
        for r in rows:
            notes += row_notes(r, plan)
        for n in notes:
            say(textwrap.fill(n, 100, subsequent_indent="  "))
        try:
            plot(rows, plan, args, png)
            say("chart: %s" % png)
            results["png"] = png
        except ImportError:
            say("chart: not drawn (python3-matplotlib missing: make deps)")
    except Interrupted as e:
        say("")
        line("%s: stopping" % signal.Signals(e.signum).name)
        rc = 128 + e.signum
    except DemoError as e:
        say("")
        line("demo failed: %s" % e)
        rc = 1
    except Exception as e:
        say("")
        line("demo failed: %s: %s" % (type(e).__name__, e))
        rc = 1
    finally:
        _cleaning = True
        tag = sb.bed.tag if sb.bed else tag
        with Step("cleaning up: stopping the daemons, deleting the namespaces") as st:
            sb.down()
            left = leftovers(tag) if tag else []
            st.result = ("nothing left" if not left else "LEFT BEHIND: %s" % " ".join(left))
        if tag and left:
            rc = rc or 1
    results["exit"] = rc
    results["seconds"] = time.monotonic() - T0
    try:
        os.makedirs(os.path.dirname(os.path.abspath(jpath)), exist_ok=True)
        with open(jpath, "w") as f:
            json.dump(results, f, indent=1)
    except OSError:
        pass
    line("%s after %.0f s" % ("finished" if rc == 0 else "exit %d" % rc,
                              time.monotonic() - T0))
    return rc


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""End-to-end bulk throughput through slot on the emulated WAN (issue 7,
scenarios 1-3): direct, slot, "ideal" and HAProxy side by side.

Every case is a tests/integration/slotbed.py test bed

    client --D ms-- server                       the direct path
    client --D/2-- relay1 --D/2-- server          the relay slotd should pick
    client --3D/4-- relay2 --3D/4-- server        a worse relay (a decoy: its
                                                  path also beats the direct one)

100 Mbit/s access links (tbf both ways), cubic, receive buffers capped at
256 KiB on every host (net.ipv4.tcp_rmem max 262144), slot-relayd in both
relay hosts, slotd in the client (hijacking port 80 and 5201), nginx and
iperf3 servers in the server host, HAProxy (mode tcp, splice, one thread) in
relay1. Data flows server -> client (iperf3 -R: the download, the common
case). Per repetition, in rotating order:

  direct    iperf3 client -> server:5202 (a port slotd does not hijack)
  slot      iperf3 client -> server:5201 (hijacked: carried through the relay
            slotd picks; every run checks from slotd's decisions that the data
            connection went through relay1)
  ideal     the slower sub-hop measured alone: relay1 -> server:5203 and
            client -> relay1:5202 run at the same time (they share no link in
            the data direction), ideal = min of the two
  haproxy   iperf3 client -> relay1:5210, HAProxy forwards to server:5204

The cases (scenarios): 1 "window" 80 ms = 40 + 40, no loss; 2 "loss1" the
same RTTs with 1% loss each way on every pair, and "paper" 1% on the direct
pair, 0.5% on the sub-hops, and "relayleg" 1% on the direct pair and on
client-relay alone, the leg the relay sends on in a download (gso off on every
host for all three: loss must hit single segments, docs/testbed.md); 3 "rttN":
direct N ms for N in the sweep, sub-hops N/2. The cases' test beds run at the same time (each at most
~100 Mbit/s, far below what the machine forwards, and no two cases share a
link), each case measuring its peers in turn; ratios are only ever taken
within one repetition of one case.

With loss, each run is 4 parallel streams (reported per stream: a single
15 s stream sees too few losses for a steady figure), and the ideal runs'
0.1 s samples give the "tandem bound": the most a relay with an unlimited
buffer could forward from those two legs, min over t of (upstream bytes by t
+ downstream bytes after t), stream by stream.

Before and after measuring, each case downloads a file of random bytes from
nginx through slot with curl and checks its sha256, slotd's decision and that
nginx saw the request come from relay1 (bytes checked end to end; the first
download also makes slotd select and cache relay1; a first selection that
picks another path is reported and retried with a fresh slotd).

usage: e2e_throughput.py [--reps 5] [--seconds 10] [--loss-seconds 15]
                         [--loss-streams 4] [--quick] [--only 1,2,3]
                         [--cases NAME,...]
                         [--out docs/bench/e2e_throughput.md] [--img DIR]
                         [--raw FILE] [--from-raw FILE]
Root, /usr/bin/python3; binaries from $SLOT_BUILD (default build/).
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback

import _needs  # scripts/bench/_needs.py: checked before measuring; figures that may fail

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "testbed"))

PEERS = ("direct", "slot", "ideal", "haproxy")
# With loss, where the congestion control matters: slot with the relays'
# legs cubic throughout, and bbr from the start, instead of RELAY_CC, and
# HAProxy on relay1 with bbr as that host's default (a fair comparison).
LOSS_PEERS = ("slot-cubic", "slot-bbr", "haproxy-bbr")
LABEL = {"direct": "direct", "slot": "slot (via relay1)", "ideal": "ideal (slower sub-hop)",
         "haproxy": "HAProxy on relay1", "slot-cubic": "slot, relay legs cubic",
         "slot-bbr": "slot, relay legs bbr from the start",
         "haproxy-bbr": "HAProxy on relay1, its default bbr"}
COLOR = {"direct": "#7f7f7f", "slot": "#1f77b4", "ideal": "#2ca02c", "haproxy": "#ff7f0e",
         "slot-cubic": "#9ecae1", "slot-bbr": "#17becf", "haproxy-bbr": "#fdae6b"}
# The relays' legs (--relay-cc): auto, slot-relayd's defaults (the host's
# cubic, bbr from a leg's first retransmission on), or one algorithm throughout.
RELAY_CC = {"cc": "auto"}


def relay_pipe_conf(cc):
    """[pipe] of the relays for --relay-cc cc (written out in full, so that a
    reload from another setting comes back to it)."""
    if cc == "auto":
        return {"congestion": "system", "congestion_on_loss": "bbr"}
    return {"congestion": cc, "congestion_on_loss": "off"}


def cc_word():
    """What the relay sends with under loss, for the report's sentences."""
    if RELAY_CC["cc"] == "auto":
        return "bbr (taken at the leg's first retransmission)"
    return RELAY_CC["cc"]
RMEM = "4096 131072 262144"
RATE = 100                      # Mbit/s, every access link, both ways
SWEEP = (30, 60, 100, 150, 200, 250)
QUICK_SWEEP = (30, 100, 250)
CHECK_FILE_SIZE = 2 << 20
# server host ports (5201 is hijacked by slotd, the others are not)
P_SLOT, P_DIRECT, P_SUBHOP, P_HABACK = 5201, 5202, 5203, 5204
P_RELAY_SUBHOP = 5202           # in relay1
P_HAPROXY = 5210                # HAProxy in relay1

log_lock = threading.Lock()
FAMILY = {"family": None}       # --family 6: every host IPv6-only (scenario 1 over IPv6)


def slotbed_hostport(addr, port):
    import slotbed
    return slotbed.hostport(addr, port)


def ip(sb, host):
    """A host's address: IPv4 on the usual (dual-stack) bed, IPv6 with --family 6."""
    return sb.bed.addr(host)


def log(*a):
    with log_lock:
        print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def cumulative(j, stream):
    """Cumulative bytes received on one stream at the end of each 0.1 s interval,
    from 0; and the time covered."""
    c, t = [0], 0.0
    for iv in j["intervals"]:
        st = iv["streams"][stream]
        c.append(c[-1] + st["bytes"])
        t += st["seconds"]
    return c, t


def tandem_mbps(up, down, streams):
    """The most a relay could forward, per stream, if it joined these two
    independently measured legs with an unlimited buffer: bytes out by the
    end = min over t of (upstream bytes by t + downstream bytes after t)
    (a tandem of two servers; t = 0 and t = end give min(A, B), the ideal).
    Legs paired stream by stream, intervals aligned by index."""
    total, secs = 0, 0.0
    for s in range(streams):
        a, ta = cumulative(up, s)
        b, tb = cumulative(down, s)
        n = min(len(a), len(b)) - 1
        total += min(a[k] + b[n] - b[k] for k in range(n + 1))
        secs = max(secs, min(ta, tb))
    return total * 8 / secs / 1e6 / streams


class Case:
    def __init__(self, scenario, name, title, direct_rtt, sub_rtt, direct_loss=0.0,
                 sub_loss=0.0, seconds=10, streams=1, leg_loss=None):
        """sub_loss: the loss of both sub-hops; leg_loss = (client-relay,
        relay-server) sets them apart instead (each relay's pair of that
        side: the decoy's too; the ideal's legs then one after the other)."""
        self.scenario, self.name, self.title = scenario, name, title
        self.direct_rtt, self.sub_rtt = direct_rtt, sub_rtt
        self.direct_loss, self.sub_loss = direct_loss, sub_loss
        self.cr_loss, self.rs_loss = leg_loss if leg_loss is not None else (sub_loss, sub_loss)
        # The ideal's two sub-hops one after the other where their losses
        # differ: at once they share no link in the data direction, but a
        # lossless leg's 4 streams fill the 100 Mbit/s link (~8,000 packets/s
        # through slot-wanem and relay1 on 2 shared cores), and the lossy
        # leg measured beside it moved 15-28% less than alone (relayleg,
        # 3 pairs of runs): the ideal would be understated. Both legs lossy,
        # they move ~15 Mbit/s together: at once, as before.
        self.seq_ideal = self.legs_differ
        self.seconds = seconds
        self.streams = streams
        self.sb = None
        self.slotd = None
        self.res = {p: [] for p in PEERS + LOSS_PEERS}
        self.sub = {"client-relay": [], "relay-server": []}
        self.tandem = []
        self.checks = []
        self.selection_misses = []
        self.switches = []      # legs slot-relayd switched to bbr, per slot run
        self.error = None

    @property
    def lossy(self):
        return bool(self.direct_loss or self.cr_loss or self.rs_loss)

    @property
    def legs_differ(self):
        return self.cr_loss != self.rs_loss

    def loss_text(self):
        """'1% on the direct pair, 0.5% on each sub-hop' (or each sub-hop's own)."""
        s = "%g%% on the direct pair, " % (self.direct_loss * 100)
        if self.legs_differ:
            return s + "%g%% on client-relay1 and %g%% on relay1-server" % (
                self.cr_loss * 100, self.rs_loss * 100)
        return s + "%g%% on each sub-hop" % (self.cr_loss * 100)

    @property
    def peers(self):
        return PEERS + LOSS_PEERS if self.lossy else PEERS

    # ---- set-up ----

    def spec_edit(self, spec):
        spec["host_defaults"]["rate"] = RATE
        if self.lossy:
            # one segment per packet, so that loss hits single segments
            spec["host_defaults"]["gso"] = False
        for p in spec["pairs"]:
            ends = {p["a"], p["b"]}
            if ends == {"client", "server"}:
                p["loss"] = self.direct_loss
            elif "client" in ends:
                p["loss"] = self.cr_loss
            elif "server" in ends:
                p["loss"] = self.rs_loss

    def up(self):
        import slotbed
        decoy = self.direct_rtt * 0.75
        self.sb = slotbed.SlotBed(
            {"relay1": (self.sub_rtt, self.sub_rtt), "relay2": (decoy, decoy)},
            direct_rtt=self.direct_rtt, other_rtt=10,
            host_sysctls={"net.ipv4.tcp_congestion_control": "cubic",
                          "net.ipv4.tcp_rmem": RMEM},
            relay_conf={"relay": {"log_level": "info"},
                        # the product's default, not the test bed's 2 s: with 1%
                        # loss each way two lost SYNs in a row (p ~ 4e-4 a
                        # connect) would fail a run
                        "limits": {"connect_timeout": "5s"},
                        "pipe": relay_pipe_conf(RELAY_CC["cc"])},
            spec_edit=self.spec_edit, family=FAMILY["family"])
        self.sb.up()
        sb = self.sb
        self.sha = sb.nginx.add_file("check", CHECK_FILE_SIZE)
        sb.nginx.start()
        bed = sb.bed
        for host, port in (("server", P_SLOT), ("server", P_DIRECT), ("server", P_SUBHOP),
                           ("server", P_HABACK), ("relay1", P_RELAY_SUBHOP)):
            p = bed.popen(host, ["iperf3", "-s", "-B", ip(sb, host), "-p", str(port)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            bed.wait_listen(host, port, p)
        sb.haproxy("relay1", {P_HAPROXY: (ip(sb, "server"), P_HABACK)})
        self.start_slotd()
        return self

    def down(self):
        if self.sb:
            self.sb.down()

    # ---- checks ----

    def start_slotd(self):
        sb = self.sb
        if self.slotd is not None:
            self.slotd.stop()
        self.slotd = sb.slotd([sb.relay("relay1"), sb.relay("relay2")],
                              {"slotd": {"log_level": "info"}}).start()

    def check_download(self, attempts=1):
        """curl of a file of random bytes through slot: sha256, and the path
        (slotd's decision and nginx's peer) must be relay1. A first selection
        that picks another path (probes lost to the emulated loss, or late on
        a busy machine) is recorded and retried with a fresh slotd (its cache
        would keep the choice for cache_ttl), up to `attempts` times."""
        sb, r1 = self.sb, self.sb.relay("relay1")
        for attempt in range(1, attempts + 1):
            tag = "chk-%s-%d-%d" % (self.name, len(self.checks), attempt)
            t0 = time.monotonic()
            r = sb.curl(sb.nginx.url("check", query=tag), timeout=300)
            dt = time.monotonic() - t0
            if r.rc != 0 or r.status != 200 or r.sha != self.sha:
                raise RuntimeError("%s: download through slot failed: %r" % (self.name, r))
            peer = sb.nginx.peer_of(tag)
            d = self.slotd.decision(client=slotbed_hostport(ip(sb, "client"), r.local_port))
            if d["verdict"] == "relay" and d["relay"] == r1.control and peer == r1.ip:
                break
            self.selection_misses.append(d)
            log("%-7s first selection did not take relay1: nginx saw %s, decision %r"
                % (self.name, peer, d))
            if attempt == attempts:
                raise RuntimeError("%s: the download went through %s, not relay1 %s; slotd "
                                   "decided %r" % (self.name, peer, r1.ip, d))
            self.start_slotd()
        self.checks.append({"bytes": r.size, "seconds": dt, "decision": d})
        log("%-7s curl %d bytes through relay1 in %.1f s, sha256 ok (%s)"
            % (self.name, r.size, dt, "cached decision" if d.get("cached") else
               "path %.1f ms, direct %.1f ms" % (d.get("path_rtt_us", 0) / 1000,
                                                 d.get("rtt_direct_us", 0) / 1000)))

    # ---- measurements ----

    def iperf(self, host, dst_ip, port):
        """iperf3 -R (data dst -> host): (JSON, Mbit/s received per stream)."""
        j = self.sb.bed.iperf3_client(host, dst_ip, port=port, seconds=self.seconds,
                                      args=["-R", "-P", str(self.streams), "-i", "0.1"],
                                      timeout=self.seconds + 90)
        end = j.get("end", {})
        recv = end.get("sum_received", {})
        if not recv.get("bytes") or len(end.get("streams", ())) != self.streams:
            raise RuntimeError("%s: iperf3 %s -> %s:%d: %d streams, received %r"
                               % (self.name, host, dst_ip, port, len(end.get("streams", ())),
                                  recv))
        return j, recv["bits_per_second"] / 1e6 / self.streams

    def run_peer(self, peer, record=None):
        sb = self.sb
        srv, r1 = ip(sb, "server"), sb.relay("relay1")
        if peer == "direct":
            _, mbps = self.iperf("client", srv, P_DIRECT)
        elif peer == "haproxy":
            _, mbps = self.iperf("client", r1.ip, P_HAPROXY)
        elif peer == "haproxy-bbr":
            # HAProxy sets no algorithm: its sockets take the host's default
            # when accepted or created.
            sb.bed.run("relay1", "sysctl", "-qw", "net.ipv4.tcp_congestion_control=bbr")
            try:
                _, mbps = self.iperf("client", r1.ip, P_HAPROXY)
            finally:
                sb.bed.run("relay1", "sysctl", "-qw", "net.ipv4.tcp_congestion_control=cubic")
        elif peer in ("slot-cubic", "slot-bbr"):
            r1.reload({"pipe": relay_pipe_conf(peer[5:])})
            try:
                return self.run_peer("slot", record=peer)
            finally:
                r1.reload({"pipe": relay_pipe_conf(RELAY_CC["cc"])})
        elif peer == "slot":
            sw0 = r1.counters()["congestion_switches"]
            j, mbps = self.iperf("client", srv, P_SLOT)
            if record is None:
                self.switches.append(r1.counters()["congestion_switches"] - sw0)
            for c in j["start"]["connected"]:
                d = self.slotd.decision(client=slotbed_hostport(ip(sb, "client"),
                                                                c["local_port"]))
                if d["verdict"] != "relay" or d["relay"] != r1.control:
                    raise RuntimeError("%s: iperf3's data connection went %r, not through "
                                       "relay1" % (self.name, d))
        else:   # ideal: both sub-hops at the same time (one after the other: seq_ideal)
            out = {}

            def leg(name, host, dst, port):
                try:
                    out[name] = self.iperf(host, dst, port)
                except Exception as e:      # noqa: BLE001 (re-raised below)
                    out[name] = e
            ts = [threading.Thread(target=leg, args=("relay-server", "relay1", srv, P_SUBHOP)),
                  threading.Thread(target=leg, args=("client-relay", "client", r1.ip,
                                                     P_RELAY_SUBHOP))]
            for t in ts:
                t.start()
                if self.seq_ideal:
                    t.join()
            for t in ts:
                t.join()
            for v in out.values():
                if isinstance(v, Exception):
                    raise v
            for k in self.sub:
                self.sub[k].append(out[k][1])
            mbps = min(out[k][1] for k in self.sub)
            self.tandem.append(tandem_mbps(out["relay-server"][0], out["client-relay"][0],
                                           self.streams))
        self.res[record or peer].append(mbps)
        return mbps

    def measure(self, reps):
        try:
            self.check_download(attempts=3)
            for rep in range(reps):
                ps = self.peers
                order = ps[rep % len(ps):] + ps[:rep % len(ps)]
                for peer in order:
                    mbps = self.run_peer(peer)
                    extra = ""
                    if peer == "ideal":
                        extra = " (client-relay %.2f, relay-server %.2f, tandem %.2f)" % (
                            self.sub["client-relay"][-1], self.sub["relay-server"][-1],
                            self.tandem[-1])
                    log("%-7s rep %d %-8s %7.2f Mbit/s%s" % (self.name, rep + 1, peer, mbps,
                                                            extra))
            self.check_download()
        except BaseException as e:      # noqa: BLE001 (reported by main)
            self.error = "%s: %s\n%s" % (self.name, e, traceback.format_exc())
            log("%s failed: %s" % (self.name, e))

    # ---- results ----

    RAW = ("scenario", "name", "title", "direct_rtt", "sub_rtt", "direct_loss", "sub_loss",
           "cr_loss", "rs_loss", "seconds", "streams", "res", "sub", "tandem",
           "selection_misses", "seq_ideal", "switches")

    def to_raw(self):
        return {k: getattr(self, k) for k in self.RAW}

    @classmethod
    def from_raw(cls, d):
        c = cls(d["scenario"], d["name"], d["title"], d["direct_rtt"], d["sub_rtt"],
                d["direct_loss"], d["sub_loss"], d["seconds"], d["streams"],
                # raw files from before leg_loss: both sub-hops sub_loss
                (d.get("cr_loss", d["sub_loss"]), d.get("rs_loss", d["sub_loss"])))
        c.res.update(d["res"])
        c.sub, c.tandem = d["sub"], d["tandem"]
        c.selection_misses = d.get("selection_misses", [])
        c.seq_ideal = d.get("seq_ideal", False)
        c.switches = d.get("switches", [])
        return c

    def ratios(self, a, b):
        return [x / y for x, y in zip(self.res[a], self.res[b])]


# ---------------------------------------------------------------- formatting

def med(v):
    return statistics.median(v)


def rng(v, f="%.1f"):
    if not v:
        return "n/a"
    return (f + " [" + f + "-" + f + "]") % (med(v), min(v), max(v))


def rrng(v):
    return rng(v, "%.2f")


def span(vals, unit=""):
    """'1.00' or '0.99 to 1.01' (two decimals), with a unit."""
    lo, hi = "%.2f%s" % (min(vals), unit), "%.2f%s" % (max(vals), unit)
    return lo if lo == hi else "%s to %s" % (lo, hi)


def mbit(v):
    m = med(v)
    f = "%.2f" if m < 10 else "%.1f"
    return rng(v, f)


def meets(r, bound):
    """A median ratio meets a bound when it does at the precision shown (2 decimals)."""
    return round(med(r), 2) >= bound


def target_line(cases, what, a, b, bound):
    """The target median(a/b) >= bound: verdict per case and overall."""
    parts, missed = [], []
    for c in cases:
        r = c.ratios(a, b)
        if not meets(r, bound):
            missed.append(c)
        parts.append("%s %s%s" % (c.name, rrng(r), "" if meets(r, bound) else " (missed by "
                                  "%.1f%%)" % (100 * (1 - med(r) / bound))))
    verdict = "met" if not missed else "not met in %s" % ", ".join(c.name for c in missed)
    return "%s: **%s**. Median %s/%s [min-max] per case: %s." % (what, verdict, a, b,
                                                                 "; ".join(parts))


def peer_table(case):
    out = ["| path | Mbit/s, median [min-max] | / direct | slot / this |",
           "|---|---|---|---|"]
    for p in case.peers:
        if not case.res[p]:
            continue
        out.append("| %s | %s | %s | %s |" % (
            LABEL[p], mbit(case.res[p]),
            "1" if p == "direct" else rrng(case.ratios(p, "direct")),
            "1" if p == "slot" else rrng(case.ratios("slot", p))))
    for k, v in case.sub.items():
        out.append("| &nbsp;&nbsp;%s alone | %s | %s | |" % (
            k, mbit(v), rrng([x / y for x, y in zip(v, case.res["direct"])])))
    if case.lossy:
        t = case.tandem
        out.append("| tandem bound (see below) | %s | %s | %s |" % (
            mbit(t), rrng([x / y for x, y in zip(t, case.res["direct"])]),
            rrng([x / y for x, y in zip(case.res["slot"], t)])))
    return out


def setup_text(case):
    s = ("client-server %g ms, client-relay1 and relay1-server %g ms each (a decoy relay2 "
         "at %g + %g ms), 100 Mbit/s access links both ways, cubic, "
         "net.ipv4.tcp_rmem max 262144 on every host, " % (
             case.direct_rtt, case.sub_rtt, case.direct_rtt * .75, case.direct_rtt * .75))
    if case.lossy:
        s += "loss each way %s (one segment per packet: gso off), " % case.loss_text()
    else:
        s += "no loss, "
    return s


def joined(vals):
    """'a and b', 'a, b and c'."""
    return vals[0] if len(vals) == 1 else ", ".join(vals[:-1]) + " and " + vals[-1]


def what_text(cs):
    """Scenario 2, the cases with both sub-hops lossy alike: the gain over
    direct (Mathis), against the ideal, HAProxy and the tandem bound."""
    if not cs:
        return ""
    both = lambda f: joined(["%.2f" % f(c) for c in cs])     # noqa: E731
    s_t = [med([x / t for x, t in zip(c.res["slot"], c.tandem)]) for c in cs]
    if [c.name for c in cs] == ["loss1", "paper"]:
        measured = ("slot %.2fx direct with 1%% everywhere, %.2fx in the paper's case (the "
                    "Slot paper measured 2.38x)" % tuple(med(c.ratios("slot", "direct"))
                                                        for c in cs))
    else:
        measured = "slot %s direct (%s)" % (both(lambda c: med(c.ratios("slot", "direct"))),
                                            joined([c.name for c in cs]))
    text = (
        "What it means: under loss a TCP connection's rate goes as 1/(RTT sqrt(p)) "
        "(Mathis), so halving the round trip at equal loss gives at most 2x, and "
        "halving the loss as well sqrt(2) more (2.83x). Measured: %s. "
        "Against the ideal, slot reaches %s (target 0.95) and HAProxy on the same node "
        "%s (slot/HAProxy %s). The tandem bound is %s of the ideal, and slot reaches %s "
        "of that bound"
        % (measured,
           both(lambda c: med(c.ratios("slot", "ideal"))),
           both(lambda c: med(c.ratios("haproxy", "ideal"))),
           both(lambda c: med(c.ratios("slot", "haproxy"))),
           both(lambda c: med([t / i for t, i in zip(c.tandem, c.res["ideal"])])),
           joined(["%.2f" % x for x in s_t])))
    if all(med(c.ratios("slot", "ideal")) >= 1.0 for c in cs) and \
            all(c.res["slot-cubic"] for c in cs) and RELAY_CC["cc"] != "cubic":
        text += (": above both, because the bound and the ideal are those of cubic legs "
                 "while the relay sends on its leg with %s, which does not stall after "
                 "each loss (see the relay's congestion control below).\n" % cc_word())
    elif all(x >= 0.95 for x in s_t):
        text += (": slot forwards about what any relay could from these two legs, and "
                 "the distance to the ideal is that of relaying two fluctuating lossy "
                 "legs, not of slot's relay.\n")
    else:
        text += (". Below the bound, the relay's buffers are finite (the receive buffer "
                 "is capped at 256 KiB on the relay too), so a long stall of the "
                 "downstream leg also throttles the upstream one, and a leg kept idle "
                 "does not grow its window meanwhile; the tandem bound has neither "
                 "effect. HAProxy is subject to the same.\n")
    return text


def relayleg_text(cs):
    """Scenario 2, the cases where only the relay's sending leg loses."""
    cc = cc_word()
    out = []
    for c in cs:
        check = ("the lossless leg's streams filling the link slowed the lossy leg by "
                 "15-28% (3.44, 3.31 and 3.96 Mbit/s per stream alone against 2.48, 2.80 "
                 "and 2.94 beside it, 3 pairs of runs on a relayleg bed)")
        how = ("measured one after the other, each alone: at once, " + check
               if c.seq_ideal else
               "measured at once, as in the other cases, where " + check + ": this ideal "
               "is understated, and the ratios to it overstated, by about as much; the "
               "benchmark now measures such legs one after the other")
        t = ("**%s** (%s): %s. The ideal is then the lossy client-relay leg alone, with "
             "cubic, %s Mbit/s (relay-server alone %s: its %d streams share the 100 Mbit/s "
             "link; the two legs %s), and the tandem bound is %.2f of it (the lossless "
             "upstream leg keeps a relay fed). slot moves %.2fx direct, %.2fx the ideal, %.2fx the tandem bound and "
             "%.2fx HAProxy on the same node"
             % (c.title.replace("\n", " "), c.name, c.loss_text(), "%.2f" % med(c.res["ideal"]),
                "%.1f" % med(c.sub["relay-server"]), c.streams, how,
                med([t / i for t, i in zip(c.tandem, c.res["ideal"])]),
                med(c.ratios("slot", "direct")), med(c.ratios("slot", "ideal")),
                med([x / t for x, t in zip(c.res["slot"], c.tandem)]),
                med(c.ratios("slot", "haproxy"))))
        if c.res["slot-cubic"] and c.res["haproxy-bbr"]:
            t += ("; with the relay's legs cubic, slot gets %.2f of the ideal (%.2fx HAProxy), "
                  "and HAProxy with bbr as its host's default %.2f of it"
                  % (med(c.ratios("slot-cubic", "ideal")), med(c.ratios("slot-cubic", "haproxy")),
                     med(c.ratios("haproxy-bbr", "ideal"))))
            if cc != "cubic":
                t += (". In a download the relay is the sender on the lossy leg, so the "
                      "algorithm that sets this transfer's rate is the relay's: with cubic (the "
                      "ideal, HAProxy, slot with cubic legs) the leg runs at what cubic gets "
                      "at 1%% loss and 40 ms, with %s, which does not cut its rate at each "
                      "loss, at %.1fx that" % (cc, med(c.ratios("slot", "slot-cubic"))))
        out.append(t + ".\n")
    return "\n".join(out)


def cc_text(cs):
    """Scenario 2: the relay's congestion control (issue 17)."""
    cc = cc_word()
    rows = (("slot / HAProxy (cubic, the host's default)", "slot", "haproxy", ">= 1.3"),
            ("slot / ideal (the slower cubic sub-hop alone)", "slot", "ideal", ">= 1.0"),
            ("slot / HAProxy with bbr as the host's default (fairness)", "slot",
             "haproxy-bbr", ""),
            ("slot / slot with the relay's legs cubic", "slot", "slot-cubic", ""),
            ("slot / slot with the relay's legs bbr from the start", "slot", "slot-bbr", ""),
            ("slot with the relay's legs cubic / HAProxy (cubic)", "slot-cubic", "haproxy", ""))
    if RELAY_CC["cc"] == "auto":
        ran = ("its defaults, `congestion = system` (the host's cubic) and "
               "`congestion_on_loss = bbr`: a leg it sends on starts with cubic and takes "
               "bbr at its first retransmission")
        if all(c.switches for c in cs):
            ran += (" (legs switched per run of %d streams, median [min-max]: %s)"
                    % (cs[0].streams, "; ".join("%s %s" % (c.name, rng(c.switches, "%g"))
                                                for c in cs)))
    else:
        ran = "`congestion = %s` throughout" % RELAY_CC["cc"]
    out = ["**The relay's congestion control** (`[pipe] congestion` and "
           "`congestion_on_loss`, issue 17). slot above ran slot-relayd with %s; *slot, relay "
           "legs cubic* ran it with cubic throughout and *slot, relay legs bbr from the "
           "start* with bbr throughout (relay1 reloaded before those runs and back after; "
           "`congestion_on_loss = off`); HAProxy uses the "
           "host's default, cubic, and *HAProxy on relay1, its default bbr* ran with relay1's "
           "net.ipv4.tcp_congestion_control set to bbr for its runs. The ideal's two sub-hops "
           "are cubic. Medians of the per-repetition ratios [min-max]:\n" % ran,
           "| ratio | %s | target |" % " | ".join(c.name for c in cs),
           "|---|%s---|" % ("---|" * len(cs))]
    for label, a, b, target in rows:
        if not all(c.res[b] for c in cs):
            continue        # a raw file from before slot-bbr
        out.append("| %s | %s | %s |" % (label, " | ".join(rrng(c.ratios(a, b)) for c in cs),
                                         target))
    out.append("")
    sym = [c for c in cs if not c.legs_differ]
    one = [c for c in cs if c.legs_differ]
    text = ("Which leg the relay's choice reaches: the download's bytes go server -> relay1 -> "
            "client, and the relay is the sender only on the client leg (relay1 -> client); "
            "the server leg's sender is the server, with its own cubic, whatever the relay "
            "chooses (an upload is the mirror image: the relay sends on the server leg, the "
            "client's cubic on the other). So the relay's choice can make its own leg keep "
            "up, never the server's.")
    if sym:
        text += (" Where both legs lose (%s), a relayed transfer stays bounded by the "
                 "server's cubic leg, which is what the ideal (the slower cubic sub-hop alone) "
                 "measures; with these symmetric legs an upload has the same bound."
                 % joined([c.name for c in sym]))
    if one:
        text += (" Where only the relay's leg loses (%s), that leg is the slower one and the "
                 "ideal is that leg with cubic: the relay's %s replaces the very algorithm "
                 "that bounds the ideal, and the server's lossless leg keeps the relay fed "
                 "(an upload over the same lossy access would put the client's cubic on the "
                 "lossy leg, out of the relay's reach)." % (joined([c.name for c in one]), cc))
    out.append(text + " Per case:\n")
    for c in cs:
        r13, r10 = c.ratios("slot", "haproxy"), c.ratios("slot", "ideal")
        if c.legs_differ:
            why = ("the lossy leg is the relay's own, and %s on it moves %.2fx what cubic "
                   "does (slot / slot with cubic legs); HAProxy, cubic, gets %.2f of the "
                   "ideal" % (cc, med(c.ratios("slot", "slot-cubic")),
                              med(c.ratios("haproxy", "ideal"))))
        else:
            rs_ha = med([x / h for x, h in zip(c.sub["relay-server"], c.res["haproxy"])])
            why = ("the server's cubic leg, lossy too, bounds every relay: alone it moved "
                   "%.2fx HAProxy's rate (relay-server alone / HAProxy, medians of the "
                   "repetitions; the ideal %.2fx)%s; %s on the relay's leg takes slot %.2fx "
                   "past slot with cubic legs, to %.2f of the ideal"
                   % (rs_ha, med([i / h for i, h in zip(c.res["ideal"], c.res["haproxy"])]),
                      ", so 1.3x is out of any relay's reach here" if rs_ha < 1.3 else "", cc,
                      med(c.ratios("slot", "slot-cubic")), med(r10)))
        out.append("- **%s** (%s): slot >= 1.3x HAProxy (cubic) **%s** (%.2f); slot >= 1.0x "
                   "the ideal of cubic legs **%s** (%.2f). Why: %s."
                   % (c.name, c.loss_text(), "met" if meets(r13, 1.3) else "not met", med(r13),
                      "met" if meets(r10, 1.0) else "not met", med(r10), why))
    out.append("")
    if sym and one:
        out.append("Issue 17's targets were posed for scenario 2 as it stood (%s); %s was "
                   "added to show where the relay's per-leg congestion control pays, and its "
                   "figures leave those cases' verdicts as they are.\n"
                   % (joined([c.name for c in sym]), joined([c.name for c in one])))
    return out


# ---------------------------------------------------------------- plots

def plt_mod():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def bar_plot(cases, path, title, ylabel="throughput, Mbit/s (iperf3 goodput)"):
    """Bars of every path per case (median, min-max whiskers, value on top); with
    loss, the tandem bound too (hatched)."""
    plt = plt_mod()
    peers = PEERS + tuple(p for p in LOSS_PEERS if all(c.res[p] for c in cases))
    series = [(p, LABEL[p], COLOR[p], None, [c.res[p] for c in cases]) for p in peers]
    if all(c.lossy for c in cases):
        series.append(("tandem", "tandem bound (relay, unlimited buffer)", "#ffffff", "//",
                       [c.tandem for c in cases]))
    n = len(series)
    w = 0.8 / n
    fig, ax = plt.subplots(figsize=(3.2 + 0.65 * n * len(cases), 4.8))
    top = 0
    for i, (key, label, color, hatch, vals) in enumerate(series):
        xs = [k + (i - (n - 1) / 2) * w for k in range(len(cases))]
        m = [med(v) for v in vals]
        lo = [med(v) - min(v) for v in vals]
        hi = [max(v) - med(v) for v in vals]
        top = max(top, max(max(v) for v in vals))
        ax.bar(xs, m, w, yerr=[lo, hi], capsize=3, color=color, hatch=hatch, label=label,
               edgecolor="#444444" if hatch else None)
        for x, v, vs in zip(xs, m, vals):
            ax.annotate("%.1f" % v if v >= 10 else "%.2f" % v, (x, max(vs)), ha="center",
                        va="bottom", fontsize=8, xytext=(0, 3), textcoords="offset points")
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([c.title for c in cases])
    ax.set_xlabel("bars: median of %d repetitions; whiskers: min-max" % len(vals[0]),
                  fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_ylim(0, top * 1.3)
    ax.legend(loc="upper left", fontsize=8, ncol=2 if n > 4 else 1)
    ax.grid(axis="y", alpha=.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def sweep_plot(cases, path):
    plt = plt_mod()
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(7.5, 7.5), sharex=True,
                                  gridspec_kw={"height_ratios": [3, 2]})
    xs = [c.direct_rtt for c in cases]
    style = {"direct": dict(marker="o", lw=2), "slot": dict(marker="o", lw=3.5, alpha=.8),
             "ideal": dict(marker="s", lw=1.5, ls="--"), "haproxy": dict(marker="^", lw=1.5,
                                                                       ls=":")}
    ax.axhline(RATE, color="#d62728", lw=1, ls="-.", label="access link rate, 100 Mbit/s")
    for p in PEERS:
        m = [med(c.res[p]) for c in cases]
        ax.plot(xs, m, color=COLOR[p], label=LABEL[p], **style[p])
        ax.fill_between(xs, [min(c.res[p]) for c in cases], [max(c.res[p]) for c in cases],
                        color=COLOR[p], alpha=.15)
    ax.set_ylabel("throughput, Mbit/s (iperf3 goodput)")
    ax.set_title("Throughput against RTT, relay at the midpoint\n"
                 "(100 Mbit/s links, cubic, receive buffer 256 KiB, no loss)")
    ax.set_ylim(0, RATE * 1.1)
    ax.legend(fontsize=8)
    ax.grid(alpha=.3)
    for p in ("slot", "ideal", "haproxy"):
        r = [c.ratios(p, "direct") for c in cases]
        ax2.errorbar(xs, [med(v) for v in r],
                     yerr=[[med(v) - min(v) for v in r], [max(v) - med(v) for v in r]],
                     capsize=3, color=COLOR[p], label=LABEL[p] + " / direct", **style[p])
    ax2.axhline(1, color="#7f7f7f", lw=1)
    ax2.set_xlabel("direct RTT client-server, ms (each sub-hop: half of it)\n"
                   "median of %d repetitions; bands and whiskers: min-max"
                   % len(cases[0].res["slot"]))
    ax2.set_ylabel("gain over direct (x)")
    ax2.set_ylim(bottom=0)
    ax2.legend(fontsize=8)
    ax2.grid(alpha=.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- report

def cmd_line(args, only):
    a = "/usr/bin/python3 scripts/bench/e2e_throughput.py --only %s --reps %d" % (only, args.reps)
    if args.quick:
        a += " --quick"
    if getattr(args, "family", 4) == 6:
        a += " --family 6"
    return "`%s` (root, after `make all`), or `make bench`" % a


def report(args, by_sc, imgdir, img_rel, elapsed, busy_frac, separate=()):
    """separate: runs merged in from other --raw files ({cases, reps,
    elapsed, busy}); elapsed and busy_frac are the full run's."""
    seq = [c.name for s in sorted(by_sc) for c in by_sc[s] if c.seq_ideal]
    seq_note = ("; in %s one after the other, see scenario 2" % joined(seq)) if seq else ""
    out = []
    v6 = getattr(args, "family", 4) == 6
    if v6:
        # its own section and pictures (scripts/bench/e2e_throughput_ipv6.sh)
        out.append("## End-to-end throughput over IPv6 (issue 15): every host IPv6-only\n")
        out.append("The same measurements on a bed whose hosts have IPv6 addresses alone: "
                   "slotd's ip6tables rules queue the SYNs, its direct probe and the relays' "
                   "measurements are bare IPv6 SYNs, the relays listen and connect on IPv6. "
                   "Compare with the IPv4 figures above.\n")
    else:
        out.append("## End-to-end throughput: direct, slot, ideal and HAProxy (issue 7, "
                   "scenarios 1-3)\n")
    out.append(
        "One bulk TCP download (iperf3 -R: data server -> client, %s, receiver goodput; "
        "%d interleaved repetitions per case, rotating the order; figures are median [min-max] "
        "and ratios are taken within each repetition) on the emulated WAN "
        "(tests/integration/slotbed.py). Paths: **direct** (a port slotd does not hijack); "
        "**slot** (slotd in the client hijacks the port and picks the relay; every run checks "
        "that slotd chose relay1 and not the decoy relay2 or the direct path); **ideal**, the "
        "slower of the two sub-hops client-relay1 and relay1-server, each measured alone by "
        "iperf3 between the two hosts (both at once: in the data direction they share no "
        "link%s), the bound a relay is measured against; **HAProxy** 2.6 (mode tcp, splice "
        "both ways, nbthread 1) statically configured on relay1, the same node, as a sysadmin "
        "would. The cases' test beds run concurrently, each case measuring its paths in turn. "
        "Each case also downloads a %d MiB file of random bytes through slot with curl, before "
        "and after its repetitions, and checks its sha256 and that nginx saw relay1 as the "
        "peer. Full run: %.0f s.%s\n"
        % ("%g s per run (%g s and %d parallel streams with loss, see scenario 2)"
           % (args.seconds, args.loss_seconds, args.loss_streams),
           args.reps, seq_note, CHECK_FILE_SIZE >> 20, elapsed,
           "".join(" The %s case%s measured later in a run of %s own (`--cases %s`, the "
                   "same build and settings, %d repetitions, %.0f s, the machine %.0f%% busy) "
                   "and merged with the full run's raw data." % (
                       joined(r["cases"]), " was" if len(r["cases"]) == 1 else "s were",
                       "its" if len(r["cases"]) == 1 else "their", ",".join(r["cases"]),
                       r["reps"], r["elapsed"], 100 * r["busy"]) for r in separate)))

    allc = [c for s in sorted(by_sc) for c in by_sc[s]]
    misses = [(c, d) for c in allc for d in c.selection_misses]
    if not misses:
        out.append("slotd's first selection (probing relay1, the decoy relay2 and the direct "
                   "path) took relay1 in every case.\n")
    else:
        out.append(
            "slotd's first selection (probing relay1, the decoy relay2 and the direct path) "
            "took relay1 in %d of %d attempts; the others (%s) were retried with a fresh "
            "slotd, since its cache would have kept the choice for cache_ttl. This "
            "benchmark measures the relayed path; selection itself is judged elsewhere.\n"
            % (len(allc), len(allc) + len(misses),
               "; ".join("%s: %s%s, %s" % (c.name, d.get("verdict"),
                                           " via " + d["relay"] if d.get("relay") else "",
                                           d.get("why", "?")) for c, d in misses)))

    if 1 in by_sc:
        c = by_sc[1][0]
        png = "bench_throughput_window%s.png" % ("_ipv6" if v6 else "")
        _, note1 = _needs.draw("e2e_throughput", "scenario 1", bar_plot, [c],
                               os.path.join(imgdir, png), "Window-limited triangle: 80 ms = "
                               "40 + 40 ms,\n100 Mbit/s, cubic, 256 KiB receive buffers")
        out.append("### Scenario 1%s: window-limited triangle\n" % (" over IPv6" if v6 else ""))
        out.append("Setup: " + setup_text(c) + "%g s per run. With the receive window capped, "
                   "a connection moves at most one window per round trip, so halving the round "
                   "trip should about double the throughput.\n" % c.seconds)
        out += peer_table(c)
        out.append("")
        out.append(note1 or "![%s](%s/%s)\n" % ("scenario 1", img_rel, png))
        out.append("Reproduce: %s.\n" % cmd_line(args, "1"))
        sd, si, sh_ = (med(c.ratios("slot", x)) for x in ("direct", "ideal", "haproxy"))
        out.append(
            "What it means: slot moves %.2fx the direct download (the expectation is about 2x: "
            "each sub-hop has half the round trip and the same window), %.2fx the slower "
            "sub-hop alone (ideal) and %.2fx HAProxy on the same relay. A relay that "
            "terminates TCP gives the gain by itself (HAProxy gets %.2fx direct too); slot "
            "gets it without configuring anything per server, choosing the relay on its own.\n"
            % (sd, si, sh_, med(c.ratios("haproxy", "direct"))))

    if 2 in by_sc:
        cs = by_sc[2]
        png = "bench_throughput_loss%s.png" % ("_ipv6" if v6 else "")
        _, note2 = _needs.draw("e2e_throughput", "scenario 2", bar_plot, cs,
                               os.path.join(imgdir, png), "Lossy triangle: 80 ms = 40 + 40 ms, "
                               "100 Mbit/s, cubic (%d streams per run)" % cs[0].streams,
                               ylabel="throughput per stream, Mbit/s (iperf3 goodput)")
        out.append("### Scenario 2: lossy triangle\n")
        out.append("Setup: as scenario 1 (80 ms = 40 + 40 ms, 100 Mbit/s, cubic, 256 KiB "
                   "receive buffers), with random loss per packet, each way, one TCP segment "
                   "per packet (gso off on every host, so a loss hits one segment; "
                   "docs/testbed.md), %g s per run:\n" % cs[0].seconds)
        for c in cs:
            out.append("- **%s**: %s." % (c.title.replace("\n", " "), c.loss_text()))
        out.append("")
        for c in cs:
            out.append("**%s**\n" % c.title.replace("\n", " "))
            out += peer_table(c)
            out.append("")
        out.append(note2 or "![%s](%s/%s)\n" % ("scenario 2", img_rel, png))
        out.append("Reproduce: %s.\n" % cmd_line(args, "2"))
        # sym: both sub-hops lossy alike (loss1, paper); one: the legs differ
        # (relayleg: only the leg the relay sends on is lossy)
        sym = [c for c in cs if not c.legs_differ]
        one = [c for c in cs if c.legs_differ]
        a = sym[0] if sym else cs[0]
        segs = med(a.res["slot"]) * 1e6 * a.seconds / 8 / 1448
        shared = ""
        if one:
            shared = ("; in %s they do share links: the lossless relay-server leg alone "
                      "fills the 100 Mbit/s access link (%s Mbit/s per stream), and slot's "
                      "streams together move %s Mbit/s on the client's access link" % (
                          ", ".join(c.name for c in one),
                          ", ".join("%.1f" % med(c.sub["relay-server"]) for c in one),
                          ", ".join("%.0f" % (med(c.res["slot"]) * c.streams) for c in one)))
        out.append(
            "Each run is %d parallel streams with independent losses, and the table gives "
            "the mean per stream: one stream through slot sends about %s segments in %g s, "
            "so only about %d are lost per leg, too few for a steady figure; the parallel "
            "streams share no bottleneck (together they move under %d Mbit/s on 100 Mbit/s "
            "links)%s. The **tandem bound** is computed from the ideal runs: from each "
            "leg's bytes per 0.1 s (iperf3 -i 0.1), the most a relay with an unlimited "
            "buffer could have forwarded when joining one stream of the upstream leg to one "
            "of the downstream leg: min over t of (upstream bytes by t + downstream bytes "
            "after t), a tandem of two queues. It is below the ideal whenever the legs "
            "fluctuate: a relay can only forward what it has received, so a stall of the "
            "upstream leg (a loss costs a round trip, a timeout 200 ms or more) idles the "
            "downstream leg unless a backlog waits in the relay, and the ideal, the slower "
            "leg's average, assumes no such coupling.\n"
            % (cs[0].streams, "{:,}".format(int(round(segs, -2))), a.seconds,
               round(segs * max(a.cr_loss, a.rs_loss)),
               5 * round(max(max(c.res[p]) for c in (sym or cs) for p in PEERS)
                         * cs[0].streams / 5 + 1), shared))
        out.append(what_text(sym))
        if one:
            out.append(relayleg_text(one))
        if all(c.res["slot-cubic"] and c.res["haproxy-bbr"] for c in cs):
            out += cc_text(cs)


    if 3 in by_sc:
        cs = by_sc[3]
        png = "bench_throughput_rtt%s.png" % ("_ipv6" if v6 else "")
        _, note3 = _needs.draw("e2e_throughput", "scenario 3", sweep_plot, cs,
                               os.path.join(imgdir, png))
        out.append("### Scenario 3: RTT sweep (the paper's Figure 2)\n")
        out.append("Setup: direct RTT %s ms, relay1 at the midpoint (each sub-hop half the "
                   "RTT; the decoy relay2 at 3/4 of it each way), 100 Mbit/s access links, "
                   "cubic, net.ipv4.tcp_rmem max 262144 on every host, no loss, %g s per run.\n"
                   % (", ".join("%g" % c.direct_rtt for c in cs), cs[0].seconds))
        out.append("| direct RTT | direct | slot | ideal | HAProxy | slot / direct | "
                   "slot / ideal | slot / HAProxy |")
        out.append("|---|---|---|---|---|---|---|---|")
        for c in cs:
            out.append("| %g ms | %s | %s | %s | %s | %s | %s | %s |" % (
                c.direct_rtt, mbit(c.res["direct"]), mbit(c.res["slot"]), mbit(c.res["ideal"]),
                mbit(c.res["haproxy"]), rrng(c.ratios("slot", "direct")),
                rrng(c.ratios("slot", "ideal")), rrng(c.ratios("slot", "haproxy"))))
        out.append("\nMbit/s, median [min-max].\n")
        out.append(note3 or "![%s](%s/%s)\n" % ("scenario 3", img_rel, png))
        out.append("Reproduce: %s.\n" % cmd_line(args, "3"))
        lo, hi = cs[0], cs[-1]
        win = [med(c.res["direct"]) * 1e6 * c.direct_rtt / 1e3 / 8 / 1e3 for c in cs]
        text = ("What it means: the direct download falls as 1/RTT (%.0f-%.0f KB per round "
                "trip, the window a 256 KiB receive buffer allows once the kernel has kept "
                "its share for overhead: %.1f Mbit/s at %g ms, %.2f at %g ms); slot follows "
                "the RTT of its sub-hops, half of it, and moves %s the direct download over "
                "the sweep; the median of slot/HAProxy is %s and that of slot/ideal %s at "
                "every RTT." % (
                    min(win), max(win),
                    med(lo.res["direct"]), lo.direct_rtt, med(hi.res["direct"]), hi.direct_rtt,
                    span([med(c.ratios("slot", "direct")) for c in cs], "x"),
                    span([med(c.ratios("slot", "haproxy")) for c in cs]),
                    span([med(c.ratios("slot", "ideal")) for c in cs])))
        capped = [c for c in cs if med(c.res["ideal"]) > 0.85 * RATE]
        if capped:
            text += (" At %s ms the sub-hops alone reach the access link's rate (about 94 "
                     "Mbit/s of goodput on 100 Mbit/s), not their window, so the gain is "
                     "capped there (%s)." % (
                         ", ".join("%g" % c.direct_rtt for c in capped),
                         ", ".join("%.2fx" % med(c.ratios("slot", "direct")) for c in capped)))
        text += (" The gain grows a little with the RTT, beyond 2x at %g ms: a %g s run "
                 "includes slow start, which takes a few round trips, and those are half as "
                 "long on the sub-hops.\n" % (hi.direct_rtt, hi.seconds)
                 if med(hi.ratios("slot", "direct")) > 2.0 else "\n")
        out.append(text)

    out.append("### Targets\n")
    out.append("A target is met when the median of the per-repetition ratios, to the two "
               "decimals shown, is at least the bound.\n")
    t12 = [c for s in (1, 2) for c in by_sc.get(s, [])]
    if t12:
        out.append("- " + target_line(t12, "slot >= 0.95x ideal in scenarios 1 and 2",
                                      "slot", "ideal", 0.95))
    out.append("- " + target_line(allc, "slot >= HAProxy's relay in every scenario",
                                  "slot", "haproxy", 1.0))
    cc = [c for c in by_sc.get(2, []) if c.res["slot-cubic"] and c.res["haproxy-bbr"]]
    if cc:
        out.append("- " + target_line(cc, "issue 17, the relay's legs %s: slot >= 1.3x HAProxy "
                                      "with the host's cubic under loss" % cc_word(),
                                      "slot", "haproxy", 1.3))
        out.append("- " + target_line(cc, "issue 17: slot >= 1.0x the ideal of cubic legs "
                                      "under loss", "slot", "ideal", 1.0))
        out.append("- issue 17, fairness: slot / HAProxy with bbr as its host's default, "
                   "median [min-max]: %s." % "; ".join(
                       "%s %s" % (c.name, rrng(c.ratios("slot", "haproxy-bbr"))) for c in cc))
    out.append("")
    lossy_miss = [c for c in t12 if c.lossy and not meets(c.ratios("slot", "ideal"), 0.95)]
    if lossy_miss:
        ha = [med(c.ratios("haproxy", "ideal")) for c in lossy_miss]
        out.append(
            "Under loss (%s) slot misses 0.95x the ideal; HAProxy on the same node gets %s "
            "of it, and the tandem bound, what a relay with an unlimited buffer could "
            "forward from the same legs, is %s of it (scenario 2): the ideal, the slower "
            "leg's average, is more than a relay joining two lossy legs forwards in a "
            "%g s transfer."
            % (", ".join(c.name for c in lossy_miss), ", ".join("%.2f" % x for x in ha),
               ", ".join("%.2f" % med([t / i for t, i in zip(c.tandem, c.res["ideal"])])
                         for c in lossy_miss), lossy_miss[0].seconds))
    ha_miss = [c for c in allc if not meets(c.ratios("slot", "haproxy"), 1.0)]
    if ha_miss:
        out.append(
            "slot-relayd and HAProxy forward alike (splice between two kernel TCP sockets on "
            "the same node, with the same kernel socket buffers), so slot/HAProxy is 1 up to "
            "the run-to-run noise; where its median is below 1 (%s) its repetitions range %s."
            % (", ".join(c.name for c in ha_miss),
               ", ".join("%.2f-%.2f" % (min(c.ratios("slot", "haproxy")),
                                        max(c.ratios("slot", "haproxy"))) for c in ha_miss)))
    if lossy_miss or ha_miss:
        out.append("")
    out.append("Machine: %d cores, busy %.0f%% on average during the %smeasurements (this "
               "benchmark's %d test beds and whatever else ran).\n"
               % (os.cpu_count(), 100 * busy_frac, "full run's " if separate else "",
                  sum(len(v) for v in by_sc.values()) - sum(len(r["cases"]) for r in separate)))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- main

def machine_cpu():
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return sum(v) - v[3] - v[4], sum(v)


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=None, help="repetitions (default 5; 2 --quick)")
    ap.add_argument("--seconds", type=float, default=None,
                    help="iperf3 duration without loss (default 10; 4 --quick)")
    ap.add_argument("--loss-seconds", type=float, default=None,
                    help="iperf3 duration with loss (default 15; 6 --quick)")
    ap.add_argument("--loss-streams", type=int, default=4,
                    help="parallel streams per run with loss, reported per stream (default 4)")
    ap.add_argument("--quick", action="store_true",
                    help="development: 2 repetitions, short runs, 3 RTTs in the sweep")
    ap.add_argument("--relay-cc", default="auto",
                    help="the relays' legs: auto (slot-relayd's defaults: the host's "
                         "algorithm, bbr from a leg's first loss) or one algorithm throughout")
    ap.add_argument("--only", default="1,2,3", help="scenarios, e.g. 1,3")
    ap.add_argument("--cases", default=None,
                    help="only these cases of those scenarios, by name, e.g. relayleg")
    ap.add_argument("--family", type=int, choices=(4, 6), default=4,
                    help="6: every host IPv6-only (slotd's ip6tables rules, IPv6 relays)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench", "e2e_throughput.md"))
    ap.add_argument("--img", default=None, help="directory of the PNGs (default: docs/img "
                    "next to the output's parent)")
    ap.add_argument("--raw", default=None, metavar="FILE",
                    help="also save the measurements as JSON")
    ap.add_argument("--from-raw", default=None, metavar="FILE",
                    help="measure nothing: write the report from a --raw file")
    ap.add_argument("--check", action="store_true",
                    help="check what the run and its report need, then exit")
    args = ap.parse_args()
    RELAY_CC["cc"] = args.relay_cc
    if args.reps is None:
        args.reps = 2 if args.quick else 5
    if args.seconds is None:
        args.seconds = 4 if args.quick else 10
    if args.loss_seconds is None:
        args.loss_seconds = 6 if args.quick else 15
    only = sorted({int(x) for x in args.only.split(",") if x.strip()})
    FAMILY["family"] = "ipv6" if args.family == 6 else None
    if not only or any(s not in (1, 2, 3) for s in only):
        sys.exit("e2e_throughput: --only takes scenarios 1, 2, 3")
    if args.from_raw:
        with open(args.from_raw) as f:
            raw = json.load(f)
        for k in ("reps", "seconds", "loss_seconds", "loss_streams", "quick"):
            setattr(args, k, raw["args"][k])
        RELAY_CC["cc"] = raw["args"].get("relay_cc", "bbr")     # runs before auto: bbr
        cases = [Case.from_raw(d) for d in raw["cases"]]
        # "separate": cases measured in runs of their own and merged in
        # (their own elapsed and busy; the top-level ones are the full run's)
        return write_report(args, cases, raw["elapsed"], raw["busy"], raw.get("separate", ()))
    import slotbed
    _needs.check("e2e_throughput", args, modules=("matplotlib",),
                 tools=("iperf3", "haproxy", "nginx", "curl"),
                 files=(slotbed.SLOTD, slotbed.RELAYD))
    cases = []
    if 1 in only:
        cases.append(Case(1, "window", "80 = 40 + 40 ms", 80, 40, seconds=args.seconds))
    if 2 in only:
        cases.append(Case(2, "loss1", "1% loss\neverywhere", 80, 40, 0.01, 0.01,
                          seconds=args.loss_seconds, streams=args.loss_streams))
        cases.append(Case(2, "paper", "1% direct,\n0.5% sub-hops (paper)", 80, 40, 0.01, 0.005,
                          seconds=args.loss_seconds, streams=args.loss_streams))
        # loss only on the leg the relay sends on in a download (relay1 ->
        # client: the client's lossy access, which the direct path crosses
        # too), where the relay's congestion control governs the lossy leg
        cases.append(Case(2, "relayleg", "1% on the relay's\nsending leg only", 80, 40, 0.01,
                          seconds=args.loss_seconds, streams=args.loss_streams,
                          leg_loss=(0.01, 0.0)))
    if 3 in only:
        for rtt in (QUICK_SWEEP if args.quick else SWEEP):
            cases.append(Case(3, "rtt%d" % rtt, "%d ms" % rtt, rtt, rtt / 2,
                              seconds=args.seconds))
    if args.cases:
        want = [x.strip() for x in args.cases.split(",") if x.strip()]
        bad = [w for w in want if w not in [c.name for c in cases]]
        if bad:
            sys.exit("e2e_throughput: --cases: no case %s in scenarios %s (cases: %s)"
                     % (", ".join(bad), args.only, ", ".join(c.name for c in cases)))
        cases = [c for c in cases if c.name in want]

    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    busy = {1: 0.0}
    t0 = time.monotonic()
    try:
        for c in cases:
            log("%-7s setting up: direct %g ms, sub-hops %g ms, loss direct %g, "
                "client-relay %g, relay-server %g"
                % (c.name, c.direct_rtt, c.sub_rtt, c.direct_loss, c.cr_loss, c.rs_loss))
            c.up()
        threads = [threading.Thread(target=c.measure, args=(args.reps,), daemon=True)
                   for c in cases]
        b0 = machine_cpu()
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(1)
        b1 = machine_cpu()
        busy[1] = (b1[0] - b0[0]) / max(1, b1[1] - b0[1])
    finally:
        for c in cases:
            try:
                c.down()
            except Exception as e:      # noqa: BLE001
                log("%s: teardown: %s" % (c.name, e))
    elapsed = time.monotonic() - t0
    failed = [c for c in cases if c.error]
    if failed:
        for c in failed:
            print(c.error, file=sys.stderr)
        sys.exit("e2e_throughput: %d case(s) failed; %s not written" % (len(failed), args.out))

    if args.raw:
        with open(args.raw, "w") as f:
            keys = ("reps", "seconds", "loss_seconds", "loss_streams", "quick", "relay_cc")
            json.dump({"args": {k: getattr(args, k) for k in keys},
                       "elapsed": elapsed, "busy": busy[1],
                       "cases": [c.to_raw() for c in cases]}, f, indent=1)
    write_report(args, cases, elapsed, busy[1])
    log("done in %.0f s" % elapsed)


def write_report(args, cases, elapsed, busy, separate=()):
    out_path = os.path.abspath(args.out)
    imgdir = os.path.abspath(args.img) if args.img else \
        os.path.join(os.path.dirname(os.path.dirname(out_path)), "img")
    os.makedirs(imgdir, exist_ok=True)
    by_sc = {}
    for c in cases:
        by_sc.setdefault(c.scenario, []).append(c)
    img_rel = os.path.relpath(imgdir, os.path.dirname(os.path.dirname(out_path)))
    text = report(args, by_sc, imgdir, img_rel, elapsed, busy, separate)
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path + ".tmp", "w") as f:
        f.write(text)
    os.rename(out_path + ".tmp", out_path)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()

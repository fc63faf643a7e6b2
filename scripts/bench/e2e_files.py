#!/usr/bin/python3
"""Scenario 4 of issue 7 (re-measured for issue 13): download time per file size
through slot, with a cold and a warm selection cache (the Slot paper's Figure
12a), on slotd's defaults: a warm hit whose relay has reached the port goes to
the relay at once (cache_early on), relays picked by strategy cover, k 20,
the direct probe a bare SYN.

Test bed (tests/integration/slotbed.py on tests/testbed/topo.py):

    client --80 ms-- server                 (direct)
    client --40 ms-- relay1 --40 ms-- server

100 Mbit/s access links (tbf) on every host, no loss, cubic, receive buffers
capped at 256 KiB (net.ipv4.tcp_rmem max) on every host, so the direct path
is window-limited. nginx serves files of random bytes on the server (port 80,
the one slotd hijacks, and 8080, never hijacked); slot-relayd runs in relay1;
slotd in the client hijacks SYNs to port 80. Unmodified curl (the main table)
and wget (check rows) download the files. Methods, visited in a rotating
order in every repetition, for every size:

  direct      curl server:8080 (no slotd involvement)
  slot-cold   curl server:80 after slotd's selection cache was emptied (a
              SIGHUP with another cache_ttl replaces the cache) and with the
              relay's RTT cache off (rtt_cache_ttl = 0), so the connection
              pays the whole probing: slotd's direct probe and relay probe
              (the relay measures its own RTT to the server afresh), then
              PIPE_ESTABLISH (a cold decision waits for PIPE_OK whatever
              cache_early says: with synack_hold, the default, the SYN goes
              with PIPE_ESTABLISH and the relay's SYN-ACK waits); default
              config
  slot-cold-syn  the same with [select] synack_hold = no: the SYN itself
              waits for PIPE_OK
  slot-cold-hoff the same as slot-cold with relay1's [probe] handover = off:
              it measures with a bare SYN and its pipe connects afresh (the
              relay's default before); relay1 reloaded around it
  slot-cold-rwarm the same as slot-cold with relay1's RTT cache on
              (rtt_cache_ttl 5 min, relay1 reloaded around it, its entry for
              the server made by a priming download): the relay answers from
              its cache and begins a connect for the pipe (a cold slotd
              behind a warm relay, the usual case for a popular server)
  slot-cold-rwarm-nopre the same with relay1's [probe] preconnect = no: the
              cached answer begins no connect, the pipe connects afresh
  slot-warm   curl server:80 with slotd's cached decision from the connection
              before, default config (cache_early on: the relay has reached
              port 80 under the entry, so the SYN goes to the relay together
              with PIPE_ESTABLISH); every decision must say early
  slot-wait   the same with [select] cache_early = no: connect() waits for
              PIPE_OK (the paper's meaning, the old default); no decision may
              say early
  haproxy     curl relay1:8081, HAProxy mode tcp (splice) -> server:8080,
              what a sysadmin would configure by hand
  ideal       curl in relay1 from server:8080: the slower sub-hop (40 ms)
              alone, no relay in the way

Every body is checked by sha256 against the file nginx serves, and nginx's
access log must name the expected peer (the relay's address for slot and
HAProxy, the client's for direct). slotd's decision for each slot download
(verdict, cached, early, select_us, decide_us) is read from its `json`
command, and its counters (early_verdicts, early_unreached, early_failures,
cache_hits, cache_misses) around every slot download.

usage: e2e_files.py [--reps 5] [--quick] [--out docs/bench/e2e_files.md]
       [--build DIR]
"""

import argparse
import os
import signal
import statistics
import sys
import time

import _needs  # scripts/bench/_needs.py: checked before measuring; figures that may fail

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

KiB = 1 << 10
MiB = 1 << 20
SIZES = [("10K", 10 * KiB, "10 KiB"), ("100K", 100 * KiB, "100 KiB"),
         ("1M", MiB, "1 MiB"), ("10M", 10 * MiB, "10 MiB")]
RTT_DIRECT, RTT_CR, RTT_RS = 80, 40, 40
RATE = 100
RMEM = "4096 131072 262144"
HAPROXY_PORT = 8081
METHODS = ["direct", "slot-cold", "slot-cold-syn", "slot-cold-hoff", "slot-cold-rwarm",
           "slot-cold-rwarm-nopre", "slot-warm", "slot-wait", "haproxy", "ideal"]
SLOT_METHODS = ["slot-cold", "slot-cold-syn", "slot-cold-hoff", "slot-cold-rwarm",
                "slot-cold-rwarm-nopre", "slot-warm", "slot-wait"]
COLD_METHODS = ["slot-cold", "slot-cold-syn", "slot-cold-hoff", "slot-cold-rwarm",
                "slot-cold-rwarm-nopre"]
RWARM_METHODS = ["slot-cold-rwarm", "slot-cold-rwarm-nopre"]
LABEL = {"direct": "direct", "slot-cold": "slot, cold cache",
         "slot-cold-syn": "slot, cold, synack_hold = no",
         "slot-cold-hoff": "slot, cold, relay's handover = off",
         "slot-cold-rwarm": "slot, cold, relay's RTT cache warm",
         "slot-cold-rwarm-nopre": "slot, cold, relay's RTT cache warm, preconnect = no",
         "slot-warm": "slot, warm cache (default: early)",
         "slot-wait": "slot, warm, cache_early = no", "haproxy": "HAProxy (static relay)",
         "ideal": "ideal (40 ms sub-hop alone)"}
# slotd's counters read around every slot download (deltas per method)
COUNTERS = ["early_verdicts", "early_unreached", "early_failures", "cache_hits",
            "cache_misses", "pipes_ok", "direct_probes", "direct_probes_connect",
            "syn_retransmits", "synack_waits", "synack_holds", "synack_failures"]
# relay1's, the same way
RELAY_COUNTERS = ["measure_connect", "measure_syn", "handover_preconnects", "handovers",
                  "handovers_connecting", "handovers_unused"]
WGET_METHODS = ["direct", "slot-cold", "slot-warm"]


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)


def fmt(vals, f="%.3f"):
    if not vals:
        return "n/a"
    return (f + " [" + f + "-" + f + "]") % (statistics.median(vals), min(vals), max(vals))


def fmt_ms(vals):
    return fmt([v * 1000 for v in vals], "%.0f")


class Bench:
    def __init__(self, args):
        self.args = args
        self.sb = None
        self.slotd = None
        self.ttl_toggle = 0             # which of two cache_ttl values is in force
        self.early = True               # cache_early: the default (on) or "no"
        self.hold = True                # synack_hold: the default (on) or "no"
        self.handover = True            # relay1's [probe] handover: default or off
        self.rtt_cache = False          # relay1's RTT cache: off (ttl 0) or 5 min
        self.preconnect = True          # relay1's [probe] preconnect
        self.rctr = {}                  # method -> {relay counter: sum of deltas}
        self.cache_warm = False
        self.n = 0
        self.res = {}                   # (tool, method, size) -> [seconds]
        self.connect = {}               # (method, size) -> [curl time_connect]
        self.first = {}                 # (method, size) -> [curl time_starttransfer]
        self.decisions = {}             # method -> [decision dicts]
        self.dec_size = {}              # (method, size) -> [decision dicts]
        self.verdicts = {}              # method -> {verdict: n}
        self.ctr = {}                   # method -> {counter: sum of deltas}
        self.odd = []                   # decisions that are not what the method means

    # ---- set-up ----

    def up(self):
        def spec_edit(spec):
            spec["host_defaults"]["rate"] = RATE
        self.sb = slotbed.SlotBed(
            {"relay1": (RTT_CR, RTT_RS)}, direct_rtt=RTT_DIRECT,
            host_sysctls={"net.ipv4.tcp_congestion_control": "cubic",
                          "net.ipv4.tcp_rmem": RMEM},
            relay_conf={"relay": {"log_level": "info"},
                        # every probe measures afresh: the relay's cache is cold too
                        "probe": {"rtt_cache_ttl": "0"}},
            spec_edit=spec_edit)
        self.sb.up()
        sb = self.sb
        self.sizes = SIZES
        for name, size, _ in self.sizes:
            sb.nginx.add_file(name, size)
        sb.nginx.start()
        self.relay = sb.relay("relay1")
        sb.haproxy("relay1", {HAPROXY_PORT: (sb.ip("server"), 8080)})
        self.slotd = sb.slotd([self.relay], self.conf())
        self.slotd.start()
        self.conf_select = dict(self.slotd.conf["select"])
        # What the bed really is: RTTs and congestion control.
        self.rtt = {p: sb.bed.ping(a, b, count=3).min for p, (a, b) in
                    {"c-s": ("client", "server"), "c-r": ("client", "relay1"),
                     "r-s": ("relay1", "server")}.items()}
        self.cc = sb.bed.run("client", "sysctl", "-n",
                             "net.ipv4.tcp_congestion_control").stdout.strip()
        self.rmem = sb.bed.run("client", "sysctl", "-n", "net.ipv4.tcp_rmem").stdout.split()

    def conf(self):
        """slotd's configuration: the test bed's (strategy cover, k 20, as the
        product's default) with cache_early left out (its default, on) or
        "no" for slot-wait."""
        return {"slotd": {"log_level": "info"},
                "hijack": {"ports": "80"},
                "select": {"cache_ttl": "%ds" % (600 + self.ttl_toggle)}}

    def write_conf(self):
        sel = self.slotd.conf["select"]
        sel.pop("cache_early", None)
        sel.pop("synack_hold", None)
        over = self.conf()
        if not self.early:
            over["select"]["cache_early"] = "no"
        if not self.hold:
            over["select"]["synack_hold"] = "no"
        self.slotd.update(over)

    def set_slotd(self, early, flush, hold=True):
        """Puts cache_early and synack_hold in force (True: the defaults);
        flush empties slotd's selection cache (a reload with another
        cache_ttl replaces the cache)."""
        if early == self.early and hold == self.hold and not flush:
            return
        self.early = early
        self.hold = hold
        if flush:
            self.ttl_toggle ^= 1
            self.cache_warm = False
        self.write_conf()
        self.slotd.hup()

    # ---- one download ----

    def tag(self):
        self.n += 1
        return "id=b%d" % self.n

    def url(self, method, name, tag):
        sb = self.sb
        if method == "direct":
            return sb.nginx.url(name, port=8080, query=tag)
        if method == "haproxy":
            return "http://%s:%d/f/%s?%s" % (sb.ip("relay1"), HAPROXY_PORT, name, tag)
        if method == "ideal":
            return sb.nginx.url(name, port=8080, query=tag)
        return sb.nginx.url(name, port=80, query=tag)

    def expected_peer(self, method):
        return self.sb.ip("client") if method == "direct" else self.sb.ip("relay1")

    def check_body(self, name, out, what):
        size, sha = self.sb.nginx.files[name]
        got = slotbed.sha256_file(out) if os.path.exists(out) else None
        if got != sha or os.path.getsize(out) != size:
            raise RuntimeError("%s: body of %s differs (sha256 %s, want %s)"
                               % (what, name, got, sha))

    def check_peer(self, method, tag, what):
        peer = self.sb.nginx.peer_of(tag + " ")
        if peer != self.expected_peer(method):
            raise RuntimeError("%s: nginx saw %s, expected %s" % (what, peer,
                                                                  self.expected_peer(method)))

    def set_handover(self, on):
        if on != self.handover:
            self.relay.reload({"probe": {"handover": "150ms" if on else "off"}})
            self.handover = on

    def set_rtt_cache(self, on):
        """relay1's RTT cache on (5 min) or off (0); switched on, a priming
        download through slotd makes sure it holds the server."""
        if on == self.rtt_cache:
            return
        self.relay.reload({"probe": {"rtt_cache_ttl": "5m" if on else "0"}})
        self.rtt_cache = on
        if on:
            self.set_slotd(True, flush=True)
            self.prime()

    def set_preconnect(self, on):
        if on != self.preconnect:
            self.relay.reload({"probe": {"preconnect": "yes" if on else "no"}})
            self.preconnect = on

    def prepare(self, method):
        self.set_handover(method != "slot-cold-hoff")
        self.set_preconnect(method != "slot-cold-rwarm-nopre")
        self.set_rtt_cache(method in RWARM_METHODS)
        if method in COLD_METHODS:
            self.set_slotd(True, flush=True, hold=method != "slot-cold-syn")
        elif method in ("slot-warm", "slot-wait"):
            self.set_slotd(method == "slot-warm", flush=False)
            if not self.cache_warm:
                self.prime()

    def prime(self):
        """A connection to the server through slotd: its decision is cached."""
        tag = self.tag()
        out = os.path.join(self.sb.dir, "prime.out")
        r = self.sb.run_client("curl", "-sS", "--max-time", "60", "-o", out,
                               self.url("slot-cold", "10K", tag), check=False, timeout=70)
        if r.returncode != 0:
            raise RuntimeError("priming download failed: %s" % r.stderr)
        self.check_body("10K", out, "prime")
        self.cache_warm = True

    def curl(self, method, name, rep):
        self.prepare(method)
        sb = self.sb
        tag = self.tag()
        out = os.path.join(sb.dir, "dl.out")
        if os.path.exists(out):
            os.unlink(out)
        host = "relay1" if method == "ideal" else "client"
        c0 = self.slotd.counters() if method.startswith("slot") else None
        rc0 = self.relay.counters() if method.startswith("slot") else None
        r = sb.bed.run(host, "curl", "-sS", "--max-time", "120", "-o", out, "-w",
                       "%{http_code} %{local_port} %{time_connect} %{time_starttransfer} "
                       "%{time_total} %{size_download}", self.url(method, name, tag),
                       check=False, timeout=130)
        what = "rep %d curl %s %s" % (rep, method, name)
        if r.returncode != 0:
            raise RuntimeError("%s: curl exit %d: %s" % (what, r.returncode, r.stderr))
        code, port, t_conn, t_first, t_total, _ = r.stdout.split()
        if code != "200":
            raise RuntimeError("%s: HTTP %s" % (what, code))
        self.check_body(name, out, what)
        self.check_peer(method, tag, what)
        if method.startswith("slot"):
            self.cache_warm = True
            self.note_counters(method, c0, rc0)
            self.note_decision(method, name, "%s:%s" % (sb.ip("client"), port))
        t = float(t_total)
        self.res.setdefault(("curl", method, name), []).append(t)
        self.connect.setdefault((method, name), []).append(float(t_conn))
        self.first.setdefault((method, name), []).append(float(t_first))
        print("rep %d %-10s %-4s %8.1f ms (connect %.1f, first byte %.1f)"
              % (rep, method, name, t * 1000, float(t_conn) * 1000, float(t_first) * 1000),
              file=sys.stderr, flush=True)

    def wget(self, method, name, rep):
        self.prepare(method)
        sb = self.sb
        tag = self.tag()
        out = os.path.join(sb.dir, "wget.out")
        if os.path.exists(out):
            os.unlink(out)
        # Timed inside the namespace, around wget alone.
        script = ('s=$(date +%%s%%N); wget -q -t 1 -T 120 -O %s "$1"; rc=$?; '
                  'e=$(date +%%s%%N); echo $rc $s $e' % out)
        r = sb.bed.run("client", "sh", "-c", script, "sh", self.url(method, name, tag),
                       check=False, timeout=130)
        what = "rep %d wget %s %s" % (rep, method, name)
        parts = r.stdout.split()
        if r.returncode != 0 or len(parts) != 3 or parts[0] != "0":
            raise RuntimeError("%s: failed: %s %s" % (what, r.stdout, r.stderr))
        self.check_body(name, out, what)
        self.check_peer(method, tag, what)
        if method.startswith("slot"):
            self.cache_warm = True
        t = (int(parts[2]) - int(parts[1])) / 1e9
        self.res.setdefault(("wget", method, name), []).append(t)
        print("rep %d wget %-10s %-4s %8.1f ms" % (rep, method, name, t * 1000),
              file=sys.stderr, flush=True)

    def note_counters(self, method, c0, rc0):
        c1 = self.slotd.counters()
        acc = self.ctr.setdefault(method, {k: 0 for k in COUNTERS})
        for k in COUNTERS:
            acc[k] += c1.get(k, 0) - c0.get(k, 0)
        # a measurement's connection no pipe took is counted when its hold ends
        if self.handover:
            slotbed.wait_for(lambda: self.relay.counters()["handovers_held"] == 0, 5,
                             "relay1's held connections to go")
        rc1 = self.relay.counters()
        acc = self.rctr.setdefault(method, {k: 0 for k in RELAY_COUNTERS})
        for k in RELAY_COUNTERS:
            acc[k] += rc1.get(k, 0) - rc0.get(k, 0)

    def note_decision(self, method, name, client):
        d = self.slotd.decision(client=client)
        self.decisions.setdefault(method, []).append(d)
        self.dec_size.setdefault((method, name), []).append(d)
        v = self.verdicts.setdefault(method, {})
        key = "%s%s%s" % (d["verdict"], ", cached" if d["cached"] else "",
                          ", early" if d.get("early") else "")
        v[key] = v.get(key, 0) + 1
        want_cached = not method.startswith("slot-cold")
        want_early = method == "slot-warm"
        if d["verdict"] != "relay" or d["cached"] != want_cached or \
                bool(d.get("early")) != want_early:
            self.odd.append((method, name, d))
            print("note: %s decision %r" % (method, d), file=sys.stderr)

    # ---- the run ----

    def run(self):
        reps = self.args.reps
        names = [n for n, _, _ in self.sizes]
        r0 = self.relay.counters()
        self.run_reps(reps, names)
        r1 = self.relay.counters()
        # The relay's legs on its defaults: the host's algorithm, bbr only
        # from a leg's first retransmission ([pipe] congestion_on_loss).
        self.cc_seen = {k: r1[k] - r0[k] for k in ("congestion_checks", "congestion_switches",
                                                   "send_buffers_raised")}

    def run_reps(self, reps, names):
        for rep in range(1, reps + 1):
            for i, name in enumerate(names):
                k = (rep + i) % len(METHODS)
                for m in METHODS[k:] + METHODS[:k]:
                    self.curl(m, name, rep)
            for i, name in enumerate(names):
                k = (rep + i) % len(WGET_METHODS)
                for m in WGET_METHODS[k:] + WGET_METHODS[:k]:
                    self.wget(m, name, rep)

    # ---- report ----

    def ratios(self, tool, method, name, over="direct"):
        """Per repetition: time(over) / time(method), i.e. the speed-up."""
        a = self.res.get((tool, over, name), [])
        b = self.res.get((tool, method, name), [])
        return [x / y for x, y in zip(a, b)]

    def plot(self, img_dir):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        files = []
        xs = [s for _, s, _ in self.sizes]
        names = [n for n, _, _ in self.sizes]
        style = {"direct": ("k", "o", "-"), "slot-cold": ("tab:blue", "s", "--"),
                 "slot-cold-syn": ("tab:purple", "s", ":"),
                 "slot-cold-hoff": ("tab:brown", "P", ":"),
                 "slot-cold-rwarm": ("tab:red", "X", "--"),
                 "slot-cold-rwarm-nopre": ("tab:pink", "X", ":"),
                 "slot-warm": ("tab:blue", "D", "-"), "slot-wait": ("tab:cyan", "^", "-"),
                 "haproxy": ("tab:orange", "v", "-."), "ideal": ("tab:green", "x", ":")}
        fig, ax = plt.subplots(figsize=(7.5, 5.2))
        for m in METHODS:
            ys = [statistics.median(self.res[("curl", m, n)]) for n in names]
            lo = [y - min(self.res[("curl", m, n)]) for y, n in zip(ys, names)]
            hi = [max(self.res[("curl", m, n)]) - y for y, n in zip(ys, names)]
            c, mk, ls = style[m]
            ax.errorbar(xs, ys, yerr=[lo, hi], color=c, marker=mk, linestyle=ls, capsize=3,
                        label=LABEL[m])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels([l for _, _, l in self.sizes])
        ax.set_xlabel("file size")
        ax.set_ylabel("download time, curl time_total (s)")
        ax.set_title("Download time by file size (curl, nginx)\n"
                     "direct 80 ms; relay 40 + 40 ms; 100 Mbit/s; cubic; rmem max 256 KiB")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        p = os.path.join(img_dir, "bench_files_time.png")
        fig.savefig(p, dpi=110)
        plt.close(fig)
        files.append(p)

        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        for m in METHODS[1:]:
            ys = [statistics.median(self.ratios("curl", m, n)) for n in names]
            lo = [y - min(self.ratios("curl", m, n)) for y, n in zip(ys, names)]
            hi = [max(self.ratios("curl", m, n)) - y for y, n in zip(ys, names)]
            c, mk, ls = style[m]
            ax.errorbar(xs, ys, yerr=[lo, hi], color=c, marker=mk, linestyle=ls, capsize=3,
                        label=LABEL[m])
        ax.axhline(1.0, color="k", linewidth=1)
        ax.axhline(1.8, color="r", linewidth=0.8, linestyle=":",
                   label="1.8x: warm 1 MiB target (issue 13)")
        ax.axhline(1.5, color="m", linewidth=0.8, linestyle=":",
                   label="1.5x: cold 1 MiB target (issue 13)")
        ax.set_xscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels([l for _, _, l in self.sizes])
        ax.set_xlabel("file size")
        ax.set_ylabel("speed-up over direct (direct time / time)")
        ax.set_title("Speed-up over the direct path by file size (curl)\n"
                     "median of per-repetition ratios, bars min-max")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        p = os.path.join(img_dir, "bench_files_speedup.png")
        fig.savefig(p, dpi=110)
        plt.close(fig)
        files.append(p)
        return files

    def decision_stats(self, method, name=None):
        ds = self.decisions.get(method, []) if name is None else \
            self.dec_size.get((method, name), [])
        return ([d["select_us"] / 1000 for d in ds], [d["decide_us"] / 1000 for d in ds])

    def phases(self, method, name):
        """Per download, ms: (select, wait for the release after the choice
        (PIPE_ESTABLISH -> PIPE_OK when the SYN waits), SYN released ->
        connect() returns, connect -> first byte, first byte -> last byte,
        total). For the methods without slotd, select and wait are 0."""
        conn = self.connect[(method, name)]
        first = self.first[(method, name)]
        tot = self.res[("curl", method, name)]
        ds = self.dec_size.get((method, name))
        rows = []
        for i in range(len(tot)):
            sel = dec = 0.0
            if ds is not None:
                sel, dec = ds[i]["select_us"] / 1000, ds[i]["decide_us"] / 1000
            c, f, t = conn[i] * 1000, first[i] * 1000, tot[i] * 1000
            rows.append((sel, dec - sel, c - dec, f - c, t - f, t))
        return [[r[k] for r in rows] for k in range(6)]

    def target(self, what, vals, ok, bound_text):
        med = statistics.median(vals)
        return ("- %s: **%s** (median %.3f, min %.3f, max %.3f; %s)"
                % (what, "met" if ok(med) else "not met", med, min(vals), max(vals),
                   bound_text))

    def report(self, elapsed, img_rel, img_note=None):
        a = self.args
        names = [n for n, _, _ in self.sizes]
        label = {n: l for n, _, l in self.sizes}
        sel_conf = self.conf_select
        out = []
        out.append("## File downloads by size: cold and warm selection cache (scenario 4)\n")
        out.append(
            "Setup: the window-limited triangle: client-server %d ms RTT, client-relay %d ms, "
            "relay-server %d ms (measured by ping: %.1f, %.1f, %.1f ms), %d Mbit/s tbf on every "
            "host's access link, no loss, %s, net.ipv4.tcp_rmem = `%s` on every host "
            "(receive buffers capped at 256 KiB), tcp_no_metrics_save = 1. slot-relayd runs "
            "its defaults for the legs it sends on, the host's algorithm from the start and "
            "bbr from a leg's first retransmission (`[pipe] congestion = system`, "
            "`congestion_on_loss = bbr`): over the run it read %d retransmission counts "
            "and switched %d legs; and it raises a leg's send buffer to 256 KiB the first "
            "time it fills (`[pipe] send_buffer`, docs/relay.md): %d legs over the run; it "
            "measures its RTT to a server by a connect whose handshake's last ACK it "
            "defers, and keeps that connection for 150 ms for a pipe to that server "
            "(`[probe] handover`, docs/relay.md): a cold decision's pipe finds its "
            "connection to the server made. "
            "nginx on the server "
            "serves files of random bytes; unmodified curl downloads them (wget in the check "
            "table), and every body is checked by sha256 end to end, every request's peer in "
            "nginx's log (relay or client). slotd runs its defaults of issue 13: relay "
            "selection strategy %s, k %s (one relay here, relay1, in a group of its own), the "
            "direct probe a bare SYN from a raw socket (counted: `direct_probes_connect`, the "
            "connect fallback, below), and `[select] cache_early` on: a cache hit whose "
            "relay has already reached that port of the server (a PIPE_OK under the entry) "
            "goes to the relay at once, together with PIPE_ESTABLISH; cold decisions wait for "
            "PIPE_OK whatever cache_early says, and `[select] synack_hold` on: they wait at the "
            "relay's SYN-ACK, the SYN having gone with PIPE_ESTABLISH. Methods: `direct` "
            "(server port 8080, never "
            "hijacked); `slot cold`: slotd's selection cache emptied just before (SIGHUP with "
            "another cache_ttl, which replaces the cache) and the relay's RTT cache off "
            "(rtt_cache_ttl = 0), so the download includes slotd's direct probe, the relay's "
            "probe of the server and PIPE_ESTABLISH; `slot, cold, synack_hold = no`: the same "
            "with the SYN itself held until PIPE_OK (the default before); `slot, cold, relay's "
            "handover = off`: the same as `slot cold` with relay1 reloaded with `[probe] "
            "handover = off` (a bare SYN measures, the pipe connects afresh: the relay's "
            "default before); `slot, cold, relay's RTT cache warm`: the same as `slot cold` "
            "with relay1's RTT cache on (rtt_cache_ttl 5 min, its entry for the server made "
            "by a priming download), so relay1 answers the probe from its cache and begins a "
            "connect to the server for the pipe (`handover_preconnects`): a cold slotd behind "
            "a warm relay, the usual case for a popular server; `slot, cold, relay's RTT cache "
            "warm, preconnect = no`: the same with relay1's `[probe] preconnect = no`, so the "
            "cached answer begins no connect and the pipe connects afresh (the relay's "
            "behaviour before pre-connects); `slot warm`: slotd's "
            "decision cached by "
            "the connection before (default config: the relay reached port 80 in that "
            "connection, so this one goes early); `slot warm, cache_early = no`: the same "
            "with `[select] cache_early = no`, connect() waits for PIPE_OK (the paper's "
            "meaning, and the default before issue 13); `HAProxy`: mode tcp with splice on "
            "relay1 as a static relay (curl asks relay1:%d); `ideal`: the slower sub-hop alone "
            "(curl in relay1 from the server, %d ms). %d repetitions, each visiting every size "
            "and every method in a rotating order. Times: curl's time_total, median [min-max]; "
            "speed-up = direct time / time, taken per repetition, median [min-max].\n"
            % (RTT_DIRECT, RTT_CR, RTT_RS, self.rtt["c-s"], self.rtt["c-r"], self.rtt["r-s"],
               RATE, self.cc, " ".join(self.rmem), self.cc_seen["congestion_checks"],
               self.cc_seen["congestion_switches"], self.cc_seen["send_buffers_raised"],
               sel_conf.get("strategy", "?"),
               sel_conf.get("k", "?"), HAPROXY_PORT, RTT_RS, a.reps))
        out.append("Download time (s):\n")
        out.append("| size | " + " | ".join(LABEL[m] for m in METHODS) + " |")
        out.append("|---|" + "---|" * len(METHODS))
        for n in names:
            out.append("| %s | %s |" % (label[n], " | ".join(
                fmt(self.res[("curl", m, n)]) for m in METHODS)))
        out.append("")
        out.append("Speed-up over direct (direct time / time, per repetition):\n")
        out.append("| size | " + " | ".join(LABEL[m] for m in METHODS[1:]) + " |")
        out.append("|---|" + "---|" * (len(METHODS) - 1))
        for n in names:
            out.append("| %s | %s |" % (label[n], " | ".join(
                fmt(self.ratios("curl", m, n), "%.2f") for m in METHODS[1:])))
        out.append("")
        out.append("Connection set-up, over every size (ms): curl's time_connect (connect() "
                   "returns; for slot that includes the whole hold of the SYN in slotd) and "
                   "time_starttransfer (the first byte of the response):\n")
        out.append("| | " + " | ".join(LABEL[m] for m in METHODS) + " |")
        out.append("|---|" + "---|" * len(METHODS))
        out.append("| connect | %s |" % " | ".join(
            fmt_ms([v for n in names for v in self.connect[(m, n)]]) for m in METHODS))
        out.append("| first byte | %s |" % " | ".join(
            fmt_ms([v for n in names for v in self.first[(m, n)]]) for m in METHODS))
        out.append("")
        out.append("slotd's decisions (from its `json` command: verdict, cached, early; "
                   "select_us = SYN to the choice, decide_us = SYN to the verdict that lets "
                   "the connection on: the SYN's, or with synack_hold the relay's SYN-ACK's) "
                   "and its counters, summed over the deltas read just before and "
                   "after each curl download of the method (wget and priming downloads not "
                   "counted), ms:\n")
        out.append("| method | decisions | early_verdicts | early_unreached | early_failures "
                   "| cache hits / misses | pipes_ok | direct_probes (connect fallback) "
                   "| synack waits / holds / failures | select | decide |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for m in SLOT_METHODS:
            sel, dec = self.decision_stats(m)
            v = ", ".join("%d %s" % (c, k) for k, c in sorted(self.verdicts.get(m, {}).items()))
            c = self.ctr.get(m, {k: 0 for k in COUNTERS})
            out.append("| %s | %s | %d | %d | %d | %d / %d | %d | %d (%d) | %d / %d / %d "
                       "| %s | %s |"
                       % (LABEL[m], v, c["early_verdicts"], c["early_unreached"],
                          c["early_failures"], c["cache_hits"], c["cache_misses"],
                          c["pipes_ok"], c["direct_probes"], c["direct_probes_connect"],
                          c["synack_waits"], c["synack_holds"], c["synack_failures"],
                          fmt(sel, "%.2f"), fmt(dec, "%.2f")))
        out.append("")
        if self.odd:
            out.append("Decisions that are not what their method means (%d): %s\n" % (
                len(self.odd), "; ".join("%s %s: %s%s%s" % (
                    m, n, d["verdict"], ", cached" if d["cached"] else "",
                    ", early" if d.get("early") else "") for m, n, d in self.odd)))
        else:
            out.append("Every `slot warm` download went early (its decision: relay, cached, "
                       "early), no `slot warm, cache_early = no` or `slot cold` one did, and "
                       "no early connection failed.\n")
        out.append("relay1's measurements and handovers, summed the same way (a measurement's "
                   "connection no pipe took is counted once its hold is over):\n")
        out.append("| method | " + " | ".join(RELAY_COUNTERS) + " |")
        out.append("|---|" + "---|" * len(RELAY_COUNTERS))
        for m in SLOT_METHODS:
            c = self.rctr.get(m, {k: 0 for k in RELAY_COUNTERS})
            out.append("| %s | %s |" % (LABEL[m], " | ".join("%d" % c[k] for k in RELAY_COUNTERS)))
        out.append("")
        c = self.ctr.get("slot-cold", {})
        out.append("Every `slot cold` download waits at the relay's SYN-ACK: %d synack waits "
                   "and %d SYN-ACKs held for %d downloads, %d failed; `slot, cold, "
                   "synack_hold = no`: %d waits.\n"
                   % (c.get("synack_waits", 0), c.get("synack_holds", 0),
                      len(self.decisions.get("slot-cold", [])), c.get("synack_failures", 0),
                      self.ctr.get("slot-cold-syn", {}).get("synack_waits", 0)))
        for n in [x for x in ("10K", "1M") if x in names]:
            out.append("Where the time of a %s download goes (ms, median per phase over the "
                       "repetitions; select = SYN to slotd's choice, wait = choice to the "
                       "verdict that lets the connection on (PIPE_ESTABLISH to PIPE_OK where "
                       "it waits: the SYN's release, or with synack_hold the relay's "
                       "SYN-ACK's), handshake = that verdict to connect() returning, request = "
                       "connect to the "
                       "first byte, body = first to last byte):\n" % label[n])
            out.append("| method | select | wait | handshake | request | body | total |")
            out.append("|---|---|---|---|---|---|---|")
            for m in METHODS:
                ph = self.phases(m, n)
                if m in SLOT_METHODS:
                    cells = ["%.1f" % statistics.median(x) for x in ph]
                else:
                    cells = ["-", "-"] + ["%.1f" % statistics.median(x) for x in ph[2:]]
                out.append("| %s | %s |" % (LABEL[m], " | ".join(cells)))
            out.append("")
        out.append("Check with wget (timed around the wget process in the client's namespace, "
                   "so it includes wget's start-up; speed-up against wget direct in the same "
                   "repetition):\n")
        out.append("| size | " + " | ".join("wget %s (s)" % LABEL[m] for m in WGET_METHODS) +
                   " | " + " | ".join("speed-up %s" % LABEL[m] for m in WGET_METHODS[1:]) + " |")
        out.append("|---|" + "---|" * (2 * len(WGET_METHODS) - 1))
        for n in names:
            out.append("| %s | %s | %s |" % (
                label[n], " | ".join(fmt(self.res[("wget", m, n)]) for m in WGET_METHODS),
                " | ".join(fmt(self.ratios("wget", m, n), "%.2f") for m in WGET_METHODS[1:])))
        out.append("")
        for f in img_rel:
            out.append("![%s](%s)\n" % (os.path.basename(f), f))
        if img_note:
            out.append(img_note)

        # Targets of issue 13.
        out.append("Targets (issue 13; a target is met when the median of the per-repetition "
                   "ratios is within the bound, compared unrounded):\n")
        if "10K" in names:
            out.append(self.target(
                "warm 10 KiB <= 1.0x direct's time (slot, warm cache, default)",
                [1 / x for x in self.ratios("curl", "slot-warm", "10K")],
                lambda v: v <= 1.0, "slot time / direct time"))
        if "1M" in names:
            out.append(self.target(
                "warm 1 MiB >= 1.8x direct (slot, warm cache, default)",
                self.ratios("curl", "slot-warm", "1M"), lambda v: v >= 1.8,
                "direct time / slot time"))
            out.append(self.target(
                "cold 1 MiB >= 1.5x direct (slot, cold cache)",
                self.ratios("curl", "slot-cold", "1M"), lambda v: v >= 1.5,
                "direct time / slot time"))
        out.append("")
        # The earlier targets of issue 7, on the same figures.
        out.append("Earlier targets (issue 7), on the same runs:\n")
        for n in names:
            if self.sizes[names.index(n)][1] < MiB:
                continue
            for m in SLOT_METHODS:
                r = self.ratios("curl", m, n)
                med = statistics.median(r)
                out.append("- %s, %s: >= 1.8x direct: **%s** (median %.2fx, min %.2fx, "
                           "max %.2fx)" % (label[n], LABEL[m], "met" if med >= 1.8 else "not met",
                                           med, min(r), max(r)))
        for n in names:
            if self.sizes[names.index(n)][1] >= MiB:
                continue
            for m in ("slot-warm", "slot-wait"):
                r = [1 / x for x in self.ratios("curl", m, n)]
                med = statistics.median(r)
                out.append("- %s, %s: no more than 5%% slower than direct: **%s** (time / "
                           "direct time: median %.2f, min %.2f, max %.2f)"
                           % (label[n], LABEL[m], "met" if med <= 1.05 else "not met",
                              med, min(r), max(r)))
        for m in ("slot-warm", "slot-wait"):
            for n in names:
                r = [h / x for h, x in zip(self.res[("curl", "haproxy", n)],
                                           self.res[("curl", m, n)])]
                med = statistics.median(r)
                out.append("- %s, %s >= HAProxy: **%s** (HAProxy time / slot time: "
                           "median %.2f, min %.2f, max %.2f)"
                           % (label[n], LABEL[m], "met" if med >= 1.0 else "not met", med,
                              min(r), max(r)))
        out.append("")
        out.append(self.meaning())
        out.append("Reproduce: `make bench` (root), or `/usr/bin/python3 scripts/bench/e2e_files.py "
                   "--reps %d` after `make all` (this run: %.0f s, on %d cores shared with other "
                   "work).\n" % (a.reps, elapsed, os.cpu_count()))
        return "\n".join(out) + "\n"

    def meaning(self):
        names = [n for n, _, _ in self.sizes]
        med = lambda m, n: statistics.median(self.res[("curl", m, n)]) * 1000
        spd = lambda m, n: statistics.median(self.ratios("curl", m, n))
        con = lambda m: statistics.median([v for n in names for v in self.connect[(m, n)]]) * 1000
        fb = lambda m: statistics.median([v for n in names for v in self.first[(m, n)]]) * 1000
        dsel = lambda m: statistics.median(self.decision_stats(m)[0])
        ddec = lambda m: statistics.median(self.decision_stats(m)[1])
        small, big = names[0], names[-1]
        sl, bl = self.sizes[0][2], self.sizes[-1][2]
        cmp = lambda a, b: "faster than" if a < b else "slower than"
        text = (
            "What it means: a download pays its set-up once, then moves its bytes at about one "
            "window per round trip of its slowest loop. Direct, that loop is %d ms and the "
            "256 KiB receive buffer caps the window; relayed, both loops are %d ms, so the bulk "
            "of a transfer can run twice as fast: the `ideal` column, the 40 ms loop alone, is "
            "the ceiling (%.2fx on %s), and slot reaches %.2fx cold, %.2fx warm (early) and "
            "%.2fx warm with cache_early = no there. Set-up is where slot pays or gains, and it "
            "decides the small sizes. Direct, connect() takes one RTT (%.0f ms) and the first "
            "byte comes one RTT later (%.0f ms). Warm, on the defaults, slotd releases the SYN "
            "to the relay from its cache at once (decide_us %.2f ms) and sends PIPE_ESTABLISH "
            "with it; the relay holds the client's connection while it connects to the "
            "server, which overlaps the client's handshake and request: connect %.0f ms (one "
            "client-relay RTT), first byte %.0f ms, %s in %.0f ms, %s direct (%.0f ms). With "
            "`cache_early = no` connect() waits for PIPE_OK, the client-relay round trip plus "
            "the relay's connect to the server (decide_us %.0f ms): connect %.0f ms, first byte "
            "%.0f ms, %s in %.0f ms. Cold, slotd holds the SYN while it probes: its bare-SYN "
            "probe of the server (%d ms) and the relay's answer (%d ms to the relay plus the "
            "relay's own %d ms measurement of the server, its RTT cache being off) both take "
            "about %d ms (select_us %.0f ms median). The relay measures by a connect whose "
            "handshake's last ACK it defers, and keeps that connection ([probe] handover): "
            "with synack_hold (the default) the SYN goes to the relay together with "
            "PIPE_ESTABLISH, the pipe takes the measurement's connection (its ACK sent now, "
            "so the server's application sees one connection, the pipe's) and PIPE_OK leaves "
            "at once, and slotd holds the relay's SYN-ACK until PIPE_OK (decide_us %.0f ms, "
            "the client-relay round trip alone): connect %.0f ms, %.1f direct RTTs, first "
            "byte %.0f ms. With the relay's handover off (a bare SYN measures, the pipe "
            "connects afresh) PIPE_OK waits for the relay's connect too, another "
            "relay-server round trip (decide_us %.0f ms): connect %.0f ms, first byte "
            "%.0f ms. With synack_hold = no the SYN itself waits for PIPE_OK (decide_us "
            "%.0f ms) and then makes its own handshake with the relay, another %d ms: "
            "connect %.0f ms, first byte %.0f ms."
            % (RTT_DIRECT, RTT_CR, spd("ideal", big), bl, spd("slot-cold", big),
               spd("slot-warm", big), spd("slot-wait", big), con("direct"), fb("direct"),
               ddec("slot-warm"), con("slot-warm"), fb("slot-warm"), sl,
               med("slot-warm", small), cmp(med("slot-warm", small), med("direct", small)),
               med("direct", small), ddec("slot-wait"), con("slot-wait"), fb("slot-wait"), sl,
               med("slot-wait", small), RTT_DIRECT, RTT_CR, RTT_RS, RTT_CR + RTT_RS,
               dsel("slot-cold"), ddec("slot-cold"), con("slot-cold"),
               con("slot-cold") / RTT_DIRECT, fb("slot-cold"), ddec("slot-cold-hoff"),
               con("slot-cold-hoff"), fb("slot-cold-hoff"), ddec("slot-cold-syn"), RTT_CR,
               con("slot-cold-syn"), fb("slot-cold-syn")))
        text += (
            " With the relay's RTT cache warm (`slot, cold, relay's RTT cache warm`: a cold "
            "slotd behind a warm relay, the usual case for a popular server), the relay "
            "answers from its cache at once, and slotd decides as soon as the direct answer, "
            "still due, can no longer beat that path by min_gain (select_us %.0f ms); the "
            "relay began a connect to the server with its answer, which the pipe takes "
            "(PIPE_OK at once: decide_us %.0f ms): connect %.0f ms, first byte %.0f ms, "
            "%.2fx direct on %s (%.2fx with the relay's cache off). With `preconnect = no` "
            "the pipe connects afresh and PIPE_OK waits for it (decide_us %.0f ms): connect "
            "%.0f ms, first byte %.0f ms, %.2fx, a warm relay then slower than a cold one."
            % (dsel("slot-cold-rwarm"), ddec("slot-cold-rwarm"), con("slot-cold-rwarm"),
               fb("slot-cold-rwarm"), spd("slot-cold-rwarm", "1M" if "1M" in names else big),
               "1 MiB" if "1M" in names else bl,
               spd("slot-cold", "1M" if "1M" in names else big),
               ddec("slot-cold-rwarm-nopre"), con("slot-cold-rwarm-nopre"),
               fb("slot-cold-rwarm-nopre"),
               spd("slot-cold-rwarm-nopre", "1M" if "1M" in names else big)))
        if "1M" in names:
            mib = "1M"
            d = med("direct", mib)
            fb1 = lambda m: statistics.median(self.first[(m, mib)]) * 1000
            body = lambda m: statistics.median(self.phases(m, mib)[4])
            ideal_t, ideal_b = med("ideal", mib), body("ideal")
            warm_t = med("slot-warm", mib)
            best_w = fb1("slot-warm") + ideal_b
            best_c = fb1("slot-cold") + ideal_b
            sel_c = statistics.median(self.decision_stats("slot-cold", mib)[0])
            dec_c = statistics.median(self.decision_stats("slot-cold", mib)[1])
            text += (
                " On 1 MiB the targets ask for %.0f ms warm (direct %.0f / 1.8) and %.0f ms "
                "cold (/ 1.5), while the ideal 40 ms loop alone takes %.0f ms (first byte "
                "%.0f ms, then %.0f ms of body). Warm (early), the first byte comes at %.0f ms, "
                "%.0f ms after the ideal's: the request and response cross both hops, one more "
                "client-relay round trip than the ideal's, the price of any relay; and the "
                "body through the relay takes %.0f ms, %+.0f ms against the ideal loop's: the "
                "relay raises a leg's send buffer the first time it fills ([pipe] "
                "send_buffer), without which a slow-start round outgrows the kernel's first "
                "buffer and its tail waits a round trip (HAProxy, which has that stall, takes "
                "%.0f ms for the body). The warm target leaves %.0f ms "
                "over the ideal download; the two together put the warm download at %.0f ms "
                "against %.0f (%.2fx). With the ideal loop's body after its first byte it "
                "would be %.0f ms, %.2fx: the warm 1.8x target sits at the edge of what a "
                "relayed download can do on this triangle, and a few ms decide on which side "
                "(the min-max above). Cold, the first byte comes at %.0f ms, and %.0f + %.0f ms "
                "is %.2fx at best, against the target's %.0f ms for the first byte (1.5x with "
                "the ideal body); the download took %.0f ms, %.2fx. connect() keeps the "
                "paper's meaning on a cold decision: it returns only once the relay holds a "
                "connection to the server, here the measurement's own, whose SYN-ACK the relay "
                "had before PIPE_OK left (PIPE_ESTABLISH to PIPE_OK %.0f ms, the client-relay "
                "round trip). What a cold decision still pays over a warm one is the choice "
                "(select %.0f ms: the direct probe is a full direct RTT, and slotd needs it to "
                "know whether a relay is worth it) and that round trip; with the relay's "
                "handover off the relay's connect comes on top (first byte %.0f ms, %.0f ms in "
                "all, %.2fx), which is why the cold target was out of reach before. It is not "
                "a matter of slotd's speed: its select is %.1f ms over the direct RTT (%.1f ms "
                "by ping) its probe has to wait for."
                % (d / 1.8, d, d / 1.5, ideal_t, fb1("ideal"), ideal_b, fb1("slot-warm"),
                   fb1("slot-warm") - fb1("ideal"), body("slot-warm"),
                   body("slot-warm") - ideal_b, body("haproxy"), d / 1.8 - ideal_t, warm_t,
                   d / 1.8,
                   d / warm_t, best_w, d / best_w, fb1("slot-cold"), fb1("slot-cold"),
                   ideal_b, d / best_c, d / 1.5 - ideal_b, med("slot-cold", mib),
                   d / med("slot-cold", mib), dec_c - sel_c, sel_c, fb1("slot-cold-hoff"),
                   med("slot-cold-hoff", mib), d / med("slot-cold-hoff", mib),
                   sel_c - self.rtt["c-s"], self.rtt["c-s"]))
        text += (
            " HAProxy terminates the client's connection itself, so its connect() returns "
            "after one client-relay RTT (%.0f ms); it connects to the server only once it has "
            "accepted, so its first byte comes at %.0f ms (slot warm %.0f, cache_early = no "
            "%.0f); for bulk both move bytes with splice at the same rate. It needs each "
            "client pointed at it, one listening port per server, where slot picks the relay "
            "per server and leaves the applications alone.\n"
            % (con("haproxy"), fb("haproxy"), fb("slot-warm"), fb("slot-wait")))
        return text


def main():
    global slotbed
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 repetitions, for development")
    ap.add_argument("--build", default=os.environ.get("SLOT_BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench", "e2e_files.md"))
    ap.add_argument("--check", action="store_true",
                    help="check what the run and its report need, then exit")
    args = ap.parse_args()
    if args.quick:
        args.reps = 2
    _needs.check("e2e_files", args, modules=("matplotlib",),
                 tools=("curl", "wget", "haproxy", "nginx"),
                 files=[os.path.join(args.build, b) for b in ("slotd", "slot-relayd", "slot-wanem")])
    os.environ["SLOT_BUILD"] = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
    import slotbed as sbmod
    slotbed = sbmod
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)

    t0 = time.monotonic()
    b = Bench(args)
    try:
        b.up()
        b.run()
        elapsed = time.monotonic() - t0
        out_dir = os.path.dirname(os.path.abspath(args.out))
        img_dir = os.path.join(os.path.dirname(out_dir), "img")
        os.makedirs(img_dir, exist_ok=True)
        imgs, note = _needs.draw("e2e_files", "download time and speed-up by file size",
                                 b.plot, img_dir)
        text = b.report(elapsed, ["img/" + os.path.basename(p) for p in imgs or []], note)
    finally:
        if b.sb:
            b.sb.down()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    sys.stdout.write(text)
    print("e2e_files: %.0f s" % (time.monotonic() - t0), file=sys.stderr)


slotbed = None

if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Learned initial windows (issue 17, part 4): scenario 4's cold downloads
through slot with and without a learned initial window on the relay's
sending leg, and what they do to a competing bulk flow.

Test bed: scenario 4's (scripts/bench/e2e_files.py):

    client --80 ms-- server                 (direct)
    client --40 ms-- relay1 --40 ms-- server

100 Mbit/s access links (tbf) on every host, no loss, cubic, receive buffers
capped at 256 KiB (net.ipv4.tcp_rmem max) on every host. slot-relayd runs in
a cgroup of its own (as systemd runs it) with [pipe] learn_initcwnd = yes;
a reload switches learning off (the table emptied: every leg starts with the
kernel's 10 segments) and on again.

Part 1, download times. Methods, in a rotating order in every repetition,
for 100 KiB and 1 MiB:

  direct      curl server:8080 (never hijacked)
  slot-cold   curl server:80, slotd's selection cache emptied just before
              (a SIGHUP with another cache_ttl), the relay's RTT cache off,
              learning off
  slot-cold-iw  the same with learning on and the client's prefix learned

Before every slot download a 1 MiB download through slot, not measured,
teaches the relay (when learning is on) and leaves both methods the same
history. The relay's counters around each measured download say whether
the learned window was applied (initcwnd_applied) and whether a transfer
saw a retransmission (initcwnd_shrunk).

Part 2, harm to a competing flow: iperf3 from relay1 to the client (cubic,
the relay's access link and the client's shared with the relay's client
legs; iperf3 is not in the relay's cgroup, so never given a learned
window) for PHASE_S seconds while cold 1 MiB slot downloads run back to
back, learning off or on (alternating phases, reps each), and iperf3 alone.
Reported: iperf3's throughput and retransmissions, the downloads' times.

Every body is checked by sha256, and nginx's log must name the expected
peer (relay1 for slot, the client for direct).

usage: e2e_initcwnd.py [--reps 5] [--quick] [--out docs/bench/e2e_initcwnd.md]
       [--build DIR]
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

import _needs  # scripts/bench/_needs.py: checked before measuring

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

KiB = 1 << 10
MiB = 1 << 20
SIZES = [("100K", 100 * KiB, "100 KiB"), ("1M", MiB, "1 MiB")]
# (name, direct RTT, client-relay, relay-server), ms: scenario 4's triangle,
# and one where the relay's sending leg is the long one (a relay near the
# server, far from the client), where the leg it sends on lags behind the
# one it receives on.
# The third: that with a shallow bottleneck buffer (tbf queues of 5 ms, 62 kB,
# instead of the test bed's 50 ms), where a burst of a learned window meets
# the competing flow's queue and may cost losses. Last field: queue_ms.
TOPOS = [("scenario 4", 80, 40, 40, None), ("relay near the server", 100, 60, 10, None),
         ("relay near the server, shallow buffers", 100, 60, 10, 5)]
RATE = 100
RMEM = "4096 131072 262144"
METHODS = ["direct", "slot-cold", "slot-cold-iw"]
LABEL = {"direct": "direct", "slot-cold": "slot, cold, IW 10",
         "slot-cold-iw": "slot, cold, learned IW"}
PHASE_S = 8
IPERF_STREAMS = 4       # window-limited each (rmem): 4 fill the 100 Mbit/s link
IPERF_PORT = 5299

slotbed = None


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)


def fmt(vals, f="%.3f"):
    if not vals:
        return "n/a"
    return (f + " [" + f + "-" + f + "]") % (statistics.median(vals), min(vals), max(vals))


class Bench:
    def __init__(self, args, topo):
        self.args = args
        self.topo_name, self.rtt_direct, self.rtt_cr, self.rtt_rs, self.queue_ms = topo
        self.sb = None
        self.n = 0
        self.ttl_toggle = 0
        self.learning = True
        self.res = {}           # (method, size) -> [seconds]
        self.applied = {}       # method -> [initcwnd_applied delta per download]
        self.shrunk = {}        # method -> sum of initcwnd_shrunk deltas
        self.windows = []       # the client prefix's learned window before each iw download
        self.phases = {}        # phase -> [(iperf Mbit/s, retransmits, [download s])]

    # ---- set-up ----

    def up(self):
        def spec_edit(spec):
            spec["host_defaults"]["rate"] = RATE
            if self.queue_ms:
                spec["host_defaults"]["queue_ms"] = self.queue_ms
        self.sb = slotbed.SlotBed(
            {"relay1": (self.rtt_cr, self.rtt_rs)}, direct_rtt=self.rtt_direct,
            host_sysctls={"net.ipv4.tcp_congestion_control": "cubic",
                          "net.ipv4.tcp_rmem": RMEM},
            relay_conf={"relay": {"log_level": "info"},
                        "probe": {"rtt_cache_ttl": "0"},
                        "pipe": {"learn_initcwnd": "yes"}},
            spec_edit=spec_edit)
        self.sb.up()
        sb = self.sb
        for name, size, _ in SIZES:
            sb.nginx.add_file(name, size)
        sb.nginx.start()
        self.relay = sb.relay("relay1")
        # In a cgroup of its own, as systemd runs it: the program's scope.
        self.relay.stop()
        self.relay.own_cgroup()
        self.relay.start()
        if self.relay.counters().get("initcwnd_on") != 1:
            raise RuntimeError("learning did not turn on:\n%s" % self.relay.log()[-3000:])
        self.slotd = sb.slotd([self.relay], self.conf())
        self.slotd.start()
        self.rtt = {p: sb.bed.ping(a, b, count=3).min for p, (a, b) in
                    {"c-s": ("client", "server"), "c-r": ("client", "relay1"),
                     "r-s": ("relay1", "server")}.items()}
        a = sb.ip("client").split(".")
        self.prefix = "%s.%s.%s.0/24" % tuple(a[:3])

    def conf(self):
        return {"slotd": {"log_level": "info"}, "hijack": {"ports": "80"},
                "select": {"cache_ttl": "%ds" % (600 + self.ttl_toggle)}}

    def flush_slotd(self):
        """Empties slotd's selection cache (a reload with another cache_ttl)."""
        self.ttl_toggle ^= 1
        self.slotd.update(self.conf())
        self.slotd.hup()

    def set_learning(self, on):
        if on == self.learning:
            return
        self.relay.reload({"pipe": {"learn_initcwnd": "yes" if on else "no"}})
        self.learning = on

    def table(self):
        return self.relay.initcwnd_table()

    # ---- one download ----

    def get(self, method, name, what):
        sb = self.sb
        self.n += 1
        tag = "id=iw%d" % self.n
        port = 8080 if method == "direct" else 80
        url = sb.nginx.url(name, port=port, query=tag)
        out = os.path.join(sb.dir, "iw.out")
        if os.path.exists(out):
            os.unlink(out)
        pipes = self.relay.counters()["pipes_total"]
        r = sb.bed.run("client", "curl", "-sS", "--max-time", "120", "-o", out, "-w",
                       "%{http_code} %{time_total}", url, check=False, timeout=130)
        if r.returncode != 0 or r.stdout.split()[0] != "200":
            raise RuntimeError("%s: curl failed: %s %s" % (what, r.stdout, r.stderr))
        size, sha = sb.nginx.files[name]
        if slotbed.sha256_file(out) != sha or os.path.getsize(out) != size:
            raise RuntimeError("%s: body of %s differs" % (what, name))
        want = sb.ip("client") if method == "direct" else sb.ip("relay1")
        peer = sb.nginx.peer_of(tag + " ")
        if peer != want:
            raise RuntimeError("%s: nginx saw %s, expected %s" % (what, peer, want))
        if method != "direct":
            # the pipe has ended and been learned from before the next one
            slotbed.wait_for(lambda: self.relay.counters()["pipes_total"] > pipes and
                             self.relay.counters()["pipes_open"] == 0, 10,
                             "%s: the pipe to end" % what)
        return float(r.stdout.split()[1])

    def measure(self, method, name, rep):
        what = "rep %d %s %s" % (rep, method, name)
        if method != "direct":
            self.set_learning(method == "slot-cold-iw")
            self.get("slot", "1M", what + " (teaching)")
            if method == "slot-cold-iw":
                iw = self.table().get(self.prefix)
                if iw is None:
                    raise RuntimeError("%s: nothing learned for %s" % (what, self.prefix))
                self.windows.append(iw)
            self.flush_slotd()
        c0 = self.relay.counters()
        t = self.get(method, name, what)
        c1 = self.relay.counters()
        if method != "direct":
            self.applied.setdefault(method, []).append(
                c1["initcwnd_applied"] - c0["initcwnd_applied"])
            self.shrunk[method] = self.shrunk.get(method, 0) + \
                c1["initcwnd_shrunk"] - c0["initcwnd_shrunk"]
        self.res.setdefault((method, name), []).append(t)
        print("%s: %.1f ms" % (what, t * 1000), file=sys.stderr, flush=True)

    # ---- part 2: a competing bulk flow ----

    def phase(self, kind, rep):
        sb = self.sb
        srv = sb.bed.popen("client", ["iperf3", "-s", "-1", "-p", str(IPERF_PORT)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sb.bed.wait_listen("client", IPERF_PORT, proc=srv)
        cli = sb.bed.popen("relay1", ["iperf3", "-c", sb.ip("client"), "-p", str(IPERF_PORT),
                                      "-t", str(PHASE_S), "-P", str(IPERF_STREAMS), "-J",
                                      "-C", "cubic"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        times = []
        c0 = self.relay.counters()
        if kind != "alone":
            self.set_learning(kind == "learned")
            end = time.monotonic() + PHASE_S - 1
            time.sleep(0.5)
            # slotd's decision stays cached (a cold one would see the
            # queue iperf3 builds and might go direct): every download
            # takes the relay, learning off or on.
            while time.monotonic() < end:
                times.append(self.get("slot", "1M", "phase %s rep %d" % (kind, rep)))
        so, se = cli.communicate(timeout=PHASE_S + 30)
        srv.wait(10)
        if cli.returncode != 0:
            raise RuntimeError("iperf3 failed: %s" % se.decode(errors="replace"))
        j = json.loads(so)
        s = j["end"]["sum_sent"]
        mbps = s["bits_per_second"] / 1e6
        c1 = self.relay.counters()
        self.phases.setdefault(kind, []).append((mbps, s.get("retransmits", 0), times,
                                                 c1["initcwnd_shrunk"] - c0["initcwnd_shrunk"]))
        print("phase %s rep %d: iperf3 %.1f Mbit/s, %d retransmits, %d downloads"
              % (kind, rep, mbps, s.get("retransmits", 0), len(times)), file=sys.stderr,
              flush=True)

    # ---- the run ----

    def run(self):
        reps = self.args.reps
        for rep in range(1, reps + 1):
            for i, (name, _, _) in enumerate(SIZES):
                k = (rep + i) % len(METHODS)
                for m in METHODS[k:] + METHODS[:k]:
                    self.measure(m, name, rep)
        self.get("slot", "1M", "warm-up")      # slotd's decision cached: relay1
        kinds = ["alone", "off", "learned"]
        for rep in range(1, max(3, reps // 2) + 1):
            k = rep % len(kinds)
            for kind in kinds[k:] + kinds[:k]:
                self.phase(kind, rep)

    # ---- report ----

    def ratios(self, a, b, name):
        """Per repetition: time(a) / time(b)."""
        return [x / y for x, y in zip(self.res[(a, name)], self.res[(b, name)])]

    def report(self, elapsed):
        L = []
        w = L.append
        w("### %s: client-server %d ms, client-relay %d ms, relay-server %d ms%s"
          % (self.topo_name.capitalize(), self.rtt_direct, self.rtt_cr, self.rtt_rs,
             ", tbf queues of %d ms" % self.queue_ms if self.queue_ms else ""))
        w("")
        w("Client-server %d ms RTT, client-relay %d ms, "
          "relay-server %d ms (measured by ping: %.1f, %.1f, %.1f ms), %d Mbit/s tbf on every "
          "host's access link. %d repetitions." % (
              self.rtt_direct, self.rtt_cr, self.rtt_rs, self.rtt["c-s"], self.rtt["c-r"],
              self.rtt["r-s"], RATE, self.args.reps))
        w("")
        w("Download time (s):")
        w("")
        w("| size | " + " | ".join(LABEL[m] for m in METHODS) + " |")
        w("|---|" + "---|" * len(METHODS))
        for name, _, label in SIZES:
            w("| %s | " % label + " | ".join(fmt(self.res[(m, name)]) for m in METHODS) + " |")
        w("")
        w("Ratios (per repetition; above 1: the second is faster):")
        w("")
        w("| size | direct / IW 10 | direct / learned IW | IW 10 / learned IW |")
        w("|---|---|---|---|")
        for name, _, label in SIZES:
            w("| %s | %s | %s | %s |" % (
                label, fmt(self.ratios("direct", "slot-cold", name), "%.2f"),
                fmt(self.ratios("direct", "slot-cold-iw", name), "%.2f"),
                fmt(self.ratios("slot-cold", "slot-cold-iw", name), "%.2f")))
        w("")
        ap = self.applied
        w("The learned window of the client's /24 before each `learned IW` download: %s "
          "segments. Connections given a learned window per measured download "
          "(initcwnd_applied): IW 10 %s, learned IW %s. Prefix windows halved after a "
          "retransmission (initcwnd_shrunk), over the measured downloads: IW 10 %d, "
          "learned IW %d."
          % (fmt(self.windows, "%.0f"), fmt(ap.get("slot-cold", []), "%.0f"),
             fmt(ap.get("slot-cold-iw", []), "%.0f"), self.shrunk.get("slot-cold", 0),
             self.shrunk.get("slot-cold-iw", 0)))
        w("")
        w("A competing flow, %d phases of each kind in a rotating order:"
          % len(self.phases.get("off", [])))
        w("")
        w("| phase | iperf3 Mbit/s | iperf3 retransmits | downloads per phase | "
          "downloads' Mbit/s over the phase | iperf3 + downloads Mbit/s | "
          "1 MiB download time (s) | windows halved after a loss |")
        w("|---|---|---|---|---|---|---|---|")
        names = {"alone": "iperf3 alone", "off": "with downloads, IW 10",
                 "learned": "with downloads, learned IW"}
        for kind in ("alone", "off", "learned"):
            ph = self.phases.get(kind, [])
            dl = [t for p in ph for t in p[2]]
            dmbps = [len(p[2]) * MiB * 8 / 1e6 / PHASE_S for p in ph]
            w("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                names[kind], fmt([p[0] for p in ph], "%.1f"), fmt([p[1] for p in ph], "%.0f"),
                fmt([len(p[2]) for p in ph], "%.0f"), fmt(dmbps, "%.1f"),
                fmt([p[0] + d for p, d in zip(ph, dmbps)], "%.1f"), fmt(dl) if dl else "-",
                sum(p[3] for p in ph) if kind == "learned" else "-"))
        w("")
        w("Run time %.0f s." % elapsed)
        w("")
        return "\n".join(L)


def plot(benches, path):
    """Per bed, the median cold download time of each method and size, as a
    fraction of direct's (min-max as error bars): below 1, faster than direct."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(benches), figsize=(4.2 * len(benches), 4.2), sharey=True)
    if len(benches) == 1:
        axes = [axes]
    colors = {"direct": "#7f7f7f", "slot-cold": "#1f77b4", "slot-cold-iw": "#2ca02c"}
    width = 0.8 / len(METHODS)
    for ax, b in zip(axes, benches):
        for i, m in enumerate(METHODS):
            meds, lo, hi = [], [], []
            for name, _, _ in SIZES:
                v = [t / d for t, d in zip(b.res[(m, name)], b.res[("direct", name)])]
                md = statistics.median(v)
                meds.append(md)
                lo.append(md - min(v))
                hi.append(max(v) - md)
            xs = [j + (i - (len(METHODS) - 1) / 2) * width for j in range(len(SIZES))]
            ax.bar(xs, meds, width, yerr=[lo, hi], capsize=3, color=colors[m], label=LABEL[m])
        ax.set_xticks(range(len(SIZES)))
        ax.set_xticklabels([label for _, _, label in SIZES])
        ax.set_title("%s\n(%d ms direct; %d + %d ms via the relay%s)" % (
            b.topo_name, b.rtt_direct, b.rtt_cr, b.rtt_rs,
            "; 5 ms queues" if b.queue_ms else ""), fontsize=9)
        ax.axhline(1.0, color="black", lw=0.6)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("cold download time / direct's (median, min-max)")
    axes[0].legend(fontsize=8, loc="upper right")
    fig.suptitle("Learned initial windows: cold downloads through one relay, %d repetitions"
                 % len(benches[0].res[(METHODS[0], SIZES[0][0])]), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def preamble(reps):
    return "\n".join([
        "## Learned initial windows: cold downloads and a competing flow (issue 17)",
        "",
        "Setup: the triangle of scenario 4 (above), one where the relay is near the "
        "server and far from the client, and that one again with shallow bottleneck "
        "buffers (tbf queues of 5 ms instead of 50); %d Mbit/s tbf on every host's access link, no "
        "loss, cubic, net.ipv4.tcp_rmem = `%s` on every host (receive buffers capped at "
        "256 KiB), tcp_no_metrics_save = 1. slot-relayd runs in a cgroup of its own (as "
        "systemd runs it) with `[pipe] learn_initcwnd = yes` and its defaults (initcwnd_max "
        "40, /24); a reload turns learning off (the table emptied: every leg starts with the "
        "kernel's 10 segments) or on again. Methods: `direct` (port 8080); `slot, cold, IW "
        "10`: slotd's selection cache emptied just before and the relay's RTT cache off, "
        "learning off; `slot, cold, learned IW`: the same with learning on and the client's "
        "/24 learned. Before every slot download a 1 MiB download through slot (not "
        "measured) teaches the relay and gives both slot methods the same history. %d "
        "repetitions, methods in a rotating order; curl's time_total, median [min-max]; "
        "ratios taken per repetition. Every body is checked by sha256, every request's peer "
        "in nginx's log. The competing flow: iperf3, %d cubic streams from relay1 to the "
        "client for %d s (together they fill the 100 Mbit/s link; each alone is capped by "
        "the receive buffer), sharing the relay's and the client's access links with the "
        "relay's client legs, while 1 MiB downloads through slot (slotd's decision cached, "
        "so every one takes the relay) run back to back with learning off or on, or with "
        "no downloads; iperf3 runs outside the relay's cgroup, so it never gets a learned "
        "window." % (RATE, RMEM, reps, IPERF_STREAMS, PHASE_S),
        ""])


def main():
    global slotbed
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 repetitions, for development")
    ap.add_argument("--build", default=os.environ.get("SLOT_BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench", "e2e_initcwnd.md"))
    ap.add_argument("--check", action="store_true",
                    help="check what the run and its report need, then exit")
    args = ap.parse_args()
    if args.quick:
        args.reps = 2
    _needs.check("e2e_initcwnd", args, modules=("matplotlib",), tools=("curl", "nginx", "iperf3"),
                 files=[os.path.join(args.build, b) for b in ("slotd", "slot-relayd",
                                                               "slot-wanem")])
    os.environ["SLOT_BUILD"] = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
    import slotbed as sbmod
    slotbed = sbmod
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    parts, benches = [preamble(args.reps)], []
    for topo in TOPOS:
        t0 = time.monotonic()
        b = Bench(args, topo)
        try:
            b.up()
            b.run()
            parts.append(b.report(time.monotonic() - t0))
            benches.append(b)
        finally:
            if b.sb:
                b.sb.down()
    out_dir = os.path.dirname(os.path.abspath(args.out))
    png = os.path.join(os.path.dirname(out_dir), "img", "bench_initcwnd.png")
    os.makedirs(os.path.dirname(png), exist_ok=True)
    _, note = _needs.draw("e2e_initcwnd", "cold download times", plot, benches, png)
    parts.append(note or "![Learned initial windows](img/bench_initcwnd.png)\n")
    text = "\n".join(parts)
    os.makedirs(out_dir, exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    sys.stdout.write(text)
    print("e2e_initcwnd: done", file=sys.stderr)


if __name__ == "__main__":
    main()

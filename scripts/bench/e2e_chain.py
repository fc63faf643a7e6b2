#!/usr/bin/python3
"""Scenario 8 of issue 17: a chain of two relays beats every single relay.

Seven hosts of the test bed on the emulated WAN: the client, the server, five
relays and the directory. The client's path to the server is inflated (240 ms)
and every single relay leaves a long loop (the best, "a", 150 ms each way;
the others 200-220 ms), while two relays, r1 near the client and r2 near the
server, are 40 ms from each other: the chain client > r1 > r2 > server has
three loops of 40 ms. Nobody tells slotd so: the relays register with
slot-dird, measure each other and report, the directory sends with its listing
every relay's RTT to its landmarks, and slotd, with its product defaults and
only the directory's URL, ranks, probes and chooses by itself.

The paths are window-limited (receive buffers capped at 256 KiB, no loss,
100 Mbit/s access links, cubic), so a path's rate is about window / its
longest loop, as in scenario 1. Per repetition, one after the other in a
rotating order, curl downloads a large file from nginx for T seconds
(--max-time; the rate counted from the first byte; the bytes received checked
against the file's first bytes with sha256):
  - direct: the server's port 8080, not hijacked;
  - slot: port 80, hijacked by slotd (the relay or chain it chose);
  - single: HAProxy in relay "a", the best single relay by the data,
    statically configured for the server;
  - the chain's three loops measured alone (r2 from the server, r1 from r2,
    the client from r1, each from an nginx in the sending host): the chain's
    ideal is the slowest of them.

usage: e2e_chain.py [--reps 5] [--seconds 12] [--quick] [--out docs/bench/e2e_chain.md]
       [--build DIR]
"""

import argparse
import hashlib
import os
import signal
import statistics
import subprocess
import sys
import time

import _needs  # scripts/bench/_needs.py

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

RELAYS = ["r1", "r2", "a", "b", "c"]
# RTTs in ms. The direct path is inflated (240 ms, more than the chain's
# 120 ms of loops end to end), as real long paths often are.
RTT = {
    ("client", "server"): 240,
    ("client", "r1"): 40, ("r1", "server"): 220,
    ("client", "r2"): 220, ("r2", "server"): 40,
    ("client", "a"): 150, ("a", "server"): 150,
    ("client", "b"): 100, ("b", "server"): 200,
    ("client", "c"): 200, ("c", "server"): 100,
    ("r1", "r2"): 40,
    ("r1", "a"): 120, ("r1", "b"): 70, ("r1", "c"): 170,
    ("r2", "a"): 120, ("r2", "b"): 170, ("r2", "c"): 70,
    ("a", "b"): 80, ("a", "c"): 80, ("b", "c"): 150,
}
CHAIN = ["r1", "r2"]
BEST_SINGLE = "a"
# The loops of the chain as (receiver, sender): the download flows server >
# r2 > r1 > client, each host sending on its downstream leg.
LOOPS = [("r2", "server"), ("r1", "r2"), ("client", "r1")]
RATE = 100              # Mbit/s, every host, both ways
RMEM = "4096 131072 262144"
DIR_RTT = 20            # the directory: 20 ms from everybody
PORT_SLOT, PORT_DIRECT, PORT_HAPROXY = 80, 8080, 8081
FILE_MIB = 256
MODES = ["direct", "slot", "single"] + ["loop:%s<%s" % l for l in LOOPS]

slotbed = None


def rtt(a, b):
    return RTT.get((a, b)) or RTT.get((b, a))


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)


def fmt(vals, f="%.2f"):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "n/a"
    return (f + " [" + f + "-" + f + "]") % (statistics.median(vals), min(vals), max(vals))


class Chain:
    def __init__(self, args):
        self.args = args
        self.sb = None
        self.dird = None
        self.slotd = None
        self.seen = set()

    def spec_edit(self, spec):
        hosts = ["client", "server"] + RELAYS
        pairs = []
        for i, a in enumerate(hosts):
            for b in hosts[i + 1:]:
                pairs.append({"a": a, "b": b, "rtt": rtt(a, b)})
        spec["pairs"] = pairs
        spec["default"] = {"rtt": DIR_RTT}      # every pair with the directory
        hd = spec.setdefault("host_defaults", {})
        hd["rate"] = RATE
        hd.setdefault("sysctls", {}).update({
            "net.ipv4.tcp_congestion_control": "cubic",
            "net.ipv4.tcp_rmem": RMEM,
        })

    def up(self):
        relay_conf = {"relay": {"log_level": "info"},
                      "limits": {"connect_timeout": "5s", "pending_timeout": "10s"}}
        self.sb = slotbed.SlotBed({r: (0, 0) for r in RELAYS}, direct_rtt=0, other_rtt=DIR_RTT,
                                  extra_hosts=["dir"], relay_conf=relay_conf,
                                  spec_edit=self.spec_edit, nginx=False)
        self.sb.up()

    def down(self):
        if self.sb:
            self.sb.down()

    def deploy(self):
        t = time.monotonic()
        self.dird = self.sb.dird(overrides={
            "dird": {"log_level": "info"},
            "relays": {"heartbeat_interval": "2s", "expire_after": "20s"},
            "groups": {"regroup_interval": "500ms"}})
        conf = {"directory": {"urls": self.dird.url, "list_interval": "1s",
                              "measure_interval": "2s", "measure_rate": 100, "timeout": "3s"}}
        for r in self.sb.relays.values():
            r.stop()
            r.update(conf)
            r.start(timeout=20)

        def converged():
            listing = self.dird.listing()
            if len(listing) != len(RELAYS):
                return None
            if any(r.counters()["dir_reports"] < 2 for r in self.sb.relays.values()):
                return None
            return listing
        slotbed.wait_for(converged, 90, "every relay registered and reporting", interval=0.5)
        self.slotd = self.sb.slotd([], overrides={
            "slotd": {"log_level": "info"},
            "hijack": {"ports": str(PORT_SLOT)},
            # A fresh choice in every repetition.
            "select": {"cache_ttl": "2s"},
            "directory": {"urls": self.dird.url, "refresh": "2s", "retry": "500ms",
                          "cache_file": os.path.join(self.sb.dir, "slotd.relays")}})
        self.slotd.start(wait=False)
        self.slotd.wait_ready(timeout=20)
        self.slotd.wait_relays_up(len(RELAYS), timeout=60)
        # The ranking needs the landmark rows of a listing made after every
        # relay measured the others: wait for slotd to rank by them.
        def ranked():
            c = self.slotd.counters()
            return (c.get("relays_ranked") or 0) >= len(RELAYS) and \
                (c.get("relays_ranked_by_landmarks") or 0) >= 1
        slotbed.wait_for(ranked, 60, "slotd ranking by the directory's landmarks", interval=0.5)
        log("deployed in %.1f s" % (time.monotonic() - t))

    def services(self):
        self.file = self.sb.serve_random_file(FILE_MIB, {
            h: (PORT_SLOT, PORT_DIRECT) if h == "server" else (PORT_DIRECT,)
            for h in ["server"] + [s for _, s in LOOPS if s != "server"]})
        self.sb.haproxy(BEST_SINGLE, {PORT_HAPROXY: (self.sb.ip("server"), PORT_DIRECT)})

    def target(self, mode):
        """(host curl runs in, URL)."""
        if mode == "direct":
            return "client", "http://%s:%d/f/big" % (self.sb.ip("server"), PORT_DIRECT)
        if mode == "slot":
            return "client", "http://%s/f/big" % self.sb.ip("server")
        if mode == "single":
            return "client", "http://%s:%d/f/big" % (self.sb.ip(BEST_SINGLE), PORT_HAPROXY)
        recv, send = mode[5:].split("<")
        return recv, "http://%s:%d/f/big" % (self.sb.ip(send), PORT_DIRECT)

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

    def curl(self, mode, seconds):
        """Mbit/s from the first byte, after checking the bytes received are
        the file's first bytes."""
        host, url = self.target(mode)
        path = os.path.join(self.sb.dir, "dl")
        err = None
        for _ in range(3):
            if os.path.exists(path):
                os.unlink(path)
            r = self.sb.bed.run(host, "curl", "-sS", "-o", path, "--max-time", "%g" % seconds,
                                "-w", "%{http_code} %{size_download} %{time_starttransfer} "
                                "%{time_total}", url, check=False, timeout=seconds + 60)
            w = r.stdout.split()
            if r.returncode in (0, 28) and len(w) == 4 and w[0] == "200" and \
                    float(w[3]) - float(w[2]) >= seconds / 2:
                size = int(w[1])
                got = hashlib.sha256(open(path, "rb").read()).hexdigest()
                os.unlink(path)
                if size == 0 or got != self.prefix_sha(size):
                    raise RuntimeError("%s: the bytes received are not the file's" % mode)
                return size * 8 / (float(w[3]) - float(w[2])) / 1e6
            err = "curl exit %d: %s %s" % (r.returncode, r.stdout, r.stderr[-300:])
            time.sleep(1)
        raise RuntimeError("%s: %s" % (mode, err))

    def relay_names(self):
        """{control endpoint: relay host}."""
        return {self.sb.relay(r).control: r for r in RELAYS}

    def new_decisions(self):
        """slotd's new choices for the server (cache misses): [path], a path
        being the list of relay hosts in order ([] for direct)."""
        names = self.relay_names()
        server = "%s:%d" % (self.sb.ip("server"), PORT_SLOT)
        out = []
        for d in self.slotd.recent():
            key = (d["client"], d["server"])
            if d["cached"] or d["server"] != server or key in self.seen:
                continue
            self.seen.add(key)
            out.append(path_of(d, names))
        return out


def path_of(d, names):
    """The relays of a decision in order (control endpoints: "relay", then
    its "chain", the relays after it); [] if direct."""
    if d.get("verdict") != "relay":
        return []
    eps = [d.get("relay")] + list(d.get("chain") or [])
    return [names.get(e, e) for e in eps]


def loop_rtt(path):
    hops = ["client"] + path + ["server"]
    return max(rtt(a, b) for a, b in zip(hops, hops[1:]))


def plot(res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = ["direct\n%d ms" % rtt("client", "server"), "slot\n(slotd's choice)",
              "HAProxy on a\nbest single, %d ms" % loop_rtt([BEST_SINGLE]),
              "chain's ideal\nslowest loop alone, %d ms" % loop_rtt(CHAIN)]
    series = [[r["direct"] for r in res], [r["slot"] for r in res], [r["single"] for r in res],
              [min(r[m] for m in MODES if m.startswith("loop:")) for r in res]]
    meds = [statistics.median(v) for v in series]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.bar(range(len(series)), meds, 0.6,
           yerr=[[m - min(v) for m, v in zip(meds, series)],
                 [max(v) - m for m, v in zip(meds, series)]], capsize=4,
           color=["#7f7f7f", "#1f77b4", "#ff7f0e", "#2ca02c"])
    ax.set_xticks(range(len(series)))
    ax.set_xticklabels(labels, fontsize=9)
    ax.set_ylabel("download rate (Mbit/s)")
    ax.set_title("Scenario 8: a chain of two relays (longest loop: path RTT under each bar), "
                 "median of %d" % len(res), fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(res, paths, args, info):
    ideal = [min(r[m] for m in MODES if m.startswith("loop:")) for r in res]
    o = []
    o.append("## A chain of two relays (scenario 8)\n")
    o.append(
        "Seven hosts of the test bed on the emulated WAN: the client, the server, five relays and "
        "slot-dird (%d ms from everybody). RTTs (ms): client-server %d (inflated, as long paths "
        "often are); the best single relay `a` %d / %d (client-relay / relay-server), the others "
        "`b` %d / %d, `c` %d / %d, `r1` %d / %d, `r2` %d / %d; and `r1`-`r2` %d, so the chain "
        "client > r1 > r2 > server has three loops of %d ms. %d Mbit/s access links both ways, no "
        "loss, cubic, `net.ipv4.tcp_rmem = %s` on every host: each path is window-limited, its "
        "rate about a window over its longest loop (as scenario 1). The whole deployment runs: the "
        "relays register with slot-dird, measure each other and report; slotd has only the "
        "directory's URL and its product defaults (strategy cover, k = 20, chains as configured "
        "by default: `max_chain`, `chain_gain`), hijacks port %d, and decides by itself (cache "
        "TTL 2 s, so each repetition is a new decision). Per repetition, one after the other in a "
        "rotating order, curl downloads a %d MiB file from nginx for %g s (--max-time; rate from "
        "the first byte; bytes checked with sha256): direct (port %d, not hijacked); slot (port "
        "%d); `single`: HAProxy in relay `a`, the best single relay, statically configured for the "
        "server; and each loop of the chain alone (from an nginx in its sending host). The "
        "chain's **ideal** is its slowest loop measured alone in the same repetition. %d "
        "repetitions; median [min-max]; tree %s.\n" % (
            DIR_RTT, rtt("client", "server"), rtt("client", "a"), rtt("a", "server"),
            rtt("client", "b"), rtt("b", "server"), rtt("client", "c"), rtt("c", "server"),
            rtt("client", "r1"), rtt("r1", "server"), rtt("client", "r2"), rtt("r2", "server"),
            rtt("r1", "r2"), rtt("r1", "r2"), RATE, RMEM, PORT_SLOT, FILE_MIB, args.seconds,
            PORT_DIRECT, PORT_SLOT, args.reps, info["tree"]))
    o.append("| path | longest loop ms | Mbit/s | slot / this |")
    o.append("|---|---|---|---|")
    slot = [r["slot"] for r in res]
    labels = {"direct": ("direct", rtt("client", "server")),
              "slot": ("slot (chosen by slotd)", None),
              "single": ("HAProxy on `a`, the best single relay", loop_rtt([BEST_SINGLE]))}
    for m in MODES:
        if m.startswith("loop:"):
            recv, send = m[5:].split("<")
            lab, lr = "loop %s > %s alone" % (send, recv), rtt(send, recv)
        else:
            lab, lr = labels[m]
        ratio = [s / r[m] for s, r in zip(slot, res)] if m != "slot" else None
        o.append("| %s | %s | %s | %s |" % (lab, lr if lr else "-", fmt([r[m] for r in res]),
                                           fmt(ratio) if ratio else "1"))
    o.append("| **chain's ideal** (slowest loop alone) | %d | %s | %s |" % (
        loop_rtt(CHAIN), fmt(ideal), fmt([s / i for s, i in zip(slot, ideal)])))
    o.append("")
    chosen = {}
    for p in paths:
        k = " > ".join(p) if p else "direct"
        chosen[k] = chosen.get(k, 0) + 1
    o.append("slotd's choices (new decisions during the measured transfers): %s." % "; ".join(
        "%s %d of %d (longest loop %d ms)" % (k, n, len(paths),
                                              loop_rtt(k.split(" > ")) if k != "direct"
                                              else rtt("client", "server"))
        for k, n in sorted(chosen.items(), key=lambda x: -x[1])))
    o.append("")
    rs = [s / i for s, i in zip(slot, ideal)]
    gain = [s / r["single"] for s, r in zip(slot, res)]
    took = sum(1 for p in paths if p == CHAIN)
    o.append("Targets (issue 17): slot chooses the chain by itself: %s (%d of %d decisions); "
             "slot moves >= 0.9x the chain's ideal: %.2f (min %.2f, max %.2f), **%s**. Gain over "
             "the best single relay (HAProxy on `a`): %.2fx (median; min %.2f, max %.2f)." % (
                 "met" if took == len(paths) and paths else "**not met**", took, len(paths),
                 statistics.median(rs), min(rs), max(rs),
                 "met" if statistics.median(rs) >= 0.9 else "not met",
                 statistics.median(gain), min(gain), max(gain)))
    o.append("")
    o.append(info.get("png_note") or "![scenario 8](img/%s)\n" % os.path.basename(info["png"]))
    o.append("Reproduce: `/usr/bin/python3 scripts/bench/e2e_chain.py --reps %d` (root, after "
             "`make all`; this run: %.0f s), or `make bench`.\n" % (args.reps, info["elapsed"]))
    return "\n".join(o) + "\n"


def main():
    global slotbed
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=12)
    ap.add_argument("--quick", action="store_true", help="2 repetitions of 6 s (a smoke run)")
    ap.add_argument("--build", default=os.environ.get("SLOT_BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench", "e2e_chain.md"))
    ap.add_argument("--check", action="store_true",
                    help="check what the run and its report need, then exit")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.seconds = min(args.reps, 2), 6
    args.build = os.path.abspath(args.build)
    _needs.check("e2e_chain", args, modules=("matplotlib", "cryptography"), tools=("haproxy", "curl", "nginx"),
                 files=[os.path.join(args.build, b)
                        for b in ("slot-relayd", "slotd", "slot-dird", "slot-wanem")])
    os.environ["SLOT_BUILD"] = args.build
    sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
    sys.path.insert(0, os.path.join(ROOT, "tests", "testbed"))
    import slotbed as sbmod
    slotbed = sbmod
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    tree = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip() or "unknown"
    t0 = time.monotonic()
    c = Chain(args)
    res, paths = [], []
    try:
        c.up()
        c.deploy()
        c.services()
        c.curl("slot", 3)           # warm-up, not counted
        c.new_decisions()
        for rep in range(args.reps):
            time.sleep(2.2)         # the last choice expires: a new decision
            r = {}
            order = MODES[rep % len(MODES):] + MODES[:rep % len(MODES)]
            for m in order:
                r[m] = c.curl(m, args.seconds)
            p = c.new_decisions()
            paths += p
            res.append(r)
            log("rep %d: %s; slotd chose %s" % (rep + 1, ", ".join(
                "%s %.1f" % (m, r[m]) for m in MODES), [" > ".join(x) or "direct" for x in p]))
        if paths and any(p == CHAIN for p in paths):
            log("slotd log (chain lines): %s" % [l for l in c.slotd.log().splitlines()
                                                 if ">" in l][-3:])
    finally:
        c.down()
    info = {"tree": tree, "elapsed": time.monotonic() - t0}
    img = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(args.out))), "img")
    os.makedirs(img, exist_ok=True)
    info["png"] = os.path.join(img, "bench_chain.png")
    _, info["png_note"] = _needs.draw("e2e_chain", "rates per path", plot, res, info["png"])
    text = report(res, paths, args, info)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Scenario 1 (the window-limited triangle of e2e_throughput.py) through a
slot gateway: does a LAN host behind slotd in gateway mode get the gain of a
client that runs slotd itself?

Test bed: client-server 80 ms, client-relay1 and relay1-server 40 ms each (a
decoy relay2 at 60 + 60 ms), 100 Mbit/s access links, cubic, tcp_rmem max
262144 on every host; pc1 on a routed LAN behind the client host, which runs
slotd with [hijack] mode = both (the LAN's connections and its own). One
iperf3 -R download per path and repetition (server -> downloader, 10 s),
the paths in rotating order: the client direct (a port slotd does not
hijack), the client through slot, pc1 direct, pc1 through slot. Before and
after, pc1 downloads a 2 MiB file through slot with curl, checked by sha256,
and nginx must see relay1. Prints a Markdown table (median [min-max], and
the ratios taken within each repetition).

Run as root after `make all`:
    /usr/bin/python3 scripts/bench/gateway_throughput.py [--reps 3] [--seconds 10]
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

import _needs  # scripts/bench/_needs.py: checked before measuring

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "testbed"))

RMEM = "4096 131072 262144"
RATE = 100
P_SLOT, P_DIRECT = 5201, 5202           # 5201 is hijacked, 5202 is not
PATHS = ("client direct", "client slot", "pc1 direct", "pc1 slot")
SYSCTLS = {"net.ipv4.tcp_congestion_control": "cubic", "net.ipv4.tcp_rmem": RMEM,
           "net.ipv4.tcp_no_metrics_save": 1}


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def rate(spec):
    spec["host_defaults"]["rate"] = RATE


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--out", help="write the section of docs/benchmarks.md here too")
    ap.add_argument("--check", action="store_true",
                    help="check what the run and its report need, then exit")
    args = ap.parse_args()
    import slotbed
    _needs.check("gateway_throughput", args, tools=("iperf3", "nginx", "curl"),
                 files=(slotbed.SLOTD, slotbed.RELAYD))

    sb = slotbed.SlotBed({"relay1": (40, 40), "relay2": (60, 60)}, direct_rtt=80,
                         other_rtt=10, host_sysctls=SYSCTLS, spec_edit=rate,
                         relay_conf={"relay": {"log_level": "info"}},
                         lans=[{"name": "office", "gateway": "client", "masquerade": False,
                                "hosts": [{"name": "pc1", "sysctls": SYSCTLS}]}])
    sb.up()
    t0 = time.monotonic()
    try:
        sha = sb.nginx.add_file("check", 2 << 20)
        sb.nginx.start()
        for port in (P_SLOT, P_DIRECT):
            p = sb.bed.popen("server", ["iperf3", "-s", "-B", sb.ip("server"), "-p", str(port)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            sb.bed.wait_listen("server", port, p)
        br = sb.bed.lan_bridge(sb.bed.topo.lans[0])
        s = sb.slotd([sb.relay("relay1"), sb.relay("relay2")],
                     {"slotd": {"log_level": "info"},
                      "hijack": {"mode": "both", "lan_interfaces": br}}).start()
        backend = "nft" if "rules: nft backend" in s.log() else "iptables"
        r1 = sb.relay("relay1")

        def check(tag):
            r = sb.curl(sb.nginx.url("check", query=tag), host="pc1", timeout=120)
            peer = sb.nginx.peer_of(tag)
            if r.rc != 0 or r.sha != sha or peer != r1.ip:
                raise RuntimeError("pc1's check download: %r, nginx saw %s" % (r, peer))
            log("pc1 curl 2 MiB through relay1, sha256 ok")

        check("gw-check-1")
        res = {p: [] for p in PATHS}
        for rep in range(args.reps):
            order = PATHS[rep % len(PATHS):] + PATHS[:rep % len(PATHS)]
            for path in order:
                host, how = path.split()
                j = sb.bed.iperf3_client(host, sb.ip("server"),
                                         port=P_SLOT if how == "slot" else P_DIRECT,
                                         seconds=args.seconds, args=["-R"],
                                         timeout=args.seconds + 90)
                mbps = j["end"]["sum_received"]["bits_per_second"] / 1e6
                if how == "slot":
                    lp = j["start"]["connected"][0]["local_port"]
                    d = s.decision(client="%s:%d" % (sb.ip(host), lp))
                    if d["verdict"] != "relay" or d["relay"] != r1.control:
                        raise RuntimeError("%s: went %r, not through relay1" % (path, d))
                res[path].append(mbps)
                log("rep %d %-14s %6.2f Mbit/s" % (rep + 1, path, mbps))
        check("gw-check-2")
        assert s.stop() == 0
    finally:
        sb.down()

    def mr(v, f="%.1f"):
        return (f + " [" + f + "-" + f + "]") % (statistics.median(v), min(v), max(v))

    def ratio(a, b):
        return [x / y for x, y in zip(res[a], res[b])]
    out = ["## Scenario 1 through a LAN gateway (issue 15)", "",
           "Scenario 1's window-limited triangle (client-server 80 ms, client-relay1 and "
           "relay1-server 40 ms each, a decoy relay2 at 60 + 60 ms, %d Mbit/s, cubic, "
           "tcp_rmem max 262144 on every host) with a routed LAN behind the client host: pc1, "
           "with nothing of slot installed, downloads through slotd on its gateway (`[hijack] "
           "mode = both`, `lan_interfaces` the LAN's bridge). One iperf3 -R download (%g s) "
           "per path and repetition, %d repetitions in rotating order; pc1 also fetches 2 MiB "
           "with curl through relay1 before and after (sha256 checked, nginx saw relay1). "
           "Rules backend: %s." % (RATE, args.seconds, args.reps, backend), "",
           "| path | Mbit/s, median [min-max] | slot / direct, same host |",
           "|---|---|---|"]
    for p in PATHS:
        host, how = p.split()
        r = mr(ratio("%s slot" % host, "%s direct" % host), "%.2f") if how == "slot" else ""
        out.append("| %s | %s | %s |" % (p, mr(res[p]), r))
    out += ["", "pc1 through the gateway / the client itself, both through slot: %s. "
            "Reproduce: `/usr/bin/python3 scripts/bench/gateway_throughput.py --reps %d` "
            "(root, after `make all`; %.0f s)." % (mr(ratio("pc1 slot", "client slot"), "%.2f"),
                                                  args.reps, time.monotonic() - t0), ""]
    text = "\n".join(out)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()

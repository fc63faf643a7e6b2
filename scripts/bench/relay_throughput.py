#!/usr/bin/python3
"""Single-stream throughput and CPU of slot-relayd against HAProxy, socat and
plain kernel forwarding, side by side in one run.

Topology (veth, no delay, namespaces named after the pid of the run):

    client 10.71.1.2 <-> 10.71.1.1 relay 10.71.2.1 <-> 10.71.2.2 server

Every middle box runs in the relay namespace at the same time on its own
port; the client sends one stream through each in turn with
build/tests/slot-bench-peer (same send path for all), the server discards it
with the same tool. Repetitions are interleaved (each repetition visits every
peer, starting one peer later than the previous one), so machine noise hits
all peers alike. Every figure reported is a median over the repetitions with
min and max; ratios are taken per repetition against the HAProxy reference of
that same repetition.

Reference ("haproxy"): HAProxy mode tcp with option splice-request and
splice-response, nbthread 1 (one stream runs on one thread anyway; the
nbthread-default variant gave the same in earlier runs). option splice-auto is measured as
a variant: HAProxy 2.6 does not splice a single fast stream with it (perf stat:
recv/send of 16 KiB, about 10 splice calls per GB), so it is not "HAProxy with
splice". haproxy-pipesize-256k compares with slot-relayd at equal pipe size.

CPU: utime+stime (+ reaped children, for socat's fork) of the middle-box
process from /proc/PID/stat before and after a transfer, per GB moved; and
the busy time of the whole machine (/proc/stat) per GB, which is the only
figure kernel forwarding has (its work is in softirq).

usage: relay_throughput.py [--reps 7] [--seconds 6] [--out docs/bench/relay_throughput.md]
       [--only NAME,NAME] [--build build]
"""

import argparse
import atexit
import os
import queue
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tests", "testbed"))
from topo import pid_alive, sh  # noqa: E402  (the test bed's helpers)
import _needs  # noqa: E402  (scripts/bench/_needs.py: checked before measuring)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PREFIX = "slb"
PID = os.getpid()
NS_C, NS_R, NS_S = ("%s%d-%s" % (PREFIX, PID, s) for s in ("c", "r", "s"))
NS_RE = re.compile(r"^%s(\d+)-[crs]$" % PREFIX)
CLK_TCK = os.sysconf("SC_CLK_TCK")

C_ADDR, R_C_ADDR, R_S_ADDR, S_ADDR = "10.71.1.2", "10.71.1.1", "10.71.2.1", "10.71.2.2"
SINK_PORT = 5201
REFERENCE = "haproxy"

procs = []          # Popen objects we started, killed on exit
tmpdir = None
namespaces_made = []


def nsx(ns, *args, **kw):
    return sh("ip", "netns", "exec", ns, *args, **kw)


def sweep():
    """Removes namespaces of earlier runs of this benchmark whose process is gone."""
    for line in sh("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = NS_RE.match(name)
        if m and not pid_alive(int(m.group(1))):
            for p in sh("ip", "netns", "pids", name, check=False).stdout.split():
                try:
                    os.kill(int(p), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            sh("ip", "netns", "del", name, check=False)


def cleanup():
    for p in procs:
        if p.poll() is None:
            try:
                p.kill()
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    procs.clear()
    for ns in namespaces_made:
        # Processes left in the namespace (socat children) go with it.
        for p in sh("ip", "netns", "pids", ns, check=False).stdout.split():
            try:
                os.kill(int(p), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        sh("ip", "netns", "del", ns, check=False)
    namespaces_made.clear()
    if tmpdir and os.path.isdir(tmpdir):
        shutil.rmtree(tmpdir, ignore_errors=True)


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)


def setup_net():
    for ns in (NS_C, NS_R, NS_S):
        sh("ip", "netns", "add", ns)
        namespaces_made.append(ns)
        nsx(ns, "ip", "link", "set", "lo", "up")
    a, b = "sb%dca" % PID, "sb%dcb" % PID      # <= 11 characters
    c, d = "sb%dsa" % PID, "sb%dsb" % PID
    sh("ip", "link", "add", a, "netns", NS_C, "type", "veth", "peer", "name", b, "netns", NS_R)
    sh("ip", "link", "add", c, "netns", NS_S, "type", "veth", "peer", "name", d, "netns", NS_R)
    nsx(NS_C, "ip", "addr", "add", C_ADDR + "/24", "dev", a)
    nsx(NS_R, "ip", "addr", "add", R_C_ADDR + "/24", "dev", b)
    nsx(NS_R, "ip", "addr", "add", R_S_ADDR + "/24", "dev", d)
    nsx(NS_S, "ip", "addr", "add", S_ADDR + "/24", "dev", c)
    for ns, dev in ((NS_C, a), (NS_R, b), (NS_R, d), (NS_S, c)):
        nsx(ns, "ip", "link", "set", dev, "up")
    nsx(NS_C, "ip", "route", "add", "default", "via", R_C_ADDR)
    nsx(NS_S, "ip", "route", "add", "default", "via", R_S_ADDR)
    nsx(NS_R, "sysctl", "-qw", "net.ipv4.ip_forward=1")


def start(ns, args, **kw):
    p = subprocess.Popen(["ip", "netns", "exec", ns] + [str(x) for x in args],
                         stdin=subprocess.DEVNULL, **kw)
    procs.append(p)
    return p


def wait_listen(ns, port, proc, what):
    """Waits until something listens on port in ns (ss), or proc died."""
    for _ in range(100):
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %d" % (what, proc.returncode))
        if (":%d " % port) in nsx(ns, "ss", "-Hltn", check=False).stdout:
            return
        time.sleep(0.05)
    raise RuntimeError("%s does not listen on %d" % (what, port))


# ---- middle boxes ----

class Peer:
    def __init__(self, name, desc, send_args, proc=None):
        self.name, self.desc, self.send_args, self.proc = name, desc, send_args, proc


def start_relayd(build, name, pipe_size, port, binary=None):
    conf = os.path.join(tmpdir, "%s.conf" % name)
    with open(conf, "w") as f:
        f.write("""[relay]
user = nobody
key_file = %(dir)s/key
probe_listen = %(addr)s:%(port)d
control_listen = %(addr)s:%(port)d
data_listen = %(addr)s:%(dport)d
stats_socket = %(dir)s/%(name)s.sock
log_level = warn
%(limits)s[policy]
allow_destinations = 10.71.2.0/24
[auth]
# slot-bench-peer speaks the lab's shared key
mode = shared
""" % {"dir": tmpdir, "addr": R_C_ADDR, "port": port, "dport": port + 1, "name": name,
               "limits": "[limits]\npipe_size = %s\n" % pipe_size if pipe_size else ""})
    p = start(NS_R, [binary or os.path.join(build, "slot-relayd"), "-c", conf])
    wait_listen(NS_R, port + 1, p, name)
    return Peer(name, "slot-relayd%s, pipe_size = %s" % (" " + binary if binary else "",
                                                         pipe_size or "default (256k)"),
                ["--connect", "%s:%d" % (S_ADDR, SINK_PORT), "--relay", "%s:%d" % (R_C_ADDR, port),
                 "--data-port", port + 1, "--key", os.path.join(tmpdir, "key")], p)


def start_haproxy(name, port, splice, nbthread, pipesize=None):
    cfg = os.path.join(tmpdir, "%s.cfg" % name)
    with open(cfg, "w") as f:
        f.write("global\n    maxconn 1000\n")
        if nbthread:
            f.write("    nbthread %d\n" % nbthread)
        if pipesize:
            f.write("    tune.pipesize %d\n" % pipesize)
        f.write("defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 1m\n"
                "    timeout server 1m\n")
        f.write("frontend fe\n    bind %s:%d\n    default_backend be\n" % (R_C_ADDR, port))
        f.write("backend be\n")
        for opt in splice:
            f.write("    option %s\n" % opt)
        f.write("    server s %s:%d\n" % (S_ADDR, SINK_PORT))
    p = start(NS_R, ["haproxy", "-db", "-f", cfg], stdout=subprocess.DEVNULL)
    wait_listen(NS_R, port, p, name)
    desc = "HAProxy %s, mode tcp, %s, nbthread %s%s" % (
        haproxy_version(), " + ".join("option " + s for s in splice) or "no splice",
        nbthread or "default (%d)" % os.cpu_count(),
        ", tune.pipesize %d" % pipesize if pipesize else "")
    return Peer(name, desc, ["--connect", "%s:%d" % (R_C_ADDR, port)], p)


def haproxy_version():
    out = sh("haproxy", "-v", check=False).stdout.split()
    return out[2] if len(out) > 2 else "?"


def start_socat(name, port):
    p = start(NS_R, ["socat", "TCP-LISTEN:%d,bind=%s,fork,reuseaddr" % (port, R_C_ADDR),
                     "TCP:%s:%d" % (S_ADDR, SINK_PORT)])
    wait_listen(NS_R, port, p, name)
    ver = sh("socat", "-V", check=False).stdout
    m = re.search(r"socat version (\S+)", ver)
    return Peer(name, "socat %s TCP-LISTEN fork (user-space copy)" % (m.group(1) if m else "?"),
                ["--connect", "%s:%d" % (R_C_ADDR, port)], p)


def kernel_peer():
    return Peer("kernel", "plain kernel IPv4 forwarding in the relay namespace (no proxy)",
                ["--connect", "%s:%d" % (S_ADDR, SINK_PORT)])


# ---- measurement ----

def proc_cpu(pid):
    """utime+stime of the process and its reaped children, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is state (field 3); utime is field 14 -> index 11.
    return sum(int(x) for x in fields[11:15]) / CLK_TCK


def machine_busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return (sum(v[:8]) - idle) / CLK_TCK


def has_children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return bool(f.read().split())
    except OSError:
        return False


class Sink:
    def __init__(self, build):
        self.q = queue.Queue()
        self.p = start(NS_S, [os.path.join(build, "tests", "slot-bench-peer"), "sink",
                              "--listen", "%s:%d" % (S_ADDR, SINK_PORT)],
                       stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        if self.q.get(timeout=10) != "listening":
            raise RuntimeError("sink did not start")

    def _read(self):
        for line in self.p.stdout:
            self.q.put(line.strip())

    def next_conn(self, timeout):
        line = self.q.get(timeout=timeout)
        return dict(kv.split("=", 1) for kv in line.split()[1:])


def transfer(build, peer, sink, seconds):
    cpu0 = proc_cpu(peer.proc.pid) if peer.proc else None
    m0 = machine_busy()
    r = subprocess.run(["ip", "netns", "exec", NS_C, os.path.join(build, "tests", "slot-bench-peer"),
                        "send", "--seconds", str(seconds)] + [str(a) for a in peer.send_args],
                       capture_output=True, text=True, timeout=seconds + 90)
    if r.returncode != 0:
        raise RuntimeError("%s: send exit %d: %s" % (peer.name, r.returncode, r.stderr.strip()))
    sent = dict(kv.split("=", 1) for kv in r.stdout.split()[1:])
    got = sink.next_conn(timeout=30)
    if int(got["bytes"]) != int(sent["bytes"]):
        raise RuntimeError("%s: sent %s bytes, sink got %s" % (peer.name, sent["bytes"], got["bytes"]))
    m1 = machine_busy()
    cpu = None
    if peer.proc:
        for _ in range(100):    # socat: the forked child must be reaped first
            if not has_children(peer.proc.pid):
                break
            time.sleep(0.02)
        cpu = proc_cpu(peer.proc.pid) - cpu0
    gb = int(sent["bytes"]) / 1e9
    return {"gbps": float(sent["gbps"]), "cpu_per_gb": cpu / gb if cpu is not None else None,
            "machine_per_gb": (m1 - m0) / gb}


def fmt_range(vals, f="%.2f"):
    if not vals or any(v is None for v in vals):
        return "n/a"
    return (f + " (" + f + " - " + f + ")") % (statistics.median(vals), min(vals), max(vals))


def main():
    global tmpdir
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--build", default=os.environ.get("SLOT_BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench", "relay_throughput.md"))
    ap.add_argument("--only", default="", help="comma-separated peer names")
    ap.add_argument("--compare-relayd", default="", metavar="PATH",
                    help="also run this slot-relayd binary as peer slot-relayd-B, "
                    "to A/B a change side by side")
    ap.add_argument("--compare-pipe-size", default="64k", metavar="SIZE",
                    help="pipe_size of slot-relayd-B (default 64k)")
    ap.add_argument("--check", action="store_true",
                    help="check what the run and its report need, then exit")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    _needs.check("relay_throughput", args, tools=("haproxy", "socat", "ss"),
                 files=[os.path.join(build, b) for b in ("slot-relayd", "tests/slot-bench-peer")])

    atexit.register(cleanup)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    sweep()
    tmpdir = tempfile.mkdtemp(prefix="slot-bench-")
    with open(os.open(os.path.join(tmpdir, "key"), os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    setup_net()

    sink = Sink(build)
    peers = [
        start_relayd(build, "slot-relayd", None, 7600),
        start_relayd(build, "slot-relayd-64k", "64k", 7610),
        start_relayd(build, "slot-relayd-1M", "1M", 7620),
        start_haproxy("haproxy", 7700, ["splice-request", "splice-response"], 1),
        start_haproxy("haproxy-pipesize-256k", 7703, ["splice-request", "splice-response"], 1,
                      256 << 10),
        start_haproxy("haproxy-splice-auto", 7701, ["splice-auto"], 1),
        start_socat("socat", 7800),
        kernel_peer(),
    ]
    if args.compare_relayd:
        peers.insert(1, start_relayd(os.path.dirname(os.path.abspath(args.compare_relayd)),
                                     "slot-relayd-B", args.compare_pipe_size, 7630,
                                     binary=os.path.abspath(args.compare_relayd)))
    if args.only:
        keep = set(args.only.split(",")) | {REFERENCE, "slot-relayd-B"}
        peers = [p for p in peers if p.name in keep]
    names = [p.name for p in peers]

    for p in peers:             # warm-up, not counted
        transfer(build, p, sink, 1)
    res = {n: [] for n in names}
    for rep in range(args.reps):
        order = peers[rep % len(peers):] + peers[:rep % len(peers)]
        for p in order:
            r = transfer(build, p, sink, args.seconds)
            res[p.name].append(r)
            print("rep %d %-22s %6.2f Gbit/s  cpu %s s/GB  machine %.2f s/GB" % (
                rep + 1, p.name, r["gbps"],
                "%.3f" % r["cpu_per_gb"] if r["cpu_per_gb"] is not None else "n/a",
                r["machine_per_gb"]), file=sys.stderr, flush=True)

    ref = [r["gbps"] for r in res[REFERENCE]]
    out = []
    out.append("## Single-stream relay throughput (veth, no delay)\n")
    out.append("One TCP stream, client -> middle box -> server, through namespaces joined by "
               "veth (no delay, no loss, default offloads), %d interleaved repetitions of "
               "%g s each after a 1 s warm-up per peer. Figures: median (min - max). "
               "Ratio = peer / `%s` in the same repetition. CPU of the middle box = "
               "utime+stime of its process per GB moved; machine = busy CPU time of the "
               "whole machine (sender, sink, middle box, softirq) per GB.\n"
               % (args.reps, args.seconds, REFERENCE))
    out.append("| peer | Gbit/s | ratio to HAProxy | middle box CPU s/GB | machine CPU s/GB |")
    out.append("|---|---|---|---|---|")
    for n in names:
        g = [r["gbps"] for r in res[n]]
        ratios = [a / b for a, b in zip(g, ref)]
        out.append("| `%s` | %s | %s | %s | %s |" % (
            n, fmt_range(g), fmt_range(ratios), fmt_range([r["cpu_per_gb"] for r in res[n]], "%.3f"),
            fmt_range([r["machine_per_gb"] for r in res[n]])))
    out.append("")
    for p in peers:
        out.append("- `%s`: %s" % (p.name, p.desc))
    out.append("")
    if "slot-relayd" in res:
        rl = [a["gbps"] / b["gbps"] for a, b in zip(res["slot-relayd"], res[REFERENCE])]
        rr = statistics.median(rl)
        out.append("**Target slot-relayd >= 1.0x HAProxy: %s** (median ratio %.2f, min %.2f, "
                   "max %.2f; slot-relayd and HAProxy each with its default pipe size, 256k and 64k, "
                   "against `%s`)."
                   % ("met" if rr >= 1.0 else "not met", rr, min(rl), max(rl), REFERENCE))
        hv = [n for n in names if n.startswith("haproxy")]
        parts = ["`%s` %.2fx" % (n, statistics.median(a["gbps"] / b["gbps"] for a, b in
                                                       zip(res["slot-relayd"], res[n]))) for n in hv]
        out.append("slot-relayd (default) against each HAProxy variant, median of per-repetition "
                   "ratios: %s.\n" % ", ".join(parts))
        sizes = [n for n in names if n.startswith("slot-relayd")]
        if len(sizes) > 1:
            base = [r["gbps"] for r in res["slot-relayd"]]
            parts = ["%s %.2fx" % (n, statistics.median(a["gbps"] / b for a, b in zip(res[n], base)))
                     for n in sizes]
            out.append("pipe_size, throughput relative to the default 256k in the same "
                       "repetition: %s.\n"
                       % ", ".join(parts))
        if "haproxy-pipesize-256k" in res:
            out.append("At equal kernel pipe size (256 KiB), slot-relayd / haproxy-pipesize-256k: "
                       "%s.\n" % fmt_range([a["gbps"] / b["gbps"] for a, b in
                                            zip(res["slot-relayd"], res["haproxy-pipesize-256k"])]))
    if "slot-relayd" in res and "kernel" in res and "haproxy-splice-auto" in res:
        med = lambda n: statistics.median(a["gbps"] / b for a, b in zip(res[n], ref))
        out.append("What it means: with no delay the single stream is CPU-bound on this machine "
                   "(sender, sink, middle box and softirq share %d cores), so the table compares "
                   "the cost per byte of each middle box. slot-relayd and `haproxy` (forced "
                   "splice) both move bytes with splice(2) through kernel pipes (256 KiB and 64 KiB by "
                   "default; a larger pipe means fewer syscalls per byte); "
                   "with `option splice-auto`, HAProxy 2.6 did not splice this stream (perf stat "
                   "showed recv/send through its buffers, not splice) and lands at %.2fx, socat copies too (%.2fx). "
                   "Kernel forwarding, with no socket termination at all, is the ceiling at "
                   "%.2fx.\n" % (os.cpu_count(), med("haproxy-splice-auto"), med("socat"),
                                 med("kernel")))
    out.append("Reproduce: `make bench` (root), or `/usr/bin/python3 "
               "scripts/bench/relay_throughput.py --reps %d --seconds %g` after `make all`.\n"
               % (args.reps, args.seconds))
    text = "\n".join(out) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()

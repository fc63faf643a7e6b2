#!/usr/bin/python3
"""Scenario 6 of issue 7: scale on one relay. slot-relayd against HAProxy on
the same node, side by side in one run:

  (a) busy: 1,000 concurrent pipes, each sending for S seconds: aggregate
      throughput, CPU of the middle box (utime+stime from /proc/PID/stat) per
      GB moved, its peak RSS;
  (b) idle: 10,000 pipes set up and held idle: VmRSS of the middle box with
      them minus VmRSS before (a fresh process after a warm-up of 100 pipes),
      per pipe (kernel socket buffers are not in VmRSS);
  (c) set-up rate: the 10,000 pipes of (b), set up with at most 256 in
      progress at once: pipes per second from the first request to the
      10,000th first byte at the server, and the CPU of the middle box per
      pipe set up.

Topology: tests/testbed/topo.py through tests/integration/slotbed.py, three
hosts (client, relay, server) on the router namespace with plain kernel
forwarding (no slot-wanem, no tbf: zero delay). The load is
build/tests/slot-bench-peer: "swarm" in the client speaks slot's control
protocol to the relay (PIPE_ESTABLISH pipelined on one authenticated control
connection, then the data connection from the announced endpoint) or
connects to HAProxy's port; "msink" in the server accepts everything in one
epoll loop and discards it. slotd and NFQUEUE are not in the path: one slotd
would be the bottleneck of the set-up rate (each SYN is a queued packet and a
decision), and this scenario is about the relay.

Peers: slot-relayd (as nobody, [limits] max_pipes and max_pending_per_client
30000, max_control_connections and [probe] max_inflight 16, pipe_size default
256k, log_level warn, RLIMIT_NOFILE 65536 when the machine lets us raise it) and HAProxy (mode tcp, splice both ways, nbthread
1; maxconn 4000 for (a), maxconn above the idle count and maxpipes 16 for (b)
and (c)), both in the relay host. The relay runs as nobody, whose kernel
pipes beyond fs.pipe-user-pages-soft get two pages each: the script raises
that global sysctl to 262144 pages (1 GiB) for the run and puts the old value
back on exit (kpipes_undersized is reported). Where the descriptor hard limit
cannot be raised (no CAP_SYS_RESOURCE), (b) holds as many pipes as it allows
and says so: slot-relayd admits what fits at 6 descriptors each (two sockets
and the two kernel pipes accounted to it, made only when bytes flow) once its
other users' caps and a margin are set aside (src/relay/kpipe.h).

Last, unless --no-strace, one more set-up of 2,000 pipes per peer runs under
strace -c, for the system calls each pipe costs (not timed).

usage: e2e_scale.py [--reps 5] [--quick] [--out docs/bench/e2e_scale.md]
       [--busy 1000] [--idle 10000] [--seconds 5] [--window 256] [--no-strace]
       [--build DIR]
"""

import argparse
import os
import queue
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time

import _needs  # scripts/bench/_needs.py: checked before measuring; figures that may fail

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLK_TCK = os.sysconf("SC_CLK_TCK")
FDS_PER_PIPE = 6    # slot-relayd: two sockets, two kernel pipes accounted (docs/relay.md)
# What slot-relayd sets aside from RLIMIT_NOFILE before admitting pipes
# (src/relay/kpipe.h, kpipe_limit): its control connections' and probes' caps
# (set low here: one control connection, no probes), two descriptors per
# pooled kernel pipe (8 MiB / pipe_size of them) and a fixed margin.
RELAY_CTRL_MAX = 16
RELAY_INFLIGHT_MAX = 16
RELAY_LINKS_MAX = 16
# five per measurement: a port per SYN sent (SYNP_MAX_TX 4) and one held
RELAY_FDS_ASIDE = (RELAY_CTRL_MAX + 5 * RELAY_INFLIGHT_MAX + RELAY_LINKS_MAX +
                   2 * (8 << 20) // (256 << 10) + 512)
PAGE = os.sysconf("SC_PAGE_SIZE")
SINK_PORT = 9000
HAPROXY_PORT = 8000
PIPE_SOFT = "/proc/sys/fs/pipe-user-pages-soft"
PIPE_SOFT_RUN = 262144          # pages: 1000 pipes x 2 directions x 64 pages, twice over
NOFILE = 65536
TARGET_IDLE_KIB = 16.0

slotbed = None                  # imported in main(), after SLOT_BUILD is set
_pipe_soft_old = None


# ---------------------------------------------------------------- helpers

def proc_cpu(pid):
    """utime+stime of a process, seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_stime(pid):
    """stime of a process, seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[12]) / CLK_TCK


def vm_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for %d" % pid)


def fmt_range(vals, f="%.2f"):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "n/a"
    return (f + " (" + f + " - " + f + ")") % (statistics.median(vals), min(vals), max(vals))


def med(vals):
    return statistics.median(vals)


def set_pipe_soft():
    global _pipe_soft_old
    with open(PIPE_SOFT) as f:
        old = int(f.read())
    if old != 0 and old < PIPE_SOFT_RUN:
        _pipe_soft_old = old
        with open(PIPE_SOFT, "w") as f:
            f.write("%d\n" % PIPE_SOFT_RUN)
    return old


def restore_pipe_soft():
    """Puts the old value back, unless somebody changed it meanwhile."""
    global _pipe_soft_old
    if _pipe_soft_old is None:
        return
    try:
        with open(PIPE_SOFT) as f:
            now = int(f.read())
        if now == PIPE_SOFT_RUN:
            with open(PIPE_SOFT, "w") as f:
                f.write("%d\n" % _pipe_soft_old)
    except OSError:
        pass
    _pipe_soft_old = None


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)



# Pipes set up once more under strace -c, per peer (system calls per pipe).
STRACE_PIPES = 2000


def idle_maxconn(args):
    """HAProxy's maxconn for (b) and (c): room for the idle pipes, and for
    the strace pass's set-up, which a smaller --idle would stall."""
    return max(args.idle, STRACE_PIPES) + 20

class RssSampler:
    """VmRSS of pid every 0.1 s until stop(): the peak, KiB."""

    def __init__(self, pid):
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, vm_rss_kib(self.pid))
            except (OSError, RuntimeError):
                pass
            self._stop.wait(0.1)

    def stop(self):
        self._stop.set()
        self.t.join()
        return self.peak


# ---------------------------------------------------------------- the bed

class Bench:
    def __init__(self, args):
        self.args = args
        self.bp = os.path.join(args.build, "tests", "slot-bench-peer")
        self.sb = None
        self.sink = None
        self.sinkq = queue.Queue()
        self.relay = None
        self.haproxy = None
        # Descriptors: six per pipe in slot-relayd (two sockets, and two
        # kernel pipes accounted when it accepts the pipe, issue 14), past
        # what it sets aside. Raising the hard limit takes CAP_SYS_RESOURCE;
        # without it (some containers) the idle count is cut to what the
        # hard limit allows, and the report says so.
        self.hard_nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        self.nofile = self.hard_nofile
        if subprocess.run(["prlimit", "--nofile=%d:%d" % (NOFILE, NOFILE), "--", "true"],
                          capture_output=True).returncode == 0:
            self.nofile = max(NOFILE, self.hard_nofile)
        room = (self.nofile - RELAY_FDS_ASIDE) // FDS_PER_PIPE // 100 * 100
        self.idle_cut = args.idle > room
        if self.idle_cut:
            args.idle = room

    def up(self):
        def edit(spec):
            spec["wanem"] = {"enabled": False}          # plain forwarding, zero delay
        sysctls = {"net.ipv4.ip_local_port_range": "1024 65535",
                   "net.ipv4.tcp_tw_reuse": 1,
                   "net.core.somaxconn": 8192,
                   "net.ipv4.tcp_max_syn_backlog": 16384,
                   "net.ipv4.tcp_congestion_control": "cubic"}
        relay_conf = {"relay": {"log_level": "warn"},
                      "probe": {"max_inflight": RELAY_INFLIGHT_MAX},
                      "limits": {"max_pipes": 30000, "max_pending_per_client": 30000,
                                 "max_control_connections": RELAY_CTRL_MAX,
                                 "pending_timeout": "10s", "connect_timeout": "5s",
                                 # one client asks for every pipe: its rate cap
                                 # (PIPE_FAIL CLIENT_LIMIT) is not what is measured
                                 "control_rate": 1000000, "control_burst": 1000000},
                      "chain": {"max_links": RELAY_LINKS_MAX}}
        # slot-bench-peer speaks the lab's shared key, not identities
        self.sb = slotbed.SlotBed({"relay": (0, 0)}, direct_rtt=0, other_rtt=0,
                                  host_sysctls=sysctls, relay_conf=relay_conf, spec_edit=edit,
                                  auth="shared", nginx=False)
        self.sb.up()
        self.relay = self.sb.relays["relay"]
        # slot-relayd raises its descriptor limit to the hard limit: give it room
        # for 10,000 pipes (two sockets each), as LimitNOFILE would under systemd.
        if self.nofile > self.hard_nofile:
            self.relay.stop()
            self.relay.wrapper = ["prlimit", "--nofile=%d:%d" % (self.nofile, self.nofile), "--"]
            self.relay.start()
        # HAProxy: for (a) as slotbed configures it (maxconn 4000: maxpipes
        # defaults to maxconn/4 = 1000, one per busy stream); for (b) and (c)
        # maxconn above the idle count and maxpipes 16 (idle streams hold no
        # pipe), so that its descriptors (2 per connection + 2 per pipe) fit
        # in the limit. Each is its own process on its own port.
        self.haproxy = self.new_haproxy(HAPROXY_PORT, 4000, None)
        self.haproxy_idle = self.new_haproxy(HAPROXY_PORT + 1, idle_maxconn(self.args), 16)
        self.sink = self.sb.bed.popen("server", [self.bp, "msink", "--listen",
                                                 "%s:%d" % (self.sb.ip("server"), SINK_PORT)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self._read_sink, daemon=True).start()
        if self.sinkq.get(timeout=10) != "listening":
            raise RuntimeError("msink did not start")

    def new_haproxy(self, port, maxconn, maxpipes):
        h = slotbed.HAProxy(self.sb, "relay", {port: (self.sb.ip("server"), SINK_PORT)},
                            maxconn=maxconn)
        h.cfg = h.cfg.replace(".cfg", "-%d.cfg" % port)
        h.log_path = h.log_path.replace(".log", "-%d.log" % port)
        with open(h.cfg, "w") as f:
            f.write("global\n    maxconn %d\n    nbthread 1\n" % maxconn)
            if maxpipes:
                f.write("    maxpipes %d\n" % maxpipes)
            f.write("defaults\n    mode tcp\n    timeout connect 5s\n"
                    "    timeout client 10m\n    timeout server 10m\n"
                    "    option splice-request\n    option splice-response\n"
                    "listen l%d\n    bind %s:%d\n    server s %s:%d\n"
                    % (port, self.sb.ip("relay"), port, self.sb.ip("server"), SINK_PORT))
        self.sb.proxies.append(h)
        return h.start()

    def _read_sink(self):
        for line in self.sink.stdout:
            self.sinkq.put(line.strip())

    def down(self):
        if self.sb:
            self.sb.down()

    def sink_expect(self, n):
        """Has the sink count first bytes from 0 again, up to n."""
        while True:                 # lines of earlier runs nobody waited for
            try:
                self.sinkq.get_nowait()
            except queue.Empty:
                break
        self.sink.stdin.write("expect %d\n" % n)
        self.sink.stdin.flush()
        self.sink_wait("expecting", 10)

    def sink_wait(self, prefix, timeout):
        end = time.monotonic() + timeout
        while True:
            try:
                line = self.sinkq.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                raise RuntimeError("msink: no %r line within %ss" % (prefix, timeout))
            if line.startswith(prefix):
                return dict(kv.split("=", 1) for kv in line.split()[1:])

    # -- peers --

    def pid(self, peer):
        return {"slot-relayd": lambda: self.relay.proc.pid,
                "haproxy": lambda: self.haproxy.proc.pid,
                "haproxy-idle": lambda: self.haproxy_idle.proc.pid}[peer]()

    def restart(self, peer):
        if peer == "slot-relayd":
            self.relay.stop()
            self.relay.start()
        else:
            self.haproxy_idle.stop()
            self.haproxy_idle.start()

    def swarm_argv(self, peer, count, seconds, idle=False):
        a = [self.bp, "swarm", "--count", count, "--window", self.args.window,
             "--seconds", seconds]
        if peer == "slot-relayd":
            a += ["--connect", "%s:%d" % (self.sb.ip("server"), SINK_PORT),
                  "--relay", self.relay.control, "--data-port", self.relay.data_port,
                  "--key", self.sb.slotd_key]
        elif peer == "haproxy":
            a += ["--connect", "%s:%d" % (self.sb.ip("relay"), HAPROXY_PORT + (1 if idle else 0))]
        else:       # direct: no middle box (the router forwards)
            a += ["--connect", "%s:%d" % (self.sb.ip("server"), SINK_PORT)]
        return [str(x) for x in a]

    # -- (a) busy pipes --

    def busy(self, peer):
        n, secs = self.args.busy, self.args.seconds
        pid = self.pid(peer) if peer != "direct" else None
        c0 = proc_cpu(pid) if pid else None
        k0 = self.relay.counters() if peer == "slot-relayd" else None
        sampler = RssSampler(pid) if pid else None
        self.sink_expect(n)
        r = self.sb.bed.run("client", *self.swarm_argv(peer, n, secs), check=False,
                            timeout=secs + 120)
        peak = sampler.stop() if sampler else None
        if r.returncode != 0:
            raise RuntimeError("%s busy swarm: exit %d: %s %s" % (peer, r.returncode, r.stdout,
                                                                 r.stderr[-2000:]))
        lines = {l.split()[0]: dict(kv.split("=", 1) for kv in l.split()[1:])
                 for l in r.stdout.splitlines() if l.strip()}
        setup, send = lines["setup"], lines["send"]
        if int(setup["ok"]) != n or int(send["lost"]) or int(send["unfinished"]):
            raise RuntimeError("%s busy: %s" % (peer, r.stdout))
        gb = int(send["bytes"]) / 1e9
        out = {"gbps": float(send["gbps"]), "gb": gb}
        if pid:
            out["cpu"] = proc_cpu(pid) - c0
            out["cpu_per_gb"] = out["cpu"] / gb
            out["rss_peak_mib"] = peak / 1024
        if k0 is not None:
            k1 = self.relay.counters()
            out["undersized"] = k1["kpipes_undersized"] - k0["kpipes_undersized"]
            moved = k1["bytes_client_to_server"] - k0["bytes_client_to_server"]
            if moved != int(send["bytes"]):
                raise RuntimeError("relay moved %d bytes, client sent %s" % (moved, send["bytes"]))
            wait = slotbed.wait_for
            wait(lambda: self.relay.counters()["pipes_open"] == 0, 20, "the relay's pipes to close")
        return out

    # -- (b), (c) idle pipes and set-up rate --

    def hold(self, peer, n):
        """Sets up n pipes through peer and holds them idle: (swarm process,
        its setup line, the sink's firstbytes line)."""
        self.sink_expect(n)
        p = self.sb.bed.popen("client", self.swarm_argv(peer, n, 0, idle=True), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline().split()
            if not line or line[0] != "setup":
                raise RuntimeError("%s swarm: %r %s" % (peer, line, p.stderr.read()[-2000:]))
            setup = dict(kv.split("=", 1) for kv in line[1:])
            if int(setup["ok"]) != n:
                raise RuntimeError("%s swarm: %s" % (peer, setup))
            fb = self.sink_wait("firstbytes", 60)
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("%s swarm not ready" % peer)
        except BaseException:
            self.release(p, peer)
            raise
        return p, setup, fb

    def release(self, p, peer):
        """Closes the held pipes (resets); raises if any was lost while held."""
        try:
            p.stdin.write("\n")
            p.stdin.flush()
        except OSError:
            pass
        try:
            rest, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            rest, err = p.communicate()
        if peer == "slot-relayd":
            slotbed.wait_for(lambda: self.relay.counters()["pipes_open"] == 0, 30,
                             "the relay's pipes to close")
        if "closed lost=0" not in rest:
            raise RuntimeError("%s: pipes lost while held: %s %s" % (peer, rest, err[-2000:]))

    def syscalls(self, peer, n=None):
        """{syscall: calls per pipe} of one set-up of n pipes under strace -c."""
        n = n or STRACE_PIPES
        self.restart(peer)
        pid = self.pid(peer if peer != "haproxy" else "haproxy-idle")
        p, _, _ = self.hold(peer, 100)
        self.release(p, peer)
        path = os.path.join(self.sb.dir, "strace-%s.txt" % peer)
        st = subprocess.Popen(["strace", "-c", "-f", "-p", str(pid), "-o", path],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        try:
            p, _, _ = self.hold(peer, n)
        finally:
            st.send_signal(signal.SIGINT)
            st.wait(30)
        self.release(p, peer)
        out = {}
        with open(path) as f:
            for line in f:
                t = line.split()
                if len(t) >= 5 and t[0][0].isdigit() and t[-1] != "total":
                    out[t[-1]] = int(t[3]) / n
        return out

    def idle(self, peer):
        n = self.args.idle
        self.restart(peer)                  # a fresh process: its RSS baseline
        pid = self.pid(peer if peer != "haproxy" else "haproxy-idle")
        # Warm-up: 100 pipes set up and closed (first-use allocations).
        p, _, _ = self.hold(peer, 100)
        self.release(p, peer)
        time.sleep(0.5)
        rss0 = vm_rss_kib(pid)
        cpu0, sys0 = proc_cpu(pid), proc_stime(pid)
        p, setup, fb = self.hold(peer, n)
        try:
            cpu1, sys1 = proc_cpu(pid), proc_stime(pid)
            if peer == "slot-relayd":
                slotbed.wait_for(lambda: self.relay.counters()["pipes_open"] == n, 20,
                                 "%d pipes open at the relay" % n)
            time.sleep(0.5)
            rss1 = vm_rss_kib(pid)
            kc = self.relay.counters() if peer == "slot-relayd" else None
        finally:
            self.release(p, peer)
        if peer == "slot-relayd":
            # (a) runs on this process next: a fresh one, as HAProxy's for
            # (a) never held the idle pipes (allocator caches keep the RSS).
            self.restart(peer)
        seconds = (int(fb["us"]) - int(setup["t0_us"])) / 1e6
        out = {"rss0_mib": rss0 / 1024, "rss1_mib": rss1 / 1024,
               "kib_per_pipe": (rss1 - rss0) / n, "rate": n / seconds,
               "client_rate": float(setup["rate"]),
               # the load generator's CPU over its set-up, per pipe, and as a
               # share of one core over that time (1: it never waited)
               "gen_us_per_setup": int(setup["cpu_us"]) / n,
               "gen_busy": int(setup["cpu_us"]) / 1e6 / float(setup["seconds"]),
               "cpu_us_per_setup": (cpu1 - cpu0) / n * 1e6,
               "sys_share": (sys1 - sys0) / (cpu1 - cpu0) if cpu1 > cpu0 else None}
        if kc is not None:
            out["kpipes_free"] = kc["kpipes_free"]
        return out


# ---------------------------------------------------------------- report

def plot(res, peers_busy, peers_idle, args, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"slot-relayd": "#1f77b4", "haproxy": "#ff7f0e", "direct": "#7f7f7f"}
    fig, ax = plt.subplots(1, 4, figsize=(15, 4.2))

    def bars(a, peers, key, src, title, ylabel, target=None, scale=1.0):
        meds, lo, hi = [], [], []
        for p in peers:
            v = [r[key] * scale for r in src[p]]
            m = med(v)
            meds.append(m)
            lo.append(m - min(v))
            hi.append(max(v) - m)
        x = range(len(peers))
        a.bar(x, meds, yerr=[lo, hi], capsize=5, color=[colors[p] for p in peers])
        a.set_xticks(list(x))
        a.set_xticklabels(peers)
        a.set_title(title, fontsize=10)
        a.set_ylabel(ylabel)
        for i, m in enumerate(meds):
            a.annotate("%.0f" % m if m >= 100 else "%.3g" % m, (i, m + hi[i]), textcoords="offset points", xytext=(0, 3),
                       ha="center", fontsize=8)
        if target is not None:
            a.axhline(target, color="red", linestyle="--", linewidth=1)
            a.annotate("target %g" % target, (len(peers) - 0.5, target), color="red",
                       fontsize=8, ha="right", va="bottom")

    bars(ax[0], peers_busy, "gbps", res["busy"],
         "(a) {:,} busy pipes: aggregate".format(args.busy), "throughput (Gbit/s)")
    bars(ax[1], [p for p in peers_busy if p != "direct"], "cpu_per_gb", res["busy"],
         "(a) CPU of the middle box", "CPU seconds per GB moved")
    bars(ax[2], peers_idle, "kib_per_pipe", res["idle"],
         "(b) {:,} idle pipes: RSS per pipe".format(args.idle), "VmRSS growth per pipe (KiB)",
         target=TARGET_IDLE_KIB)
    bars(ax[3], peers_idle, "rate", res["idle"],
         "(c) set-up rate (%d in progress)" % args.window, "pipes set up per second")
    fig.suptitle("One relay node, zero delay: slot-relayd vs HAProxy "
                 "(median of %d, bars min-max)" % args.reps)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(res, peers_busy, peers_idle, args, info, elapsed):
    b, i = res["busy"], res["idle"]
    out = []
    out.append("## Scale on one relay: {:,} busy pipes, {:,} idle pipes, set-up rate "
               "(scenario 6)\n".format(args.busy, args.idle))
    out.append(
        "Three hosts of the test bed (client, relay, server) on the router namespace with plain "
        "kernel forwarding: zero delay, no loss, no rate limit, cubic. slot-relayd and HAProxy "
        "(%s, mode tcp, splice both ways, nbthread 1; for (a) maxconn 4000, whose default "
        "maxpipes of 1000 gives every busy stream a kernel pipe; for (b) and (c) maxconn %d and "
        "maxpipes 16, idle streams holding no pipe, so that its descriptors fit the limit) run "
        "side by side in the relay host. The load comes from `slot-bench-peer swarm` in the client, which speaks "
        "slot's control protocol to the relay itself (PIPE_ESTABLISH requests pipelined on one "
        "authenticated control connection, then each data connection from its announced "
        "endpoint) or connects to HAProxy's port, and `slot-bench-peer msink` in the server, "
        "one epoll loop that discards everything (splice to /dev/null). slotd and NFQUEUE are "
        "left out on purpose: this measures the relay, and one slotd's SYN queue would bound "
        "the set-up rate first. slot-relayd runs as `nobody` with `[limits] max_pipes = 30000`, "
        "`max_pending_per_client = 30000`, `max_control_connections`, `[probe] "
        "max_inflight` and `[chain] max_links` 16 (one control connection, no probes, no "
        "chains: the descriptors the relay sets aside for them go to pipes), `pipe_size` 256k "
        "(default), log level warn, and "
        "RLIMIT_NOFILE %d%s. "
        "Since kernel pipes of an unprivileged user beyond `fs.pipe-user-pages-soft` get two "
        "pages, that global sysctl was raised from %s to %d pages for the run and restored "
        "after (kernel pipes created undersized during (a): %s). %d interleaved repetitions "
        "(each visits every peer); figures are median (min - max) over them."
        % (info["haproxy"], idle_maxconn(args), info["nofile"], info["nofile_note"], info["pipe_soft_old"], PIPE_SOFT_RUN,
           fmt_range([r["undersized"] for r in b["slot-relayd"]], "%d"), args.reps))
    out.append("")
    out.append("**(a) {:,} concurrent pipes**, each sending for %g s (then every byte delivered "
               "and every connection closed): aggregate throughput, CPU of the middle-box "
               "process (utime+stime) per GB moved, and its peak VmRSS while the pipes run. "
               "`direct`: the same connections straight to the server (the router forwards), "
               "the machine's ceiling. Each repetition runs slot-relayd and HAProxy twice, in "
               "ABBA order around `direct` (A first in even repetitions), and takes the mean of "
               "the two; ratio: to HAProxy in the same repetition.\n"
               .replace("{:,}", "{:,}".format(args.busy)) % args.seconds)
    out.append("| peer | Gbit/s | ratio to HAProxy | CPU s/GB | peak RSS MiB |")
    out.append("|---|---|---|---|---|")
    for p in peers_busy:
        g = [r["gbps"] for r in b[p]]
        ratio = [x["gbps"] / y["gbps"] for x, y in zip(b[p], b["haproxy"])]
        out.append("| `%s` | %s | %s | %s | %s |" % (
            p, fmt_range(g), fmt_range(ratio),
            fmt_range([r.get("cpu_per_gb") for r in b[p]], "%.3f"),
            fmt_range([r.get("rss_peak_mib") for r in b[p]], "%.1f")))
    out.append("")
    N = "{:,}".format(args.idle)
    out.append("**(b) %s idle pipes and (c) their set-up rate.** Each repetition measures "
               "each peer twice (ABBA, the mean of the two): it restarts the "
               "middle box, sets up and closes 100 pipes (first-use allocations), reads its "
               "VmRSS, then sets up %s pipes with at most %d in progress at once, each carrying "
               "one byte, and holds them idle: RSS per pipe = (VmRSS with them - VmRSS before) / "
               "%s. Kernel socket buffers and kernel pipes are not in VmRSS. Set-up rate = %s / "
               "(time from the first request to the server's receipt of the %sth first byte); "
               "CPU per set-up = the middle box's utime+stime over that time / %s. Load generator: "
               "`swarm`'s own user+system CPU (getrusage) from its first request to its last "
               "connect, per pipe, and as a share of one core over that time (1.00: it never "
               "waited, so it was the bound).\n"
               % (N, N, args.window, N, N, N, N))
    out.append("| peer | RSS per idle pipe KiB | VmRSS before -> with pipes MiB | "
               "set-up rate pipes/s | ratio to HAProxy | CPU us per set-up | "
               "load generator us per set-up | load generator busy |")
    out.append("|---|---|---|---|---|---|---|---|")
    for p in peers_idle:
        ratio = [x["rate"] / y["rate"] for x, y in zip(i[p], i["haproxy"])]
        out.append("| `%s` | %s | %s -> %s | %s | %s | %s | %s | %s |" % (
            p, fmt_range([r["kib_per_pipe"] for r in i[p]]),
            fmt_range([r["rss0_mib"] for r in i[p]], "%.1f"),
            fmt_range([r["rss1_mib"] for r in i[p]], "%.1f"),
            fmt_range([r["rate"] for r in i[p]], "%.0f"), fmt_range(ratio),
            fmt_range([r["cpu_us_per_setup"] for r in i[p]], "%.1f"),
            fmt_range([r["gen_us_per_setup"] for r in i[p]], "%.1f"),
            fmt_range([r["gen_busy"] for r in i[p]])))
    out.append("")
    out.append(info.get("png_note") or
               "![Scale on one relay](img/%s)\n" % os.path.basename(info["png"]))
    sc = res.get("syscalls") or {}
    if len(sc) == 2:
        names = sorted(set(sc["slot-relayd"]) | set(sc["haproxy"]),
                       key=lambda k: -(sc["slot-relayd"].get(k, 0) + sc["haproxy"].get(k, 0)))
        out.append("System calls per pipe set up (one more set-up of 2,000 pipes per peer "
                   "under `strace -c -f`, not timed; the one byte each pipe carries included):\n")
        out.append("| | %s | total |" % " | ".join("`%s`" % n for n in names))
        out.append("|---|%s---|" % ("---|" * len(names)))
        for p in peers_idle:
            out.append("| `%s` | %s | %.1f |" % (p, " | ".join(
                "%.1f" % sc[p].get(n, 0) for n in names), sum(sc[p].values())))
        out.append("")

    # targets
    tp = [x["gbps"] / y["gbps"] for x, y in zip(b["slot-relayd"], b["haproxy"])]
    tc = [y["cpu_per_gb"] / x["cpu_per_gb"] for x, y in zip(b["slot-relayd"], b["haproxy"])]
    tr = [x["rate"] / y["rate"] for x, y in zip(i["slot-relayd"], i["haproxy"])]
    tm = [y["kib_per_pipe"] / x["kib_per_pipe"] if x["kib_per_pipe"] > 0 else float("inf")
          for x, y in zip(i["slot-relayd"], i["haproxy"])]
    kib = [r["kib_per_pipe"] for r in i["slot-relayd"]]

    def met(v):
        return "met" if med(v) >= 1.0 else "not met"
    out.append("Targets:\n")
    out.append("- **slot >= HAProxy** (median of per-repetition ratios): aggregate throughput "
               "%.2fx (%s, min %.2f, max %.2f); CPU per GB, HAProxy's / slot-relayd's %.2fx (%s); "
               "set-up rate %.2fx (%s, min %.2f, max %.2f); RSS per idle pipe, HAProxy's / "
               "slot-relayd's %.2fx (%s)."
               % (med(tp), met(tp), min(tp), max(tp), med(tc), met(tc), med(tr), met(tr),
                  min(tr), max(tr), med(tm), met(tm)))
    out.append("- **Relay RSS at most %g KiB per idle pipe: %s** (median %.2f KiB, max %.2f KiB; "
               "kernel socket buffers aside).\n"
               % (TARGET_IDLE_KIB, "met" if max(kib) <= TARGET_IDLE_KIB else "not met",
                  med(kib), max(kib)))
    # issue 17: the set-up's cost
    out[-1] = out[-1][:-1]
    out.append("- **Set-up rate at least 1.2x HAProxy's: %s** (median %.2fx, min %.2f, max %.2f)."
               % ("met" if round(med(tr), 2) >= 1.2 else "not met", med(tr), min(tr), max(tr)))
    scs = res.get("syscalls") or {}
    if len(scs) == 2:
        ts, th = sum(scs["slot-relayd"].values()), sum(scs["haproxy"].values())
        out.append("- **System calls per pipe at most HAProxy's: %s** (%.1f against %.1f)."
                   % ("met" if round(ts, 1) <= round(th, 1) else "not met", ts, th))
    out.append("")
    out.append(info["meaning"] + "\n")
    out.append("Reproduce: `make bench` (root), or `/usr/bin/python3 scripts/bench/e2e_scale.py "
               "--reps %d` after `make all` (this run: %.0f s on %d cores).\n"
               % (args.reps, elapsed, os.cpu_count()))
    return "\n".join(out) + "\n"


def meaning(res, args):
    b, i = res["busy"], res["idle"]
    kib = med([r["kib_per_pipe"] for r in i["slot-relayd"]])
    hkib = med([r["kib_per_pipe"] for r in i["haproxy"]])
    gd = med([x["gbps"] / y["gbps"] for x, y in zip(b["slot-relayd"], b["direct"])])
    hd = med([x["gbps"] / y["gbps"] for x, y in zip(b["haproxy"], b["direct"])])
    cs = med([r["cpu_us_per_setup"] for r in i["slot-relayd"]])
    ch = med([r["cpu_us_per_setup"] for r in i["haproxy"]])
    rr = med([x["rate"] / y["rate"] for x, y in zip(i["slot-relayd"], i["haproxy"])])
    out = ("What it means: with zero delay every figure is CPU-bound on this machine (the "
           "client, the middle box, the sink and softirq share %d cores), so the tables compare "
           "the cost of each middle box. With %s pipes at once, slot-relayd carries %.2fx and "
           "HAProxy %.2fx of what the same connections get with no middle box at all, both "
           "splicing, slot-relayd at %.2fx HAProxy's CPU per byte. An idle pipe costs slot-relayd %.2f KiB of "
           "user-space memory (its pipe record, watchers and hash entries, and its share of "
           "tables that grow with the pipe count; no buffer, since kernel pipes are held only "
           "while bytes are in flight), against %.2f KiB per connection for HAProxy."
           % (os.cpu_count(), "{:,}".format(args.busy), gd, hd,
              med([x["cpu_per_gb"] / y["cpu_per_gb"] for x, y in zip(b["slot-relayd"],
                                                                      b["haproxy"])]),
              kib, hkib))
    sc = res.get("syscalls") or {}
    if len(sc) == 2:
        ts, th = sum(sc["slot-relayd"].values()), sum(sc["haproxy"].values())
        g = lambda p, k: sc[p].get(k, 0)
        out += (" Setting a pipe up costs slot-relayd %.0f us of CPU against %.0f us for "
                "HAProxy's connection (medians; set-up rate %.2fx HAProxy's end to end). The load "
                "generator's side of slot's protocol costs it %.0f us per pipe against %.0f us "
                "for a plain connect to HAProxy (the signed request and the verified answer, "
                "HMAC-SHA256 each; a bind, getsockname and getrandom per pipe), on the same two "
                "cores; it is busy %.2f of a core while slot-relayd sets pipes up, against "
                "%.2f with HAProxy: %s. Per pipe slot-relayd makes %.1f system calls "
                "against HAProxy's %.1f. The client leg inherits all its options from the data "
                "listener (none per pipe); the server leg, a socket of its own, takes %.1f "
                "setsockopt (%s; keepalive's four and TCP_USER_TIMEOUT "
                "wait until a pipe has been open half of keepalive_idle, 30 s, which none of "
                "these reaches; HAProxy sets %.0f and no keepalive); "
                "%.2f pipe2 and %.2f fcntl (F_SETPIPE_SZ) for kernel pipes, which are made "
                "lazily when bytes flow and pooled (up to 8 MiB of empty ones) as HAProxy's are, "
                "the pipe's reservation being only an account of their descriptors; "
                "%.1f getsockopt (the connect's "
                "result is read only when epoll reports more than writability, the SYN saved "
                "for the pipe token only while a tokened pipe is pending or for a connection "
                "that matches no endpoint); %.1f epoll_ctl against %.1f (the server socket's "
                "watcher goes from connecting to reading in one change); "
                "%.0f splice for the first byte; %.1f recvfrom for the signed request; %.2f "
                "getrandom (nonces are drawn 64 at a time). "
                "System time is %.0f%% of slot-relayd's set-up CPU and %.0f%% of HAProxy's: the "
                "kernel work per call dominates, not the protocol's user-space part (HMAC, "
                "replay check, tables)." % (
                    cs, ch, rr, med([r["gen_us_per_setup"] for r in i["slot-relayd"]]),
                    med([r["gen_us_per_setup"] for r in i["haproxy"]]),
                    med([r["gen_busy"] for r in i["slot-relayd"]]),
                    med([r["gen_busy"] for r in i["haproxy"]]),
                    "it never waits, so it is what bounds slot-relayd's rate"
                    if med([r["gen_busy"] for r in i["slot-relayd"]]) >= 0.9 else
                    "it waits on the relay part of the time, so it is not alone what bounds "
                    "slot-relayd's rate: the two cores are, shared by the generator, the middle "
                    "box, the sink and the kernel's TCP work",
                    ts, th, g("slot-relayd", "setsockopt"),
                    "TCP_NODELAY, the RST on loss, and the congestion control since [pipe] "
                    "congestion is not the host's default" if g("slot-relayd", "setsockopt") >= 2.5
                    else "TCP_NODELAY and the RST on loss; the congestion control is the host's "
                    "(`[pipe] congestion = system`, the default), which a new socket has, and "
                    "`congestion_on_loss` reads a leg only once it has sent for 0.25 s",
                    g("haproxy", "setsockopt"),
                    g("slot-relayd", "pipe2"), g("slot-relayd", "fcntl"),
                    g("slot-relayd", "getsockopt"), g("slot-relayd", "epoll_ctl"),
                    g("haproxy", "epoll_ctl"), g("slot-relayd", "splice"),
                    g("slot-relayd", "recvfrom"), g("slot-relayd", "getrandom"),
                    100 * med([r["sys_share"] for r in i["slot-relayd"] if r["sys_share"]]),
                    100 * med([r["sys_share"] for r in i["haproxy"] if r["sys_share"]])))
    else:
        out += (" Setting a pipe up costs slot-relayd %.0f us of CPU against %.0f us for "
                "HAProxy (set-up rate %.2fx HAProxy's)." % (cs, ch, rr))
    return out


# ---------------------------------------------------------------- main

def main():
    global slotbed
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true",
                    help="2 repetitions, 200 busy and 2000 idle pipes, 2 s (a smoke run)")
    ap.add_argument("--busy", type=int, default=1000)
    ap.add_argument("--idle", type=int, default=10000)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--no-strace", action="store_true",
                    help="skip the system call count of the set-up")
    ap.add_argument("--build", default=os.environ.get("SLOT_BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench", "e2e_scale.md"))
    ap.add_argument("--check", action="store_true",
                    help="check what the run and its report need, then exit")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.busy, args.idle, args.seconds = min(args.reps, 2), 200, 2000, 2
    args.build = os.path.abspath(args.build)
    _needs.check("e2e_scale", args, modules=("matplotlib",), tools=("haproxy", "prlimit", "nginx"),
                 files=[os.path.join(args.build, b)
                        for b in ("slot-relayd", "tests/slot-bench-peer")])
    os.environ["SLOT_BUILD"] = args.build
    sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
    import slotbed as sbmod
    slotbed = sbmod

    t_start = time.monotonic()
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    info = {"pipe_soft_old": None}
    bench = Bench(args)
    try:
        info["pipe_soft_old"] = set_pipe_soft()
        info["nofile"] = bench.nofile
        info["nofile_note"] = (
            " (the hard limit of this machine, which cannot be raised here: no "
            "CAP_SYS_RESOURCE; a pipe takes six descriptors in slot-relayd, two sockets and the "
            "two kernel pipes accounted to it, past %d it sets aside for its other users, so (b) "
            "holds %s pipes instead of 10,000; the RSS "
            "per pipe only falls with more, as its fixed part spreads "
            "wider)" % (RELAY_FDS_ASIDE, "{:,}".format(args.idle)) if bench.idle_cut else
            " (the LimitNOFILE a unit would set: a pipe takes six descriptors)")
        bench.up()
        hv = subprocess.run(["haproxy", "-v"], capture_output=True, text=True).stdout.split()
        info["haproxy"] = "HAProxy " + (hv[2] if len(hv) > 2 else "?")
        peers_busy = ["slot-relayd", "haproxy", "direct"]
        peers_idle = ["slot-relayd", "haproxy"]
        res = {"busy": {p: [] for p in peers_busy}, "idle": {p: [] for p in peers_idle}}
        for rep in range(args.reps):
            # slot-relayd and HAProxy twice each, ABBA around direct, so that
            # a drift of the machine's load (other jobs) hits both alike.
            a, b = ("slot-relayd", "haproxy") if rep % 2 == 0 else ("haproxy", "slot-relayd")
            got = {p: [] for p in peers_busy}
            for p in (a, b, "direct", b, a):
                r = bench.busy(p)
                got[p].append(r)
                print("rep %d busy %-12s %6.2f Gbit/s cpu %s s/GB rss %s MiB undersized %s" % (
                    rep + 1, p, r["gbps"], "%.3f" % r["cpu_per_gb"] if "cpu_per_gb" in r else "-",
                    "%.1f" % r["rss_peak_mib"] if "rss_peak_mib" in r else "-",
                    r.get("undersized", "-")), file=sys.stderr, flush=True)
            for p, rs in got.items():
                m = {"gbps": statistics.mean(r["gbps"] for r in rs),
                     "gb": sum(r["gb"] for r in rs)}
                if "cpu" in rs[0]:
                    m["cpu_per_gb"] = sum(r["cpu"] for r in rs) / m["gb"]
                    m["rss_peak_mib"] = max(r["rss_peak_mib"] for r in rs)
                if "undersized" in rs[0]:
                    m["undersized"] = sum(r["undersized"] for r in rs)
                res["busy"][p].append(m)
            got = {p: [] for p in peers_idle}
            for p in (a, b, b, a):
                r = bench.idle(p)
                got[p].append(r)
                print("rep %d idle %-12s %.2f KiB/pipe (%.1f -> %.1f MiB) %.0f pipes/s "
                      "(client %.0f) %.1f us CPU/setup; generator %.1f us/setup, busy %.2f" % (
                          rep + 1, p, r["kib_per_pipe"], r["rss0_mib"], r["rss1_mib"], r["rate"],
                          r["client_rate"], r["cpu_us_per_setup"], r["gen_us_per_setup"],
                          r["gen_busy"]), file=sys.stderr, flush=True)
            for p, rs in got.items():
                m = {k: statistics.mean(r[k] for r in rs)
                     for k in ("rss0_mib", "rss1_mib", "kib_per_pipe", "rate", "client_rate",
                               "cpu_us_per_setup", "gen_us_per_setup", "gen_busy")}
                sh = [r["sys_share"] for r in rs if r["sys_share"] is not None]
                m["sys_share"] = statistics.mean(sh) if sh else None
                res["idle"][p].append(m)
        res["syscalls"] = {}
        if not args.no_strace and subprocess.run(["which", "strace"],
                                                 capture_output=True).returncode == 0:
            for p in peers_idle:
                res["syscalls"][p] = bench.syscalls(p)
                print("syscalls %s: %s" % (p, " ".join(
                    "%s=%.2f" % kv for kv in sorted(res["syscalls"][p].items(), key=lambda kv: -kv[1]))),
                    file=sys.stderr, flush=True)
    finally:
        bench.down()
        restore_pipe_soft()

    # The images go to img/ beside the markdown's parent (docs/img for
    # docs/bench/NAME.md), where benchmarks.md's "img/..." links point.
    img = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(args.out))), "img")
    os.makedirs(img, exist_ok=True)
    info["png"] = os.path.join(img, "bench_scale_summary.png")
    _, info["png_note"] = _needs.draw("e2e_scale", "scale on one relay", plot, res,
                                      peers_busy, peers_idle, args, info["png"])
    info["meaning"] = meaning(res, args)
    text = report(res, peers_busy, peers_idle, args, info, time.monotonic() - t_start)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Scenario 7 of issue 7: the latency a relay adds, in microseconds per hop.

Test bed (tests/integration/slotbed.py on tests/testbed/topo.py) with zero
delay: slot-wanem is off ("wanem": false), so the router namespace forwards
in the kernel, no tbf, no loss:

    client -- router -- server              (direct)
    client -- router -- relay1 -- router -- server

A small echo tool (C, embedded below, compiled into the run directory with
cc -O2) runs an echo server in the server host and the client in the client
host: one TCP connection (TCP_NODELAY on both ends), a warm-up, then
thousands of round trips of a 100-byte message, each timed with
CLOCK_MONOTONIC; the connection's set-up is not in those figures. Set-up is
measured apart: many connections, each timed from socket() to connect()'s
return and to the first echo's answer.

Paths, visited in a rotating order in every repetition:

  direct      client -> server:7002 (port never hijacked)
  slot        client -> server:7000, hijacked by slotd, steered to
              slot-relayd in relay1 (decision cached: warm)
  haproxy     client -> relay1:7001, HAProxy mode tcp with splice -> server:7002
  kernel-nat  client -> relay1:7003, DNAT + SNAT in relay1's kernel to
              server:7002: the same packet path as the relays (two more
              veth crossings and router passes) with no user-space proxy

With zero delay no relay can beat the direct path, so slotd would (rightly)
go direct: a rule in the client drops slotd's own direct probe to port 7000
(only packets with slotd's bypass mark), and slotd takes the relay before
the direct probe answers. That changes how the first, cold, connection is decided, not
the data path. Set-up "slot cold" empties slotd's selection cache before
each connection (SIGHUP with another cache_ttl) and the relay's RTT cache is
off (rtt_cache_ttl = 0).

Added latency per hop = median round trip of the path - median round trip
of direct, per repetition; reported as median [min-max] over repetitions.

usage: e2e_latency.py [--reps 5] [--quick] [--out docs/bench/e2e_latency.md]
       [--build DIR] [--rounds 10000]
"""

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import _needs  # scripts/bench/_needs.py: checked before measuring; figures that may fail

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

MSG = 100                       # bytes per request and per answer
PORT_SLOT, PORT_HAPROXY, PORT_DIRECT, PORT_NAT = 7000, 7001, 7002, 7003
PATHS = ["direct", "slot", "haproxy", "kernel-nat"]
LABEL = {"direct": "direct", "slot": "slot (slot-relayd via slotd)",
         "haproxy": "HAProxy (static relay)", "kernel-nat": "kernel NAT in the relay host",
         "slot-cold": "slot, cold cache"}
BYPASS_MARK = "0x10000000"      # slotd's default bypass_mark

ECHO_C = r"""
/* echo tool of scripts/bench/e2e_latency.py */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

#define LISTENER (1ull << 32)
#include <unistd.h>

static void die(const char *w) { fprintf(stderr, "echo: %s: %s\n", w, strerror(errno)); exit(1); }

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int all(int fd, char *b, size_t n, int wr)
{
	size_t d = 0;
	while (d < n) {
		ssize_t r = wr ? write(fd, b + d, n - d) : read(fd, b + d, n - d);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		d += (size_t)r;
	}
	return 0;
}

static void addr(const char *s, struct sockaddr_in *a)
{
	char h[64];
	const char *c = strrchr(s, ':');
	if (!c || (size_t)(c - s) >= sizeof(h)) { fprintf(stderr, "echo: bad address %s\n", s); exit(2); }
	memcpy(h, s, (size_t)(c - s));
	h[c - s] = 0;
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_port = htons((unsigned short)atoi(c + 1));
	if (inet_pton(AF_INET, h, &a->sin_addr) != 1) { fprintf(stderr, "echo: bad address %s\n", s); exit(2); }
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
	int i = (int)(p * (n - 1) + 0.5);
	return v[i];
}

static void stats(const char *name, double *v, int n)
{
	double s = 0;
	for (int i = 0; i < n; i++)
		s += v[i];
	qsort(v, (size_t)n, sizeof(*v), cmp);
	printf("%s n=%d min=%.2f p10=%.2f p50=%.2f p90=%.2f p99=%.2f mean=%.2f\n", name, n, v[0],
	    pct(v, n, .1), pct(v, n, .5), pct(v, n, .9), pct(v, n, .99), s / n);
}

static int dial(struct sockaddr_in *a)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket");
	nodelay(fd);
	if (connect(fd, (struct sockaddr *)a, sizeof(*a)) < 0)
		die("connect");
	return fd;
}

int main(int argc, char **argv)
{
	char buf[65536];
	if (argc >= 3 && strcmp(argv[1], "server") == 0) {
		/* one process, epoll: no fork in the path of a new connection */
		int ep = epoll_create1(0);
		if (ep < 0)
			die("epoll_create1");
		for (int i = 2; i < argc; i++) {
			struct sockaddr_in a;
			int one = 1, l;
			addr(argv[i], &a);
			if ((l = socket(AF_INET, SOCK_STREAM, 0)) < 0)
				die("socket");
			setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
			if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0)
				die("bind");
			if (listen(l, 1024) < 0)
				die("listen");
			struct epoll_event e = { .events = EPOLLIN, .data.u64 = (uint64_t)l | LISTENER };
			if (epoll_ctl(ep, EPOLL_CTL_ADD, l, &e) < 0)
				die("epoll_ctl");
		}
		printf("listening\n");
		fflush(stdout);
		for (;;) {
			struct epoll_event ev[64];
			int n = epoll_wait(ep, ev, 64, -1);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				die("epoll_wait");
			}
			for (int i = 0; i < n; i++) {
				int fd = (int)(ev[i].data.u64 & 0xffffffffu);
				if (ev[i].data.u64 & LISTENER) {
					int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
					if (c < 0)
						continue;
					nodelay(c);
					struct epoll_event e = { .events = EPOLLIN, .data.u64 = (uint64_t)c };
					if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &e) < 0)
						close(c);
					continue;
				}
				ssize_t r = read(fd, buf, sizeof(buf));
				/* the answers are small: a blocking write is fine */
				if (r <= 0 || all(fd, buf, (size_t)r, 1) < 0)
					close(fd);
			}
		}
	}
	if (argc == 6 && strcmp(argv[1], "rtt") == 0) {
		/* rtt ADDR:PORT SIZE WARMUP COUNT */
		struct sockaddr_in a;
		int size = atoi(argv[3]), warm = atoi(argv[4]), n = atoi(argv[5]);
		double *v = calloc((size_t)n, sizeof(double));
		addr(argv[2], &a);
		if (!v || size < 1 || size > (int)sizeof(buf) || n < 1)
			return 2;
		memset(buf, 'x', (size_t)size);
		double t0 = now_us();
		int fd = dial(&a);
		double t1 = now_us();
		for (int i = 0; i < warm + n; i++) {
			double s = now_us();
			if (all(fd, buf, (size_t)size, 1) < 0 || all(fd, buf, (size_t)size, 0) < 0)
				die("echo");
			if (i >= warm)
				v[i - warm] = now_us() - s;
		}
		close(fd);
		printf("connect_us=%.1f\n", t1 - t0);
		stats("rtt", v, n);
		return 0;
	}
	if (argc == 5 && strcmp(argv[1], "setup") == 0) {
		/* setup ADDR:PORT SIZE COUNT: COUNT connections, each timed to
		 * connect() and to the first answer */
		struct sockaddr_in a;
		int size = atoi(argv[3]), n = atoi(argv[4]);
		double *c = calloc((size_t)n, sizeof(double)), *f = calloc((size_t)n, sizeof(double));
		addr(argv[2], &a);
		if (!c || !f || size < 1 || size > (int)sizeof(buf) || n < 1)
			return 2;
		memset(buf, 'x', (size_t)size);
		for (int i = 0; i < n; i++) {
			double t0 = now_us();
			int fd = dial(&a);
			double t1 = now_us();
			if (all(fd, buf, (size_t)size, 1) < 0 || all(fd, buf, (size_t)size, 0) < 0)
				die("echo");
			double t2 = now_us();
			close(fd);
			c[i] = t1 - t0;
			f[i] = t2 - t0;
		}
		stats("connect", c, n);
		stats("first", f, n);
		return 0;
	}
	fprintf(stderr, "usage: echo server ADDR:PORT...| rtt ADDR:PORT SIZE WARMUP COUNT | "
	    "setup ADDR:PORT SIZE COUNT\n");
	return 2;
}
"""


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)


def fmt(vals, f="%.1f"):
    if not vals:
        return "n/a"
    return (f + " [" + f + "-" + f + "]") % (statistics.median(vals), min(vals), max(vals))


def parse(out):
    """{name: {key: float}} from the echo tool's lines."""
    res = {}
    for line in out.splitlines():
        parts = line.split()
        if not parts:
            continue
        if "=" in parts[0]:
            k, v = parts[0].split("=", 1)
            res.setdefault("", {})[k] = float(v)
            continue
        res[parts[0]] = {k: float(v) for k, v in (p.split("=", 1) for p in parts[1:])}
    return res


class Bench:
    def __init__(self, args, tmp):
        self.args = args
        self.tmp = tmp
        self.sb = None
        self.slotd = None
        self.ttl_toggle = 0
        self.rtt = {}                   # path -> [per-repetition dict]
        self.setup = {}                 # path -> [per-repetition {"connect":..., "first":...}]

    def build_tool(self):
        src = os.path.join(self.tmp, "echo.c")
        with open(src, "w") as f:
            f.write(ECHO_C)
        self.tool = os.path.join(self.tmp, "slot-echo")
        subprocess.run(["cc", "-O2", "-Wall", "-o", self.tool, src], check=True)
        os.chmod(self.tmp, 0o755)

    def up(self):
        def spec_edit(spec):
            spec["wanem"] = {"enabled": False}      # kernel forwarding, no delay
        self.sb = slotbed.SlotBed({"relay1": (0, 0)}, direct_rtt=0, other_rtt=0,
                                  relay_conf={"relay": {"log_level": "warn"},
                                              "probe": {"rtt_cache_ttl": "0"}},
                                  spec_edit=spec_edit, nginx=False)
        self.sb.up()
        sb = self.sb
        srv, rly, cli = sb.ip("server"), sb.ip("relay1"), sb.ip("client")
        p = sb.bed.popen("server", [self.tool, "server", "%s:%d" % (srv, PORT_SLOT),
                                    "%s:%d" % (srv, PORT_DIRECT)],
                         stdout=subprocess.PIPE, text=True)
        if p.stdout.readline().strip() != "listening":
            raise RuntimeError("echo server did not start")
        for port in (PORT_SLOT, PORT_DIRECT):
            sb.bed.wait_listen("server", port, p)
        sb.haproxy("relay1", {PORT_HAPROXY: (srv, PORT_DIRECT)})
        # Kernel NAT through the relay host: the packet path of a relay, no proxy.
        sb.bed.run("relay1", "sysctl", "-qw", "net.ipv4.ip_forward=1")
        sb.bed.run("relay1", "iptables", "-w", "-t", "nat", "-A", "PREROUTING", "-p", "tcp",
                   "-d", rly, "--dport", str(PORT_NAT), "-j", "DNAT", "--to-destination",
                   "%s:%d" % (srv, PORT_DIRECT))
        sb.bed.run("relay1", "iptables", "-w", "-t", "nat", "-A", "POSTROUTING", "-p", "tcp",
                   "-d", srv, "--dport", str(PORT_DIRECT), "-j", "SNAT", "--to-source", rly)
        # slotd's direct probe to the hijacked port goes unanswered: the relay wins
        # before it (a refusal would tell slotd that the server refuses the port).
        sb.bed.run("client", "iptables", "-w", "-A", "OUTPUT", "-p", "tcp", "-d", srv,
                   "--dport", str(PORT_SLOT), "-m", "mark", "--mark",
                   "%s/%s" % (BYPASS_MARK, BYPASS_MARK), "-j", "DROP")
        self.relay = sb.relay("relay1")
        self.slotd = sb.slotd([self.relay], self.conf())
        self.slotd.start()
        self.targets = {"direct": "%s:%d" % (srv, PORT_DIRECT),
                        "slot": "%s:%d" % (srv, PORT_SLOT),
                        "slot-cold": "%s:%d" % (srv, PORT_SLOT),
                        "haproxy": "%s:%d" % (rly, PORT_HAPROXY),
                        "kernel-nat": "%s:%d" % (rly, PORT_NAT)}
        self.client_ip = cli
        self.ping = sb.bed.ping("client", "server", count=10, interval=0.05)
        # The slot path must go through the relay (and stay cached).
        before = self.relay.counters()["pipes_total"]
        self.echo_setup("slot", 3)
        if self.relay.counters()["pipes_total"] < before + 3:
            raise RuntimeError("slot path is not relayed: %r\n%s" % (
                self.slotd.recent()[-3:], self.slotd.log()[-3000:]))

    def conf(self):
        return {"slotd": {"log_level": "info"},
                "hijack": {"ports": str(PORT_SLOT)},
                "select": {"cache_ttl": "%ds" % (600 + self.ttl_toggle)}}

    def flush(self):
        self.ttl_toggle ^= 1
        self.slotd.update(self.conf())
        self.slotd.hup()

    def run_tool(self, *args):
        r = self.sb.bed.run("client", self.tool, *[str(a) for a in args], check=False,
                            timeout=300)
        if r.returncode != 0:
            raise RuntimeError("echo %s: exit %d: %s" % (" ".join(map(str, args)),
                                                         r.returncode, r.stderr))
        return parse(r.stdout)

    def echo_rtt(self, path):
        return self.run_tool("rtt", self.targets[path], MSG, self.args.warmup, self.args.rounds)

    def echo_setup(self, path, n):
        return self.run_tool("setup", self.targets[path], MSG, n)

    def run(self):
        a = self.args
        for rep in range(1, a.reps + 1):
            rtts = {p: [] for p in PATHS}
            sets = {p: [] for p in PATHS}
            for ps in range(a.passes):
                k = (rep + ps) % len(PATHS)
                for p in PATHS[k:] + PATHS[:k]:
                    before = self.relay.counters()["pipes_total"] if p == "slot" else 0
                    rtts[p].append(self.echo_rtt(p)["rtt"])
                    sets[p].append(self.echo_setup(p, a.setups))
                    if p == "slot":
                        got = self.relay.counters()["pipes_total"] - before
                        if got != 1 + a.setups:
                            raise RuntimeError("slot: %d of %d connections relayed"
                                               % (got, 1 + a.setups))
            for p in PATHS:
                # a repetition's figure: the median over its passes
                r = {k: statistics.median(x[k] for x in rtts[p]) for k in ("p50", "p99")}
                s = {k: {"p50": statistics.median(x[k]["p50"] for x in sets[p])}
                     for k in ("connect", "first")}
                self.rtt.setdefault(p, []).append(r)
                self.setup.setdefault(p, []).append(s)
                print("rep %d %-10s rtt p50 %6.1f us p99 %6.1f us; connect p50 %6.1f us, "
                      "first answer p50 %6.1f us" % (rep, p, r["p50"], r["p99"],
                                                    s["connect"]["p50"], s["first"]["p50"]),
                      file=sys.stderr, flush=True)
            # Cold set-up: slotd's cache emptied before every connection.
            cs, fs = [], []
            for _ in range(a.cold):
                self.flush()
                s = self.echo_setup("slot-cold", 1)
                cs.append(s["connect"]["p50"])
                fs.append(s["first"]["p50"])
            d = [x for x in self.slotd.recent() if not x["cached"]][-a.cold:]
            if any(x["verdict"] != "relay" for x in d):
                raise RuntimeError("cold decisions not relayed: %r" % d)
            self.setup.setdefault("slot-cold", []).append(
                {"connect": {"p50": statistics.median(cs)}, "first": {"p50": statistics.median(fs)},
                 "select": statistics.median(x["select_us"] for x in d),
                 "decide": statistics.median(x["decide_us"] for x in d)})
            print("rep %d slot-cold  connect p50 %.1f us, first answer p50 %.1f us"
                  % (rep, statistics.median(cs), statistics.median(fs)), file=sys.stderr,
                  flush=True)
        self.warm_decisions = [x for x in self.slotd.recent() if x["cached"]]

    # ---- report ----

    def added(self, path, key="p50", what="rtt"):
        src = self.rtt if what == "rtt" else self.setup
        base = src["direct"]
        if what == "rtt":
            return [x[key] - y[key] for x, y in zip(src[path], base)]
        return [x[key]["p50"] - y[key]["p50"] for x, y in zip(src[path], base)]

    def plot(self, img_dir):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.6))
        colors = {"direct": "k", "slot": "tab:blue", "haproxy": "tab:orange",
                  "kernel-nat": "tab:green"}
        names = {"direct": "direct", "slot": "slot-relayd", "haproxy": "HAProxy",
                 "kernel-nat": "kernel NAT"}
        for i, p in enumerate(PATHS):
            for key, mk, off in (("p50", "o", -0.12), ("p99", "^", 0.12)):
                v = [x[key] for x in self.rtt[p]]
                m = statistics.median(v)
                ax1.errorbar([i + off], [m], yerr=[[m - min(v)], [max(v) - m]], color=colors[p],
                             marker=mk, capsize=3, linestyle="none",
                             label=("median" if key == "p50" else "99th percentile")
                             if i == 0 else None)
        ax1.set_xticks(range(len(PATHS)))
        ax1.set_xticklabels([names[p] for p in PATHS])
        ax1.set_yscale("log")
        ax1.set_ylabel("round trip of a %d-byte echo (us, log scale)" % MSG)
        ax1.set_title("Echo round trip by path\n(markers: median of repetitions; bars min-max)")
        ax1.grid(True, which="both", axis="y", alpha=0.3)
        ax1.legend(fontsize=8)
        rel = PATHS[1:]
        for i, p in enumerate(rel):
            v = self.added(p, "p50")
            m = statistics.median(v)
            ax2.bar([i], [m], width=0.5, color=colors[p])
            ax2.errorbar([i], [m], yerr=[[m - min(v)], [max(v) - m]], color="k", capsize=4,
                         linestyle="none")
            ax2.annotate("%.0f us" % m, (i, max(v)), textcoords="offset points", xytext=(0, 4),
                         ha="center", fontsize=9)
        ax2.set_xticks(range(len(rel)))
        ax2.set_xticklabels([names[p] for p in rel])
        ax2.set_ylabel("added median round trip over direct (us)")
        ax2.set_title("Added latency of one relay hop\n(median of repetitions; bars min-max)")
        ax2.axhline(0, color="k", linewidth=0.8)
        ax2.margins(y=0.15)
        ax2.grid(True, axis="y", alpha=0.3)
        fig.suptitle("Relay latency on a zero-delay bed (%d repetitions of %d round trips "
                     "per path)" % (self.args.reps, self.args.passes * self.args.rounds))
        fig.tight_layout()
        p = os.path.join(img_dir, "bench_latency_rtt.png")
        fig.savefig(p, dpi=110)
        plt.close(fig)
        return [p]

    def report(self, elapsed, imgs, img_note=None):
        a = self.args
        out = []
        out.append("## Added latency of a relay hop (scenario 7)\n")
        out.append(
            "Setup: a zero-delay bed: client, relay1 and server namespaces joined through the "
            "test bed's router namespace with slot-wanem off (kernel forwarding, no tbf, no "
            "loss; ping client-server %.3f ms median). An echo server (C, one epoll loop, "
            "TCP_NODELAY) in the server host; an echo client in the client host opens a "
            "connection, makes %d warm-up round trips, then %d timed round trips of a %d-byte "
            "message (write it, read the %d-byte answer; CLOCK_MONOTONIC around each), so "
            "connection set-up is left out. Paths: `direct`; `slot`: the port slotd hijacks, "
            "relayed by slot-relayd in relay1 with a cached decision (with zero delay no relay "
            "can beat the direct path, so a rule in the client drops slotd's own direct probe "
            "and slotd takes the relay before that probe answers; the data path is the normal "
            "one); `HAProxy`: mode tcp with splice in relay1, the client asking relay1; "
            "`kernel NAT`: DNAT and SNAT in relay1's kernel, the relay's packet path with no "
            "proxy. Set-up: %d connections per path and pass, each timed from socket() to "
            "connect()'s return and to the first answer; `slot, cold cache`: %d connections "
            "per repetition, each after emptying slotd's selection cache (SIGHUP with another "
            "cache_ttl; the relay's RTT cache is off). A repetition is %d passes, each visiting "
            "every path in a rotating order with a new connection (%d timed round trips per "
            "path and repetition); its figure per path is the median over its passes of each "
            "pass's median (or 99th percentile). Tables: median [min-max] over %d "
            "repetitions; added = path - direct within a repetition.\n"
            % (self.ping.median, a.warmup, a.rounds, MSG, MSG, a.setups, a.cold, a.passes,
               a.passes * a.rounds, a.reps))
        out.append("Round trip of a %d-byte echo on an open connection (us):\n" % MSG)
        out.append("| path | median | added per hop (median - direct's) | 99th percentile |")
        out.append("|---|---|---|---|")
        for p in PATHS:
            out.append("| %s | %s | %s | %s |" % (
                LABEL[p], fmt([x["p50"] for x in self.rtt[p]]),
                "-" if p == "direct" else "**%s**" % fmt(self.added(p, "p50")),
                fmt([x["p99"] for x in self.rtt[p]])))
        out.append("")
        out.append("The 99th percentiles are dominated by scheduling on this shared machine "
                   "(every process of the bed and of other work on %d cores); the medians are "
                   "the figure to compare." % os.cpu_count())
        out.append("")
        over_nat = lambda p: [x["p50"] - y["p50"] for x, y in zip(self.rtt[p],
                                                                  self.rtt["kernel-nat"])]
        out.append("Over kernel NAT through the same host (the proxy's own share: two socket "
                   "terminations and its user-space wake-ups), median round trip: slot-relayd "
                   "+%s us, HAProxy +%s us.\n" % (fmt(over_nat("slot")), fmt(over_nat("haproxy"))))
        out.append("Connection set-up (us, median of each repetition's median):\n")
        out.append("| path | connect() | first answer | added to connect() | added to first "
                   "answer |")
        out.append("|---|---|---|---|---|")
        for p in PATHS + ["slot-cold"]:
            c = [x["connect"]["p50"] for x in self.setup[p]]
            f = [x["first"]["p50"] for x in self.setup[p]]
            dc = [x - y["connect"]["p50"] for x, y in zip(c, self.setup["direct"])]
            df = [x - y["first"]["p50"] for x, y in zip(f, self.setup["direct"])]
            out.append("| %s | %s | %s | %s | %s |" % (
                LABEL[p], fmt(c), fmt(f), "-" if p == "direct" else fmt(dc),
                "-" if p == "direct" else fmt(df)))
        out.append("")
        cold = self.setup["slot-cold"]
        wd = self.warm_decisions
        out.append("slotd's decisions (its `json`): warm, decide_us (SYN to the verdict, "
                   "i.e. PIPE_ESTABLISH answered) %s us over %d connections; cold, select_us %s "
                   "us and decide_us %s us (medians per repetition).\n"
                   % (fmt([x["decide_us"] for x in wd]), len(wd),
                      fmt([x["select"] for x in cold]), fmt([x["decide"] for x in cold])))
        for f in imgs:
            out.append("![%s](%s)\n" % (os.path.basename(f), f))
        if img_note:
            out.append(img_note)
        med = lambda v: statistics.median(v)
        slot_add = med(self.added("slot"))
        ha_add = med(self.added("haproxy"))
        nat_add = med(self.added("kernel-nat"))
        out.append(
            "What it means: a relay hop costs about %.0f us per round trip with slot-relayd "
            "(HAProxy: %.0f us) on this machine, against %.0f us of direct round trip. Of "
            "that, %.0f us is the network path alone (kernel NAT through the relay host: two "
            "more veth crossings and forwarding passes each way), and the rest, %.0f us for "
            "slot-relayd and %.0f us for HAProxy, is the proxy: a second TCP termination and a "
            "wake-up of the process on each side, with splice(2) moving the bytes. slotd is "
            "not on the data path at all (the kernel's conntrack rewrites the packets), so "
            "the per-request cost is the relay's alone. Against the round trips this overlay "
            "is for (tens to hundreds of milliseconds), it is noise. Set-up is another "
            "matter: a relayed connect() waits for slotd's verdict, which with a cached "
            "decision is one PIPE_ESTABLISH exchange with the relay and the relay's connect "
            "to the server (%.0f us added here; on a WAN it is the client-relay RTT plus the "
            "relay's connect, see scenario 4), and with a cold cache the probing too. The "
            "machine has %d cores shared by the client, the relay, the server and whatever "
            "else runs, so the absolute figures move between runs; compare paths within a "
            "repetition.\n"
            % (slot_add, ha_add, med([x["p50"] for x in self.rtt["direct"]]), nat_add,
               slot_add - nat_add, ha_add - nat_add,
               med([x["connect"]["p50"] - y["connect"]["p50"] for x, y in
                    zip(self.setup["slot"], self.setup["direct"])]), os.cpu_count()))
        out.append("Reproduce: `make bench` (root), or `/usr/bin/python3 "
                   "scripts/bench/e2e_latency.py --reps %d` after `make all` "
                   "(this run: %.0f s).\n" % (a.reps, elapsed))
        return "\n".join(out) + "\n"


def main():
    global slotbed
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--passes", type=int, default=8, help="interleaved passes per repetition, "
                    "each a new connection per path")
    ap.add_argument("--rounds", type=int, default=2500, help="timed round trips per path "
                    "and pass")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--setups", type=int, default=15, help="connections timed per path and "
                    "pass")
    ap.add_argument("--cold", type=int, default=10, help="cold connections per repetition")
    ap.add_argument("--quick", action="store_true", help="2 repetitions of fewer round trips")
    ap.add_argument("--build", default=os.environ.get("SLOT_BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench", "e2e_latency.md"))
    ap.add_argument("--check", action="store_true",
                    help="check what the run and its report need, then exit")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.passes, args.rounds, args.setups, args.cold = 2, 3, 1000, 10, 4
    _needs.check("e2e_latency", args, modules=("matplotlib",),
                 tools=("cc", "haproxy", "nginx", "iptables"),
                 files=[os.path.join(args.build, b) for b in ("slotd", "slot-relayd")])
    os.environ["SLOT_BUILD"] = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
    import slotbed as sbmod
    slotbed = sbmod
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)

    t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="slot-e2e-latency-")
    b = Bench(args, tmp)
    try:
        b.build_tool()
        b.up()
        b.run()
        elapsed = time.monotonic() - t0
        out_dir = os.path.dirname(os.path.abspath(args.out))
        img_dir = os.path.join(os.path.dirname(out_dir), "img")
        os.makedirs(img_dir, exist_ok=True)
        imgs, note = _needs.draw("e2e_latency", "round-trip and connect times", b.plot, img_dir)
        text = b.report(elapsed, ["img/" + os.path.basename(p) for p in imgs or []], note)
    finally:
        if b.sb:
            b.sb.down()
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(out_dir, exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    sys.stdout.write(text)
    print("e2e_latency: %.0f s" % (time.monotonic() - t0), file=sys.stderr)


slotbed = None

if __name__ == "__main__":
    main()

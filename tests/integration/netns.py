"""Network namespaces, processes and a slot-relayd driver for the integration tests.

One run builds three namespaces joined by veths:

    client 10.X.1.2 <-> 10.X.1.1 relay 10.X.2.1 <-> 10.X.2.2 server

with IP forwarding in the relay namespace, so the direct path through kernel
forwarding works too. Every name carries the pid of the run ("sltit<pid>-..."),
so leftovers of a dead run are recognised and swept by the next one, and
concurrent runs do not collide. Teardown runs on every exit path: explicit
down(), atexit, SIGINT/SIGTERM.
"""

import atexit
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

PREFIX = "sltit"
NAME_RE = re.compile(r"^%s(\d+)-" % PREFIX)
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Command and process helpers are the test bed's (tests/testbed/topo.py).
sys.path.insert(0, os.path.join(ROOT, "tests", "testbed"))
import topo  # noqa: E402
from topo import kill_ns_pids, pid_alive, sh  # noqa: E402,F401


def cgroup2_mounts():
    """Where cgroup v2 is mounted (from /proc/self/mountinfo)."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            head, _, tail = line.partition(" - ")
            if tail.startswith("cgroup2 "):
                out.append(head.split()[4])
    return out


def cgroup_join_argv(name):
    """The argv prefix that moves a process into cgroup v2 directory name
    (at the hierarchy's root) before it execs the rest: ip netns exec mounts
    a sysfs of the namespace's, without the cgroup hierarchy, so it is
    mounted again in ip's private mount namespace."""
    return ["sh", "-c", 'mount -t cgroup2 none /sys/fs/cgroup && '
            'echo $$ > "/sys/fs/cgroup/$0/cgroup.procs" && exec "$@"', name]


def sweep():
    """Removes namespaces, root-namespace links and run directories of earlier
    runs whose process is gone. Only names of our own pattern are touched."""
    removed = []
    r = sh("ip", "netns", "list", check=False)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = NAME_RE.match(name)
        if m and not pid_alive(int(m.group(1))):
            kill_ns_pids(name)
            sh("ip", "netns", "del", name, check=False)
            removed.append(name)
    r = sh("ip", "-o", "link", "show", check=False)
    for line in r.stdout.splitlines():
        parts = line.split(":")
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@")[0]
        m = NAME_RE.match(name)
        if m and not pid_alive(int(m.group(1))):
            sh("ip", "link", "del", name, check=False)
            removed.append(name)
    # slotd's run cgroups ([lib] cgroup), left by a slotd that was killed
    for mnt in cgroup2_mounts():
        for d in os.listdir(mnt):
            m = NAME_RE.match(d)
            if m and not pid_alive(int(m.group(1))):
                try:
                    os.rmdir(os.path.join(mnt, d))
                    removed.append(d)
                except OSError:
                    pass
    tmp = tempfile.gettempdir()
    for d in os.listdir(tmp):
        m = NAME_RE.match(d)
        if m and not pid_alive(int(m.group(1))):
            shutil.rmtree(os.path.join(tmp, d), ignore_errors=True)
            removed.append(d)
    return removed


def rss_kib(pid):
    """VmRSS of a process in KiB (from /proc/PID/status)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for %d" % pid)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)


class Net:
    """The three namespaces of one run."""

    def __init__(self):
        self.pid = os.getpid()
        self.tag = "%s%d" % (PREFIX, self.pid)
        self.x = 1 + self.pid % 250
        self.ns = {k: "%s-%s" % (self.tag, k[0]) for k in ("client", "relay", "server")}
        self.client_ip = "10.%d.1.2" % self.x
        self.relay_cip = "10.%d.1.1" % self.x      # relay, client side
        self.relay_sip = "10.%d.2.1" % self.x      # relay, server side
        self.server_ip = "10.%d.2.2" % self.x
        self.server_net = "10.%d.2.0/24" % self.x
        self.client_net = "10.%d.1.0/24" % self.x
        self.dir = None
        self.procs = []
        self._down = False
        self._lock = threading.Lock()
        self._old_handlers = {}

    # -- life cycle --

    def up(self):
        sweep()
        assert len(self.tag) + 3 <= 15, "interface names too long"
        self.dir = tempfile.mkdtemp(prefix=self.tag + "-")
        os.chmod(self.dir, 0o755)   # the relay drops to nobody and re-reads its config
        atexit.register(self.down)
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)
        try:
            self._build()
        except BaseException:
            self.down()
            raise
        return self

    def _build(self):
        t, c, r, s = self.tag, self.ns["client"], self.ns["relay"], self.ns["server"]
        for ns in (c, r, s):
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            # Debian's default socket buffer limits, so amounts in flight are predictable.
            self.run_ns(ns, "sysctl", "-qw", "net.ipv4.tcp_rmem=4096 131072 6291456")
            self.run_ns(ns, "sysctl", "-qw", "net.ipv4.tcp_wmem=4096 16384 4194304")
        sh("ip", "link", "add", t + "-cr", "netns", c, "type", "veth",
           "peer", "name", t + "-rc", "netns", r)
        sh("ip", "link", "add", t + "-rs", "netns", r, "type", "veth",
           "peer", "name", t + "-sr", "netns", s)
        for ns, dev, a in ((c, t + "-cr", self.client_ip), (r, t + "-rc", self.relay_cip),
                           (r, t + "-rs", self.relay_sip), (s, t + "-sr", self.server_ip)):
            sh("ip", "-n", ns, "addr", "add", a + "/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", c, "route", "add", self.server_net, "via", self.relay_cip)
        sh("ip", "-n", s, "route", "add", self.client_net, "via", self.relay_sip)
        self.run_ns(r, "sysctl", "-qw", "net.ipv4.ip_forward=1")

    def _on_signal(self, sig, frame):
        self.down()
        if sig == signal.SIGINT:
            raise KeyboardInterrupt
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)

    def down(self):
        """Kills our processes, deletes the namespaces and the run directory.
        Idempotent; safe from atexit and signal handlers."""
        with self._lock:
            if self._down:
                return
            self._down = True
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.kill()
                    p.wait(5)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
        for ns in self.ns.values():
            kill_ns_pids(ns)
            sh("ip", "netns", "del", ns, check=False)
        if self.dir and os.environ.get("SLOT_KEEP"):
            print("\nintegration: run directory kept in %s" % self.dir)
        elif self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        for sig, h in self._old_handlers.items():
            try:
                signal.signal(sig, h)
            except (ValueError, TypeError):
                pass
        try:
            atexit.unregister(self.down)
        except Exception:
            pass

    # -- commands --

    def _nsname(self, ns):
        return self.ns.get(ns, ns)

    def cmd(self, ns, *args):
        return ["ip", "netns", "exec", self._nsname(ns)] + [str(a) for a in args]

    def run_ns(self, ns, *args, check=True, timeout=60, **kw):
        return sh(*self.cmd(ns, *args), check=check, timeout=timeout, **kw)

    def popen(self, ns, args, **kw):
        """Starts a background process in ns ("ip netns exec" execs it, so the
        pid is the command's own). It is killed at teardown if still running."""
        p = subprocess.Popen(self.cmd(ns, *args), **kw)
        self.procs.append(p)
        self.procs = [q for q in self.procs if q.poll() is None or q is p]
        return p

    # -- sockets created inside a namespace, used from this process --

    def in_ns(self, ns, fn):
        """Calls fn() on a thread that has entered ns; returns its result.
        Sockets keep the namespace they were created in."""
        return topo.in_netns(self._nsname(ns), fn)

    def listen(self, ns, ip, port, backlog=64):
        def f():
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((ip, port))
            s.listen(backlog)
            return s
        return self.in_ns(ns, f)

    def connect(self, ns, ip, port, timeout=10):
        return self.in_ns(ns, lambda: socket.create_connection((ip, port), timeout))

    def udp(self, ns):
        return self.in_ns(ns, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))

    def iptables(self, ns, *rule):
        self.run_ns(ns, "iptables", "-w", *rule)


def write_key(path, hexkey=None, mode=0o600, owner=None):
    """Writes a key file (64 hex digits). owner: a user name to chown it to, so
    that a daemon running as that user can re-read it on reload."""
    hexkey = hexkey or os.urandom(32).hex()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(hexkey + "\n")
    os.chmod(path, mode)
    if owner:
        import pwd
        pw = pwd.getpwnam(owner)
        os.chown(path, pw.pw_uid, pw.pw_gid)
    return path


def render_ini(conf):
    out = []
    for sec, kv in conf.items():
        out.append("[%s]" % sec)
        for k, v in kv.items():
            out.append("%s = %s" % (k, v))
        out.append("")
    return "\n".join(out)


class Relay:
    """slot-relayd in the relay namespace, with a config written from a dict."""

    _serial = 0

    def __init__(self, net, binary, key_file, overrides=None, valgrind=False, wrapper=None):
        Relay._serial += 1
        self.n = Relay._serial
        self.net = net
        self.binary = binary
        self.key_file = key_file
        self.valgrind = valgrind
        self.wrapper = wrapper or []
        self.ctl_port = 7600 + 10 * self.n
        self.probe_port = self.ctl_port
        self.data_port = self.ctl_port + 1
        self.stats = os.path.join(net.dir, "relay%d.sock" % self.n)
        self.conf_path = os.path.join(net.dir, "relay%d.conf" % self.n)
        self.log_path = os.path.join(net.dir, "relay%d.log" % self.n)
        self.vg_log = os.path.join(net.dir, "relay%d.valgrind" % self.n)
        self.conf = {
            "relay": {
                "user": "nobody",
                "key_file": key_file,
                "probe_listen": "%s:%d" % (net.relay_cip, self.probe_port),
                "control_listen": "%s:%d" % (net.relay_cip, self.ctl_port),
                "data_listen": "%s:%d" % (net.relay_cip, self.data_port),
                "stats_socket": self.stats,
                "log_level": "debug",
            },
            "limits": {
                "connect_timeout": "2s",
                "pending_timeout": "2s",
                "drain_timeout": "10s",
            },
            "policy": {
                "allowed_ports": "1-65535",
                "allow_destinations": net.server_net,
            },
            "probe": {},
            # slot-testclient speaks the lab's shared key (tests/integration/
            # slotbed.py runs the identity mode)
            "auth": {"mode": "shared"},
        }
        self.update(overrides or {})
        self.proc = None
        self._log = None

    def update(self, overrides):
        for sec, kv in overrides.items():
            self.conf.setdefault(sec, {}).update(kv)
        self.write_config()

    def write_config(self):
        with open(self.conf_path, "w") as f:
            f.write(render_ini(self.conf))
        os.chmod(self.conf_path, 0o644)

    def argv(self, *extra):
        a = list(self.wrapper)
        if self.valgrind:
            a += ["valgrind", "--vgdb=no", "--leak-check=full", "--errors-for-leak-kinds=definite",
                  "--error-exitcode=99", "--log-file=" + self.vg_log]
        return a + [self.binary, "-c", self.conf_path] + list(extra)

    def check_config(self):
        """slot-relayd -t: (exit code, stderr)."""
        r = self.net.run_ns("relay", *[self.binary, "-c", self.conf_path, "-t"], check=False)
        return r.returncode, r.stderr

    def start(self, wait=True, timeout=10):
        self._log = open(self.log_path, "ab")
        self.proc = self.net.popen("relay", self.argv(), stdin=subprocess.DEVNULL,
                                   stdout=self._log, stderr=self._log)
        if wait:
            self.wait_ready(timeout * (5 if self.valgrind else 1))
        return self

    @property
    def pid(self):
        return self.proc.pid

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def _listening(self):
        r = self.net.run_ns("relay", "ss", "-Hltn", check=False)
        want = {"%s:%d" % (self.net.relay_cip, p) for p in (self.ctl_port, self.data_port)}
        have = {line.split()[3] for line in r.stdout.splitlines() if len(line.split()) > 3}
        return want <= have

    def wait_ready(self, timeout=10):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("slot-relayd exited with %d at start:\n%s"
                                   % (self.proc.returncode, self.log()))
            try:
                if self._listening():
                    self.counters()
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("slot-relayd not ready after %ss:\n%s" % (timeout, self.log()))

    def _stats(self, request, timeout=5):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(self.stats)
            s.sendall(request)
            chunks = []
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
        finally:
            s.close()
        return b"".join(chunks).decode()

    def counters(self):
        out = {}
        for line in self._stats(b"counters\n").splitlines():
            parts = line.split()
            if len(parts) == 2:
                try:
                    out[parts[0]] = int(parts[1])
                except ValueError:
                    out[parts[0]] = parts[1]
        return out

    def json(self):
        return json.loads(self._stats(b"json\n"))

    def wait_counter(self, name, pred, timeout=5):
        """Polls counters until pred(value) holds; returns the counters."""
        end = time.monotonic() + timeout
        while True:
            c = self.counters()
            if pred(c.get(name, 0)):
                return c
            if time.monotonic() > end:
                raise AssertionError("counter %s=%r never satisfied the condition; counters %r"
                                     % (name, c.get(name), c))
            time.sleep(0.05)

    def rss_kib(self):
        return rss_kib(self.proc.pid)

    def signal(self, sig):
        self.proc.send_signal(sig)

    def hup(self):
        self.signal(signal.SIGHUP)

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout=15):
        """SIGTERM, wait; SIGKILL if it does not go. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            if self.wait(timeout * (4 if self.valgrind else 1)) is None:
                self.proc.kill()
                self.proc.wait(5)
        if self._log:
            self._log.close()
            self._log = None
        return self.proc.returncode

    def valgrind_log(self):
        try:
            with open(self.vg_log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

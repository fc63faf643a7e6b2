"""A harness for slotd's integration tests on the emulated WAN test bed.

One SlotBed is a tests/testbed/topo.py Testbed (docs/testbed.md) with hosts

    client  relay1 .. relayN  server

and chosen RTTs, plus the daemons of a deployment:

- slot-relayd in every relay host (config rendered from a dict, the key owned
  by "nobody" as the relay drops to that user; [policy] allow_destinations
  covers the test bed's 10.A.0.0/16 and fd00:A::/32 (and the LANs'), since
  relays refuse private destinations by default);
- nginx in the server host, started by up() (config, pid, logs and temp
  paths in the run directory, `daemon off`), serving files of random bytes
  with known sha256 on server:80 and server:8080 (IPv4 and IPv6), accepting
  PUT under /up/ (dav module), one request per connection
  (keepalive_timeout 0, a parameter: see Nginx), with an access log that
  names the peer address of every request: a relayed request comes from the
  relay's address, a direct one from the client's;
- sshd in a host on demand (SlotBed.sshd(): a key, ssh_command() for rsync
  -e, target(path));
- slotd in the client host (Slotd), with a config written from a dict; its
  control socket ("counters", "json"), its iptables rules, conntrack.

Helpers run curl and wget in the client host and check the sha256 of what
arrived. Every process is started through Testbed.popen, so Testbed's
teardown (down(), atexit, SIGINT/SIGTERM) kills whatever is still running and
deletes the namespaces; SlotBed.down() stops the daemons first, gently.
"""

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testbed"))
sys.path.insert(0, HERE)
import topo  # noqa: E402
import netns  # noqa: E402
from dirrpc import DirClient, Identity  # noqa: E402

ROOT = topo.ROOT
BUILD = os.environ.get("SLOT_BUILD", os.path.join(ROOT, "build"))
RELAYD = os.environ.get("SLOT_RELAYD", os.path.join(BUILD, "slot-relayd"))
SLOTD = os.environ.get("SLOT_SLOTD", os.path.join(BUILD, "slotd"))
SLOTD_SRC = os.path.join(ROOT, "src", "client", "slotd.c")
DIRD = os.environ.get("SLOT_DIRD", os.path.join(BUILD, "slot-dird"))
KEYGEN = os.environ.get("SLOT_KEYGEN", os.path.join(BUILD, "slot-keygen"))
NGINX = os.environ.get("SLOT_NGINX", "/usr/sbin/nginx")

KiB = 1 << 10
MiB = 1 << 20

RELAY_PORT = 7600            # probe (UDP) and control (TCP); data = +1


# ---------------------------------------------------------------- small helpers

def sha256_bytes(b):
    return hashlib.sha256(b).hexdigest()


def sha256_file(path):
    return netns.sha256_file(path)


def unix_request(path, request, timeout=5):
    """Sends one line on a unix stream socket and reads until EOF."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.sendall(request)
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    finally:
        s.close()
    return b"".join(chunks).decode(errors="replace")


def directory_bed(paths, pairs, direct_rtt, other_rtt, file_size=256 << 10):
    """A SlotBed of these relays (and a host "dir") serving file "f" from
    nginx, with a slot-dird every relay registers with and measures the
    others through (bed.dird_measuring); a generator for a module fixture:
    yields the bed, then takes it down."""
    b = SlotBed(paths, direct_rtt=direct_rtt, other_rtt=other_rtt, extra_hosts=["dir"],
                extra_pairs=pairs).up()
    try:
        b.nginx.add_file("f", file_size)
        b.nginx.start()
        b.dird_measuring = b.measuring_dird()
        yield b
    finally:
        b.down()


def relays_table(s):
    """slotd s's "relays" command in JSON: {control endpoint: row}."""
    t = json.loads(unix_request(s.sock, b"relays json\n"))
    return {x["relay"]: x for x in t["relays"]}


def relays_ranks(s):
    """{control endpoint: its rank in slotd s's ranking, or None}."""
    return {c: x.get("rank") for c, x in relays_table(s).items()}


def ranked_with_every_rtt(s):
    """True once slotd s's last ranking had an RTT for every relay. A
    ranking runs 0.2 s after a link comes up (rank_soon) and decisions use
    the last one's figures: one made before the last link came up leaves
    that relay out, though the ranks may already look right."""
    return all(x.get("rtt_est_us") for x in relays_table(s).values())


def parse_counters(text):
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                out[parts[0]] = parts[1]
    return out


def hostport(ip, port):
    """"ip:port", "[ip6]:port" for an IPv6 address."""
    return ("[%s]:%d" if ":" in ip else "%s:%d") % (ip, port)


def render_ini(conf):
    """INI from {section: {key: value}}; a list value becomes one line per
    item (inih allows repeated keys, as slotd's `relay =` lines need)."""
    out = []
    for sec, kv in conf.items():
        out.append("[%s]" % sec)
        for k, v in kv.items():
            for item in (v if isinstance(v, (list, tuple)) else [v]):
                out.append(("%s = %s" % (k, item)).rstrip())
        out.append("")
    return "\n".join(out)


def wait_for(pred, timeout, what, interval=0.05):
    """Polls pred() until it returns a true value (returned); raises on timeout."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))
        time.sleep(interval)


def read_log(path, tail=20000):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-tail:]
    except OSError:
        return ""


def deltas(before, after, names=None):
    """after - before for every (or the named) numeric counter."""
    names = names or sorted(set(before) | set(after))
    return {n: after.get(n, 0) - before.get(n, 0) for n in names}


# ---------------------------------------------------------------- conntrack

CT_RE = re.compile(r"(src|dst|sport|dport)=(\S+)")


class CtEntry:
    """One conntrack entry: the original and the reply tuples."""

    def __init__(self, line):
        self.line = line
        kv = CT_RE.findall(line)
        orig, reply = kv[:4], kv[4:8]
        o, r = dict(orig), dict(reply)
        self.proto = line.split()[0]
        self.state = next((w for w in line.split() if w.isupper() and "=" not in w
                           and not w.startswith("[")), "")
        self.src, self.dst = o.get("src"), o.get("dst")
        self.sport, self.dport = int(o.get("sport", 0)), int(o.get("dport", 0))
        self.rsrc, self.rdst = r.get("src"), r.get("dst")
        self.rsport, self.rdport = int(r.get("sport", 0)), int(r.get("dport", 0))

    @property
    def dnat(self):
        """(address, port) the connection was steered to if DNATed, else None."""
        if (self.rsrc, self.rsport) != (self.dst, self.dport):
            return (self.rsrc, self.rsport)
        return None

    def __repr__(self):
        return "CtEntry(%s)" % self.line


# ---------------------------------------------------------------- identities

class Identities:
    """A deployment's CA and per-host keys and certificates (docs/keys.md),
    made with slot-keygen in a directory of the run. issue() returns the
    [auth] section a daemon's config needs."""

    def __init__(self, directory, name="ca"):
        self.dir = directory
        os.makedirs(self.dir, exist_ok=True)
        os.chmod(self.dir, 0o755)        # relays run as nobody and re-read theirs
        self.ca = os.path.join(self.dir, name)
        keygen("ca", self.ca)
        self.ca_pub = self.ca + ".pub"
        self.certs = {}                  # name -> prefix

    def issue(self, role, name, owner=None, days=None, key=None):
        """A key and certificate for host `name` in `role`; owner: the user
        the key file must belong to (a relay re-reads it as nobody). key: an
        existing key file to certify again (a renewal). Returns the [auth]
        section."""
        prefix = os.path.join(self.dir, name)
        a = ["issue", "-c", self.ca + ".key", "-r", role, "-n", name, "-f"]
        if days is not None:
            a += ["-d", str(days)]
        if key is not None:
            a += ["-k", key]
        keygen(*a, prefix)
        os.chmod(prefix + ".cert", 0o644)
        if owner:
            import pwd
            pw = pwd.getpwnam(owner)
            os.chown(prefix + ".key", pw.pw_uid, pw.pw_gid)
        self.certs[name] = prefix
        return self.auth(name)

    def auth(self, name):
        prefix = self.certs[name]
        return {"mode": "identity", "key": prefix + ".key", "certificate": prefix + ".cert",
                "ca": self.ca_pub}

    def serial(self, name):
        """The certificate's serial, 16 hex digits (slot-keygen show)."""
        out = keygen("show", self.certs[name] + ".cert")
        m = re.search(r"serial\s*:?\s*([0-9a-f]{16})", out)
        assert m, out
        return m.group(1)


def keygen(*args):
    r = subprocess.run([KEYGEN] + list(args), capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError("slot-keygen %s: %s" % (" ".join(args), r.stderr))
    return r.stdout


# ---------------------------------------------------------------- slot-relayd

class Relay:
    """slot-relayd in a host of the test bed, listening on the host's address
    (probe and control on `port`, data on port + 1); config from a dict.
    family: 6 listens on the host's IPv6 address, 4 on its IPv4 one; None:
    IPv4 if the host has it, else IPv6."""

    def __init__(self, sb, host, key_file, overrides=None, port=RELAY_PORT, family=None):
        self.sb, self.bed, self.host = sb, sb.bed, host
        self.wrapper = []           # e.g. valgrind and its options
        self.ip = sb.bed.addr(host, family)
        self.ctl_port = port
        self.probe_port = port
        self.data_port = port + 1
        self.key_file = key_file
        self.stats = os.path.join(sb.dir, "%s.sock" % host)
        self.conf_path = os.path.join(sb.dir, "%s.conf" % host)
        self.log_path = os.path.join(sb.dir, "%s.log" % host)
        self.conf = {
            "relay": {
                "user": "nobody",
                "key_file": key_file,
                "probe_listen": hostport(self.ip, self.probe_port),
                "control_listen": hostport(self.ip, self.ctl_port),
                "data_listen": hostport(self.ip, self.data_port),
                "stats_socket": self.stats,
                "log_level": "debug",
            },
            "limits": {"connect_timeout": "2s", "pending_timeout": "5s", "drain_timeout": "5s"},
            # the relays refuse private destinations unless allowed
            "policy": {"allowed_ports": "1-65535",
                       "allow_destinations": sb.bed_networks(),
                       "deny_destinations": ""},
            # a burst of new connections probes often
            "probe": {"requester_rate": 1000, "requester_burst": 2000},
            "auth": sb.auth_for("relay", host, owner="nobody"),
        }
        self.proc = None
        self._log_f = None
        self.cgroup = None          # own_cgroup(): a cgroup v2 directory of its own
        self.update(overrides or {})

    def initcwnd_table(self):
        """The learned initial windows ("initcwnd" command): {prefix: segments}."""
        rows = {}
        for line in unix_request(self.stats, b"initcwnd\n").splitlines()[1:]:
            f = line.split()
            if len(f) >= 2 and "/" in f[0]:
                rows[f[0]] = int(f[1])
        return rows

    def own_cgroup(self):
        """Starts the relay in a cgroup of its own (removed at stop), as
        systemd's unit does: [pipe] learn_initcwnd attaches its BPF program
        to the relay's cgroup and wants it alone there."""
        name = "sltit%d-relay-%s" % (os.getpid(), self.host)
        self.cgroup = os.path.join(netns.cgroup2_mounts()[0], name)
        os.makedirs(self.cgroup, exist_ok=True)
        self.wrapper = netns.cgroup_join_argv(name) + list(self.wrapper)
        return self

    def _rm_cgroup(self):
        if self.cgroup:
            try:
                os.rmdir(self.cgroup)
            except OSError:
                pass

    @property
    def control(self):
        """The relay's control endpoint as slotd names it: "ip:port" ("[ip6]:port")."""
        return hostport(self.ip, self.ctl_port)

    def relay_line(self, group):
        return "%s data=%d group=%d" % (hostport(self.ip, self.ctl_port), self.data_port, group)

    def update(self, overrides):
        for sec, kv in overrides.items():
            self.conf.setdefault(sec, {}).update(kv)
        with open(self.conf_path, "w") as f:
            f.write(render_ini(self.conf))
        os.chmod(self.conf_path, 0o644)

    def start(self, timeout=10):
        if self.cgroup:
            os.makedirs(self.cgroup, exist_ok=True)
        self._log_f = open(self.log_path, "ab")
        self.proc = self.bed.popen(self.host, self.wrapper + [RELAYD, "-c", self.conf_path],
                                   stdout=self._log_f, stderr=self._log_f)
        end = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("slot-relayd in %s exited with %d at start:\n%s"
                                   % (self.host, self.proc.returncode, self.log()))
            try:
                if self._listening():
                    self.counters()
                    return self
            except OSError:
                pass
            if time.monotonic() > end:
                raise RuntimeError("slot-relayd in %s not ready:\n%s" % (self.host, self.log()))
            time.sleep(0.05)

    def _listening(self):
        out = self.bed.run(self.host, "ss", "-Hltn", check=False).stdout
        have = {l.split()[3] for l in out.splitlines() if len(l.split()) > 3}
        # a dual-stack listener on [::] (docs/relay.md "IPv6") shows as "*:PORT"
        want = {"*:%d" % p if self.conf["relay"][k].startswith("[::]:") else hostport(self.ip, p)
                for k, p in (("control_listen", self.ctl_port), ("data_listen", self.data_port))}
        return want <= have

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=10):
        """SIGTERM (drain), then SIGKILL if it lingers. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._log_f:
            self._log_f.close()
            self._log_f = None
        self._rm_cgroup()
        return self.proc.returncode

    def restart(self):
        self.stop()
        return self.start()

    def reload(self, overrides, timeout=5):
        """Changes the config and SIGHUPs; waits for the relay's log to say so."""
        self.update(overrides)
        n = self.log().count("configuration reloaded")
        self.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: self.log().count("configuration reloaded") > n, timeout,
                 "%s to reload" % self.host)

    def log(self):
        return read_log(self.log_path, tail=10 ** 7)

    def counters(self):
        return parse_counters(unix_request(self.stats, b"counters\n"))

    def json(self):
        return json.loads(unix_request(self.stats, b"json\n"))

    def wait_counter(self, name, pred, timeout=5):
        c = {}

        def ok():
            c.update(self.counters())
            return pred(c.get(name, 0))
        try:
            wait_for(ok, timeout, "relay counter %s" % name)
        except AssertionError:
            raise AssertionError("%s: counter %s=%r never satisfied the condition; counters %r"
                                 % (self.host, name, c.get(name), c))
        return c

    # Silence: the probe port drops every datagram (the control connection
    # stays up, so slotd keeps probing it and never hears back).
    def _probe_rule(self):
        return ["INPUT", "-p", "udp", "--dport", str(self.probe_port), "-j", "DROP"]

    def block_probes(self):
        self.bed.run(self.host, "iptables", "-w", "-I", *self._probe_rule())

    def unblock_probes(self):
        self.bed.run(self.host, "iptables", "-w", "-D", *self._probe_rule(), check=False)


# ---------------------------------------------------------------- HAProxy

class HAProxy:
    """HAProxy in a host as a sysadmin's static relay: mode tcp, splice both
    ways, one frontend per (listen port -> target ip:port). The peer that
    slot's benchmarks compare a relay with."""

    def __init__(self, sb, host, routes, pipesize=None, maxconn=4000):
        self.sb, self.bed, self.host = sb, sb.bed, host
        self.ip = sb.bed.addr(host)     # IPv4 if it has one; HAProxy takes IPv6 as is
        self.routes = dict(routes)      # listen port -> (ip, port)
        self.cfg = os.path.join(sb.dir, "haproxy-%s.cfg" % host)
        self.log_path = os.path.join(sb.dir, "haproxy-%s.log" % host)
        with open(self.cfg, "w") as f:
            # maxconn needs about 2.5 descriptors each within the file limit
            f.write("global\n    maxconn %d\n    nbthread 1\n" % maxconn)
            if pipesize:
                f.write("    tune.pipesize %d\n" % pipesize)
            f.write("defaults\n    mode tcp\n    timeout connect 5s\n"
                    "    timeout client 10m\n    timeout server 10m\n"
                    "    option splice-request\n    option splice-response\n")
            for port, (ip, tport) in sorted(self.routes.items()):
                f.write("listen l%d\n    bind %s:%d\n    server s %s:%d\n"
                        % (port, self.ip, port, ip, tport))
        self.proc = None
        self._log_f = None

    def start(self, timeout=10):
        self._log_f = open(self.log_path, "ab")
        self.proc = self.bed.popen(self.host, ["haproxy", "-db", "-f", self.cfg],
                                   stdout=self._log_f, stderr=self._log_f)
        end = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("haproxy in %s exited with %d:\n%s"
                                   % (self.host, self.proc.returncode, read_log(self.log_path)))
            out = self.bed.run(self.host, "ss", "-Htln", check=False).stdout
            if all(":%d " % p in out for p in self.routes):
                return self
            if time.monotonic() > end:
                raise RuntimeError("haproxy in %s not listening" % self.host)
            time.sleep(0.05)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._log_f:
            self._log_f.close()
            self._log_f = None


# ---------------------------------------------------------------- nginx

# Where both nginx configurations of the bed keep their temporary files
# (in the run directory: nginx runs as nobody).
NGINX_TEMP_PATHS = """    client_body_temp_path %(d)s/tmp/body;
    proxy_temp_path %(d)s/tmp/proxy;
    fastcgi_temp_path %(d)s/tmp/fastcgi;
    uwsgi_temp_path %(d)s/tmp/uwsgi;
    scgi_temp_path %(d)s/tmp/scgi;
"""


class Nginx:
    """nginx in a host: static files under /f/, PUT under /up/, on ports, on
    each of the host's addresses (IPv4, IPv6). ip: the IPv4 address if the
    host has one, else the IPv6 one; ip6: the IPv6 address or None.

    keepalive_timeout (seconds, default 0): 0 makes nginx close every
    connection after its response, so that one request is one TCP
    connection: one decision of slotd, one pipe of the relay, closed when
    the download ends (tests count pipes, conntrack entries and connections
    right after one), and the access log's peer port is that connection's.
    Give more to test persistent connections (several requests, one
    connection); start() after changing it restarts nginx with it.

    start() writes the config and starts nginx; called again while nginx
    runs, it does nothing unless the config changed (then it restarts
    nginx). Files added with add_file() are served at once, started or not.
    SlotBed.up() starts the server's (SlotBed(..., nginx=False): not)."""

    def __init__(self, sb, host, ports=(80, 8080), keepalive_timeout=0):
        self.sb, self.bed, self.host = sb, sb.bed, host
        self.ip = sb.bed.addr(host)
        self.ip6 = sb.bed.host(host).ip6
        self.ports = list(ports)
        self.keepalive_timeout = keepalive_timeout
        self._started_conf = None       # the config the running nginx read
        self.dir = os.path.join(sb.dir, "nginx")
        self.www = os.path.join(self.dir, "www")
        self.files = {}                 # name -> (size, sha256)
        for d in (self.dir, self.www, os.path.join(self.www, "f"), os.path.join(self.www, "up"),
                  os.path.join(self.dir, "tmp")):
            os.makedirs(d, exist_ok=True)
            os.chmod(d, 0o755)
        import pwd
        nobody = pwd.getpwnam("nobody")
        # the workers run as nobody: uploads and request bodies land there
        for d in (os.path.join(self.www, "up"), os.path.join(self.dir, "tmp")):
            os.chown(d, nobody.pw_uid, nobody.pw_gid)
        self.conf_path = os.path.join(self.dir, "nginx.conf")
        self.access_log = os.path.join(self.dir, "access.log")
        self.error_log = os.path.join(self.dir, "error.log")
        self.proc = None
        self._out = None

    def add_file(self, name, size):
        """A file of random bytes served at /f/NAME; returns its sha256."""
        path = os.path.join(self.www, "f", name)
        h = hashlib.sha256()
        with open(path, "wb") as f:
            left = size
            while left:
                b = os.urandom(min(left, 4 * MiB))
                f.write(b)
                h.update(b)
                left -= len(b)
        os.chmod(path, 0o644)
        self.files[name] = (size, h.hexdigest())
        return h.hexdigest()

    def _base(self, port, ip, family):
        ip = ip or (self.bed.addr(self.host, family) if family else self.ip)
        return "http://%s%s" % ("[%s]" % ip if ":" in ip else ip,
                                "" if port == 80 else ":%d" % port)

    def url(self, name, port=80, query=None, ip=None, family=None):
        """The URL of a file; ip: another address to name (an IPv6 one is
        bracketed), or family 4/6: the server's address of that family."""
        u = "%s/f/%s" % (self._base(port, ip, family), name)
        return u + ("?" + query if query else "")

    def upload_url(self, name, port=80, ip=None, family=None):
        return "%s/up/%s" % (self._base(port, ip, family), name)

    def upload_path(self, name):
        return os.path.join(self.www, "up", name)

    def config(self):
        d = self.dir
        h = self.bed.host(self.host)
        listen = "\n".join("        listen %s backlog=4096;" % hostport(ip, p)
                           for p in self.ports for ip in (h.ip, h.ip6) if ip)
        return ("""# written by tests/integration/slotbed.py
daemon off;
master_process on;
worker_processes 1;
user nobody nogroup;
pid %(d)s/nginx.pid;
error_log %(d)s/error.log info;
worker_rlimit_nofile 16384;
events {
    worker_connections 8192;
}
http {
    log_format peers '$remote_addr:$remote_port "$request" $status $body_bytes_sent';
    access_log %(d)s/access.log peers;
""" + NGINX_TEMP_PATHS + """    default_type application/octet-stream;
    sendfile on;
    keepalive_timeout %(keepalive)s;
    server {
%(listen)s
        root %(www)s;
        location /f/ { }
        location /up/ {
            dav_methods PUT;
            create_full_put_path on;
            dav_access user:rw group:r all:r;
            client_max_body_size 256m;
        }
    }
}
""") % {"d": d, "listen": listen, "www": self.www,
        "keepalive": "%gs" % self.keepalive_timeout if self.keepalive_timeout else "0"}

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout=10):
        conf = self.config()
        if self.running:
            if conf == self._started_conf:
                return self
            self.stop()
        with open(self.conf_path, "w") as f:
            f.write(conf)
        os.chmod(self.conf_path, 0o644)
        self._started_conf = conf
        self._out = open(os.path.join(self.dir, "stderr.log"), "ab")
        self.proc = self.bed.popen(self.host, [NGINX, "-p", self.dir + "/", "-c", self.conf_path,
                                               "-e", self.error_log],
                                   stdout=self._out, stderr=self._out)
        for p in self.ports:
            self.bed.wait_listen(self.host, p, self.proc, timeout)
        return self

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)          # graceful
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._out:
            self._out.close()
            self._out = None

    def log(self):
        return read_log(self.error_log) + read_log(os.path.join(self.dir, "stderr.log"))

    def requests(self, match=None):
        """Access log entries [{peer, peer_port, request, status, bytes}], in
        order; match: a substring of the request line."""
        out = []
        try:
            with open(self.access_log, errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return out
        for l in lines:
            m = re.match(r'^(\S+):(\d+) "([^"]*)" (\d+) (\d+)$', l)
            if m and (match is None or match in m.group(3)):
                out.append({"peer": m.group(1), "peer_port": int(m.group(2)),
                            "request": m.group(3), "status": int(m.group(4)),
                            "bytes": int(m.group(5))})
        return out

    def peer_of(self, match, timeout=5):
        """The peer address of the (only) request whose line contains match.
        nginx logs a request when it is done, so this waits for it."""
        r = wait_for(lambda: self.requests(match), timeout, "nginx to log %r" % match)
        assert len(r) == 1, r
        return r[0]["peer"]


# ---------------------------------------------------------------- sshd

class Sshd:
    """OpenSSH's sshd in a host of the bed, for ssh, scp and rsync tests:
    its own host key, one user key authorized for `user` (root), password
    logins off, config, pid file and log in the run directory; it listens
    on each of the host's addresses, port `port` (22).

    key: the private key's path (what `ssh -i` takes). ssh_argv() and
    ssh_command() are the ssh command that logs in with it, without asking
    anything (no host key check, quiet): argv for a direct call (scp takes
    ssh_argv()[1:] as its own options), the string for `rsync -e`. target(path) is
    "root@ADDR:path" for rsync and scp (an IPv6 address bracketed), login()
    "root@ADDR" for ssh itself. SlotBed.sshd(host) makes, starts and later
    stops one."""

    def __init__(self, sb, host="server", port=22, user="root"):
        self.sb, self.bed, self.host, self.port, self.user = sb, sb.bed, host, port, user
        self.ip = sb.bed.addr(host)
        self.ip6 = sb.bed.host(host).ip6
        self.dir = os.path.join(sb.dir, "ssh-%s-%d" % (host, port))
        self.key = os.path.join(self.dir, "user")
        self.conf_path = os.path.join(self.dir, "sshd_config")
        self.log_path = os.path.join(self.dir, "sshd.log")
        self.proc = None
        self._log_f = None

    def config(self):
        h = self.bed.host(self.host)
        d = self.dir
        listen = "".join("ListenAddress %s\n" % hostport(ip, self.port)
                         for ip in (h.ip, h.ip6) if ip)
        return ("# written by tests/integration/slotbed.py\n%sHostKey %s\n"
                "AuthorizedKeysFile %s\nPermitRootLogin prohibit-password\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
                "StrictModes no\nPidFile %s\n"
                # scp speaks SFTP (OpenSSH 9), sftp too
                "Subsystem sftp internal-sftp\n"
                % (listen, os.path.join(d, "host"), os.path.join(d, "authorized"),
                   os.path.join(d, "sshd.pid")))

    def start(self, timeout=10):
        if not os.path.isdir(self.dir):
            os.makedirs(self.dir, mode=0o700)
            for name in ("host", "user"):
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
                                "slotbed-%s" % name, "-f", os.path.join(self.dir, name)],
                               check=True)
            with open(self.key + ".pub") as f, \
                    open(os.path.join(self.dir, "authorized"), "w") as a:
                a.write(f.read())
        with open(self.conf_path, "w") as f:
            f.write(self.config())
        os.makedirs("/run/sshd", exist_ok=True)     # sshd's privilege separation directory
        self._log_f = open(self.log_path, "ab")
        self.proc = self.bed.popen(self.host, ["/usr/sbin/sshd", "-D", "-e", "-f",
                                               self.conf_path],
                                   stdout=self._log_f, stderr=self._log_f)
        self.bed.wait_listen(self.host, self.port, self.proc, timeout)
        return self

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=10):
        if self.running:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._log_f:
            self._log_f.close()
            self._log_f = None

    def log(self):
        return read_log(self.log_path)

    def ssh_argv(self):
        """ssh with the key, on our port, asking nothing."""
        a = ["ssh", "-i", self.key, "-o", "StrictHostKeyChecking=no",
             "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
             "-o", "BatchMode=yes"]
        return a + (["-p", str(self.port)] if self.port != 22 else [])

    def ssh_command(self):
        """ssh_argv() as one string: rsync -e takes it."""
        import shlex
        return " ".join(shlex.quote(x) for x in self.ssh_argv())

    def login(self, family=None):
        """user@ADDR: the host's address (of family 4 or 6, else its ip)."""
        return "%s@%s" % (self.user, self.bed.addr(self.host, family) if family else self.ip)

    def target(self, path, family=None):
        """user@ADDR:path for rsync and scp; an IPv6 address bracketed."""
        ip = self.bed.addr(self.host, family) if family else self.ip
        return "%s@%s:%s" % (self.user, "[%s]" % ip if ":" in ip else ip, path)


# ---------------------------------------------------------------- slotd

class Slotd:
    """slotd in the client host, config written from a dict (see conf())."""

    _serial = 0

    def __init__(self, sb, relays, overrides=None, host="client", binary=None, wrapper=None):
        Slotd._serial += 1
        self.wrapper = list(wrapper or [])
        self.n = Slotd._serial
        self.sb, self.bed, self.host = sb, sb.bed, host
        self.binary = binary or SLOTD
        self.relays = list(relays)
        self.conf_path = os.path.join(sb.dir, "slotd%d.conf" % self.n)
        self.log_path = os.path.join(sb.dir, "slotd%d.log" % self.n)
        # one per host: slotds of several hosts (LAN hosts) run at once
        self.sock = os.path.join(sb.dir, "slotd.sock" if host == "client"
                                 else "slotd-%s.sock" % host)
        # libslot's socket and slotctl run's cgroup, of this run alone
        self.lib_sock = os.path.join(sb.dir, "slotd-lib%d.sock" % self.n)
        self.cgroup = "sltit%d-slotd%d" % (os.getpid(), self.n)
        self.conf = self.default_conf()
        self.extra_relay_lines = []
        self.proc = None
        self._log_f = None
        self.update(overrides or {})

    def default_conf(self):
        return {
            # user root: files in the run directory stay root's; tests of
            # the unprivileged slotd set user (test_ops_faults.py)
            "slotd": {"key_file": self.sb.slotd_key, "control_socket": self.sock,
                      "log_level": "debug", "queue": 7600, "user": "root"},
            # the default exclude has 10.0.0.0/8, the test bed's network
            "hijack": {"ports": "80, 5201", "include": "", "exclude": ""},
            # attach_from /: the tests' processes run in the root cgroup
            "lib": {"socket": self.lib_sock, "cgroup": self.cgroup, "attach_from": "/"},
            # c_wait 2, not the default 1.25: on the default layout a relay's
            # first answer needs 80 of the 100 ms 1.25 leaves, and a loaded
            # machine's late loops took that margin (the decision went direct,
            # and a direct decision is cached). slotd takes a good answer as
            # soon as it comes all the same.
            "select": {"strategy": "cover", "k": 20, "c_wait": 2, "min_gain": 1.1,
                       "repair_timeout": "3s", "hold_timeout": "5s",
                       "establish_timeout": "3s", "cache_ttl": "10m", "max_held": 4096,
                       "seed": 0},
            "relays": {"keepalive_interval": "30s", "keepalive_timeout": "10s",
                       "reconnect_min": "500ms", "reconnect_max": "2s",
                       "failure_quarantine": "30s"},
            "auth": self.sb.auth_for("client", "client%d" % self.n),
        }

    def relay_lines(self):
        """One `relay = ` line per relay, each in a group of its own."""
        lines = []
        for g, r in enumerate(self.relays, 1):
            lines.append(r.relay_line(g) if isinstance(r, Relay) else r)
        return lines + list(self.extra_relay_lines)

    def text(self):
        conf = {k: dict(v) for k, v in self.conf.items()}
        conf["relays"]["relay"] = self.relay_lines()
        return render_ini(conf)

    def update(self, overrides):
        for sec, kv in overrides.items():
            self.conf.setdefault(sec, {}).update(kv)
        self.write(self.text())

    def write(self, text):
        tmp = self.conf_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.rename(tmp, self.conf_path)

    # -- life cycle --

    def check(self, path=None):
        """slotd -t: (exit code, stderr)."""
        r = self.bed.run(self.host, self.binary, "-c", path or self.conf_path, "-t",
                         check=False, timeout=20)
        return r.returncode, r.stdout + r.stderr

    def start(self, wait=True, relays_up=None, timeout=10):
        """Starts slotd; waits until it is ready (control socket answers and
        SLOT_HIJACK exists) and, by default, until every relay that runs is up."""
        self._log_f = open(self.log_path, "ab")
        self.proc = self.bed.popen(self.host, self.wrapper + [self.binary, "-c", self.conf_path],
                                   stdout=self._log_f, stderr=self._log_f)
        if wait:
            self.wait_ready(timeout)
            if relays_up is None:
                relays_up = sum(1 for r in self.relays if isinstance(r, Relay) and r.running)
            self.wait_relays_up(relays_up, timeout)
        return self

    @property
    def pid(self):
        return self.proc.pid

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout=10):
        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("slotd exited with %d at start:\n%s"
                                   % (self.proc.returncode, self.log()))
            try:
                self.counters()
            except (OSError, ValueError):
                return False
            if self.conf.get("hijack", {}).get("backend") == "nft":
                return self.sb.run_client("nft", "list", "table", "inet", "slot",
                                          check=False).returncode == 0
            # [slotd] iptables: the tools slotd uses (legacy or nft)
            ipt = self.conf["slotd"].get("iptables", "iptables")
            return self.bed.run(self.host, ipt, "-w", "-t", "mangle", "-S", "SLOT_HIJACK",
                                check=False).returncode == 0
        try:
            wait_for(ready, timeout, "slotd to be ready")
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, self.log()))

    def wait_relays_up(self, n, timeout=10):
        """Waits until n relays are up and slotd's rules are in the kernel:
        a relay is probed only once its DNAT rule is in, which a link up
        (two round trips) may precede on a loaded machine."""
        def settled():
            c = self.counters()
            return c.get("relays_up") == n and c.get("rules_pending") == 0 and \
                c.get("relays_waiting_rules") == 0
        try:
            wait_for(settled, timeout, "relays_up == %d, rules in" % n)
        except AssertionError as e:
            raise AssertionError("%s: counters %r\n%s" % (e, self.counters(), self.log()))

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=10):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout=10):
        """SIGTERM and wait; SIGKILL if it does not exit. Returns the exit
        status (None if it had to be killed)."""
        if self.proc is None:
            return None
        rc = self.proc.poll()
        if rc is None:
            self.proc.send_signal(signal.SIGTERM)
            rc = self.wait(timeout)
            if rc is None:
                self.proc.kill()
                self.proc.wait(5)
        if self._log_f:
            self._log_f.close()
            self._log_f = None
        return rc

    def kill(self):
        """SIGKILL: slotd leaves its rules behind."""
        self.proc.kill()
        self.proc.wait(5)
        if self._log_f:
            self._log_f.close()
            self._log_f = None

    def hup(self, counter="reloads", timeout=5):
        """SIGHUP; waits until `counter` moves. Returns the counters."""
        before = self.counters().get(counter, 0)
        self.proc.send_signal(signal.SIGHUP)
        c = {}

        def moved():
            c.clear()
            c.update(self.counters())
            return c.get(counter, 0) > before
        try:
            wait_for(moved, timeout, "slotd's %s to move" % counter)
        except AssertionError as e:
            raise AssertionError("%s: counters %r\n%s" % (e, c, self.log()))
        return c

    def log(self):
        return read_log(self.log_path)

    # -- control socket --

    def counters(self):
        return parse_counters(unix_request(self.sock, b"counters\n"))

    def json(self):
        return json.loads(unix_request(self.sock, b"json\n"))

    def recent(self):
        return self.json()["recent"]

    def decision(self, client=None, server=None, timeout=5):
        """The newest decision for this client "ip:port" (or server "ip:port")."""
        def find():
            for d in reversed(self.recent()):
                if (client is None or d["client"] == client) and \
                        (server is None or d["server"] == server):
                    return d
            return None
        try:
            return wait_for(find, timeout, "a decision for %s -> %s" % (client, server))
        except AssertionError as e:
            raise AssertionError("%s; recent %r" % (e, self.recent()[-5:]))

    def relays_state(self):
        return {r["control"]: r for r in self.json()["relays"]}

    def caps(self):
        """{CapInh, CapPrm, CapEff, CapBnd, CapAmb}: ints from /proc/PID/status."""
        out = {}
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith("Cap"):
                    k, v = line.split(":")
                    out[k] = int(v.strip(), 16)
        return out


# ---------------------------------------------------------------- the bed

class Result:
    """What a download or upload client did."""

    def __init__(self, rc, out, err, sha=None, size=None, local_port=None, status=None):
        self.rc, self.out, self.err = rc, out, err
        self.sha, self.size, self.local_port, self.status = sha, size, local_port, status

    def __repr__(self):
        return ("Result(rc=%r status=%r size=%r local_port=%r sha=%s err=%r)"
                % (self.rc, self.status, self.size, self.local_port,
                   (self.sha or "")[:16], self.err[-2000:]))


class BedDird(DirClient):
    """slot-dird in a host of the test bed (listening on the host's address,
    port 7602, state file and counters socket in the run directory), config
    from a dict. Its DirClient methods call it from inside the client host,
    as a relay or slotd would: in identity mode a call about a bed relay is
    signed with that relay's own identity, others with one of the test's
    (a relay's for endpoints of no bed relay, a client's for slot.list)."""

    def call(self, method, fields, key=None, mac=None, ident=None, **kw):
        if ident is None and key is None and mac is None and self.sb.auth_mode == "identity":
            ident = self._ident_for(fields.get("relay"))
        return DirClient.call(self, method, fields, key=key, mac=mac, ident=ident, **kw)

    def _ident_for(self, relay):
        role, name, owner = "client", "dirtest-client", None
        if relay is not None:
            role, name = "relay", "dirtest-relay"
            for host, r in self.sb.relays.items():
                if r.control == relay:
                    name, owner = host, "nobody"
        a = self.sb.auth_for(role, name, owner=owner)
        return Identity(a["key"], a["certificate"])

    def __init__(self, sb, host, overrides=None, port=7602):
        self.sb, self.bed, self.host = sb, sb.bed, host
        self.ip = sb.bed.ip(host)
        self.port = port
        self.sock = os.path.join(sb.dir, "dird-%s.sock" % host)
        self.state = os.path.join(sb.dir, "dird-%s.state" % host)
        self.conf_path = os.path.join(sb.dir, "dird-%s.conf" % host)
        self.log_path = os.path.join(sb.dir, "dird-%s.log" % host)
        self.conf = {
            "dird": {"listen": "%s:%d" % (self.ip, port), "key_file": sb.slotd_key,
                     "state_file": self.state, "control_socket": self.sock,
                     "log_level": "debug"},
            "limits": {}, "relays": {}, "groups": {"regroup_interval": "200ms"},
            "auth": sb.auth_for("directory", "dird-%s" % host),
        }
        self.proc = None
        self._log_f = None
        self.wrapper = []           # e.g. env NOTIFY_SOCKET=...
        self.update(overrides or {})
        DirClient.__init__(self, "http://%s:%d/RPC2" % (self.ip, port),
                           bytes.fromhex(sb.key_hex),
                           run=lambda fn: self.bed.in_ns("client", fn))

    def update(self, overrides):
        for sec, kv in overrides.items():
            self.conf.setdefault(sec, {}).update(kv)
        with open(self.conf_path, "w") as f:
            f.write(render_ini(self.conf))

    def start(self, timeout=10):
        self._log_f = open(self.log_path, "ab")
        self.proc = self.bed.popen(self.host, self.wrapper + [DIRD, "-c", self.conf_path],
                                   stdout=self._log_f, stderr=self._log_f)
        end = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("slot-dird in %s exited with %d at start:\n%s"
                                   % (self.host, self.proc.returncode, self.log()))
            try:
                self.counters()     # the HTTP port listens before this answers
                return self
            except OSError:
                pass
            if time.monotonic() > end:
                raise RuntimeError("slot-dird in %s not ready:\n%s" % (self.host, self.log()))
            time.sleep(0.05)

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=10):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._log_f:
            self._log_f.close()
            self._log_f = None
        return self.proc.returncode if self.proc else None

    def log(self):
        return read_log(self.log_path)

    def counters(self):
        return parse_counters(unix_request(self.sock, b"counters\n"))

    def json(self):
        return json.loads(unix_request(self.sock, b"json\n"))

    def listing(self):
        """{relay: group} of the current listing."""
        return {e["relay"]: e["group"] for e in self.list("")["relays"]}


# serve_random_file's nginx: a file server and nothing else.
STATIC_NGINX_CONF = """# written by slotbed.serve_random_file
daemon off;
master_process on;
worker_processes 1;
user nobody nogroup;
pid %(d)s/nginx.pid;
error_log %(d)s/error.log warn;
events {
    worker_connections 1024;
}
http {
    access_log off;
""" + NGINX_TEMP_PATHS + """    default_type application/octet-stream;
    sendfile on;
    keepalive_timeout 0;
    server {
%(listen)s
        root %(www)s;
        location /f/ { }
    }
}
"""


class SlotBed:
    """The test bed and its daemons. relays: {name: (rtt client-relay, rtt
    relay-server)}; direct_rtt: client-server. extra_hosts: more hosts (a
    directory's, say); extra_pairs: (a, b, rtt) for other pairs. Every other
    pair gets other_rtt. host_sysctls: sysctls of every host. spec_edit(spec)
    may change the topology (tests/testbed/topo.py format) before it is built.
    auth: "identity" (the default: a CA of the run, a key and certificate per
    daemon) or "shared" (the lab's one key_file, every daemon in [auth] mode
    shared). family: every host's address family ("dual", the default,
    "ipv4" or "ipv6"); families: {host: family} for some. lans: LANs behind
    hosts (topology key "lans", docs/testbed.md), e.g. [{"name": "home",
    "gateway": "client", "hosts": ["pc1", "pc2"], "masquerade": True}]: the
    LAN hosts have the client's RTTs to the relays and the server (behind a
    NAT, as the client's address), for a Slotd(host="pc1") or curl(host=...).
    nginx: up() starts nginx in the server host (Nginx: ports 80 and 8080,
    keepalive_timeout 0); a dict of Nginx's keyword arguments starts it
    with those ({"keepalive_timeout": 65}), False leaves it to
    sb.nginx.start(). sshd(host) starts an sshd for ssh, scp and rsync."""

    def __init__(self, relays, direct_rtt=80, other_rtt=10, host_sysctls=None, relay_conf=None,
                 extra_hosts=(), extra_pairs=(), spec_edit=None, auth="identity",
                 family=None, families=None, lans=None, nginx=True):
        self.relay_rtts = dict(relays)
        hosts = ["client"] + list(self.relay_rtts) + ["server"] + list(extra_hosts)
        hosts = [{"name": h, "family": families[h]} if families and h in families else h
                 for h in hosts]
        pairs = [{"a": "client", "b": "server", "rtt": direct_rtt}]
        for name, (crtt, srtt) in self.relay_rtts.items():
            pairs.append({"a": "client", "b": name, "rtt": crtt})
            pairs.append({"a": name, "b": "server", "rtt": srtt})
        # more pairs: (a, b, rtt in ms)
        pairs += [{"a": a, "b": b, "rtt": rtt} for a, b, rtt in extra_pairs]
        sysctls = {
            # no ssthresh carried over between connections of one pair
            "net.ipv4.tcp_no_metrics_save": 1,
            # a burst of connections at once
            "net.core.somaxconn": 4096,
            "net.ipv4.tcp_max_syn_backlog": 8192,
        }
        sysctls.update(host_sysctls or {})
        self.spec = {"hosts": hosts, "pairs": pairs, "default": {"rtt": other_rtt},
                     "host_defaults": {"sysctls": sysctls}}
        if family:
            self.spec["host_defaults"]["family"] = family
        if lans:
            self.spec["lans"] = lans
        if spec_edit:
            spec_edit(self.spec)    # rates, loss, congestion control... (docs/testbed.md)
        self.relay_conf = relay_conf or {}
        self.nginx_opts = nginx
        self.bed = None
        self.dir = None
        self.relays = {}
        self.nginx = None
        self.sshds = []
        self.slotds = []
        self.dirds = []
        self.proxies = []
        self.key_hex = None
        assert auth in ("identity", "shared"), auth
        self.auth_mode = auth
        self.ids = None                 # Identities, in identity mode

    def auth_for(self, role, name, owner=None):
        """The [auth] section of a daemon: its own key and certificate
        (made on first use) in identity mode, mode shared otherwise."""
        if self.auth_mode == "shared":
            return {"mode": "shared"}
        if name not in self.ids.certs:
            return self.ids.issue(role, name, owner=owner)
        return self.ids.auth(name)

    # -- life cycle --

    def up(self):
        for b in (RELAYD, NGINX):
            if not os.access(b, os.X_OK):
                raise RuntimeError("%s is missing" % b)
        self.bed = topo.Testbed(self.spec)
        self.bed.up()
        try:
            self.dir = os.path.join(self.bed.dir, "slot")
            os.makedirs(self.dir)
            os.chmod(self.dir, 0o755)     # relays run as nobody and re-read their config
            self.key_hex = os.urandom(32).hex()
            # The relays re-read the key as nobody; slotd keeps CAP_NET_ADMIN
            # only, so its copy must be its own (root's, 0600).
            self.relay_key = netns.write_key(os.path.join(self.dir, "relay.key"), self.key_hex,
                                             owner="nobody")
            self.slotd_key = netns.write_key(os.path.join(self.dir, "slotd.key"), self.key_hex)
            if self.auth_mode == "identity":
                self.ids = Identities(os.path.join(self.dir, "ids"))
            for name in self.relay_rtts:
                self.relays[name] = Relay(self, name, self.relay_key, self.relay_conf).start()
            opts = self.nginx_opts
            self.nginx = Nginx(self, "server", **(opts if isinstance(opts, dict) else {}))
            if opts is not False:
                self.nginx.start()
        except BaseException:
            self.down()
            raise
        return self

    def down(self):
        for s in self.slotds:
            try:
                s.stop(timeout=5)
            except Exception:
                pass
        for r in list(self.relays.values()) + self.dirds:
            try:
                r.stop(timeout=5)
            except Exception:
                pass
        for h in self.proxies + self.sshds:
            try:
                h.stop()
            except Exception:
                pass
        if self.nginx:
            try:
                self.nginx.stop()
            except Exception:
                pass
        if self.bed:
            self.bed.down()
        # slotd leaves its run cgroup (it may no longer remove it); its
        # programs are gone with the namespaces
        for s in self.slotds:
            for mnt in netns.cgroup2_mounts():
                try:
                    os.rmdir(os.path.join(mnt, s.cgroup))
                except OSError:
                    pass

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()
        return False

    # -- names --

    def ip(self, host):
        return self.bed.ip(host)

    def ip6(self, host):
        return self.bed.ip6(host)

    def bed_networks(self):
        """The bed's networks (the relays' allow_destinations): the hosts'
        10.A.0.0/16 and fd00:A::/32, and the LANs' if there are any."""
        nets = ["10.%d.0.0/16" % self.bed.subnet, "fd00:%x::/32" % self.bed.subnet]
        if self.bed.topo.lans:
            nets += ["192.168.0.0/16", "fd01:%x::/32" % self.bed.subnet]
        return ", ".join(nets)

    def relay(self, name):
        return self.relays[name]

    def serve_random_file(self, mib, ports_by_host):
        """A file of mib MiB of random bytes at /f/big, served by a plain nginx
        (no access log, no keep-alive) in each host of ports_by_host on its
        ports; returns the file's path. For benchmarks that download from
        several hosts; stopped with the bed."""
        www = os.path.join(self.dir, "www")
        os.makedirs(os.path.join(www, "f"))
        path = os.path.join(www, "f", "big")
        with open(path, "wb") as f:
            for _ in range(mib // 4):
                f.write(os.urandom(4 << 20))
        for d in (www, os.path.join(www, "f")):
            os.chmod(d, 0o755)
        os.chmod(path, 0o644)
        for h, ports in ports_by_host.items():
            d = os.path.join(self.dir, "nginx-" + h)
            os.makedirs(os.path.join(d, "tmp"))
            os.chmod(d, 0o755)
            conf = os.path.join(d, "nginx.conf")
            with open(conf, "w") as f:
                f.write(STATIC_NGINX_CONF % {
                    "d": d, "www": www,
                    "listen": "\n".join("        listen %s:%d;" % (self.ip(h), p)
                                        for p in ports)})
            proc = self.bed.popen(h, [NGINX, "-p", d + "/", "-c", conf,
                                      "-e", os.path.join(d, "error.log")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for p in ports:
                self.bed.wait_listen(h, p, proc)
        return path

    def haproxy(self, host, routes, **kw):
        """A started HAProxy in host (stopped at down())."""
        h = HAProxy(self, host, routes, **kw).start()
        self.proxies.append(h)
        return h

    def sshd(self, host="server", port=22):
        """A started Sshd in host (stopped at down()): ssh, scp and rsync to
        it with its key (ssh_command(), target(path))."""
        h = Sshd(self, host, port).start()
        self.sshds.append(h)
        return h

    def dird(self, host="dir", overrides=None):
        """A started slot-dird in host (stopped at down())."""
        d = BedDird(self, host, overrides).start()
        self.dirds.append(d)
        return d

    # A directory that regroups often and relays that list and measure each
    # other often: a bed where slotd ranks relays from the directory's RTTs.
    FAST_DIRD = {"relays": {"heartbeat_interval": "1s", "expire_after": "30s"},
                 "groups": {"regroup_interval": "200ms"}}

    def measuring_dird(self, host="dir", overrides=None, measure_interval="2s"):
        """A started slot-dird in host (overrides: its config, default
        FAST_DIRD) with every relay restarted to register with it and
        measure the others every measure_interval."""
        d = self.dird(host, overrides=self.FAST_DIRD if overrides is None else overrides)
        for r in self.relays.values():
            r.stop()
            r.update({"directory": {"urls": d.url, "list_interval": "500ms",
                                    "measure_interval": measure_interval, "measure_rate": 50,
                                    "timeout": "2s"}})
            r.start()
        return d

    def relays_measured(self, d):
        """True once d lists every relay, each has an RTT to every other
        (the relays' "peers" command: endpoint, RTT or -, samples) and d's
        listing has every relay as a landmark with all its rows known. The
        landmark rows lag the relays' own RTTs by a report or two; a slotd
        started before that ranks on a partial set (a relay not yet a
        landmark, rows of 65535)."""
        full = d.list("")
        if len(full["relays"]) != len(self.relays):
            return False
        for r in self.relays.values():
            lines = unix_request(r.stats, b"peers\n").splitlines()
            if len(lines) != len(self.relays) - 1 or any(ln.split()[1] == "-" for ln in lines):
                return False
        lm = full.get("landmarks")
        if lm is None or len(lm["index"]) != len(self.relays):
            return False
        raw = lm["rtt"].data if hasattr(lm["rtt"], "data") else lm["rtt"]
        return 0xffff not in struct.unpack("<%dH" % (len(raw) // 2), raw)

    def cover_slotd(self, d, tag, **select):
        """A started slotd with the cover strategy (k 1 unless select says)
        on directory d, once it has every relay's control link up."""
        s = self.slotd([], overrides={
            "select": dict({"strategy": "cover", "k": 1}, **select),
            "directory": {"urls": d.url, "refresh": "1s", "retry": "500ms",
                          "cache_file": os.path.join(self.dir, "slotd-%s.relays" % tag)}})
        s.start(wait=False)
        s.wait_ready()
        s.wait_relays_up(len(self.relays), timeout=20)
        return s

    def slotd(self, relays, overrides=None, **kw):
        """A new Slotd (not started) for these relays (Relay objects or raw
        `relay =` values)."""
        s = Slotd(self, relays, overrides, **kw)
        self.slotds.append(s)
        return s

    # -- commands --

    def run_client(self, *args, **kw):
        return self.bed.run("client", *args, **kw)

    def _out(self, tool, host):
        return os.path.join(self.dir, "%s.out" % tool if host == "client"
                            else "%s-%s.out" % (tool, host))

    def curl(self, url, out=None, args=(), timeout=120, expect_sha=None, host="client"):
        """curl in the client host (or another: a LAN host, a gateway); out:
        where the body goes (default: a file in the run directory). Returns a
        Result with the sha256 of the body, the HTTP status and curl's local
        port."""
        out = out or self._out("curl", host)
        if os.path.exists(out):
            os.unlink(out)
        r = self.bed.run(host, "curl", "-sS", "--max-time", str(timeout), "-o", out,
                         "-w", "%{http_code} %{local_port} %{size_download}", *args, url,
                         check=False, timeout=timeout + 10)
        res = Result(r.returncode, r.stdout, r.stderr)
        parts = r.stdout.split()
        if len(parts) == 3:
            res.status, res.local_port = int(parts[0]), int(parts[1])
        if os.path.exists(out):
            res.sha = sha256_file(out)
            res.size = os.path.getsize(out)
        return res

    def curl_popen(self, url, out, args=(), host="client"):
        """curl in the background (for transfers in flight); finish with
        finish_curl(p, out)."""
        if os.path.exists(out):
            os.unlink(out)
        return self.bed.popen(host, ["curl", "-sS", "--max-time", "120", "-o", out,
                                     "-w", "%{http_code} %{local_port} %{size_download}",
                                     *args, url],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def finish_curl(self, p, out, timeout=120):
        try:
            so, se = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
        res = Result(p.returncode, so.decode(errors="replace"), se.decode(errors="replace"))
        parts = res.out.split()
        if len(parts) == 3:
            res.status, res.local_port = int(parts[0]), int(parts[1])
        if os.path.exists(out):
            res.sha = sha256_file(out)
            res.size = os.path.getsize(out)
        return res

    def wget(self, url, out=None, timeout=120, host="client"):
        out = out or self._out("wget", host)
        if os.path.exists(out):
            os.unlink(out)
        r = self.bed.run(host, "wget", "-q", "-T", str(timeout), "-t", "1", "-O", out, url,
                         check=False, timeout=timeout + 10)
        res = Result(r.returncode, r.stdout, r.stderr)
        if os.path.exists(out):
            res.sha = sha256_file(out)
            res.size = os.path.getsize(out)
        return res

    def upload(self, path, url, timeout=120, host="client"):
        """curl -T path url (HTTP PUT), from the client host or another."""
        r = self.bed.run(host, "curl", "-sS", "--max-time", str(timeout), "-o", "/dev/null",
                         "-w", "%{http_code} %{local_port} %{size_upload}", "-T", path, url,
                         check=False, timeout=timeout + 10)
        res = Result(r.returncode, r.stdout, r.stderr)
        parts = r.stdout.split()
        if len(parts) == 3:
            res.status, res.local_port, res.size = int(parts[0]), int(parts[1]), int(parts[2])
        return res

    def random_file(self, name, size):
        """A file of random bytes in the run directory: (path, sha256)."""
        path = os.path.join(self.dir, name)
        h = hashlib.sha256()
        with open(path, "wb") as f:
            left = size
            while left:
                b = os.urandom(min(left, 4 * MiB))
                f.write(b)
                h.update(b)
                left -= len(b)
        os.chmod(path, 0o644)
        return path, h.hexdigest()

    # -- packet filter and conntrack in the client host --

    def iptables_save(self, table, host="client"):
        return self.bed.run(host, "iptables-save", "-t", table).stdout

    def chain_exists(self, table, chain, host="client"):
        return self.bed.run(host, "iptables", "-w", "-t", table, "-S", chain,
                            check=False).returncode == 0

    def slot_rules(self, host="client"):
        """Every line of the mangle and nat tables that mentions SLOT_."""
        return [l for t in ("mangle", "nat") for l in self.iptables_save(t, host).splitlines()
                if "SLOT_" in l]

    def remove_slot_rules(self, host="client"):
        """Removes slotd's jumps and chains (both families, both hooks) and
        its nft table by hand (after a SIGKILL), as slotd itself does at
        stop."""
        for ipt in ("iptables", "ip6tables"):
            for table, hook, chain in (("mangle", "OUTPUT", "SLOT_HIJACK"),
                                       ("nat", "OUTPUT", "SLOT_DNAT"),
                                       ("mangle", "PREROUTING", "SLOT_GW"),
                                       ("nat", "PREROUTING", "SLOT_DNAT")):
                for _ in range(100):
                    if self.bed.run(host, ipt, "-w", "-t", table, "-D", hook, "-j", chain,
                                    check=False).returncode != 0:
                        break
            for table, chain in (("mangle", "SLOT_GW"), ("mangle", "SLOT_HIJACK"),
                                 ("nat", "SLOT_DNAT")):
                self.bed.run(host, ipt, "-w", "-t", table, "-F", chain, check=False)
                self.bed.run(host, ipt, "-w", "-t", table, "-X", chain, check=False)
        if shutil.which("nft"):
            self.bed.run(host, "nft", "delete", "table", "inet", "slot", check=False)

    def conntrack(self, host="client", dport=None):
        """TCP conntrack entries of a host (conntrack -L)."""
        a = ["conntrack", "-L", "-p", "tcp"]
        if dport is not None:
            a += ["--dport", str(dport)]
        r = self.bed.run(host, *a, check=False)
        return [CtEntry(l) for l in r.stdout.splitlines() if l.startswith("tcp")]

    def ct_entry(self, sport, dst=None, dport=None, host="client"):
        """The conntrack entry of the client's connection from local port
        sport (to dst:dport); None if there is none."""
        for e in self.conntrack(host):
            if e.sport == sport and e.src == self.ip("client") and \
                    (dst is None or e.dst == dst) and (dport is None or e.dport == dport):
                return e
        return None

"""The Debian packages (debian/, `make deb`; docs/deploy.md, "The Debian
packages"), built, installed, run, upgraded and purged under a real systemd.

The throwaway root: the host's own /etc, /usr and /var, each an overlay
whose upper layer is in a temporary directory, in the private mount
namespace of a systemd booted in fresh namespaces (sysboot.py, the approach
of test_install.py). dpkg and apt run in that root as on a real host: the
host's dpkg database satisfies the dependencies (libev4, adduser,
iptables...), the maintainer scripts' adduser and deb-systemd-helper are
the host's, and systemctl talks to that systemd; nothing reaches the
host's own files, and the upper layers record every file the packages
leave behind. (dpkg --root or --instdir/--admindir on an empty tree has no
database to resolve dependencies against and no adduser, shell or systemd to
run the maintainer scripts with.) The host's policy-rc.d (Docker's "no
daemon starts") is removed in that root, as a real host has none.

In file order, each test on the state the previous left:
  1. make deb (into a temporary B=) builds every package lintian-clean, of
     the Makefile's SLOT_VERSION, without touching the tree; a second build
     of a bumped version in the same copy recompiles what prints it;
  2. apt installs them (README's apt install ./...deb): the slot user, the
     files, the conffiles; each unit enabled but, without a key, not started
     and not failing ("start condition unmet"); libslot-dev builds an
     application with pkg-config, python3-slot imports;
  3. with keys from the packaged slot-keygen and edited conffiles, each role
     starts from its package: slotd takes the relay from the directory;
  4. the upgrade to the bumped version while the relay carries two pipes:
     the unit restarts, the relay drains (docs/deploy.md, "The Debian
     packages"): the pipe that ends within drain_timeout completes (sha256),
     the one that does not is reset, so its client sees a reset and not a
     clean end; the new relay runs the new version; the edited conffiles
     stay;
  5. purge: nothing left but dpkg's records, the slot user (kept, as
     Debian keeps system users) and the keys the operator put in /etc/slot;
  6. deploy/ with slot_debs on that purged root: apt installs the packages,
     systemd runs the daemons the playbook configured.
"""

import glob
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import pytest

import sysboot

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD = os.path.abspath(os.environ.get("SLOT_BUILD", os.path.join(ROOT, "build")))
TESTCLIENT = os.environ.get("SLOT_TESTCLIENT", os.path.join(BUILD, "tests", "slot-testclient"))

TAG = "sltdeb"                  # namespaces, links, cgroups, directories: sltdeb<pid>
SHARE = "/run/sltdeb-share"     # the work directory's share/, inside the root
NET = "10.213.0"                # the link between the root and the test's namespace
SERVER_PORT = 8080
HALF = 1 << 20                  # each transfer: HALF bytes, then HALF more on request
# The relay's drain_timeout in the test, seconds: the pipe meant to survive
# gets its last request as soon as the test sees the relay draining, and
# ends within milliseconds; the other outlives it.
DRAIN = 12
DAEMONS = {"slot-relay": ("slot-relayd", "relayd", "relay"),
           "slot-client": ("slotd", "slotd", "client"),
           "slot-directory": ("slot-dird", "dird", "directory")}
PACKAGES = ["slot-common", "slot-relay", "slot-client", "slot-directory", "slot-tools",
            "libslot1", "libslot-dev", "python3-slot"]


def slot_version():
    m = re.search(r"^SLOT_VERSION\s*\?=\s*(\S+)", open(os.path.join(ROOT, "Makefile")).read(),
                  re.M)
    return m.group(1)


def bumped(v):
    """0.1.0 -> 0.1.1"""
    head, _, last = v.rpartition(".")
    return "%s.%d" % (head, int(last) + 1) if last.isdigit() else v + ".1"


V1 = slot_version()
V2 = bumped(V1)
LIBV = re.search(r'^#define SLOT_LIB_VERSION\s+"([^"]+)"',
                 open(os.path.join(ROOT, "include/slot/slot.h")).read(), re.M).group(1)

pytestmark = pytest.mark.skipif(
    shutil.which("dh") is None or shutil.which("dpkg-buildpackage") is None,
    reason="debhelper or dpkg-dev missing: no packages to test (sudo ./scripts/deps.sh)")


def sh(*args, check=True, **kw):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    if check:
        assert r.returncode == 0, (args, r.stdout[-4000:], r.stderr[-4000:])
    return r


def payload(name):
    return hashlib.shake_256(name.encode()).digest(2 * HALF)


def sha(b):
    return hashlib.sha256(b).hexdigest()


# ---------------------------------------------------------------- the root

INNER = r"""#!/bin/sh
set -eu
W=$1
mount --make-rprivate /
for d in etc usr var; do
    mount -t overlay overlay -o "lowerdir=/$d,upperdir=$W/$d-upper,workdir=$W/$d-work" "/$d"
done
mount -t tmpfs -o mode=755 tmpfs /run
mkdir %(share)s
mount --bind "$W/share" %(share)s
mount -t tmpfs -o mode=1777 tmpfs /tmp
umount -l /sys
mount -t sysfs -o ro sysfs /sys
mount -t cgroup2 cgroup2 /sys/fs/cgroup
ip link set lo up
exec env -i container=slot-test PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    /lib/systemd/systemd --unit=slot-test.target --log-target=journal --show-status=no
""" % {"share": SHARE}

# The test's server, in its own network namespace: per connection, a name
# line, then HALF bytes of payload(name), then on a "more" line the other
# HALF, then its end.
SERVER = r"""
import hashlib, socket, sys, threading
half = %d
srv = socket.create_server((sys.argv[1], int(sys.argv[2])), reuse_port=True)
print("ready", flush=True)
def serve(c):
    try:
        f = c.makefile("rb")
        name = f.readline().strip().decode()
        body = hashlib.shake_256(name.encode()).digest(2 * half)
        c.sendall(body[:half])
        if f.readline().strip() == b"more":
            c.sendall(body[half:])
        c.shutdown(socket.SHUT_WR)
        while c.recv(65536):
            pass
    except OSError:
        pass
    c.close()
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
""" % HALF


def sweep():
    """What earlier runs killed before their teardown left: their systemd
    (cgroup), network namespace and directories."""
    sysboot.sweep_cgroups(TAG)
    for line in sh("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.match(r"^%s(\d+)$" % TAG, name)
        if m and not sysboot.pid_alive(int(m.group(1))):
            for p in sh("ip", "netns", "pids", name, check=False).stdout.split():
                try:
                    os.kill(int(p), 9)
                except (ProcessLookupError, ValueError):
                    pass
            sh("ip", "netns", "del", name, check=False)
    for line in sh("ip", "-o", "link", "show", check=False).stdout.splitlines():
        m = re.match(r"^\d+: (%s(\d+)[hp])[@:]" % TAG, line)
        if m and not sysboot.pid_alive(int(m.group(2))):
            sh("ip", "link", "del", m.group(1), check=False)
    tmp = tempfile.gettempdir()
    for name in os.listdir(tmp):
        m = re.match(r"^%s(\d+)-" % TAG, name)
        if m and not sysboot.pid_alive(int(m.group(1))):
            shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)


class Root:
    def __init__(self, work, debs):
        self.w, self.debs = work, debs
        self.tag = "%s%d" % (TAG, os.getpid())
        self.ns = self.tag                      # the test's side of the link
        self.sys = None
        self.server = None
        self.clients = []
        self.share = os.path.join(work, "share")

    def prepare(self):
        for d in ("etc", "usr", "var"):
            os.makedirs(os.path.join(self.w, d + "-upper"))
            os.makedirs(os.path.join(self.w, d + "-work"))
        os.makedirs(self.share)
        os.chmod(self.share, 0o755)
        units = os.path.join(self.w, "etc-upper", "systemd", "system")
        os.makedirs(units)
        with open(os.path.join(units, "slot-test.target"), "w") as f:
            f.write("[Unit]\nDescription=slot packages under test\n")
        for u in sysboot.masks():
            os.symlink("/dev/null", os.path.join(units, u))
        for v in (V1, V2):
            d = os.path.join(self.share, v)
            os.makedirs(d)
            for p in PACKAGES:
                f, = glob.glob(os.path.join(self.debs, "%s_%s_*.deb" % (p, v)))
                shutil.copy(f, d)
        shutil.copy(os.path.join(ROOT, "tests/integration/slot-libget.c"), self.share)
        inner = os.path.join(self.w, "inner.sh")
        with open(inner, "w") as f:
            f.write(INNER)
        self.sys = sysboot.System(self.tag, inner, [self.w], os.path.join(self.w, "boot.log"))

    def start(self):
        self.sys.start()
        # A real host has no policy-rc.d; Docker's would keep every daemon
        # from starting.
        self.run("rm", "-f", "/usr/sbin/policy-rc.d")
        # The link to the test's namespace (the server, the relay's clients).
        sh("ip", "netns", "add", self.ns)
        sh("ip", "link", "add", self.tag + "h", "type", "veth", "peer", "name", self.tag + "p")
        sh("ip", "link", "set", self.tag + "h", "netns", self.sys.pid)
        sh("ip", "link", "set", self.tag + "p", "netns", self.ns)
        self.run("ip", "addr", "add", NET + ".1/24", "dev", self.tag + "h")
        self.run("ip", "link", "set", self.tag + "h", "up")
        sh("ip", "-n", self.ns, "addr", "add", NET + ".2/24", "dev", self.tag + "p")
        sh("ip", "-n", self.ns, "link", "set", self.tag + "p", "up")
        sh("ip", "-n", self.ns, "link", "set", "lo", "up")
        self.before = self.snapshot()

    def run(self, *cmd, **kw):
        return self.sys.run(*cmd, **kw)

    def show(self, unit, prop):
        return self.sys.show(unit, prop)

    def read(self, path):
        return self.run("cat", path).stdout

    def write(self, path, text, mode="644", owner="root"):
        """path in the root gets text (through the shared directory)."""
        tmp = os.path.join(self.share, "file.tmp")
        with open(tmp, "w") as f:
            f.write(text)
        self.run("install", "-m", mode, "-o", owner, SHARE + "/file.tmp", path)

    def snapshot(self):
        """What the overlays' upper layers hold, as {path in the root: what}:
        files (their sha256), links, whiteouts (deleted host files) and
        directories the host does not have (a host directory copied up
        because something changed inside is no change of its own)."""
        out = {}
        for layer in ("etc", "usr", "var"):
            up = os.path.join(self.w, layer + "-upper")
            for d, dirs, files in os.walk(up):
                for n in dirs + files:
                    p = os.path.join(d, n)
                    path = "/%s/%s" % (layer, os.path.relpath(p, up))
                    st = os.lstat(p)
                    if stat.S_ISDIR(st.st_mode):
                        if not os.path.isdir(path):
                            out[path] = "dir"
                    elif stat.S_ISLNK(st.st_mode):
                        out[path] = "-> " + os.readlink(p)
                    elif stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                        out[path] = "deleted"
                    else:
                        with open(p, "rb") as f:
                            out[path] = sha(f.read())
        return out

    def journal(self):
        return self.sys.journal("-u", "slot-relayd", "-u", "slotd", "-u", "slot-dird",
                                "_PID=1")

    # -- the test's namespace: the server and the relay's clients --

    def start_server(self):
        self.server = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, sys.executable, "-c", SERVER, NET + ".2",
             str(SERVER_PORT)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        assert self.server.stdout.readline().strip() == "ready"

    def client(self, name):
        """A pipe through the relay (identity mode: the test's client
        certificate) to the server, which sends HALF bytes of payload(name);
        write "more\\n" to .stdin for the rest."""
        out = os.path.join(self.w, "client-%s.out" % name)
        err = os.path.join(self.w, "client-%s.err" % name)
        p = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, TESTCLIENT,
             "--id-key", os.path.join(self.share, "tester.key"),
             "--id-cert", os.path.join(self.share, "tester.cert"),
             "--ca", os.path.join(self.share, "ca.pub"),
             "--relay", NET + ".1:7600", "--data-port", "7601",
             "--server", "%s.2:%d" % (NET, SERVER_PORT), "--timeout", "120"],
            stdin=subprocess.PIPE, stdout=open(out, "wb"), stderr=open(err, "w"))
        p.out, p.err, p.name = out, err, name
        p.stdin.write(name.encode() + b"\n")
        p.stdin.flush()
        self.clients.append(p)
        return p

    def stop(self):
        for p in self.clients + ([self.server] if self.server else []):
            if p.poll() is None:
                p.kill()
                p.wait(5)
        if self.sys:
            self.sys.stop()
        for p in sh("ip", "netns", "pids", self.ns, check=False).stdout.split():
            try:
                os.kill(int(p), 9)
            except (ProcessLookupError, ValueError):
                pass
        sh("ip", "netns", "del", self.ns, check=False)


@pytest.fixture(scope="module")
def built():
    """make deb into a temporary B=, then the bumped version into the same
    OUTDIR (its copy of the tree and its objects)."""
    sweep()
    top = tempfile.mkdtemp(prefix="%s%d-build-" % (TAG, os.getpid()))
    try:
        b = os.path.join(top, "b")
        t0 = time.monotonic()
        r = sh("make", "-s", "deb", "B=" + b, cwd=ROOT, check=False, timeout=900)
        assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-6000:]
        t1 = time.monotonic()
        out = os.path.join(b, "deb")
        r = sh(os.path.join(ROOT, "scripts/deb.sh"), "-k", "-n", "-v", V2, out, check=False,
               timeout=900)
        assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-6000:]
        print("\nmake deb: %.0f s; the bumped version: %.0f s" % (t1 - t0, time.monotonic() - t1))
        yield out
    finally:
        if os.environ.get("SLOT_KEEP"):
            print("\npackages kept in %s" % top)
        else:
            shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def root(built):
    why = sysboot.unavailable()
    if why:
        pytest.skip("no systemd to boot: " + why)
    work = tempfile.mkdtemp(prefix="%s%d-root-" % (TAG, os.getpid()))
    r = Root(work, built)
    try:
        r.prepare()
        r.start()
        yield r
    except BaseException:
        if r.sys and r.sys.pid:
            print(r.journal()[-20000:])
        raise
    finally:
        r.stop()
        if not os.environ.get("SLOT_KEEP"):
            shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------- 1. the build

def deb_field(path, field):
    return sh("dpkg-deb", "-f", path, field).stdout.strip()


def deb_files(path):
    """{path: mode string} of a package's contents (directories left out)."""
    out = {}
    for line in sh("dpkg-deb", "-c", path).stdout.splitlines():
        f = line.split()
        name = f[5].lstrip(".")
        if not f[0].startswith("d"):
            out[name] = f[0]
    return out


def test_make_deb_builds_every_package_lintian_clean(built):
    changelog = sh("dpkg-parsechangelog", "-l", os.path.join(ROOT, "debian/changelog"),
                   "-S", "Version").stdout.strip()
    assert changelog == V1, "debian/changelog says %s, the Makefile %s" % (changelog, V1)
    arch = sh("dpkg", "--print-architecture").stdout.strip()
    for v in (V1, V2):
        for p in PACKAGES:
            f = glob.glob(os.path.join(built, "%s_%s_*.deb" % (p, v)))
            assert len(f) == 1, (p, v, os.listdir(built))
            assert deb_field(f[0], "Version") == v
            assert deb_field(f[0], "Architecture") in (arch, "all")
    # make deb ran lintian: no error, no warning
    lint = open(os.path.join(built, "lintian.txt")).read()
    assert not re.search(r"^[EW]: ", lint, re.M), lint
    # built in the copy: the tree gets nothing
    for junk in ("debian/tmp", "debian/files", "debian/.debhelper", "debian/build",
                 "debian/slot-relay", "debian/debhelper-build-stamp"):
        assert not os.path.exists(os.path.join(ROOT, junk)), junk
    assert not glob.glob(os.path.join(os.path.dirname(ROOT), "slot_*.changes"))
    # the bumped rebuild, on the objects of the first, compiled again the
    # files that print the version (and, unless the tree changed meanwhile,
    # only those)
    log = open(os.path.join(built, "build.log")).read()
    compiled = set(re.findall(r"-c -o \S+/obj/(\S+)\.o ", log))
    printing = {f[:-2] for f in sh("grep", "-rl", "--include=*.c", "SLOT_VERSION", "src",
                                   cwd=ROOT).stdout.split()}
    assert printing and printing <= compiled, (compiled, printing)
    print("the bumped rebuild compiled %d files: %s" % (len(compiled), sorted(compiled)))

    deb = lambda p, v=V1: glob.glob(os.path.join(built, "%s_%s_*.deb" % (p, v)))[0]  # noqa
    # the layout (docs/deploy.md, "The Debian packages")
    for p, (d, conf, _) in DAEMONS.items():
        files = deb_files(deb(p))
        assert "/usr/sbin/" + d in files
        assert "/lib/systemd/system/%s.service" % d in files
        assert "/lib/systemd/system/%s.service.d/slot-key.conf" % d in files
        assert "/etc/slot/%s.conf" % conf in files
        assert "/usr/share/man/man8/%s.8.gz" % d in files
        conffiles = sh("dpkg-deb", "--info", deb(p), "conffiles").stdout.split()
        assert conffiles == ["/etc/slot/%s.conf" % conf], conffiles
        assert "slot-common (= %s)" % V1 in deb_field(deb(p), "Depends")
    tools = deb_files(deb("slot-tools"))
    assert {"/usr/sbin/slotctl", "/usr/sbin/slot-keygen", "/usr/bin/slot-sim"} <= set(tools)
    multiarch = sh("dpkg-architecture", "-qDEB_HOST_MULTIARCH").stdout.strip()
    lib = "/usr/lib/%s/" % multiarch
    assert set(deb_files(deb("libslot1"))) >= {lib + "libslot.so.1", lib + "libslot.so." + LIBV}
    dev = deb_files(deb("libslot-dev"))
    assert {lib + "libslot.so", lib + "libslot.a", lib + "pkgconfig/slot.pc",
            "/usr/include/slot/slot.h", "/usr/share/man/man3/libslot.3.gz"} <= set(dev)
    assert "/usr/lib/python3/dist-packages/slot.py" in deb_files(deb("python3-slot", V1))
    assert "libslot1 (>= %s)" % V1 in deb_field(deb("python3-slot"), "Depends")
    common = deb_files(deb("slot-common"))
    assert "/usr/share/man/man5/slot.conf.5.gz" in common
    # uncompressed: the units' Documentation= and the man pages name them
    assert "/usr/share/doc/slot-common/relay.md" in common


# ---------------------------------------------------------------- 2. install

def test_install_enables_each_unit_and_starts_none_without_a_key(root):
    debs = sorted(glob.glob(os.path.join(root.share, V1, "*.deb")))
    # The README's apt install ./...deb, all packages at once.
    r = root.run("apt-get", "install", "-y", "--no-install-recommends",
                 *[SHARE + "/%s/%s" % (V1, os.path.basename(d)) for d in debs],
                 env={"DEBIAN_FRONTEND": "noninteractive"}, timeout=300, check=False)
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-5000:]
    for p in PACKAGES:
        st = root.run("dpkg-query", "-W", "-f", "${Status} ${Version}", p).stdout
        assert st == "install ok installed " + V1, (p, st)

    # The system user: no home, no login shell.
    pw = root.run("getent", "passwd", "slot").stdout.strip().split(":")
    assert int(pw[2]) < 1000 and pw[5] == "/nonexistent" and pw[6] == "/usr/sbin/nologin", pw
    assert root.run("getent", "group", "slot").stdout.startswith("slot:")

    for p, (d, conf, _) in DAEMONS.items():
        # the example configuration is the conffile
        assert root.read("/etc/slot/%s.conf" % conf) == open(
            os.path.join(ROOT, "etc", conf + ".conf")).read()
        # the hardened unit, substituted as make install does it, and the
        # package's drop-in
        unit = root.read("/lib/systemd/system/%s.service" % d)
        assert "ExecStart=/usr/sbin/%s -c /etc/slot/%s.conf\n" % (d, conf) in unit
        assert "ProtectSystem=strict" in unit and "@" + "SBINDIR@" not in unit
        assert "file:///usr/share/doc/slot-common/" in unit
        cond = root.show(d, "ConditionResult")
        assert root.show(d, "UnitFileState") == "enabled", d
        # enabled and started by the postinst, but the condition kept it
        # from running: inactive, not failed, never restarted
        assert root.show(d, "ActiveState") == "inactive", (d, root.journal()[-3000:])
        assert cond == "no", (d, cond)
        assert root.show(d, "Result") == "success" and root.show(d, "NRestarts") == "0", d
        assert "%s.service - " % d in root.sys.journal(
            "-u", d, "--grep", "skipped because no trigger condition checks were met"), \
            "%s: the postinst did not try to start it" % d
    # nothing failed anywhere
    assert root.run("systemctl", "--failed", "--plain", "--no-legend").stdout.strip() == ""

    # libslot-dev: an application built with pkg-config runs against
    # libslot1; python3-slot loads the same library.
    r = root.run("sh", "-c", "cc -Wall -Werror -o /tmp/app %s/slot-libget.c "
                 "$(pkg-config --cflags --libs slot) && ldd /tmp/app && "
                 "/tmp/app -n -s /tmp/none.sock 127.0.0.1 9 / /tmp/out; echo rc=$?" % SHARE)
    assert re.search(r"libslot\.so\.1 => (/usr)?/lib/\S+/libslot\.so\.1 ", r.stdout), r.stdout
    assert "not reachable" in r.stdout and "rc=2" in r.stdout, r.stdout
    r = root.run("python3", "-c", "import slot; print(slot.__file__, slot.version())")
    assert r.stdout.split() == ["/usr/lib/python3/dist-packages/slot.py", LIBV], r.stdout
    assert root.run("/usr/sbin/slotctl", "-V").stdout.strip() == "slotctl " + V1


# ---------------------------------------------------------------- 3. each role

def edit(text, edits):
    lines = text.split("\n")
    for old, new in edits.items():
        assert old in lines, old
        lines[lines.index(old)] = new
    return "\n".join(lines)


URL = "http://127.0.0.1:7602/RPC2"
EDITS = {
    "relayd": {"urls =": "urls = " + URL, "advertise =": "advertise = 127.0.0.1:7600",
               "measure_interval = 10m": "measure_interval = 10s",
               # the test's server is on a private network
               "allow_destinations =": "allow_destinations = %s.0/24" % NET,
               "drain_timeout = 30s": "drain_timeout = %ds" % DRAIN},
    "slotd": {"urls =": "urls = " + URL, "refresh = 2h": "refresh = 1s",
              "retry = 30s": "retry = 1s"},
    "dird": {},
}


def status(root, daemon):
    return json.loads(root.run("/usr/sbin/slotctl", "-d", daemon, "-j", "status").stdout)


def test_each_role_starts_from_its_package(root):
    # The CA and the certificates, by the packaged slot-keygen (README);
    # the test's own client certificate for its pipes through the relay.
    kg = "/usr/sbin/slot-keygen"
    root.run(kg, "ca", SHARE + "/ca")
    for name, role in (("relay1", "relay"), ("dir1", "directory"), ("client1", "client"),
                       ("tester", "client")):
        root.run(kg, "issue", "-c", SHARE + "/ca.key", "-r", role, "-n", name,
                 SHARE + "/" + name)
    root.run("install", "-m", "644", SHARE + "/ca.pub", "/etc/slot/ca.pub")
    for conf, name in (("relayd", "relay1"), ("dird", "dir1"), ("slotd", "client1")):
        root.run("install", "-m", "600", "-o", "slot", "%s/%s.key" % (SHARE, name),
                 "/etc/slot/%s.key" % conf)
        root.run("install", "-m", "644", "%s/%s.cert" % (SHARE, name), "/etc/slot/%s.cert" % conf)
        path = "/etc/slot/%s.conf" % conf
        root.write(path, edit(root.read(path), EDITS[conf]))
    root.edited = {c: root.read("/etc/slot/%s.conf" % c) for c in EDITS}

    root.run("systemctl", "start", "slot-dird", "slot-relayd", "slotd")
    try:
        for _, (d, conf, _) in DAEMONS.items():
            assert root.show(d, "ActiveState") == "active", d
            assert root.show(d, "ConditionResult") == "yes", d
            assert status(root, conf)["version"] == V1
        # the whole deployment: the relay registered with the directory, and
        # slotd took it from there and holds a control connection to it
        root.sys.wait(lambda: re.search(
            r"^127\.0\.0\.1:7600\s.*\bup\b.*\bdirectory\b",
            root.run("/usr/sbin/slotctl", "relays", check=False).stdout, re.M),
            30, "slotd has no relay up from the directory")
        # each daemon as the unit says: slot-dird as slot throughout, the
        # others switched to it once set up
        uid = root.run("id", "-u", "slot").stdout.strip()
        for _, (d, _, _) in DAEMONS.items():
            st = root.read("/proc/%s/status" % root.show(d, "MainPID"))
            assert re.search(r"^Uid:\s+%s\s" % uid, st, re.M), (d, st)
    except BaseException:
        print(root.journal()[-8000:])
        raise


# ---------------------------------------------------------------- 4. upgrade

def test_upgrade_restarts_the_relay_which_drains_its_pipes(root):
    root.start_server()
    a, b = root.client("survives"), root.client("outlives-the-drain")
    old_pid = root.show("slot-relayd", "MainPID")
    try:
        # both pipes carry their first half before the upgrade begins
        root.sys.wait(lambda: all(os.path.getsize(c.out) >= HALF or c.poll() is not None
                                  for c in (a, b)), 60, "the pipes did not start")
        for c in (a, b):
            assert c.poll() is None and os.path.getsize(c.out) == HALF, open(c.err).read()

        debs = sorted(glob.glob(os.path.join(root.share, V2, "*.deb")))
        up = root.sys.popen("dpkg", "-i", *[SHARE + "/%s/%s" % (V2, os.path.basename(d))
                                            for d in debs],
                            env={"DEBIAN_FRONTEND": "noninteractive"},
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
        # the postinst restarts the unit: SIGTERM, and the relay drains
        root.sys.wait(lambda: root.show("slot-relayd", "ActiveState") == "deactivating" or
                      up.poll() is not None, 120, "slot-relayd was not stopped")
        assert up.poll() is None, up.stdout.read()
        # one pipe ends while the relay drains: through the old relay
        a.stdin.write(b"more\n")
        a.stdin.close()
        assert a.wait(60) == 0, open(a.err).read()
        out, _ = up.communicate(timeout=DRAIN + 120)
        assert up.returncode == 0, out
        # the other outlived drain_timeout: reset, not a clean end
        assert b.wait(30) == 5, open(b.err).read()
        assert "reset" in open(b.err).read()
    except BaseException:
        print(root.journal()[-8000:])
        raise

    got = open(a.out, "rb").read()
    assert len(got) == 2 * HALF and sha(got) == sha(payload("survives"))
    got = open(b.out, "rb").read()
    assert sha(got) == sha(payload("outlives-the-drain")[:HALF])
    log = root.sys.journal("-u", "slot-relayd")
    assert re.search(r"draining: 2 pipes, deadline %d\.0 s" % DRAIN, log), log[-3000:]
    assert "drain deadline reached: resetting 1 pipes" in log, log[-3000:]

    # the new relay, and every daemon, at the new version; the operator's
    # conffiles as they were (no prompt: the packaged ones did not change)
    assert root.show("slot-relayd", "MainPID") != old_pid
    for p, (d, conf, _) in DAEMONS.items():
        assert root.show(d, "ActiveState") == "active", d
        assert root.show(d, "NRestarts") == "0", d
        assert status(root, conf)["version"] == V2, d
        assert root.read("/etc/slot/%s.conf" % conf) == root.edited[conf]
    for p in PACKAGES:
        st = root.run("dpkg-query", "-W", "-f", "${Status} ${Version}", p).stdout
        assert st == "install ok installed " + V2, (p, st)
    assert not root.run("sh", "-c", "ls /etc/slot/*.dpkg-* 2>/dev/null",
                        check=False).stdout.strip()
    # and it relays
    c = root.client("after")
    c.stdin.write(b"more\n")
    c.stdin.close()
    assert c.wait(60) == 0, open(c.err).read()
    assert sha(open(c.out, "rb").read()) == sha(payload("after"))


# ---------------------------------------------------------------- 5. purge

# What may stay after a purge: dpkg's and apt's records and logs, caches
# (man-db, ld.so), the slot user and group (Debian keeps system users: their
# files elsewhere would pass to the next owner of the uid; .pwd.lock is the
# lock adduser took to make them), and the keys,
# certificates and CA the operator put in /etc/slot (with /etc/slot).
LEFT = re.compile(r"^(/etc/(passwd|group|shadow|gshadow)-?|/etc/\.pwd\.lock|/etc/ld\.so\.cache"
                  r"|/etc/slot|/etc/slot/(ca\.pub|(relayd|slotd|dird)\.(key|cert))"
                  r"|/var/lib/dpkg/.*|/var/lib/apt/extended_states|/var/log/(dpkg\.log|apt/.*)"
                  r"|/var/cache/(man|debconf|apt|ldconfig)/.*)$")


def test_purge_leaves_only_the_user_and_the_operators_keys(root):
    r = root.run("dpkg", "--purge", *PACKAGES, env={"DEBIAN_FRONTEND": "noninteractive"},
                 timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    for p in PACKAGES:
        st = root.run("dpkg-query", "-W", "-f", "${Status}", p, check=False).stdout
        assert st in ("", "unknown ok not-installed"), (p, st)
    for _, (d, _, _) in DAEMONS.items():
        assert root.show(d, "LoadState") == "not-found", d
        assert root.run("pgrep", "-x", d, check=False).returncode == 1, d
    # slotd removed its rules when it stopped (once, under a loaded CI run,
    # the jump and the chain were left: its journal says why, if it recurs)
    ipt = root.run("iptables-save").stdout
    assert "SLOT_" not in ipt, ipt + root.sys.journal("-u", "slotd")[-6000:]
    for p in ("/run/slot", "/sys/fs/cgroup/slot.run", "/var/lib/slot", "/var/lib/slotd"):
        assert root.run("test", "-e", p, check=False).returncode == 1, p
    # the user stays
    pw = root.run("getent", "passwd", "slot").stdout.strip().split(":")
    assert pw[6] == "/usr/sbin/nologin", pw

    after = root.snapshot()
    left = sorted(p for p, what in after.items() if root.before.get(p) != what)
    assert [p for p in left if not LEFT.match(p)] == [], left
    print("left after the purge: %s" % left)
    assert sorted(os.listdir(os.path.join(root.w, "etc-upper", "slot"))) == sorted(
        ["ca.pub"] + ["%s.%s" % (c, e) for c in ("relayd", "slotd", "dird")
                      for e in ("key", "cert")])


# ---------------------------------------------------------------- 6. Ansible

def playbook(root, inventory, *args):
    env = {"ANSIBLE_CONFIG": SHARE + "/deploy/ansible.cfg", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_HOME": "/tmp/ansible-home", "ANSIBLE_LOCAL_TEMP": "/tmp/ansible-tmp",
           "ANSIBLE_REMOTE_TEMP": "/tmp/ansible-tmp", "HOME": "/root"}
    r = root.run("sh", "-c", 'cd "$1" && shift && exec ansible-playbook "$@"', "sh",
                 SHARE + "/deploy", "-i", inventory, "site.yml", *args, env=env,
                 timeout=600, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-8000:]
    recap = re.search(r"^pkghost\s*: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)",
                      out, re.M)
    assert recap, out[-3000:]
    return out, {k: int(v) for k, v in zip(("ok", "changed", "unreachable", "failed"),
                                           recap.groups())}


def test_ansible_installs_the_packages_given_slot_debs(root):
    """deploy/ with slot_debs, for real on the purged root: one host in the
    three groups, apt and systemd included (the host's apt sources are not
    needed: the dependencies are installed)."""
    shutil.copytree(os.path.join(ROOT, "deploy"), os.path.join(root.share, "deploy"),
                    ignore=shutil.ignore_patterns("*.key", "inventory.yml"))
    debs = [SHARE + "/%s/%s" % (V2, os.path.basename(d))
            for d in sorted(glob.glob(os.path.join(root.share, V2, "*.deb")))]
    host = {"ansible_host": "127.0.0.1"}
    inv = {"all": {"vars": {
        "ansible_connection": "local", "ansible_become": False,
        "ansible_python_interpreter": "/usr/bin/python3",
        "slot_debs": debs, "slot_apt_update_cache": False,
        "slot_ca_key_file": SHARE + "/ca.key", "slot_identity_dir": SHARE + "/identities",
        # the control node is the host: slot-tools' slot-keygen is there once
        # the packages are
        "slot_keygen": "/usr/sbin/slot-keygen",
        "slot_dird_settings": {"dird": {"log_level": "info"}},
        "slot_client_settings": {"directory": {"refresh": "1s", "retry": "1s"}}},
        "children": {g: {"hosts": {"pkghost": host}} for g in ("directory", "relays",
                                                                 "clients")}}}
    with open(os.path.join(root.share, "inventory.json"), "w") as f:
        json.dump(inv, f)
    inventory = SHARE + "/inventory.json"
    try:
        _, recap = playbook(root, inventory)
        assert recap["failed"] == 0 and recap["changed"] > 0, recap
        for p in ["slot-common", "slot-tools"] + list(DAEMONS):
            st = root.run("dpkg-query", "-W", "-f", "${Status} ${Version}", p).stdout
            assert st == "install ok installed " + V2, (p, st)
        for p, (d, conf, _) in DAEMONS.items():
            assert root.show(d, "ActiveState") == "active", d
            assert root.show(d, "FragmentPath") == "/lib/systemd/system/%s.service" % d
            assert root.show(d, "ExecMainStatus") == "0" and root.show(d, "NRestarts") == "0"
            assert status(root, conf)["version"] == V2
            # the playbook's file in place of the packaged default
            assert "Written by the slot playbook" in root.read("/etc/slot/%s.conf" % conf)
        assert root.run("sh", "-c", "ls /usr/local/sbin/slot* /etc/systemd/system/slot*.service",
                        check=False).stdout == ""
        root.sys.wait(lambda: re.search(
            r"^127\.0\.0\.1:7600\s.*\bup\b.*\bdirectory\b",
            root.run("/usr/sbin/slotctl", "relays", check=False).stdout, re.M),
            30, "slotd has no relay up from the directory")
    except BaseException:
        print(root.journal()[-8000:])
        raise

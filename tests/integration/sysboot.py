"""A real systemd, booted in fresh pid, mount, network, UTS, IPC and cgroup
namespaces: test_deb.py installs slot's Debian packages under one. The
approach of test_install.py's Booted (which keeps its own copy): an inner
shell script mounts what the test needs (overlays, tmpfs, a cgroup2 mount of
a cgroup of its own) and execs systemd as PID 1 of the new pid namespace;
commands enter its namespaces with nsenter; SIGKILL to that PID 1 ends
everything in them at once, and the mounts go with the mount namespace.

Everything is named after a tag of the caller (its prefix and pid), so that
a run killed before its teardown is recognised and swept by the next."""

import os
import re
import shutil
import signal
import subprocess
import time

PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

# Units of the host's boot that have no business in a test.
MASKED = ["systemd-remount-fs.service", "systemd-udevd.service",
          "systemd-udev-trigger.service", "systemd-udevd-control.socket",
          "systemd-udevd-kernel.socket", "dbus.socket", "dbus.service",
          "systemd-journald-audit.socket", "systemd-networkd.service",
          "systemd-resolved.service", "systemd-timesyncd.service",
          "systemd-logind.service"]


def cgroup2_mount():
    for line in open("/proc/self/mounts"):
        f = line.split()
        if f[2] == "cgroup2":
            return f[1]
    return None


def unavailable():
    """Why systemd cannot be booted here, or None."""
    if os.environ.get("SLOT_NO_SYSTEMD_BOOT"):
        return "SLOT_NO_SYSTEMD_BOOT is set"
    if not os.access("/lib/systemd/systemd", os.X_OK):
        return "systemd is not installed"
    if open("/proc/1/comm").read().strip() == "systemd":
        # A host run by systemd: a second one in our cgroups would fight it.
        return "systemd is PID 1 here"
    for tool in ("unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            return tool + " is missing"
    if cgroup2_mount() is None:
        return "no cgroup2 hierarchy is mounted"
    return None


def masks():
    """Unit names to mask (symlinks to /dev/null in /etc/systemd/system):
    MASKED and whatever sysinit.target wants, but the journal."""
    out = set(MASKED)
    for d in ("/lib/systemd/system/sysinit.target.wants",
              "/etc/systemd/system/sysinit.target.wants"):
        if os.path.isdir(d):
            out |= {u for u in os.listdir(d) if u != "systemd-journald.service"}
    return sorted(out)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_cgroup(path):
    """SIGKILL every process under a cgroup, then remove it (and below)."""
    end = time.monotonic() + 10
    while os.path.isdir(path) and time.monotonic() < end:
        for d, _, files in os.walk(path):
            if "cgroup.procs" in files:
                try:
                    pids = open(os.path.join(d, "cgroup.procs")).read().split()
                except OSError:
                    pids = []
                for p in pids:
                    try:
                        os.kill(int(p), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
        for d in sorted((d for d, _, _ in os.walk(path)), key=len, reverse=True):
            try:
                os.rmdir(d)
            except OSError:
                pass
        time.sleep(0.1)


def sweep_cgroups(prefix):
    """The cgroups of earlier runs (prefix<pid>) whose process is gone."""
    top = cgroup2_mount()
    if top is None:
        return
    for name in os.listdir(top):
        m = re.match(r"^%s(\d+)$" % re.escape(prefix), name)
        if m and not pid_alive(int(m.group(1))):
            kill_cgroup(os.path.join(top, name))


class System:
    """systemd booted by `sh INNER ARGS...` in new namespaces, in the cgroup
    <cgroup2 mount>/<tag>. INNER ends by exec'ing systemd."""

    def __init__(self, tag, inner, args, log):
        self.tag, self.inner, self.args, self.logpath = tag, inner, list(args), log
        self.cg = None
        self.proc = None
        self.pid = None
        self.log = None

    def start(self, timeout=60):
        self.cg = os.path.join(cgroup2_mount(), self.tag)
        os.mkdir(self.cg)
        cg = self.cg

        def enter():
            os.setsid()
            with open(os.path.join(cg, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

        self.log = open(self.logpath, "w")
        self.proc = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount", "--net", "--uts", "--ipc", "--cgroup",
             "--mount-proc", "sh", self.inner] + self.args,
            preexec_fn=enter, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        end = time.monotonic() + 20
        while self.pid is None and time.monotonic() < end:
            try:
                kids = open("/proc/%d/task/%d/children" % (self.proc.pid, self.proc.pid)).read()
            except OSError:
                kids = ""
            if kids.split():
                pid = int(kids.split()[0])
                try:
                    if os.path.basename(os.readlink("/proc/%d/exe" % pid)) == "systemd":
                        self.pid = pid
                except OSError:
                    pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        assert self.pid, "systemd did not start: " + open(self.logpath).read()
        # Its manager socket comes up a moment later.
        self.wait(lambda: self.run("systemctl", "is-system-running", check=False).stdout.strip()
                  in ("running", "degraded"), timeout, "systemd did not finish starting")

    def run(self, *cmd, check=True, timeout=60, env=None, stdin=None):
        """cmd in systemd's namespaces, with a clean environment."""
        e = ["env", "-i", "PATH=" + PATH, "LANG=C.UTF-8"] + ["%s=%s" % kv for kv in
                                                           (env or {}).items()]
        r = subprocess.run(["nsenter", "-t", str(self.pid), "-m", "-u", "-i", "-n", "-p"]
                           + e + [str(c) for c in cmd], capture_output=True, text=True,
                           timeout=timeout, stdin=stdin if stdin is not None else
                           subprocess.DEVNULL)
        if check:
            assert r.returncode == 0, (cmd, r.returncode, r.stdout[-3000:], r.stderr[-3000:])
        return r

    def popen(self, *cmd, env=None, **kw):
        e = ["env", "-i", "PATH=" + PATH, "LANG=C.UTF-8"] + ["%s=%s" % kv for kv in
                                                           (env or {}).items()]
        return subprocess.Popen(["nsenter", "-t", str(self.pid), "-m", "-u", "-i", "-n", "-p"]
                                + e + [str(c) for c in cmd], **kw)

    def show(self, unit, prop):
        return self.run("systemctl", "show", "-p", prop, "--value", unit).stdout.strip()

    @staticmethod
    def wait(cond, timeout, what):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if cond():
                return
            time.sleep(0.2)
        raise AssertionError(what)

    def journal(self, *args):
        return self.run("journalctl", "--no-pager", "-o", "short-monotonic", *args,
                        check=False).stdout

    def stop(self):
        # SIGKILL to PID 1 of the namespace ends every process in it at once;
        # no systemd-shutdown, which has no business with this machine's
        # file systems.
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc:
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.log:
            self.log.close()
        if self.cg:
            kill_cgroup(self.cg)

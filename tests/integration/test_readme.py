"""The README, followed to the letter: every command in its ```sh blocks is run
by a test here, by another test, or by the demo, and COVERAGE below says
which. A README command with no entry fails test_every_command_is_covered;
an entry whose command left the README fails too, as does an entry naming a
test that does not exist or does not contain what the entry says it runs.

Where the commands run:

- SANDBOX: the installation and operation sections, verbatim and in README
  order, as one shell script in a private mount and network namespace that
  looks like a fresh host: a copy of /etc (so `useradd` and /etc/slot land in
  the copy), and empty /usr/local, /run and /var/lib. `sudo` is a shell
  function (root already; `sudo -u USER` is runuser), and `systemctl` is a
  stand-in that starts what the installed unit says (ExecStartPre, then
  ExecStart in the background as the unit's User, its RuntimeDirectory and
  StateDirectory made) without systemd's sandboxing, since the test machines
  run no systemd. So `make install`, the key, the example configurations
  checked with -t, all three daemons started from their units, slotctl
  against each of them, the iptables recipes next to a running slotd, and
  slotd leaving a sysadmin's rule in place when it stops, are all exercised.
  The build tree is $SLOT_BUILD (B= in the environment, which the Makefile
  honours).
- HOST: commands that need the real machine (the test bed's namespaces, the
  package check), each with its own runner below; placeholders the README
  spells out (a tag like slw1234a, "the address it printed") are replaced
  by what the earlier command printed.
- Elsewhere: `make demo` is run in a fresh copy of the tree
  (test_fresh_tree_make_demo, the small version), and by test_demo.py;
  `make check` is what CI runs (.ci/run).

Also checked: the ```ini example is a valid slotd configuration, and every
relative link of the README points at a file (a few documents being written
by others are allowed to be missing until they land: PENDING).
"""

import ast
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("SLOT_BUILD", os.path.join(ROOT, "build"))
README = os.path.join(ROOT, "README.md")
PY = "/usr/bin/python3"
THIS = "tests/integration/test_readme.py"

# Documents the README links to that other work is writing; allowed to be
# missing until then.
PENDING = {"docs/slotctl.md", "docs/deploy.md", "docs/man"}


# ---------------------------------------------------------------- the README's commands

def fenced_blocks(lang):
    """[(first line number, text)] of the README's ```lang blocks."""
    out, cur, start = [], None, 0
    with open(README) as f:
        for n, line in enumerate(f, 1):
            s = line.rstrip("\n")
            if cur is None:
                if s.strip() == "```" + lang:
                    cur, start = [], n + 1
            elif s.strip() == "```":
                out.append((start, "\n".join(cur)))
                cur = None
            else:
                cur.append(s)
    return out


def strip_comment(s):
    """s without a trailing shell comment (a # outside quotes, at the start
    or after a blank)."""
    q = None
    i = 0
    while i < len(s):
        c = s[i]
        if q:
            if c == q:
                q = None
            elif c == "\\" and q == '"':
                i += 1
        elif c in "'\"":
            q = c
        elif c == "\\":
            i += 1
        elif c == "#" and (i == 0 or s[i - 1].isspace()):
            return s[:i].rstrip()
        i += 1
    return s.rstrip()


def readme_commands():
    """[(line, key, text)]: every command of the ```sh blocks in order;
    continuation lines joined, comments dropped. key is text with runs of
    blanks made one."""
    out = []
    for start, text in fenced_blocks("sh"):
        lines = text.split("\n")
        i = 0
        while i < len(lines):
            n = start + i
            cmd = lines[i]
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd[:-1] + " " + lines[i].strip()
            i += 1
            cmd = strip_comment(cmd).strip()
            if cmd:
                out.append((n, " ".join(cmd.split()), cmd))
    return out


# ---------------------------------------------------------------- where each runs

class Ref:
    """A test that runs a command: "path::function" (path relative to the
    repository), and fragments its source must contain."""

    def __init__(self, where, *fragments):
        self.path, self.func = where.split("::")
        self.fragments = fragments

    def __repr__(self):
        return "%s::%s" % (self.path, self.func)


SANDBOX = Ref(THIS + "::test_install_and_operate_in_a_sandbox")
HOST = Ref(THIS + "::test_host_commands")
SYSADMIN_RULE = Ref("tests/integration/test_slotd.py::test_sysadmin_rule_queues_to_slotd",
                    "--queue-bypass", "0x10000000/0x10000000", "s.stop()")
# The units under a real systemd booted in namespaces (skipped where it cannot).
UNITS = Ref("tests/integration/test_install.py::test_units_run_the_daemons", "ActiveState")
# slotctl run with these programs, on the emulated WAN (other addresses).
RUN_IPERF3 = Ref("tests/integration/test_libslot.py::test_slotctl_run_iperf3",
                 "run_under", '"iperf3"', '"-c"', '"-p"')
RUN_RSYNC = Ref("tests/integration/test_libslot.py::test_slotctl_run_rsync_over_ssh",
                "run_under", '"rsync"', '"-e"', "ssh")

IPT_BACKUP = ("iptables -t mangle -A OUTPUT -p tcp --syn -d 203.0.113.0/24 -m owner "
              "--uid-owner backup -m mark ! --mark 0x10000000/0x10000000 -j NFQUEUE "
              "--queue-num 7600 --queue-bypass")
IPT_RANGE = ("-t mangle %s OUTPUT -p tcp --syn -d 198.51.100.7 --dport 8000:8099 -m mark ! "
             "--mark 0x10000000/0x10000000 -j NFQUEUE --queue-num 7600 --queue-bypass")
TOPO = "sudo /usr/bin/python3 tests/testbed/topo.py"

COVERAGE = {
    # Two commands
    "sudo make demo": [Ref(THIS + "::test_fresh_tree_make_demo", '"demo"'),
                       Ref("tests/integration/test_demo.py::test_quick_demo_end_to_end"),
                       Ref("tests/integration/test_demo.py::test_make_demo_installs_builds_then_runs",
                           '"demo"')],
    "sudo make check": [Ref(THIS + "::test_make_check_is_what_ci_runs", '"check"')],
    # Installing: the Debian packages, built and installed in a throwaway root
    "make deb": [Ref("tests/integration/test_deb.py::built", '"deb"')],
    "sudo apt install ./build/deb/slot-common_*.deb ./build/deb/slot-tools_*.deb "
    "./build/deb/slot-relay_*.deb": [
        Ref("tests/integration/test_deb.py::test_install_enables_each_unit_and_starts_none_"
            "without_a_key", '"apt-get", "install"', "*.deb")],
    "sudo ./scripts/deps.sh": [HOST],
    "make": [SANDBOX],
    "sudo make install": [SANDBOX],
    "sudo useradd --system --no-create-home --shell /usr/sbin/nologin slot": [SANDBOX],
    "sudo mkdir -p /etc/slot": [SANDBOX],
    "sudo cp /etc/slot/relayd.conf.example /etc/slot/relayd.conf": [SANDBOX],
    "sudo slot-relayd -t -c /etc/slot/relayd.conf": [SANDBOX],
    "sudo systemctl enable --now slot-relayd": [SANDBOX, UNITS],
    "mkdir -m 700 ~/slot-ca && cd ~/slot-ca": [SANDBOX],
    "slot-keygen ca ca": [SANDBOX],
    "slot-keygen issue -c ca.key -r relay -n relay1 relay1": [SANDBOX],
    "slot-keygen issue -c ca.key -r directory -n dir1 dir1": [SANDBOX],
    "slot-keygen issue -c ca.key -r client -n client1 client1": [SANDBOX],
    "sudo install -m 644 ca.pub /etc/slot/ca.pub": [SANDBOX],
    "sudo install -m 600 -o slot relay1.key /etc/slot/relayd.key": [SANDBOX],
    "sudo install -m 644 relay1.cert /etc/slot/relayd.cert": [SANDBOX],
    "sudo install -m 600 -o slot dir1.key /etc/slot/dird.key": [SANDBOX],
    "sudo install -m 644 dir1.cert /etc/slot/dird.cert": [SANDBOX],
    "sudo install -m 600 -o slot client1.key /etc/slot/slotd.key": [SANDBOX],
    "sudo install -m 644 client1.cert /etc/slot/slotd.cert": [SANDBOX],
    "sudo cp /etc/slot/dird.conf.example /etc/slot/dird.conf": [SANDBOX],
    "sudo -u slot slot-dird -t -c /etc/slot/dird.conf": [SANDBOX],
    "sudo systemctl enable --now slot-dird": [SANDBOX, UNITS],
    "sudo cp /etc/slot/slotd.conf.example /etc/slot/slotd.conf": [SANDBOX],
    "sudo slotd -t -c /etc/slot/slotd.conf": [SANDBOX],
    "sudo systemctl enable --now slotd": [SANDBOX, UNITS],
    "sudo systemctl reload slotd": [SANDBOX, UNITS],
    # Running them
    "sudo slotctl relays": [SANDBOX],
    "sudo slotctl counters": [SANDBOX],
    "sudo slotctl -s /run/slot/relayd.sock counters": [SANDBOX],
    "sudo slotctl -s /run/slot/dird.sock counters": [SANDBOX],
    # Choosing the traffic
    IPT_BACKUP: [SANDBOX, SYSADMIN_RULE],
    "iptables " + IPT_RANGE % "-A": [SANDBOX, SYSADMIN_RULE],
    "iptables -t mangle -S OUTPUT": [SANDBOX],
    "iptables " + IPT_RANGE % "-D": [SANDBOX],
    "slotctl run -- iperf3 -c 203.0.113.7 -p 5301": [RUN_IPERF3],
    "slotctl run -- rsync -e ssh backup@203.0.113.7:/srv/data/ /srv/data/": [RUN_RSYNC],
    # Troubleshooting
    "sudo iptables -t mangle -S SLOT_HIJACK": [SANDBOX],
    "sudo iptables -t nat -S SLOT_DNAT": [SANDBOX],
    TOPO + " down --all-dead": [HOST],
    # The emulated WAN
    TOPO + ' cities "Paris,Tokyo,New York" > /tmp/t.json': [HOST],
    TOPO + " up /tmp/t.json --detach": [HOST],
    "sudo ip netns exec slw1234a-paris ping -c 3 10.X.2.2": [HOST],
    TOPO + " list": [HOST],
    TOPO + " down slw1234a": [HOST],
}


def test_every_command_is_covered():
    cmds = readme_commands()
    assert len(cmds) >= 20, cmds
    missing = ["README.md:%d: %s" % (n, key) for n, key, _ in cmds if key not in COVERAGE]
    assert not missing, ("README commands that no test runs (add them to COVERAGE in %s, "
                         "with the test that runs them):\n%s" % (THIS, "\n".join(missing)))
    keys = {key for _, key, _ in cmds}
    stale = [k for k in COVERAGE if k not in keys]
    assert not stale, "COVERAGE entries no longer in the README: %r" % stale


def test_says_how_to_run_as_root_without_sudo():
    """A fresh Debian installed with a root password has no sudo: before the
    first command written with `sudo`, the README says to run as root (or
    with sudo) and that as root one types the commands without `sudo`."""
    text = open(README).read()
    first = text.index("\nsudo ")   # the first command line written with sudo
    section = text[text.index("## Two commands"):]
    intro = " ".join(section[:section.index("```sh")].split())
    assert text.index("## Two commands") < first, "a sudo command before \"Two commands\""
    assert "as root (or with sudo)" in intro, intro
    assert re.search(r"no sudo\b", intro), intro
    assert re.search(r"as root\b[^.]*\bwithout the leading `sudo`", intro), intro


def function_source(path, func):
    src = open(os.path.join(ROOT, path)).read()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.FunctionDef) and node.name == func:
            return ast.get_source_segment(src, node)
    return None


def test_covering_tests_exist_and_run_the_command():
    for key, refs in COVERAGE.items():
        assert refs, key
        for r in refs:
            body = function_source(r.path, r.func)
            assert body is not None, "%s: %s does not exist" % (key, r)
            for frag in r.fragments:
                assert frag in body, "%s: %s does not contain %r" % (key, r, frag)


def test_links_point_at_files():
    text = open(README).read()
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#")[0].rstrip("/")
        if not os.path.exists(os.path.join(ROOT, path)) and path not in PENDING:
            bad.append(target)
    assert not bad, "README links to missing files: %r" % bad


def test_ini_example_is_a_valid_slotd_configuration(tmp_path):
    blocks = fenced_blocks("ini")
    assert blocks
    key = tmp_path / "key"
    key.write_text("ab" * 32 + "\n")
    os.chmod(key, 0o600)
    for n, text in blocks:
        conf = tmp_path / ("slotd-%d.conf" % n)
        conf.write_text("[auth]\nmode = shared\n[slotd]\nkey_file = %s\ncontrol_socket = %s/s.sock\n%s\n"
                        % (key, tmp_path, text))
        r = subprocess.run([os.path.join(BUILD, "slotd"), "-t", "-c", str(conf)],
                           capture_output=True, text=True, timeout=20)
        assert r.returncode == 0, "README.md:%d: %s%s" % (n, r.stdout, r.stderr)


# ---------------------------------------------------------------- the sandbox

# The stand-in for systemctl: what systemd would start for a unit, minus its
# sandboxing. enable --now / start, stop, reload.
FAKE_SYSTEMCTL = r'''
import os, pwd, shlex, signal, subprocess, sys, time
box = os.environ["SLOT_SANDBOX"]
def unit(name):
    name = name if name.endswith(".service") else name + ".service"
    for d in ("/etc/systemd/system", "/usr/local/lib/systemd/system", "/lib/systemd/system"):
        p = os.path.join(d, name)
        if os.path.exists(p):
            return name[:-8], p
    sys.exit("systemctl (stand-in): no unit %s" % name)
def service(path):
    kv, sec = [], None
    for line in open(path):
        line = line.strip()
        if line.startswith("["):
            sec = line
        elif sec == "[Service]" and "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            kv.append((k.strip(), v.strip()))
    return kv
def argv(v, user):
    a = shlex.split(v)
    plus = False
    while a and a[0][:1] in "+-@!:":
        plus = plus or a[0][0] == "+"
        a[0] = a[0][1:]
        if not a[0]:
            a.pop(0)
    if user and not plus:
        a = ["runuser", "-u", user, "--"] + a
    return a
def start(name):
    name, path = unit(name)
    kv = service(path)
    get = lambda k: [v for kk, v in kv if kk == k]
    user = (get("User") or [None])[-1]
    for base, key in (("/run", "RuntimeDirectory"), ("/var/lib", "StateDirectory")):
        for v in get(key):
            for d in v.split():
                p = os.path.join(base, d)
                os.makedirs(p, exist_ok=True)
                mode = (get(key + "Mode") or ["0755"])[-1]
                os.chmod(p, int(mode, 8))
                if user:
                    pw = pwd.getpwnam(user)
                    os.chown(p, pw.pw_uid, pw.pw_gid)
    for v in get("ExecStartPre"):
        r = subprocess.run(argv(v, user))
        if r.returncode != 0 and not v.startswith("-"):
            sys.exit("systemctl (stand-in): %s: ExecStartPre %s failed" % (name, v))
    log = open(os.path.join(box, "logs", name + ".log"), "ab")
    p = subprocess.Popen(argv(get("ExecStart")[-1], user), stdin=subprocess.DEVNULL,
                         stdout=log, stderr=log, start_new_session=True)
    with open(os.path.join(box, "pids", name), "w") as f:
        f.write("%d\n" % p.pid)
    # ready: the daemon (or runuser's child) listens on a unix socket
    end = time.monotonic() + 15
    while time.monotonic() < end:
        if p.poll() is not None:
            sys.exit("systemctl (stand-in): %s exited with %d:\n%s" % (
                name, p.returncode, open(os.path.join(box, "logs", name + ".log")).read()[-3000:]))
        out = subprocess.run(["ss", "-xlpH"], capture_output=True, text=True).stdout
        kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True,
                              text=True).stdout.split()
        if any("pid=%s," % x in out for x in [str(p.pid)] + kids):
            print("systemctl (stand-in): %s started (pid %d)" % (name, p.pid))
            return
        time.sleep(0.1)
    sys.exit("systemctl (stand-in): %s: no control socket after 15 s" % name)
def stop(name):
    """SIGTERM to the unit's process group, SIGKILL after 10 s (systemd's
    TimeoutStopSec is longer; the daemons here have nothing to drain)."""
    f = os.path.join(box, "pids", name)
    if not os.path.exists(f):
        return
    p = int(open(f).read())
    try:
        os.killpg(p, signal.SIGTERM)
    except ProcessLookupError:
        pass
    end = time.monotonic() + 10
    while time.monotonic() < end:
        try:
            os.killpg(p, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        print("systemctl (stand-in): %s did not stop in 10 s: SIGKILL" % name)
        os.killpg(p, signal.SIGKILL)
    os.unlink(f)
def pid(name):
    return int(open(os.path.join(box, "pids", unit(name)[0])).read())
cmd, args = sys.argv[1], [a for a in sys.argv[2:] if not a.startswith("--")]
if cmd in ("enable", "start") and (cmd == "start" or "--now" in sys.argv):
    for u in args:
        start(u)
elif cmd == "reload":
    for u in args:
        os.kill(pid(u), signal.SIGHUP)
elif cmd == "stop":
    for u in args:
        stop(unit(u)[0])
elif cmd == "stop-all":
    for u in sorted(os.listdir(os.path.join(box, "pids"))):
        stop(u)
else:
    sys.exit("systemctl (stand-in): %s is not emulated" % " ".join(sys.argv[1:]))
'''

SANDBOX_PRELUDE = r'''
set -eu
box=%(box)s
# A fresh host's view: /etc a copy, nothing of ours in /usr/local, /run, /var/lib.
mount --bind "$box/etc" /etc
mount -t tmpfs tmpfs /usr/local
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /var/lib
ip link set lo up
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export SLOT_SANDBOX="$box" B=%(build)s
# The README's "your own machine" (the CA) is a directory of the box.
mkdir -p "$box/home" && export HOME="$box/home"
sudo() {
    if [ "$1" = "-u" ]; then u=$2; shift 2; runuser -u "$u" -- "$@"; else "$@"; fi
}
systemctl() { %(py)s "$box/systemctl.py" "$@"; }
stop_all() { %(py)s "$box/systemctl.py" stop-all; }
trap stop_all EXIT
cd %(root)s
'''

# What the sandbox looks at after the README's commands (not README commands).
SANDBOX_INSPECT = r'''
echo "@@@ inspect"
for k in relayd dird slotd; do stat -c "key $k %a %U" /etc/slot/$k.key; done
slot-keygen show /etc/slot/slotd.cert /etc/slot/relayd.cert /etc/slot/dird.cert
getent passwd slot | cut -d: -f7
ls /usr/local/sbin
slotctl counters | grep -E '^reload(s|_failures) '
for f in "$box"/pids/*; do kill -0 "$(cat "$f")" && echo "running $(basename "$f")"; done
echo "@@@ stop"
stop_all
echo "@@@ after-stop"
iptables -t mangle -S OUTPUT
echo "@@@ hijack-chain"
iptables -t mangle -S SLOT_HIJACK 2>&1 || echo "no such chain"
'''

# README command -> a regex its output must match in the sandbox.
SANDBOX_EXPECT = {
    "sudo slot-relayd -t -c /etc/slot/relayd.conf": r"configuration ok",
    "sudo slotd -t -c /etc/slot/slotd.conf": r"configuration ok",
    "sudo systemctl enable --now slot-relayd": r"slot-relayd started",
    "sudo systemctl enable --now slot-dird": r"slot-dird started",
    "sudo systemctl enable --now slotd": r"slotd started",
    "sudo slotctl relays": r"(?m)^relay\b",
    "sudo slotctl counters": r"(?m)^syn_received \d+$",
    "sudo slotctl -s /run/slot/relayd.sock counters": r"(?m)^pipes_open \d+$",
    "sudo slotctl -s /run/slot/dird.sock counters": r"(?m)^relays \d+$",
    "iptables -t mangle -S OUTPUT": (r"-j SLOT_HIJACK[\s\S]*--uid-owner 34[\s\S]*"
                                     r"--dport 8000:8099"),
    "sudo iptables -t mangle -S SLOT_HIJACK": r"-j NFQUEUE --queue-num 7600 --queue-bypass",
    "sudo iptables -t nat -S SLOT_DNAT": r"-N SLOT_DNAT",
}


def test_install_and_operate_in_a_sandbox(tmp_path):
    box = str(tmp_path)
    os.chmod(box, 0o755)
    for d in ("logs", "pids"):
        os.makedirs(os.path.join(box, d))
    subprocess.run(["cp", "-a", "/etc", os.path.join(box, "etc")], check=True)
    with open(os.path.join(box, "systemctl.py"), "w") as f:
        f.write(FAKE_SYSTEMCTL)
    cmds = [(n, key, text) for n, key, text in readme_commands()
            if SANDBOX in COVERAGE.get(key, [])]
    assert len(cmds) >= 20
    script = [SANDBOX_PRELUDE % {"box": box, "root": ROOT, "py": PY,
                                 "build": os.path.relpath(BUILD, ROOT)}]
    for i, (n, key, text) in enumerate(cmds):
        script.append("echo \"@@@ %d $(date +%%s.%%N)\"" % i)
        script.append(text)
    script.append(SANDBOX_INSPECT)
    path = os.path.join(box, "readme.sh")
    with open(path, "w") as f:
        f.write("\n".join(script) + "\n")
    try:
        r = subprocess.run(["unshare", "--mount", "--net", "--propagation", "private",
                            "/bin/sh", path], capture_output=True, text=True, timeout=600)
    finally:
        # whatever the stand-in started and the script did not stop
        pids = os.path.join(box, "pids")
        for f in os.listdir(pids):
            try:
                os.killpg(int(open(os.path.join(pids, f)).read()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    out = r.stdout + r.stderr
    parts = re.split(r"^@@@ (\S+)(?: \S+)?\n", r.stdout, flags=re.M)
    stamps = re.findall(r"^@@@ (\d+) ([\d.]+)$", r.stdout, flags=re.M)
    took = {cmds[int(a)][1]: float(b2) - float(b1)
            for (a, b1), (_, b2) in zip(stamps, stamps[1:])}
    print("slowest README commands in the sandbox:", sorted(took.items(), key=lambda x: -x[1])[:3])
    got = dict(zip(parts[1::2], parts[2::2]))
    done = [k for k in got if k.isdigit()]
    last = cmds[int(done[-1])] if done else None
    assert r.returncode == 0, "README.md:%s: `%s` failed in the sandbox:\n%s\n%s" % (
        last[0] if last else "?", last[1] if last else "?", out[-6000:],
        "\n".join("--- %s\n%s" % (f, open(os.path.join(box, "logs", f)).read()[-2000:])
                  for f in os.listdir(os.path.join(box, "logs"))))
    for i, (n, key, text) in enumerate(cmds):
        if key in SANDBOX_EXPECT:
            assert re.search(SANDBOX_EXPECT[key], got.get(str(i), "")), \
                "README.md:%d: `%s` printed:\n%s" % (n, key, got.get(str(i)))
    insp = got["inspect"]
    for k in ("relayd", "dird", "slotd"):
        assert "key %s 600 slot" % k in insp, insp
    for role, name in (("client", "client1"), ("relay", "relay1"), ("directory", "dir1")):
        assert re.search(r"role %s\n\s+name %s\n" % (role, name), insp), insp
    # the reload as slot, with slot's key: put in force, none refused
    assert re.search(r"(?m)^reloads 1$", insp) and re.search(r"(?m)^reload_failures 0$", insp), \
        insp
    assert "/usr/sbin/nologin" in insp, insp
    for b in ("slot-dird", "slot-relayd", "slotctl", "slotd"):
        assert b in insp.split(), insp
    for u in ("slot-relayd", "slot-dird", "slotd"):
        assert "running " + u in insp, insp
    # slotd took its chains away when it stopped and left the sysadmin's
    # rule (the port-range one the README removed itself).
    after = got["after-stop"]
    assert "--uid-owner 34" in after and "SLOT_HIJACK" not in after, after
    assert "--dport 8000:8099" not in after, after
    assert "no such chain" in got["hijack-chain"], got["hijack-chain"]


# ---------------------------------------------------------------- on the host

def _run(cmd, **kw):
    return subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, SLOT_BUILD=BUILD), **kw)


def _nosudo(text):
    return re.sub(r"^sudo ", "", text)


def host_deps(text, state):
    r = _run(_nosudo(text), timeout=900)
    assert r.returncode == 0, r.stderr


def host_topo_down_all_dead(text, state):
    r = _run(_nosudo(text), timeout=120)
    assert r.returncode == 0, r.stderr


def host_cities(text, state):
    state["json"] = os.path.join(state["tmp"], "t.json")
    r = _run(_nosudo(text).replace("/tmp/t.json", state["json"]), timeout=60)
    assert r.returncode == 0, r.stderr
    assert '"paris"' in open(state["json"]).read()


def host_up(text, state):
    r = _run(_nosudo(text).replace("/tmp/t.json", state["json"]), timeout=120)
    assert r.returncode == 0, r.stderr
    state["tag"] = re.search(r"^tag (\S+)$", r.stdout, re.M).group(1)
    # host NAME NAMESPACE IPV4 [IPV6]: the IPv4 address
    state["hosts"] = dict(re.findall(r"^host (\S+) \S+ (\S+)(?: \S+)?$", r.stdout, re.M))


def host_ping(text, state):
    # "10.X.2.2": the second host's address as `up` printed it (Tokyo).
    assert state["hosts"]["tokyo"].endswith(".2.2")
    cmd = _nosudo(text).replace("slw1234a", state["tag"]).replace("10.X.2.2",
                                                                  state["hosts"]["tokyo"])
    r = _run(cmd, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    rtts = [float(x) for x in re.findall(r"time=([\d.]+) ms", r.stdout)]
    assert len(rtts) == 3 and all(200 < x < 280 for x in rtts), r.stdout   # Paris-Tokyo 235 ms


def host_list(text, state):
    r = _run(_nosudo(text), timeout=60)
    assert r.returncode == 0 and "%s alive" % state["tag"] in r.stdout, r.stdout


def host_down(text, state):
    r = _run(_nosudo(text).replace("slw1234a", state["tag"]), timeout=120)
    assert r.returncode == 0 and "%s: down" % state["tag"] in r.stdout, r.stdout + r.stderr
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert state["tag"] not in left


HOST_RUNNERS = {
    "sudo ./scripts/deps.sh": host_deps,
    TOPO + " down --all-dead": host_topo_down_all_dead,
    TOPO + ' cities "Paris,Tokyo,New York" > /tmp/t.json': host_cities,
    TOPO + " up /tmp/t.json --detach": host_up,
    "sudo ip netns exec slw1234a-paris ping -c 3 10.X.2.2": host_ping,
    TOPO + " list": host_list,
    TOPO + " down slw1234a": host_down,
}


def test_host_commands(tmp_path):
    state = {"tmp": str(tmp_path)}
    ran = []
    try:
        for n, key, text in readme_commands():
            if HOST not in COVERAGE.get(key, []):
                continue
            assert key in HOST_RUNNERS, "README.md:%d: no host runner for %r" % (n, key)
            HOST_RUNNERS[key](text, state)
            ran.append(key)
    finally:
        if "tag" in state:
            subprocess.run([PY, os.path.join(ROOT, "tests", "testbed", "topo.py"), "down",
                            state["tag"]], capture_output=True, timeout=120)
    assert set(ran) == set(HOST_RUNNERS)


# ---------------------------------------------------------------- make demo, make check

def test_make_check_is_what_ci_runs():
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    assert re.search(r"^exec make check$", ci, re.M), ci
    r = subprocess.run(["make", "-n", "check"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    for step in ("scripts/deps.sh", "tests/unit/run.sh", "build/asan", "tests/fuzz/run.sh",
                 "tests/integration/run.sh"):
        assert step in r.stdout, step


def _data_dir():
    sys.path.insert(0, os.path.join(ROOT, "tests", "testbed"))
    import topo
    try:
        return topo.data_dir()
    except RuntimeError:
        return None


@pytest.mark.skipif(_data_dir() is None, reason="no WonderNetwork data (SLOT_DATA)")
@pytest.mark.serial     # a build from nothing, then the demo's measured speedups: alone (run.sh)
def test_fresh_tree_make_demo(tmp_path):
    """`sudo make demo` in a fresh copy of the tree (what git would check
    out, plus files not yet committed): packages, the build from nothing and
    the demo, its small version. The data comes through SLOT_DATA, as the
    README says."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    tree = tmp_path / "slot"
    for f in files:
        if not f or not os.path.isfile(os.path.join(ROOT, f)):
            continue
        os.makedirs(tree / os.path.dirname(f), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, f), tree / f)
    assert not (tree / "build").exists()
    env = {k: v for k, v in os.environ.items() if k not in ("SLOT_BUILD", "B")}
    env["SLOT_DATA"] = _data_dir()
    p = subprocess.Popen(["make", "demo", "DEMO_FLAGS=--quick"], cwd=str(tree), env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM)
        out, _ = p.communicate(timeout=60)
        raise AssertionError("make demo did not finish in 10 minutes:\n" + out[-5000:])
    assert p.returncode == 0, out[-5000:]
    assert os.access(tree / "build" / "slotd", os.X_OK)
    assert re.search(r"^Shanghai\s+\d+ ms\s+Hong Kong\s", out, re.M), out[-5000:]
    assert "nothing left" in out
    assert (tree / "build" / "demo.png").stat().st_size > 10000

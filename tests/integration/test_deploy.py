"""deploy/ (the Ansible playbook, docs/deploy.md), run for real on this machine.

Three inventory hosts, each with ansible_connection=local and its own
temporary root (slot_root), so nothing lands in the real /etc, /usr/local or
systemd: hostA (directory and relay), hostB (relay), hostC (client). Their
ansible_host addresses are those of three network namespaces made for the
test (a bridge in A, veths to B and C). No systemd, apt or user creation here
(slot_manage_services/packages/user false, the daemons' user is nobody); the
build and staging on the "control node" run for real from SLOT_BUILD.

The runs, in file order (each test builds on the state the previous left):
  1. install: files, modes, the key, each daemon's own key and certificate
     for its role (issued on the control node from the CA the test points
     the playbook at), the CA's public key everywhere, the revocation list
     on the directory, and every rendered configuration passes the daemon's
     own check (slot-relayd/slot-dird/slotd -t -c);
  2. a second run changes nothing (changed=0 everywhere);
  3. --check --diff with a new key and a new advertise: diffs shown, nothing
     written, the key never printed;
  4. the same for real, with a value slot-relayd refuses on hostB: the
     template's validation (the daemon's -t) stops hostB and its file stays;
     the key is replaced everywhere, and the handler picks restart for the
     changed restart-only key, reload for the rest;
  5. the deployed daemons, started from the deployed trees in the namespaces,
     form the overlay: both relays register with the directory (signed
     calls) and slotd gets them from it (a signed listing).
"""

import json
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DEPLOY = os.path.join(ROOT, "deploy")
BUILD = os.path.abspath(os.environ.get("SLOT_BUILD", os.path.join(ROOT, "build")))
PLAYBOOK = shutil.which("ansible-playbook")
KEYGEN = os.path.join(BUILD, "slot-keygen")
REVOKED = "# stolen laptop\n00000000000000aa\n"
ROLES = {"dird": "directory", "relayd": "relay", "slotd": "client"}
sys.path.insert(0, os.path.join(ROOT, "tests", "testbed"))
from topo import kill_ns_pids, pid_alive  # noqa: E402

pytestmark = pytest.mark.skipif(
    PLAYBOOK is None, reason="ansible-playbook missing (apt-get install ansible-core, or make deps)")

PREFIX = "sltdp"          # namespaces: sltdp<pid>-a, -b, -c
NET = "10.77.0"           # inside the namespaces only
HOSTS = {"hostA": ("a", NET + ".1"), "hostB": ("b", NET + ".2"), "hostC": ("c", NET + ".3")}
RECAP_RE = re.compile(r"^(\S+)\s*: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)",
                      re.M)


def sh(*args, check=True):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, check=check)


def dead_run(name):
    """True for a name of an earlier run of this test whose process is gone."""
    m = re.match(r"^%s(\d+)-" % PREFIX, name)
    return bool(m) and not pid_alive(int(m.group(1)))


def sweep():
    """Namespaces and directories of earlier runs killed before their teardown."""
    for line in sh("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if dead_run(name):
            kill_ns_pids(name)
            sh("ip", "netns", "del", name, check=False)
    tmp = tempfile.gettempdir()
    for name in os.listdir(tmp):
        if dead_run(name):
            shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)


class Deployment:
    def __init__(self):
        self.tag = "%s%d" % (PREFIX, os.getpid())
        self.ns = {h: "%s-%s" % (self.tag, s) for h, (s, _) in HOSTS.items()}
        self.dir = tempfile.mkdtemp(prefix=self.tag + "-")
        self.inventory = os.path.join(self.dir, "inventory.yml")
        self.vars = os.path.join(self.dir, "vars.yml")
        self.local_key = os.path.join(self.dir, "slot.key")   # inventory_dir/slot.key
        self.revoked = os.path.join(self.dir, "revoked")
        self.procs = []
        self.host_vars = {h: {} for h in HOSTS}

    def root(self, host, *path):
        return os.path.join(self.dir, "hosts", host, *path)

    # -- namespaces: A holds a bridge, B and C hang off it --

    def net_up(self):
        sweep()
        a = self.ns["hostA"]
        for ns in self.ns.values():
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", a, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", a, "link", "set", "br0", "up")
        sh("ip", "-n", a, "addr", "add", HOSTS["hostA"][1] + "/24", "dev", "br0")
        for h in ("hostB", "hostC"):
            s = HOSTS[h][0]
            peer = "%s-%s" % (self.tag, s)          # transient name, unique per run
            sh("ip", "link", "add", peer, "netns", a, "type", "veth",
               "peer", "name", "eth0", "netns", self.ns[h])
            sh("ip", "-n", a, "link", "set", peer, "master", "br0", "up")
            sh("ip", "-n", self.ns[h], "addr", "add", HOSTS[h][1] + "/24", "dev", "eth0")
            sh("ip", "-n", self.ns[h], "link", "set", "eth0", "up")

    def down(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)
        for ns in self.ns.values():
            kill_ns_pids(ns)
            sh("ip", "netns", "del", ns, check=False)
        if os.environ.get("SLOT_KEEP"):
            print("\ndeploy test: directory kept in %s" % self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- the inventory and the playbook --

    def make_ca(self):
        """The operator's CA, where the playbook looks by default
        (inventory_dir/ca.key), and a revocation list."""
        sh(KEYGEN, "ca", os.path.join(self.dir, "ca"))
        with open(self.revoked, "w") as f:
            f.write(REVOKED)

    def write_inventory(self):
        """Our three hosts in the example inventory's groups, with its group
        variables and its client's settings, so that the example's values
        pass the daemons' checks too."""
        import yaml   # python3-yaml, which ansible-core depends on
        ex = yaml.safe_load(open(os.path.join(DEPLOY, "inventory.example.yml")))["all"]
        groups = {"directory": ["hostA"], "relays": ["hostA", "hostB"], "clients": ["hostC"]}
        children = {}
        for g, hosts in groups.items():
            src = ex["children"][g]
            hv = {}
            if g == "clients":   # the example's client settings, on hostC
                hv = {k: v for k, v in next(iter(src["hosts"].values())).items()
                      if k != "ansible_host"}
            children[g] = {"vars": src.get("vars", {}), "hosts": {}}
            for h in hosts:
                v = {"ansible_host": HOSTS[h][1], "slot_root": self.root(h)}
                v.update(hv)
                v.update(self.host_vars[h])
                children[g]["hosts"][h] = v
        allvars = {k: v for k, v in ex.get("vars", {}).items() if k != "ansible_user"}
        allvars.update(ansible_connection="local", ansible_become=False)
        with open(self.inventory, "w") as f:
            yaml.safe_dump({"all": {"vars": allvars, "children": children}}, f)
        with open(self.vars, "w") as f:
            json.dump({
                "slot_build_dir": BUILD,
                # Built and staged by the first run only (slot_build=true), so
                # that edits to the tree meanwhile do not count as changes.
                "slot_build": False,
                "slot_stage_dir": os.path.join(self.dir, "stage"),
                "slot_manage_services": False,
                "slot_manage_packages": False,
                "slot_manage_user": False,
                "slot_user": "nobody",
                "slot_group": "nogroup",
                "slot_revoked_local_file": self.revoked,
            }, f)

    def playbook(self, *args, expect_fail=False):
        # deploy/ansible.cfg, whatever ~/.ansible.cfg or /etc/ansible say.
        env = dict(os.environ, ANSIBLE_NOCOLOR="1",
                   ANSIBLE_CONFIG=os.path.join(DEPLOY, "ansible.cfg"),
                   ANSIBLE_HOME=os.path.join(self.dir, "ansible-home"),
                   ANSIBLE_LOCAL_TEMP=os.path.join(self.dir, "ansible-tmp"),
                   ANSIBLE_REMOTE_TEMP=os.path.join(self.dir, "ansible-tmp"),
                   )
        r = subprocess.run([PLAYBOOK, "-i", self.inventory, "-e", "@" + self.vars, "site.yml"]
                           + list(args), cwd=DEPLOY, env=env, capture_output=True, text=True,
                           timeout=300)
        out = r.stdout + r.stderr
        if expect_fail:
            assert r.returncode != 0, out[-6000:]
        else:
            assert r.returncode == 0, out[-8000:]
        recap = {m.group(1): {"ok": int(m.group(2)), "changed": int(m.group(3)),
                              "unreachable": int(m.group(4)), "failed": int(m.group(5))}
                 for m in RECAP_RE.finditer(out)}
        return out, recap

    # -- daemons in the namespaces, from the deployed trees --

    def start(self, host, daemon, conf):
        log = open(os.path.join(self.dir, "%s-%s.log" % (host, daemon)), "w")
        p = subprocess.Popen(["ip", "netns", "exec", self.ns[host],
                              self.root(host, "usr/local/sbin", daemon),
                              "-c", self.root(host, "etc/slot", conf)],
                             stdout=log, stderr=subprocess.STDOUT)
        p.log = log.name
        self.procs.append(p)
        return p

    def logs(self):
        out = []
        for p in self.procs:
            with open(p.log) as f:
                out.append("---- %s ----\n%s" % (p.log, f.read()[-3000:]))
        return "\n".join(out)


def unix_json(path, timeout=2):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.sendall(b"json\n")
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    finally:
        s.close()
    return json.loads(b"".join(chunks))


def wait_for(pred, timeout, what):
    end = time.monotonic() + timeout
    while True:
        try:
            v = pred()
        except (OSError, ValueError):
            v = None
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.1)


def conf_values(path):
    """{(section, key): value} of an INI file written by the playbook."""
    out, section = {}, None
    for line in open(path):
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]")
        elif "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out.setdefault((section, k.strip()), []).append(v.strip())
    return {k: v[0] if len(v) == 1 else v for k, v in out.items()}


DAEMONS = {"hostA": [("slot-dird", "dird.conf"), ("slot-relayd", "relayd.conf")],
           "hostB": [("slot-relayd", "relayd.conf")],
           "hostC": [("slotd", "slotd.conf")]}


@pytest.fixture(scope="module")
def dep():
    d = Deployment()
    try:
        d.net_up()
        d.make_ca()
        d.write_inventory()
        yield d
    finally:
        d.down()


def test_syntax_check(dep):
    out, _ = dep.playbook("--syntax-check")
    assert "playbook: site.yml" in out
    r = subprocess.run([PLAYBOOK, "-i", "inventory.example.yml", "--syntax-check", "site.yml"],
                       cwd=DEPLOY, capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(DEPLOY, "ansible.cfg")))
    assert r.returncode == 0, r.stdout + r.stderr
    lint = shutil.which("ansible-lint")
    if lint:
        # Every file of deploy/ (slot_daemon is only included dynamically),
        # to the production profile, offline.
        r = subprocess.run([lint, "--offline", "--nocolor"], cwd=DEPLOY,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "production profile" in r.stdout + r.stderr, \
            r.stdout + r.stderr


def test_install_and_the_daemons_accept_their_configs(dep):
    out, recap = dep.playbook("-e", "slot_build=true")
    assert set(recap) == set(HOSTS), out[-3000:]
    assert all(r["failed"] == 0 and r["changed"] > 0 for r in recap.values()), recap

    # The key: generated once on the control node, 0600 there and on every host,
    # owned by the daemons' user; never in the output.
    key = open(dep.local_key).read().strip()
    assert re.fullmatch(r"[0-9a-f]{64}", key)
    assert stat.S_IMODE(os.stat(dep.local_key).st_mode) == 0o600
    assert key not in out
    for h in HOSTS:
        k = dep.root(h, "etc/slot/key")
        st = os.stat(k)
        assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 65534, h
        assert open(k).read().strip() == key

    # Identities: the CA's public key on every host; each daemon its own key
    # (0600, its user's: every daemon re-reads it as that user) and a certificate for its role,
    # issued once on the control node; the secret keys never in the output.
    ca = open(os.path.join(dep.dir, "ca.pub")).read()
    for h, daemons in DAEMONS.items():
        assert open(dep.root(h, "etc/slot/ca.pub")).read() == ca
        for daemon, conf in daemons:
            n = conf.split(".")[0]
            key, cert = dep.root(h, "etc/slot", n + ".key"), dep.root(h, "etc/slot", n + ".cert")
            st = os.stat(key)
            assert stat.S_IMODE(st.st_mode) == 0o600, (h, n)
            assert st.st_uid == 65534, (h, n)
            issued = os.path.join(dep.dir, "identities", "%s-%s" % (h, n))
            assert open(key).read() == open(issued + ".key").read()
            assert open(cert).read() == open(issued + ".cert").read()
            seed = re.search(r"slot-key-1 ([0-9a-f]{64})", open(key).read()).group(1)
            assert seed not in out
            show = sh(KEYGEN, "show", cert).stdout
            assert "role %s" % ROLES[n] in show and "name %s" % h in show, show
            c = conf_values(dep.root(h, "etc/slot", conf))
            assert c[("auth", "mode")] == "identity"
            assert (c[("auth", "key")], c[("auth", "certificate")]) == (key, cert)
            assert c[("auth", "ca")] == dep.root(h, "etc/slot/ca.pub")
    assert open(dep.root("hostA", "etc/slot/revoked")).read() == REVOKED
    assert conf_values(dep.root("hostA", "etc/slot/dird.conf"))[("auth", "revoked")] == \
        dep.root("hostA", "etc/slot/revoked")
    assert not os.path.exists(dep.root("hostB", "etc/slot/revoked"))

    for h, daemons in DAEMONS.items():
        names = {n for n, _ in daemons} | {"slotctl"}
        assert set(os.listdir(dep.root(h, "usr/local/sbin"))) == names, h
        assert sorted(os.listdir(dep.root(h, "etc/systemd/system"))) == \
            sorted(n + ".service" for n, _ in daemons), h
        assert os.path.isfile(dep.root(h, "usr/local/share/doc/slot/relay.md")), h
        for daemon, conf in daemons:
            binary = dep.root(h, "usr/local/sbin", daemon)
            assert stat.S_IMODE(os.stat(binary).st_mode) == 0o755
            unit = open(dep.root(h, "etc/systemd/system", daemon + ".service")).read()
            assert "ExecStart=/usr/local/sbin/%s -c /etc/slot/%s" % (daemon, conf) in unit
            assert "@SBINDIR@" not in unit
            # The real value of the test: the daemon's own check.
            path = dep.root(h, "etc/slot", conf)
            r = sh(binary, "-t", "-c", path, check=False)
            assert r.returncode == 0 and "configuration ok" in r.stdout, (h, r.stderr)

    url = "http://%s:7602/RPC2" % HOSTS["hostA"][1]
    for h in ("hostA", "hostB"):
        c = conf_values(dep.root(h, "etc/slot/relayd.conf"))
        assert c[("directory", "urls")] == url
        assert c[("directory", "advertise")] == ""
        assert c[("relay", "key_file")] == dep.root(h, "etc/slot/key")
        assert c[("relay", "user")] == "nobody"
        # The example inventory's group variables.
        assert c[("policy", "allowed_ports")] == "80,443,8000-8099"
        assert c[("limits", "max_pipes")] == "8192"
    c = conf_values(dep.root("hostC", "etc/slot/slotd.conf"))
    assert c[("directory", "urls")] == url
    assert c[("hijack", "ports")] == "80, 443"
    assert c[("select", "min_gain")] == "1.2"
    assert ("relays", "relay") not in c       # the directory lists them
    c = conf_values(dep.root("hostA", "etc/slot/dird.conf"))
    assert c[("dird", "listen")] == "0.0.0.0:7602"
    assert c[("relays", "expire_after")] == "120s"


def test_second_run_changes_nothing(dep):
    out, recap = dep.playbook()
    assert all(r["changed"] == 0 and r["failed"] == 0 for r in recap.values()), \
        "%r\n%s" % (recap, "\n".join(x for x in out.splitlines() if x.startswith("changed")))


def snapshot(dep):
    return {p: open(p, "rb").read() for h in HOSTS
            for p in [dep.root(h, "etc/slot", f) for f in os.listdir(dep.root(h, "etc/slot"))]}


def change(dep):
    """A new key (given as slot_key) and an advertise for hostA's relay."""
    dep.new_key = secrets.token_hex(32)
    dep.host_vars["hostA"]["slot_relay_advertise"] = HOSTS["hostA"][1] + ":7600"
    dep.write_inventory()
    return ["-e", "slot_key=" + dep.new_key]


def test_check_mode_shows_changes_writes_nothing_and_hides_the_key(dep):
    before = snapshot(dep)
    out, recap = dep.playbook(*change(dep), "--check", "--diff", "--limit", "hostA")
    assert recap["hostA"]["changed"] > 0
    assert "+advertise = %s:7600" % HOSTS["hostA"][1] in out
    assert dep.new_key not in out
    assert snapshot(dep) == before


def handler_actions(out):
    """{(host, daemon): action} from the handler's loop labels (the handler
    itself is skipped here: no systemd)."""
    part = out.split("RUNNING HANDLER", 1)[1] if "RUNNING HANDLER" in out else ""
    return {(h, d): a for h, d, a in
            re.findall(r"\[(\w+)\] => \(item=([\w-]+): ([\w ]+)\)", part)}


def test_changes_restart_or_reload_and_a_refused_value_stays_out(dep):
    args = change(dep)
    # hostB gets a value slot-relayd refuses: the template's validation (the
    # daemon's -t) stops the run there, its file stays, the others go on.
    dep.host_vars["hostB"]["slot_relay_settings"] = {"limits": {"max_pipes": "lots"}}
    dep.write_inventory()
    b_conf = dep.root("hostB", "etc/slot/relayd.conf")
    before = open(b_conf).read()
    out, recap = dep.playbook(*args, "-v", expect_fail=True)
    assert {h: r["failed"] for h, r in recap.items()} == {"hostA": 0, "hostB": 1, "hostC": 0}
    assert "failed to validate" in out and "max_pipes" in out, out[-3000:]
    assert open(b_conf).read() == before
    # The key is replaced everywhere (on hostB before its failure), never shown.
    assert dep.new_key not in out
    for h in HOSTS:
        assert open(dep.root(h, "etc/slot/key")).read().strip() == dep.new_key
        assert stat.S_IMODE(os.stat(dep.root(h, "etc/slot/key")).st_mode) == 0o600
    # advertise needs a restart; a new key alone a reload (SIGHUP).
    assert handler_actions(out) == {
        ("hostA", "slot-dird"): "reload", ("hostA", "slot-relayd"): "restart",
        ("hostC", "slotd"): "reload"}, out[-4000:]


def test_deployed_daemons_form_the_overlay(dep):
    for h in HOSTS:
        for d in ("run/slot", "var/lib/slot", "var/lib/slotd"):
            os.makedirs(dep.root(h, d), exist_ok=True)
    try:
        dep.start("hostA", "slot-dird", "dird.conf")
        wait_for(lambda: unix_json(dep.root("hostA", "run/slot/dird.sock")), 10, "slot-dird")
        dep.start("hostA", "slot-relayd", "relayd.conf")
        dep.start("hostB", "slot-relayd", "relayd.conf")
        want = {HOSTS["hostA"][1] + ":7600", HOSTS["hostB"][1] + ":7600"}

        def registered():
            j = unix_json(dep.root("hostA", "run/slot/dird.sock"))
            return {r.get("relay") or r.get("endpoint") for r in j.get("relays", [])} >= want
        wait_for(registered, 10, "both relays registered with the directory")
        dep.start("hostC", "slotd", "slotd.conf")

        def client_has_them():
            j = unix_json(dep.root("hostC", "run/slot/slotd.sock"))
            return {r["control"] for r in j["relays"] if r["state"] == "up"} >= want
        wait_for(client_has_them, 15, "slotd up with both relays from the directory")
        # Every call was signed and every listing checked: no refusal anywhere.
        j = unix_json(dep.root("hostA", "run/slot/dird.sock"))
        assert j["counters"]["faults_auth"] == 0 and j["counters"]["revoked"] == 1, j["counters"]
        assert "listing refused" not in dep.logs() and "signature" not in dep.logs()
    except AssertionError as e:
        raise AssertionError("%s\n%s" % (e, dep.logs()))
    finally:
        for p in dep.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in dep.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def test_package_route_checks_its_debs_and_removes_the_build_copies(dep):
    """slot_debs (docs/deploy.md, "The Debian packages"; test_deb.py runs
    that route for real, apt and systemd included, on a throwaway root):
    nothing is built or copied; a host lacking one of its packages stops
    before any change; on the others, what the build route copied goes (a
    unit in /etc/systemd/system would hide the package's) and the
    configuration stays. (slot_manage_packages is false here: the packages
    themselves are neither copied nor installed.)"""
    debs = [os.path.join(dep.dir, "slot-%s_9.9_all.deb" % p) for p in ("common", "tools", "relay")]
    dep.host_vars["hostB"].pop("slot_relay_settings", None)   # the value refused above
    dep.write_inventory()
    before = {h: snapshot_host(dep, h) for h in HOSTS}
    out, recap = dep.playbook("-e", json.dumps({"slot_debs": debs}), expect_fail=True)
    assert {h: r["failed"] for h, r in recap.items()} == {"hostA": 1, "hostB": 0, "hostC": 1}
    assert "one .deb file of each of slot-common, slot-tools, slot-directory, slot-relay" in out
    assert "one .deb file of each of slot-common, slot-tools, slot-client" in out
    for h in ("hostA", "hostC"):
        assert snapshot_host(dep, h) == before[h], h
    assert not os.path.exists(dep.root("hostB", "etc/systemd/system/slot-relayd.service"))
    assert set(os.listdir(dep.root("hostB", "usr/local/sbin"))) == set()
    conf = dep.root("hostB", "etc/slot/relayd.conf")
    assert open(conf, "rb").read() == before["hostB"][conf]
    # nothing built or staged: every task of slot_build skipped
    build = re.findall(r"^TASK \[slot_build : [^\]]*\][^\n]*\n((?:.+\n)*)", out, re.M)
    assert build and all(re.fullmatch(r"(skipping: .*\n)+", b) for b in build), build


def snapshot_host(dep, host):
    out = {}
    for d, _, files in os.walk(dep.root(host)):
        for f in files:
            p = os.path.join(d, f)
            if not os.path.islink(p) and os.path.isfile(p):
                out[p] = open(p, "rb").read()
    return out

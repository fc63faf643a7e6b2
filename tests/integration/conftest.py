"""Fixtures of the namespace tests: the network, relays, test servers and the test client."""

import hashlib
import os
import re
import socket
import subprocess
import threading
import time

import pytest

import netns

BUILD = os.environ.get("SLOT_BUILD", os.path.join(netns.ROOT, "build"))
RELAYD = os.environ.get("SLOT_RELAYD", os.path.join(BUILD, "slot-relayd"))
TESTCLIENT = os.environ.get("SLOT_TESTCLIENT", os.path.join(BUILD, "tests", "slot-testclient"))

MiB = 1 << 20


def pytest_configure(config):
    # run.sh runs these alone, after its parallel phase (README, "Running
    # the integration tests").
    config.addinivalue_line("markers", "serial: measures time or rates, or runs under valgrind: "
                            "run.sh runs it with no other test beside it")
    if os.geteuid() != 0:
        pytest.exit("the integration tests need root (network namespaces)", returncode=2)
    for b in (RELAYD, TESTCLIENT):
        if not os.access(b, os.X_OK):
            pytest.exit("%s is missing: build it first (make all)" % b, returncode=2)


@pytest.fixture(scope="session")
def net():
    n = netns.Net().up()
    yield n
    n.down()


@pytest.fixture(scope="session")
def key(net):
    # Owned by the relay's user, as in a deployment, so that SIGHUP can re-read it.
    return netns.write_key(os.path.join(net.dir, "key"), owner="nobody")


@pytest.fixture(scope="session")
def wrong_key(net):
    return netns.write_key(os.path.join(net.dir, "wrong.key"))


@pytest.fixture
def relays(net, key, request):
    """Factory: relays(overrides) starts a relay; all are stopped at the end, and
    a test that fails gets the relay logs printed."""
    started = []

    def start(overrides=None, wait=True, start=True, **kw):
        r = netns.Relay(net, RELAYD, key, overrides, **kw)
        started.append(r)
        return r.start(wait=wait) if start else r

    yield start
    for r in started:
        r.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for r in started:
            print("---- relay %d log (%s) ----\n%s" % (r.n, r.log_path, r.log()[-20000:]))


@pytest.fixture
def relay(relays):
    return relays()


# The longest modules, started first in run.sh's parallel phase (xdist hands
# the modules out in collection order), so that none of them is left running
# alone at its end; by their times in one process, longest first.
LONG_FIRST = ("test_faults.py", "test_synprobe.py", "test_ops_faults.py", "test_deploy.py",
              "test_slotd.py", "test_relay_dir.py", "test_relay_faults.py", "test_slotctl.py")


def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):      # one process: file order
        return
    rank = {m: i for i, m in enumerate(LONG_FIRST)}
    # a stable sort: each module's tests keep their order
    items.sort(key=lambda it: rank.get(os.path.basename(it.nodeid.split("::")[0]), len(rank)))


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture(scope="session")
def data64(net):
    """64 MiB of random data in a file, and its digest."""
    return random_file(net, "data64", 64 * MiB)


def random_file(net, name, size):
    path = os.path.join(net.dir, name)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            b = os.urandom(min(left, 4 * MiB))
            f.write(b)
            h.update(b)
            left -= len(b)
    return path, h.hexdigest()


_ports = iter(range(20000, 30000))


@pytest.fixture
def port():
    """A fresh server port for each use."""
    return lambda: next(_ports)


# ---- servers in the server namespace, run on threads of this process ----

class Server:
    """Accepts `conns` connections on the server address and runs handler(conn)
    for each on its own thread. result(i) returns what handler i returned (or
    raises what it raised)."""

    def __init__(self, net, port, handler, conns=1, ip=None):
        self.port = port
        self.ls = net.listen("server", ip or net.server_ip, port)
        self.handler = handler
        self.results = {}
        self.threads = []
        self.done = threading.Event()
        self.accepted = 0
        self.t = threading.Thread(target=self._accept, args=(conns,), daemon=True)
        self.t.start()

    def _accept(self, conns):
        for i in range(conns):
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            self.accepted += 1
            t = threading.Thread(target=self._run, args=(i, c), daemon=True)
            t.start()
            self.threads.append(t)

    def _run(self, i, c):
        try:
            self.results[i] = ("ok", self.handler(c))
        except BaseException as e:
            self.results[i] = ("exc", e)
        finally:
            c.close()

    def result(self, i=0, timeout=60):
        end = time.monotonic() + timeout
        while i not in self.results:
            if time.monotonic() > end:
                raise AssertionError("server handler %d did not finish in %ss" % (i, timeout))
            time.sleep(0.01)
        kind, v = self.results[i]
        if kind == "exc":
            raise v
        return v

    def close(self):
        try:
            self.ls.close()
        except OSError:
            pass


@pytest.fixture
def servers(net):
    made = []

    def make(port, handler, conns=1, **kw):
        s = Server(net, port, handler, conns, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def recv_all(c, sink=None):
    """Reads until EOF. Returns (bytes, sha256 hex); sink gets every chunk."""
    h = hashlib.sha256()
    n = 0
    while True:
        b = c.recv(1 << 20)
        if not b:
            return n, h.hexdigest()
        n += len(b)
        h.update(b)
        if sink:
            sink(b)


def send_file(c, path):
    with open(path, "rb") as f:
        c.sendfile(f)


def send_while_receiving(path):
    """A server handler: sends the file at path (then its FIN) while it
    reads to EOF; returns recv_all's (bytes, sha256)."""
    def serve(c):
        def tx():
            send_file(c, path)
            c.shutdown(socket.SHUT_WR)
        t = threading.Thread(target=tx)
        t.start()
        got = recv_all(c)
        t.join()
        return got
    return serve


# ---- the test client ----

LINE_RE = re.compile(r"(\w+)=(\S+)")


class ClientResult:
    def __init__(self, rc, err, elapsed):
        self.rc = rc
        self.err = err
        self.lines = err.splitlines()
        self.elapsed = elapsed

    def line(self, prefix):
        """The first stderr line starting with prefix, as a dict of its key=value
        fields (plus "_" = the whole line); None if absent."""
        for l in self.lines:
            if l.startswith(prefix):
                d = dict(LINE_RE.findall(l))
                d["_"] = l
                return d
        return None

    def all(self, prefix):
        out = []
        for l in self.lines:
            if l.startswith(prefix):
                d = dict(LINE_RE.findall(l))
                d["_"] = l
                out.append(d)
        return out

    def __repr__(self):
        return "ClientResult(rc=%r, elapsed=%.2fs, stderr=%r)" % (self.rc, self.elapsed, self.err)


class Client:
    def __init__(self, net, relay, key):
        self.net, self.relay, self.key = net, relay, key

    def argv(self, server_port=None, *extra, server_ip=None, relay=None):
        r = relay or self.relay
        a = [TESTCLIENT, "--key", self.key, "--relay", "%s:%d" % (self.net.relay_cip, r.ctl_port),
             "--data-port", str(r.data_port)]
        if server_port is not None:
            a += ["--server", "%s:%d" % (server_ip or self.net.server_ip, server_port)]
        return a + [str(e) for e in extra]

    def start(self, server_port, *extra, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
              server_ip=None, relay=None):
        p = self.net.popen("client", self.argv(server_port, *extra, server_ip=server_ip,
                                               relay=relay),
                           stdin=stdin, stdout=stdout, stderr=subprocess.PIPE)
        p.t0 = time.monotonic()
        return p

    @staticmethod
    def finish(p, timeout=60):
        try:
            _, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            raise AssertionError("test client did not finish in %ss: %s" % (timeout, err.decode()))
        return ClientResult(p.returncode, err.decode(errors="replace"), time.monotonic() - p.t0)

    def run(self, server_port, *extra, stdin=None, stdout=None, timeout=60, server_ip=None,
            relay=None):
        fin = open(stdin, "rb") if isinstance(stdin, str) else subprocess.DEVNULL
        fout = open(stdout, "wb") if isinstance(stdout, str) else subprocess.DEVNULL
        try:
            p = self.start(server_port, *extra, stdin=fin, stdout=fout, server_ip=server_ip,
                           relay=relay)
            return self.finish(p, timeout)
        finally:
            if fin is not subprocess.DEVNULL:
                fin.close()
            if fout is not subprocess.DEVNULL:
                fout.close()


@pytest.fixture
def client(net, relay, key):
    return Client(net, relay, key)


def make_client(net, relay, key):
    return Client(net, relay, key)

"""Identities at the directory (docs/directory.md, "Authentication" and
"Signed answers"), on the emulated WAN test bed with a real slot-dird, real
relays and a real slotd, each with its own key and a certificate from the
bed's CA (slot-keygen):

    client --40-- relay1 --40-- server        dir: slot-dird
    client --80-- relay2 --80-- server        client --10-- dir
    client --30-- relay3 --30-- server

- roles and binding: a client certificate can neither register a relay nor
  report RTTs, a relay cannot heartbeat or report for another relay's
  endpoint nor take it over (fault 2); the signed listing checks with an
  independent Python implementation of the canonical text;
- revocation: a revoked relay is refused by the directory, leaves its
  listing at once, and leaves slotd's relay set within a refresh; the relays
  get the list through their own signed listings;
- a listing altered on the way (a proxy that changes one relay's address,
  or replays an old answer) is refused by slotd, which keeps its relays;
- a cache file altered on disk is refused at start; the untouched one is
  used;
- slot-dird in identity mode under valgrind: no error, no leak.

The calls of the test itself are tests/integration/dirrpc.py's."""

import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import xmlrpc.client

import pytest

import slotbed
from dirrpc import DirClient, Identity, read_tagged, verify_listing, verify_text_listing

RELAYS = {"relay1": (40, 40), "relay2": (80, 80), "relay3": (30, 30)}
WAIT = 30
KEYGEN = os.path.join(slotbed.BUILD, "slot-keygen")
AUTH, MALFORMED = 2, 1
DIRD_CONF = {"relays": {"heartbeat_interval": "1s", "expire_after": "4s"}}


def keygen(*args):
    r = subprocess.run([KEYGEN] + list(args), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


class Ids:
    """A CA of its own and identities under dir (a foreign CA, and the
    valgrind run without a bed): issue(name, role, owner) makes dir/name.key
    and dir/name.cert."""

    def __init__(self, d):
        self.dir = d
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o755)
        keygen("ca", os.path.join(d, "ca"))
        os.chmod(os.path.join(d, "ca.pub"), 0o644)
        self.ca_pub = os.path.join(d, "ca.pub")
        self.ca_pk = read_tagged(self.ca_pub, "slot-ca-1")

    def issue(self, name, role, owner=None):
        p = os.path.join(self.dir, name)
        keygen("issue", "-c", os.path.join(self.dir, "ca.key"), "-r", role, "-n", name, p)
        os.chmod(p + ".cert", 0o644)
        if owner:
            shutil.chown(p + ".key", owner)
        return p

    def auth(self, name):
        p = os.path.join(self.dir, name)
        return {"mode": "identity", "key": p + ".key", "certificate": p + ".cert",
                "ca": self.ca_pub}

    def ident(self, name):
        p = os.path.join(self.dir, name)
        return Identity(p + ".key", p + ".cert")


@pytest.fixture(scope="module")
def sb():
    for b in (slotbed.SLOTD, slotbed.DIRD, KEYGEN):
        if not os.access(b, os.X_OK):
            pytest.fail("%s is missing: build it first (make all)" % b)
    b = slotbed.SlotBed(RELAYS, direct_rtt=80, extra_hosts=["dir"], auth="identity").up()
    try:
        b.nginx.add_file("small", 100 * 1024)
        b.nginx.start()
        b.auth_for("client", "dirtest-client")
        b.auth_for("relay", "intruder", owner="nobody")
        b.ca_pk = read_tagged(b.ids.ca_pub, "slot-ca-1")
        yield b
    finally:
        b.down()


@pytest.fixture
def dird(sb, request):
    """A fresh slot-dird in identity mode (the bed's), with a revocation list
    file (empty) it watches; relays are not pointed at it yet. The test's
    own calls go with slotd's kind of credentials unless they say."""
    for d in sb.dirds:
        d.stop()
    sb.dirds.clear()
    for f in os.listdir(sb.dir):
        if f.startswith("dird-"):
            os.unlink(os.path.join(sb.dir, f))
    revoked = os.path.join(sb.dir, "revoked")
    with open(revoked, "w") as f:
        f.write("# none yet\n")
    d = sb.dird(overrides=dict(DIRD_CONF, auth={"revoked": revoked}))
    d.revoked_path = revoked
    d.ident = ident(sb, "dirtest-client")
    yield d
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print("---- slot-dird ----\n%s" % d.log()[-8000:])
    d.stop()
    sb.dirds.remove(d)


def ident(sb, name):
    """The bed's identity of host name as dirrpc signs with it."""
    p = sb.ids.certs[name]
    return Identity(p + ".key", p + ".cert")


def fault_of(fn):
    try:
        fn()
    except xmlrpc.client.Fault as f:
        return f.faultCode, f.faultString
    raise AssertionError("no fault")


def relays_use(sb, d, names):
    """Restarts these relays in identity mode, registered with d."""
    for n in names:
        r = sb.relay(n)
        r.stop()
        r.update({"directory": {"urls": d.url, "list_interval": "500ms",
                                "measure_interval": "2s", "timeout": "2s"}})
        r.start()


def relays_back(sb):
    for r in sb.relays.values():
        r.stop()
        r.conf.pop("directory", None)
        r.update({})
        r.start()


@pytest.fixture
def slotd(sb, request):
    started = []

    def start(url, cache, wait=True):
        s = sb.slotd([])
        s.update({"directory": {"urls": url, "refresh": "1s", "retry": "500ms",
                                "timeout": "5s", "cache_file": cache},
                  "select": {"cache_ttl": 0}})
        started.append(s)
        s.start(wait=False)
        if wait:
            s.wait_ready(WAIT)
        return s

    yield start
    rep = getattr(request.node, "rep_call", None)
    for s in started:
        rc = s.stop()
        if rep is not None and rep.failed:
            print("---- slotd (%s), exit %r ----\n%s" % (s.log_path, rc, s.log()[-12000:]))
        assert rc == 0, (rc, s.log()[-3000:])
    sb.remove_slot_rules()


def wait_relays(s, want, timeout=WAIT):
    got = {}

    def ok():
        got.clear()
        got.update(s.relays_state())
        return set(got) == set(want)
    try:
        slotbed.wait_for(ok, timeout, "relays %r" % sorted(want), interval=0.2)
    except AssertionError as e:
        raise AssertionError("%s; slotd has %r" % (e, sorted(got)))
    return got


def listed(d):
    return {e["relay"] for e in d.list("")["relays"]}


def cache_file(sb, request):
    return os.path.join(sb.dir, "cache-" + re.sub(r"\W", "_", request.node.name),
                        "slotd.relays")


# ---------------------------------------------------------------- roles and binding

def test_roles_and_endpoint_binding(sb, dird):
    d = dird
    r1, r2 = sb.relay("relay1"), sb.relay("relay2")
    client, i1, i2 = ident(sb, "dirtest-client"), ident(sb, "relay1"), ident(sb, "relay2")
    intruder = ident(sb, "intruder")

    # A client's credentials cannot register a relay nor report RTTs.
    code, msg = fault_of(lambda: d.register(r1.control, r1.data_port, ident=client))
    assert code == AUTH and "relay" in msg, msg
    code, msg = fault_of(lambda: d.report(r1.control, [(r2.control, 1000)], ident=client))
    assert code == AUTH, msg
    # A shared-mode call (a MAC, no certificate) is malformed here.
    code, msg = fault_of(lambda: DirClient(d.url, os.urandom(32), run=d.run).list(""))
    assert code == MALFORMED and "cert" in msg, msg
    # A certificate from another CA.
    other = os.path.join(sb.dir, "ids-other")
    Ids(other).issue("r", "relay")
    code, msg = fault_of(lambda: d.register(r1.control, r1.data_port,
                                            ident=Identity(other + "/r.key", other + "/r.cert")))
    assert code == AUTH, msg
    # A signature by another key than the certificate's.
    forged = ident(sb, "relay1")
    forged.sk = intruder.sk
    code, msg = fault_of(lambda: d.register(r1.control, r1.data_port, ident=forged))
    assert code == AUTH and "signature" in msg, msg
    assert listed(d) == set()

    # relay1 registers its endpoint; relay2 and the intruder (a relay
    # certificate of their own) cannot heartbeat, report or register for it.
    assert d.register(r1.control, r1.data_port, ident=i1)["ok"]
    assert d.register(r2.control, r2.data_port, ident=i2)["ok"]
    for who in (i2, intruder):
        code, msg = fault_of(lambda: d.heartbeat(r1.control, ident=who))
        assert code == AUTH and "another key" in msg, msg
        code, msg = fault_of(lambda: d.report(r1.control, [(r2.control, 5)], ident=who))
        assert code == AUTH, msg
        code, msg = fault_of(lambda: d.register(r1.control, 9999, ident=who))
        assert code == AUTH, msg
    assert d.heartbeat(r1.control, ident=i1)["ok"]
    assert d.report(r1.control, [(r2.control, 40000)], ident=i1)["accepted"] == 1
    assert d.report(r2.control, [(r1.control, 42000)], ident=i2)["accepted"] == 1
    c = d.counters()
    assert c["faults_auth"] == 10 and c["faults_malformed"] == 1, c

    # The listing: each relay with its certificate, signed over the call's
    # nonce; checked here with an implementation of its own. Landmarks come
    # with it once both relays reported.
    def full():
        ans = d.list("")
        return ans if "landmarks" in ans else None
    ans = slotbed.wait_for(full, WAIT, "a listing with landmarks")
    nonce = d.last_nonce
    verify_listing(sb.ca_pk, nonce, ans)
    by = {e["relay"]: e for e in ans["relays"]}
    assert by[r1.control]["cert"] == i1.cert.hex() and by[r2.control]["cert"] == i2.cert.hex()
    assert ans["revoked"] == []
    # Another nonce, or one relay's address changed: the signature fails.
    with pytest.raises(Exception):
        verify_listing(sb.ca_pk, "0" * 16, ans)
    ans["relays"][0]["relay"] = "10.9.9.9:7600"
    with pytest.raises(Exception):
        verify_listing(sb.ca_pk, nonce, ans)
    # The text form slotd and the relays ask for: the same listing as one
    # signed text, the landmark rows beside it.
    t = d.call("slot.list", {"version": "", "format": "text"})
    lines = verify_text_listing(sb.ca_pk, d.last_nonce, t)
    assert "relay %s %d %d %s" % (r1.control, r1.data_port, by[r1.control]["group"],
                                  i1.cert.hex()) in lines, lines
    assert sorted(t) == ["cert", "format", "rtt", "sig", "text"], sorted(t)
    assert len(t["rtt"].data) == len(ans["landmarks"]["rtt"].data)
    t["text"] = xmlrpc.client.Binary(t["text"].data.replace(b"changed 1", b"changed 0"))
    with pytest.raises(Exception):
        verify_text_listing(sb.ca_pk, d.last_nonce, t)
    # An unchanged answer is signed too (its own nonce). A regroup may move
    # the version between two calls: ask again until one is unchanged.
    def unchanged():
        a = d.list(d.list("")["version"])
        return a if a["changed"] is False else None
    ans = slotbed.wait_for(unchanged, WAIT, "an unchanged answer")
    assert ans["relays"] == []
    verify_listing(sb.ca_pk, d.last_nonce, ans)


# ---------------------------------------------------------------- revocation

def test_revoked_relay_leaves_directory_and_slotd(sb, dird, slotd, request):
    d = dird
    r1, r2 = sb.relay("relay1"), sb.relay("relay2")
    try:
        relays_use(sb, d, ["relay1", "relay2"])
        slotbed.wait_for(lambda: listed(d) == {r1.control, r2.control}, WAIT, "both listed")
        s = slotd(d.url, cache_file(sb, request))
        wait_relays(s, {r1.control, r2.control})
        assert s.counters()["dir_fetches_refused"] == 0
        # The relays' own listings verify.
        slotbed.wait_for(lambda: all(r.counters()["dir_lists"] >= 1 for r in (r1, r2)), WAIT,
                         "relay listings")
        assert r1.counters()["dir_lists_refused"] == 0

        serial = "%016x" % ident(sb, "relay2").serial
        before = d.counters()
        with open(d.revoked_path, "w") as f:
            f.write("# relay2's key was stolen\n%s\n" % serial)
        # The directory drops it at once (its mtime is watched) ...
        slotbed.wait_for(lambda: listed(d) == {r1.control}, 10, "relay2 dropped")
        c = d.counters()
        assert c["relays_revoked"] == before["relays_revoked"] + 1 and c["revoked"] == 1, c
        assert d.list("")["revoked"] == [serial]
        # ... refuses its calls (it keeps trying: heartbeats, registers) ...
        code, msg = fault_of(lambda: d.heartbeat(r2.control, ident=ident(sb, "relay2")))
        assert code == AUTH and "revoked" in msg, msg
        slotbed.wait_for(lambda: "is revoked" in r2.log(), WAIT, "relay2 told it is revoked")
        assert r2.control not in listed(d)
        # ... slotd drops it within a refresh or two, and holds the list ...
        wait_relays(s, {r1.control}, timeout=10)
        slotbed.wait_for(lambda: s.counters()["dir_revoked"] == 1, 10, "slotd's list")
        # ... and so does the other relay (its signed listing carries it).
        slotbed.wait_for(lambda: r1.counters()["dir_revoked"] == 1, 10, "relay1's list")
        assert s.counters()["dir_fetches_refused"] == 0
        # Traffic still flows, byte for byte.
        r = sb.curl(sb.nginx.url("small", query="id=revoked"))
        assert r.rc == 0 and (r.size, r.sha) == sb.nginx.files["small"], r
    finally:
        relays_back(sb)


# ---------------------------------------------------------------- tampering

class Tamper:
    """An HTTP proxy in the client host between slotd and the directory:
    mode "pass" forwards, "edit" changes one relay's address in listings,
    "replay" answers every slot.list with the first full listing it saw."""

    def __init__(self, sb, d, relay_ip):
        self.sb, self.d, self.relay_ip = sb, d, relay_ip
        self.mode = "pass"
        self.first_full = None
        self.edited = 0
        self.replayed = 0
        self.sock = sb.bed.in_ns("client", self._listen)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d/RPC2" % self.port
        self.stop = False
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    @staticmethod
    def _listen():
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        s.settimeout(0.2)
        return s

    @staticmethod
    def _read(c):
        buf = b""
        while b"\r\n\r\n" not in buf:
            b = c.recv(65536)
            if not b:
                return buf
            buf += b
        head, body = buf.split(b"\r\n\r\n", 1)
        n = int(re.search(rb"(?i)content-length:\s*(\d+)", head).group(1))
        while len(body) < n:
            b = c.recv(65536)
            if not b:
                break
            body += b
        return head + b"\r\n\r\n" + body

    def _upstream(self, req):
        def f():
            u = socket.create_connection((self.d.ip, self.d.port), timeout=10)
            return u
        u = self.sb.bed.in_ns("client", f)
        try:
            u.sendall(req)
            out = b""
            while True:
                b = u.recv(65536)
                if not b:
                    return out
                out += b
        finally:
            u.close()

    def _serve(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            try:
                c.settimeout(10)
                # No "Expect: 100-continue": the body is here already.
                req = re.sub(rb"(?i)\r\nexpect:[^\r]*", b"", self._read(c))
                resp = self._upstream(req)
                head, body = resp.split(b"\r\n\r\n", 1)
                # slotd asks for the listing's text form: one signed text
                # (docs/directory.md), edited inside its base64.
                st = xmlrpc.client.loads(body)[0][0] if b"slot.list" in req else {}
                text = st["text"].data if "text" in st else b""
                full = b"\nchanged 1\n" in text
                if full and self.first_full is None:
                    self.first_full = body
                if self.mode == "edit" and full and self.relay_ip.encode() in text:
                    st["text"] = xmlrpc.client.Binary(
                        text.replace(self.relay_ip.encode(), b"10.250.0.1"))
                    body = xmlrpc.client.dumps((st,), methodresponse=True).encode()
                    self.edited += 1
                elif self.mode == "replay" and b"slot.list" in req and self.first_full:
                    body = self.first_full
                    self.replayed += 1
                head = re.sub(rb"(?i)content-length:\s*\d+", b"Content-Length: %d" % len(body),
                              head)
                c.sendall(head + b"\r\n\r\n" + body)
            except Exception:
                pass
            finally:
                c.close()

    def close(self):
        self.stop = True
        self.t.join(5)
        self.sock.close()


def test_altered_listing_refused(sb, dird, slotd, request):
    d = dird
    r1, r2, r3 = sb.relay("relay1"), sb.relay("relay2"), sb.relay("relay3")
    beating = {"relay1", "relay2", "relay3"}
    for n in beating:
        d.register(sb.relay(n).control, sb.relay(n).data_port, ident=ident(sb, n))
    stop = threading.Event()

    def beat():     # the relays are not pointed at this directory: the test keeps them listed
        while not stop.wait(0.5):
            for n in list(beating):
                try:
                    d.heartbeat(sb.relay(n).control, ident=ident(sb, n))
                except Exception:
                    pass
    hb = threading.Thread(target=beat, daemon=True)
    hb.start()
    p = Tamper(sb, d, r1.ip)
    try:
        s = slotd(p.url, cache_file(sb, request))
        wait_relays(s, {r1.control, r2.control, r3.control})
        assert p.first_full is not None

        # relay3 expires; the new listing comes with relay1's address
        # changed: refused, the set stays as it was.
        p.mode = "edit"
        beating.discard("relay3")
        slotbed.wait_for(lambda: r3.control not in listed(d), WAIT, "relay3 expired")
        slotbed.wait_for(lambda: s.counters()["dir_fetches_refused"] >= 2 and p.edited >= 2,
                         WAIT, "edited listings refused")
        assert set(s.relays_state()) == {r1.control, r2.control, r3.control}
        assert "listing refused" in s.log() and "signature does not verify" in s.log()
        assert "10.250.0.1" not in str(s.relays_state())

        # An old answer replayed: refused too (it answers another nonce).
        p.mode = "replay"
        n = s.counters()["dir_fetches_refused"]
        slotbed.wait_for(lambda: s.counters()["dir_fetches_refused"] >= n + 2, WAIT,
                         "replayed listings refused")
        assert p.replayed >= 2
        assert set(s.relays_state()) == {r1.control, r2.control, r3.control}

        # Honest again: the set follows the directory.
        p.mode = "pass"
        wait_relays(s, {r1.control, r2.control})
    finally:
        stop.set()
        hb.join(5)
        p.close()


def test_altered_cache_refused_at_start(sb, dird, slotd, request):
    d = dird
    r1, r2 = sb.relay("relay1"), sb.relay("relay2")
    for r, n in ((r1, "relay1"), (r2, "relay2")):
        d.register(r.control, r.data_port, ident=ident(sb, n))
    cache = cache_file(sb, request)
    s = slotd(d.url, cache)
    wait_relays(s, {r1.control, r2.control})
    slotbed.wait_for(lambda: os.path.exists(cache), 10, "the cache file")
    assert s.stop() == 0
    good = open(cache, "rb").read()
    assert good.startswith(b"slot-relays 2\ncert ")
    dead = "http://%s:7699/RPC2" % d.ip        # nothing listens: the cache is all there is

    # relay1's data port changed on disk: refused, slotd starts without it.
    with open(cache, "wb") as f:
        f.write(good.replace(("relay %s %d " % (r1.control, r1.data_port)).encode(),
                             ("relay %s %d " % (r1.control, r1.data_port + 1)).encode()))
    assert open(cache, "rb").read() != good
    s2 = slotd(dead, cache)
    try:
        slotbed.wait_for(lambda: "ignoring the cache file" in s2.log(), 10, "the refusal")
    except AssertionError:
        print(s2.log()[:5000])
        raise
    assert "signature does not verify" in s2.log()
    assert s2.relays_state() == {} and s2.counters()["dir_cache_loaded"] == 0
    assert s2.stop() == 0

    # An unsigned (format 1) cache is refused in identity mode.
    with open(cache, "w") as f:
        f.write("slot-relays 1 v-1\n%s %d 0\n" % (r1.control, r1.data_port))
    s3 = slotd(dead, cache)
    slotbed.wait_for(lambda: "not signed" in s3.log(), 10, "the refusal")
    assert s3.relays_state() == {}
    assert s3.stop() == 0

    # The file as written: both relays, from the cache.
    with open(cache, "wb") as f:
        f.write(good)
    s4 = slotd(dead, cache)
    wait_relays(s4, {r1.control, r2.control})
    assert s4.counters()["dir_cache_loaded"] == 1


# ---------------------------------------------------------------- the list's file

def loopback_dird(tmp_path, revoked_text, overrides=None, valgrind=False):
    """A directory in identity mode on loopback (no bed) with its revocation
    list file, and certificates for relays r1, r2 and client c (d.ident):
    (dird, the Ids, revocation file, r1, r2). Not started."""
    from test_dird import Dird
    ids = Ids(str(tmp_path / "ids"))
    ids.issue("dir", "directory")
    for n in ("r1", "r2", "c"):
        ids.issue(n, "client" if n == "c" else "relay")
    revoked = str(tmp_path / "revoked")
    with open(revoked, "w") as f:
        f.write(revoked_text)
    run = tmp_path / "run"
    run.mkdir()
    conf = dict(overrides or {})
    conf["auth"] = dict(ids.auth("dir"), revoked=revoked)
    d = Dird(run, conf, valgrind=valgrind)
    d.ident = ids.ident("c")
    return d, ids, revoked, ids.ident("r1"), ids.ident("r2")


class Opens:
    """Counts the opens of files in a directory, by name (inotify IN_OPEN):
    how many times a daemon has read a file, as no counter says."""
    IN_OPEN, IN_NONBLOCK = 0x20, 0o4000

    def __init__(self, path):
        import ctypes
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(self.IN_NONBLOCK)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        if self.libc.inotify_add_watch(self.fd, path.encode(), self.IN_OPEN) < 0:
            os.close(self.fd)
            raise OSError(ctypes.get_errno(), "inotify_add_watch " + path)
        self.n = {}

    def count(self, name):
        import struct
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            off = 0
            while off < len(buf):
                _, mask, _, ln = struct.unpack_from("iIII", buf, off)
                nm = buf[off + 16:off + 16 + ln].rstrip(b"\0").decode()
                if mask & self.IN_OPEN:
                    self.n[nm] = self.n.get(nm, 0) + 1
                off += 16 + ln
        return self.n.get(name, 0)

    def close(self):
        os.close(self.fd)


def test_revocation_file_caught_half_written(tmp_path):
    """A revocation list read while half written (it does not parse) is
    read again once whole, even when the rest landed within the same mtime
    (os.utime puts it back): the directory never takes a file that failed
    for read. No bed: a directory on loopback."""
    d, _, revoked, r1, r2 = loopback_dird(tmp_path, "# none yet\n")
    d.start()
    try:
        d.register("10.0.0.1:7600", ident=r1)
        d.register("10.0.0.2:7600", ident=r2)
        assert len(d.list("")["relays"]) == 2
        full = "# r2's key was stolen\n%016x\n" % r2.serial
        half = full[:-9]                # cut inside the serial
        with open(revoked, "w") as f:   # in place: the same inode
            f.write(half)
        d.wait_log(r"revocation list not loaded.*line")
        mtime = os.stat(revoked).st_mtime_ns
        with open(revoked, "a") as f:
            f.write(full[len(half):])
        os.utime(revoked, ns=(mtime, mtime))
        assert os.stat(revoked).st_mtime_ns == mtime
        slotbed.wait_for(lambda: len(d.list("")["relays"]) == 1, 10, "r2 revoked")
        assert d.counters()["revoked"] == 1
        d.wait_log(r"revocation list \S+ loaded again")
        # A list that stays broken is said once, not at every read. Renamed
        # over, whole: written in place, a tick could read it empty (a valid
        # list of no serials). A broken list is read at every tick (0.5 s):
        # the opens of the file are counted, and once it has been read three
        # times it has been said once.
        opens = Opens(os.path.dirname(revoked))
        try:
            with open(revoked + ".tmp", "w") as f:
                f.write("not a serial\n")
            os.replace(revoked + ".tmp", revoked)
            slotbed.wait_for(lambda: opens.count(os.path.basename(revoked)) >= 3, 20,
                             "three reads of the broken list")
        finally:
            opens.close()
        assert d.log().count("revocation list not loaded") == 2
        assert d.counters()["revoked"] == 1
    finally:
        rc = d.stop()
    assert rc == 0



def test_listing_size_warning(tmp_path):
    """Identity mode: a relay's entry in a listing takes up to 720 bytes,
    so more than about 40,000 relays make a listing larger than clients
    take. A max_relays that allows it is said at start and at a reload
    that keeps it; one within the bound is not."""
    d = loopback_dird(tmp_path, "", {"limits": {"max_relays": 50000}})[0]
    want = r"\[limits\] max_relays 50000: a listing of more than 40777 relays"
    d.start()
    try:
        d.wait_log(want)
        d.update({"limits": {"max_relays": 40000}})
        n = d.log().count("configuration reloaded")
        d.proc.send_signal(signal.SIGHUP)
        slotbed.wait_for(lambda: d.log().count("configuration reloaded") > n, 10, "reload")
        assert d.log().count("a listing of more than") == 1
    finally:
        rc = d.stop()
    assert rc == 0


# ---------------------------------------------------------------- valgrind

@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")
@pytest.mark.serial     # under valgrind: alone (run.sh)
def test_identity_mode_under_valgrind(tmp_path):
    """slot-dird in identity mode under valgrind (no bed): signed calls, a
    refused one, reports and landmarks, signed listings, a revocation read
    from the file, a reload; no error, no leak."""
    import time
    d, ids, revoked, r1, r2 = loopback_dird(tmp_path, "",
                                            {"groups": {"regroup_interval": "0"}},
                                            valgrind=True)
    d.start()
    try:
        d.register("10.0.0.1:7600", ident=r1)
        d.register("10.0.0.2:7600", ident=r2)
        assert fault_of(lambda: d.heartbeat("10.0.0.1:7600", ident=r2))[0] == AUTH
        d.report("10.0.0.1:7600", [("10.0.0.2:7600", 30000)], ident=r1)
        d.report("10.0.0.2:7600", [("10.0.0.1:7600", 31000)], ident=r2)
        ans = slotbed.wait_for(lambda: (lambda a: a if "landmarks" in a else None)(d.list("")),
                               60, "landmarks")
        verify_listing(ids.ca_pk, d.last_nonce, ans)
        with open(revoked, "w") as f:
            f.write("%016x\n" % r2.serial)
        slotbed.wait_for(lambda: len(d.list("")["relays"]) == 1, 60, "r2 revoked")
        d.proc.send_signal(signal.SIGHUP)
        time.sleep(1)
        assert d.heartbeat("10.0.0.1:7600", ident=r1)["ok"]
    finally:
        rc = d.stop()
    assert rc == 0, open(d.vg_log).read()[-3000:]
    log = open(d.vg_log).read()
    assert "ERROR SUMMARY: 0 errors" in log and "definitely lost" not in log, log[-3000:]

"""A load of concurrent curl transfers on a SlotBed, for the fault tests.

CurlLoad starts n curl processes in the client host at once, each fetching a
file from nginx (or, one in `upload_every`, PUTting one) with --limit-rate,
so that every transfer is still running when a test injects its fault; then
it waits for every curl and checks each transfer end to end:

- a download: curl's exit code, the HTTP status, the size and the sha256 of
  the body written to disk;
- an upload: curl's exit code, the HTTP status, and the sha256 of the file
  nginx stored (nginx's dav module stores a PUT only once the whole body is
  in, so a cut upload leaves no file);
- for both, the peer nginx logged for the request (the relay's address when
  relayed, the client's when direct; a request id in the URL finds it).

Classification (Transfer.outcome): "ok" (exit 0, the right bytes), "reset"
(curl's exit code for a connection reset: 56 receiving, 55 sending),
"truncated" (18: the server's FIN came before Content-Length's bytes),
"hang" (28: --max-time reached, or killed by finish()), "bad" (exit 0 with
wrong bytes: a cut stream taken for a complete one), "error" (anything else).

Every process is started through the bed (Testbed.popen), so the bed's
teardown kills whatever still runs on every exit path.
"""

import collections
import os
import re
import subprocess
import time

import slotbed
from slotbed import KiB, MiB

CURL_RESET_RECV = 56        # "Recv failure: Connection reset by peer"
CURL_RESET_SEND = 55        # "Send failure: Connection reset by peer"
CURL_PARTIAL = 18           # "transfer closed with N bytes remaining to read"
CURL_TIMEOUT = 28


class Transfer:
    def __init__(self, i, kind, tag, url, out=None, src=None):
        self.i, self.kind, self.tag, self.url = i, kind, tag, url
        self.out, self.src = out, src
        self.proc = None
        self.rc = self.status = self.size = self.sha = self.local_port = None
        self.err = ""
        self.killed = False
        self.peer = None
        self.outcome = None

    def __repr__(self):
        return ("Transfer(%d %s %s rc=%r status=%r size=%r peer=%s outcome=%s err=%r)"
                % (self.i, self.kind, self.tag, self.rc, self.status, self.size, self.peer,
                   self.outcome, self.err.strip()[-300:]))


class CurlLoad:
    """n transfers of `size` bytes at `rate` (curl's --limit-rate, e.g.
    "100K"), one in `upload_every` an upload (0: downloads only); `name`
    prefixes every request id, file and nginx path of this load."""

    def __init__(self, sb, name, n=200, size=MiB, rate="100K", upload_every=5,
                 max_time=300, port=80):
        self.sb, self.name, self.n, self.size = sb, name, n, size
        self.rate, self.max_time, self.port = rate, max_time, port
        self.dir = os.path.join(sb.dir, "load-" + name)
        os.makedirs(self.dir, exist_ok=True)
        self.file = "load-%s" % name
        self.sha = sb.nginx.add_file(self.file, size)
        self.up_src, self.up_sha = sb.random_file("load-%s.up" % name, size)
        self.transfers = []
        for i in range(n):
            tag = "%s-%d" % (name, i)
            if upload_every and i % upload_every == upload_every - 1:
                t = Transfer(i, "up", tag, sb.nginx.upload_url(tag, port=port), src=self.up_src)
            else:
                t = Transfer(i, "down", tag,
                             sb.nginx.url(self.file, port=port, query="id=" + tag),
                             out=os.path.join(self.dir, "%d.out" % i))
            self.transfers.append(t)
        self.started = False

    @property
    def downloads(self):
        return [t for t in self.transfers if t.kind == "down"]

    @property
    def uploads(self):
        return [t for t in self.transfers if t.kind == "up"]

    def _argv(self, t):
        a = ["curl", "-sS", "--max-time", str(self.max_time), "--limit-rate", self.rate,
             "-w", "%{http_code} %{local_port} %{size_download} %{size_upload}"]
        if t.kind == "down":
            a += ["-o", t.out]
        else:
            a += ["-o", "/dev/null", "-T", t.src]
        return a + [t.url]

    def start(self):
        """Starts every curl (all at once: the decisions come as a burst)."""
        for t in self.transfers:
            if t.out and os.path.exists(t.out):
                os.unlink(t.out)
            t.proc = self.sb.bed.popen("client", self._argv(t), stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE)
        self.started = True
        return self

    # -- while running --

    def established(self, peers=None):
        """Established TCP connections of the client host towards the
        server's port (what curl's sockets name: DNAT rewrites only the
        packets). peers: count only those to these addresses."""
        out = self.sb.run_client("ss", "-Htn", "state", "established",
                                 "dport", "=", ":%d" % self.port, check=False).stdout
        n = 0
        for l in out.splitlines():
            f = l.split()
            if len(f) >= 4 and f[3].endswith(":%d" % self.port) and \
                    (peers is None or f[3].rsplit(":", 1)[0] in peers):
                n += 1
        return n

    def running(self):
        return [t for t in self.transfers if t.proc.poll() is None]

    def bytes_in(self):
        """Downloads that have written at least one byte."""
        return sum(1 for t in self.downloads if os.path.exists(t.out) and
                   os.path.getsize(t.out) > 0)

    def wait_running(self, timeout=120):
        """Waits until every transfer is connected and every download has
        bytes on disk, with every curl still running; raises if one ended
        first (the files are too small or the rate too high for the test)."""
        server = self.sb.ip("server")

        def all_in():
            ended = [t for t in self.transfers if t.proc.poll() is not None]
            if ended:
                t = ended[0]
                raise AssertionError("%d transfers ended before the load was complete "
                                     "(first: %s %s, exit %d: %r)"
                                     % (len(ended), t.kind, t.tag, t.proc.returncode,
                                        t.proc.stderr.read().decode(errors="replace")))
            return self.established([server]) == self.n and \
                self.bytes_in() == len(self.downloads)
        slotbed.wait_for(all_in, timeout, "%d transfers running (now %d connected, %d with "
                         "bytes)" % (self.n, self.established(), self.bytes_in()), interval=0.2)

    # -- after --

    def finish(self, timeout=None):
        """Waits for every curl (killing one that outlives --max-time by a
        margin), checks each transfer and returns the outcome counts."""
        end = time.monotonic() + (timeout or self.max_time + 60)
        for t in self.transfers:
            try:
                so, se = t.proc.communicate(timeout=max(1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                t.proc.kill()
                t.killed = True
                so, se = t.proc.communicate()
            t.rc = t.proc.returncode
            t.err = se.decode(errors="replace")
            parts = so.decode(errors="replace").split()
            if len(parts) == 4:
                t.status, t.local_port = int(parts[0]), int(parts[1])
            if t.kind == "down":
                if os.path.exists(t.out):
                    t.size = os.path.getsize(t.out)
                    t.sha = slotbed.sha256_file(t.out)
            else:
                stored = self.sb.nginx.upload_path(t.tag)
                if os.path.exists(stored):
                    t.size = os.path.getsize(stored)
                    t.sha = slotbed.sha256_file(stored)
        self._peers()
        for t in self.transfers:
            t.outcome = self._outcome(t)
        return self.counts()

    def _outcome(self, t):
        want = self.sha if t.kind == "down" else self.up_sha
        if t.killed or t.rc == CURL_TIMEOUT:
            return "hang"
        if t.rc == 0:
            good_status = t.status == 200 if t.kind == "down" else t.status in (201, 204)
            return "ok" if good_status and t.size == self.size and t.sha == want else "bad"
        if t.rc in (CURL_RESET_RECV, CURL_RESET_SEND):
            return "reset"
        if t.rc == CURL_PARTIAL:
            return "truncated"
        return "error"

    def _peers(self, timeout=30):
        """The peer nginx logged for each request. nginx logs a request when
        it ends (a cut one too, a little later), so this waits a while for
        the completed ones and takes what is there for the rest."""
        def read():
            got = {}
            for r in self.sb.nginx.requests():
                m = re.search(r"(?:id=|/up/)(%s-\d+) " % re.escape(self.name), r["request"])
                if m:
                    got[m.group(1)] = r["peer"]
            return got
        want = {t.tag for t in self.transfers if t.rc == 0}
        try:
            got = slotbed.wait_for(lambda: (lambda g: g if want <= set(g) else None)(read()),
                                   timeout, "nginx to log every completed request")
        except AssertionError:
            got = read()
        for t in self.transfers:
            t.peer = got.get(t.tag)

    def counts(self):
        return dict(collections.Counter(t.outcome for t in self.transfers))

    def by_peer(self, outcome=None):
        """{peer address: number of transfers} (of one outcome)."""
        return dict(collections.Counter(t.peer for t in self.transfers
                                        if outcome is None or t.outcome == outcome))

    def where(self, outcome):
        return [t for t in self.transfers if t.outcome == outcome]

    def summary(self):
        return "%s: %d transfers of %d KiB at %s/s: %r; peers %r" % (
            self.name, self.n, self.size // KiB, self.rate, self.counts(), self.by_peer())

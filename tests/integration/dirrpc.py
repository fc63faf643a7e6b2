"""The client side of slot-dird's protocol (docs/directory.md), written from
the document with hmac/hashlib, independently of src/core/dirproto.c: tests
call the directory with it as a relay or slotd would."""

import hashlib
import hmac
import os
import time
import xmlrpc.client


def canonical(method, ts, nonce, body):
    return "slot-dird/1\n%s\n%s\n%s\n%s" % (method, ts, nonce, body)


def body_of(method, f):
    if method == "slot.register":
        return "%s\n%d" % (f["relay"], f["data_port"])
    if method == "slot.heartbeat":
        return f["relay"]
    if method == "slot.report":
        return f["relay"] + "\n" + "".join("%s %d\n" % (e["peer"], e["rtt_us"])
                                           for e in f["rtts"])
    if method == "slot.list":
        return f["version"]
    raise ValueError(method)


def stamp():
    return str(int(time.time() * 1e6)), os.urandom(8).hex()


class Timeout(xmlrpc.client.Transport):
    def __init__(self, timeout):
        super().__init__()
        self.timeout = timeout

    def make_connection(self, host):
        c = super().make_connection(host)
        c.timeout = self.timeout
        return c


class DirClient:
    """Signed calls to one directory URL. run(fn) runs each call (the default
    calls it here; a test bed passes one that enters a namespace)."""

    def __init__(self, url, key, run=None):
        self.url = url
        self.key = key
        self.run = run or (lambda fn: fn())

    def raw_call(self, method, fields, timeout=10):
        def f():
            p = xmlrpc.client.ServerProxy(self.url, transport=Timeout(timeout))
            return getattr(p, method)(fields)
        return self.run(f)

    def call(self, method, fields, key=None, ts=None, nonce=None, mac=None, body=None,
             timeout=10):
        t, n = stamp()
        ts = ts if ts is not None else t
        nonce = nonce if nonce is not None else n
        if body is None:
            body = body_of(method, fields)
        if mac is None:
            mac = hmac.new(key or self.key, canonical(method, ts, nonce, body).encode(),
                           hashlib.sha256).hexdigest()
        return self.raw_call(method, dict(fields, ts=ts, nonce=nonce, mac=mac), timeout)

    def register(self, relay, data_port=7601):
        return self.call("slot.register", {"relay": relay, "data_port": data_port})

    def heartbeat(self, relay):
        return self.call("slot.heartbeat", {"relay": relay})

    def report(self, relay, rtts):
        return self.call("slot.report", {"relay": relay, "rtts": [
            {"peer": p, "rtt_us": r} for p, r in rtts]})

    def list(self, version=""):
        return self.call("slot.list", {"version": version})

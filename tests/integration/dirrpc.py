"""The client side of slot-dird's protocol (docs/directory.md), written from
the document with hmac/hashlib and the cryptography package's Ed25519,
independently of src/core/dirproto.c: tests call the directory with it as a
relay or slotd would, in shared mode (a MAC) or identity mode (a certificate
and a signature), and check the signed listing."""

import hashlib
import hmac
import os
import struct
import time
import xmlrpc.client


def canonical(method, ts, nonce, body, tag="slot-dird/1"):
    return "%s\n%s\n%s\n%s\n%s" % (tag, method, ts, nonce, body)


CALL_CTX = b"slot-dird call\0"
LIST_CTX = b"slot-dird listing\0"


def read_tagged(path, tag):
    """The hex of a slot-keygen file's line "<tag> <hex>" (docs/keys.md)."""
    for line in open(path):
        if line.startswith(tag + " "):
            return bytes.fromhex(line.split()[1])
    raise ValueError("%s: no %s line" % (path, tag))


class Identity:
    """A host's key and certificate files (slot-keygen issue)."""

    def __init__(self, key_path, cert_path):
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        self.sk = Ed25519PrivateKey.from_private_bytes(read_tagged(key_path, "slot-key-1"))
        self.cert = read_tagged(cert_path, "slot-cert-1")

    @property
    def serial(self):
        return int.from_bytes(self.cert[8:16], "big")

    def sign_call(self, method, ts, nonce, body):
        text = canonical(method, ts, nonce, body, "slot-dird/2").encode()
        return self.sk.sign(CALL_CTX + text).hex()


def listing_text(nonce, ans):
    """The canonical text of a slot.list answer (docs/directory.md, "Signed
    answers"), from the answer's members as parsed."""
    out = ["slot-listing/1", "nonce " + nonce, "version " + ans["version"],
           "changed %d" % (1 if ans["changed"] else 0), "relays %d" % len(ans["relays"])]
    for r in ans["relays"]:
        out.append("relay %s %d %d %s" % (r["relay"], r["data_port"], r["group"],
                                          r.get("cert", "-")))
    land = ans.get("landmarks")
    rows = land["rtt"].data if land else b""
    out.append("landmarks %d %s" % (len(land["index"]) if land else 0,
                                    hashlib.sha256(rows).hexdigest()))
    if land:
        for i, w in zip(land["index"], land["weight"]):
            out.append("landmark %d %s" % (i, "%.9g" % struct.unpack("f", struct.pack("f", w))[0]))
    out.append("revoked %d" % len(ans.get("revoked", [])))
    out += ["serial " + s for s in ans.get("revoked", [])]
    return ("\n".join(out) + "\n").encode()


def verify_listing(ca_pk, nonce, ans):
    """Checks a signed answer as slotd does (the directory certificate's CA
    signature and role, then the signature over the text); raises if not."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    cert = bytes.fromhex(ans["cert"])
    assert cert[:4] == b"SLC1" and cert[4] == 3, "not a directory certificate"
    Ed25519PublicKey.from_public_bytes(ca_pk).verify(cert[96:160], b"slot-cert/1\0" + cert[:96])
    Ed25519PublicKey.from_public_bytes(cert[32:64]).verify(
        bytes.fromhex(ans["sig"]), LIST_CTX + listing_text(nonce, ans))


def verify_text_listing(ca_pk, nonce, ans):
    """Checks a listing in its text form (format "text") as slotd does:
    the certificate and the signature over the text as sent, this call's
    nonce, the rows' hash; raises if not. Returns the text's lines."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    text = ans["text"].data
    if ca_pk is not None:
        cert = bytes.fromhex(ans["cert"])
        assert cert[:4] == b"SLC1" and cert[4] == 3, "not a directory certificate"
        Ed25519PublicKey.from_public_bytes(ca_pk).verify(cert[96:160],
                                                         b"slot-cert/1\0" + cert[:96])
        Ed25519PublicKey.from_public_bytes(cert[32:64]).verify(bytes.fromhex(ans["sig"]),
                                                               LIST_CTX + text)
    lines = text.decode().splitlines()
    assert lines[0] == "slot-listing/1" and lines[1] == "nonce " + nonce, lines[:2]
    land = [ln for ln in lines if ln.startswith("landmarks ")][0].split()
    rows = ans["rtt"].data if "rtt" in ans else b""
    assert land[2] == hashlib.sha256(rows).hexdigest(), land
    return lines


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

    def __init__(self, url, key, run=None, ident=None):
        self.url = url
        self.key = key
        self.ident = ident          # an Identity: identity mode
        self.run = run or (lambda fn: fn())
        self.last_nonce = None

    def raw_call(self, method, fields, timeout=10):
        def f():
            p = xmlrpc.client.ServerProxy(self.url, transport=Timeout(timeout))
            return getattr(p, method)(fields)
        return self.run(f)

    def call(self, method, fields, key=None, ts=None, nonce=None, mac=None, body=None,
             timeout=10, ident=None):
        t, n = stamp()
        ts = ts if ts is not None else t
        nonce = nonce if nonce is not None else n
        self.last_nonce = nonce
        if body is None:
            body = body_of(method, fields)
        ident = ident or self.ident
        if ident is not None:
            return self.raw_call(method, dict(fields, ts=ts, nonce=nonce, cert=ident.cert.hex(),
                                              sig=ident.sign_call(method, ts, nonce, body)),
                                 timeout)
        if mac is None:
            mac = hmac.new(key or self.key, canonical(method, ts, nonce, body).encode(),
                           hashlib.sha256).hexdigest()
        return self.raw_call(method, dict(fields, ts=ts, nonce=nonce, mac=mac), timeout)

    def register(self, relay, data_port=7601, ident=None):
        return self.call("slot.register", {"relay": relay, "data_port": data_port},
                         ident=ident)

    def heartbeat(self, relay, ident=None):
        return self.call("slot.heartbeat", {"relay": relay}, ident=ident)

    def report(self, relay, rtts, ident=None):
        return self.call("slot.report", {"relay": relay, "rtts": [
            {"peer": p, "rtt_us": r} for p, r in rtts]}, ident=ident)

    def list(self, version="", ident=None):
        return self.call("slot.list", {"version": version}, ident=ident)

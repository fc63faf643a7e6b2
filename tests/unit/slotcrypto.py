"""Ed25519, X25519 and slot's certificates and pair keys in plain Python
(stdlib only), written from RFC 8032, RFC 7748 and docs/keys.md and sharing
no code with src/core/ident.c: the second reading that gen_proto_vectors.py
and the integration tests check the C code against. Slow (milliseconds a
signature) and not constant time: for tests only, never for real keys."""

import hashlib
import struct

P = 2 ** 255 - 19
Q = 2 ** 252 + 27742317777372353535851937790883648493   # the group order
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)

CERT_CTX = b"slot-cert/1\0"
PAIR_CTX = b"slot-pair/1\0"
ROLES = {"client": 1, "relay": 2, "directory": 3}


def _inv(x):
    return pow(x, P - 2, P)


def _add(p1, p2):
    # extended coordinates (RFC 8032, 5.1.4)
    a = (p1[1] - p1[0]) * (p2[1] - p2[0]) % P
    b = (p1[1] + p1[0]) * (p2[1] + p2[0]) % P
    c = 2 * p1[3] * p2[3] * D % P
    d = 2 * p1[2] * p2[2] % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _mul(s, pt):
    acc = (0, 1, 1, 0)
    while s > 0:
        if s & 1:
            acc = _add(acc, pt)
        pt = _add(pt, pt)
        s >>= 1
    return acc


def _recover_x(y, sign):
    x2 = (y * y - 1) * _inv(D * y * y + 1) % P
    if x2 == 0:
        return 0
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P:
        raise ValueError("not a point")
    return P - x if (x & 1) != sign else x


_GY = 4 * _inv(5) % P
_GX = _recover_x(_GY, 0)
G = (_GX, _GY, 1, _GX * _GY % P)


def _compress(pt):
    zi = _inv(pt[2])
    x, y = pt[0] * zi % P, pt[1] * zi % P
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def _expand(seed):
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    return a, h[32:]


def public_key(seed):
    """The Ed25519 public key of a 32-byte seed."""
    return _compress(_mul(_expand(seed)[0], G))


def sign(seed, msg):
    """Ed25519 signature (RFC 8032, 5.1.6)."""
    a, prefix = _expand(seed)
    pk = _compress(_mul(a, G))
    r = int.from_bytes(hashlib.sha512(prefix + msg).digest(), "little") % Q
    rs = _compress(_mul(r, G))
    k = int.from_bytes(hashlib.sha512(rs + pk + msg).digest(), "little") % Q
    return rs + ((r + k * a) % Q).to_bytes(32, "little")


def sign_ctx(seed, ctx, msg):
    """slot's context-bound signature: over ctx, a NUL, then msg."""
    return sign(seed, ctx.encode() + b"\0" + msg)


def _x25519(k, u):
    """RFC 7748, 5: the Montgomery ladder; k already clamped."""
    x1, x2, z2, x3, z3, swap = u, 1, 0, u, 1, 0
    a24 = 121665
    for t in reversed(range(255)):
        kt = (k >> t) & 1
        swap ^= kt
        if swap:
            x2, x3, z2, z3 = x3, x2, z3, z2
        swap = kt
        a, b = (x2 + z2) % P, (x2 - z2) % P
        aa, bb = a * a % P, b * b % P
        e = (aa - bb) % P
        c, d = (x3 + z3) % P, (x3 - z3) % P
        da, cb = d * a % P, c * b % P
        x3 = (da + cb) ** 2 % P
        z3 = x1 * (da - cb) ** 2 % P
        x2 = aa * bb % P
        z2 = e * (aa + a24 * e) % P
    if swap:
        x2, z2 = x3, z3
    return x2 * pow(z2, P - 2, P) % P


def pair_key(seed, peer_pk):
    """ident_pair_key: X25519 of the keys converted to Montgomery form,
    hashed (BLAKE2b-256) with a context and both public keys in order."""
    own_pk = public_key(seed)
    y = int.from_bytes(peer_pk, "little") & ((1 << 255) - 1)
    u = (1 + y) * _inv((1 - y) % P) % P            # Edwards y -> Montgomery u
    shared = _x25519(_expand(seed)[0], u).to_bytes(32, "little")
    lo, hi = sorted([own_pk, peer_pk])
    return hashlib.blake2b(PAIR_CTX + shared + lo + hi, digest_size=32).digest()


def cert(ca_seed, role, name, serial, not_before, not_after, pk):
    """A certificate (160 bytes) as slot-keygen issues it."""
    body = (b"SLC1" + bytes([ROLES.get(role, role)]) + bytes(3) +
            struct.pack(">QQQ", serial, not_before, not_after) + pk +
            name.encode().ljust(32, b"\0"))
    return body + sign(ca_seed, CERT_CTX + body)


def key_file_text(seed):
    return "slot-key-1 %s\n" % seed.hex()


def cert_file_text(raw):
    return "slot-cert-1 %s\n" % raw.hex()

"""slot: offer a program's own TCP connections to slotd (libslot(3)).

A ctypes binding of libslot, the standard library only:

    import socket, slot
    s = socket.socket()
    slot.connect(s, ("203.0.113.7", 8080), deadline_ms=2000)
    print(slot.decision(s))
    slot.attach_self()      # this process and its children, from now on

The library is $SLOT_LIBSLOT if set (a path), else what
ctypes.util.find_library("slot") finds, else "libslot.so.1". Errors raise
OSError(errno, text), with libslot's text for people (slot_strerror).
"""

import ctypes
import ctypes.util
import dataclasses
import errno as _errno
import os
import select
import socket
import struct
import threading

__all__ = ["connect", "decision", "attach_self", "version", "Decision",
           "AVOID_MAX", "CHAIN_MAX", "DEADLINE_MAX"]

AVOID_MAX = 8
CHAIN_MAX = 3
DEADLINE_MAX = 60000

_STATES = {1: "relayed", 2: "direct", 3: "pending", 4: "fallback"}


class _Decision(ctypes.Structure):
    _fields_ = [("state", ctypes.c_int),
                ("relay", ctypes.c_char * 64),
                ("path_rtt_us", ctypes.c_uint),
                ("direct_rtt_us", ctypes.c_uint),
                ("cached", ctypes.c_int),
                ("why", ctypes.c_char * 128)]


@dataclasses.dataclass
class Decision:
    """What slotd did with a connection; vars() gives it as a dict."""
    state: str              # relayed, direct, pending or fallback
    relay: str              # "ADDR:PORT" when relayed, else ""
    path_rtt_us: int
    direct_rtt_us: int      # 0: the direct path was not measured
    cached: bool
    why: str


_lib = None
_lib_lock = threading.Lock()


def _load():
    """The library, loaded once, on first use: importing this module never
    fails for want of it."""
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        name = (os.environ.get("SLOT_LIBSLOT") or ctypes.util.find_library("slot")
                or "libslot.so.1")
        lib = ctypes.CDLL(name, use_errno=True)
        opts = ctypes.c_void_p
        for fn, args, res in (
                ("slot_opts_new", [], opts),
                ("slot_opts_free", [opts], None),
                ("slot_opts_set_relay", [opts, ctypes.c_char_p], ctypes.c_int),
                ("slot_opts_avoid_relay", [opts, ctypes.c_char_p], ctypes.c_int),
                ("slot_opts_set_deadline", [opts, ctypes.c_uint], ctypes.c_int),
                ("slot_opts_set_fallback", [opts, ctypes.c_int], ctypes.c_int),
                ("slot_opts_set_socket", [opts, ctypes.c_char_p], ctypes.c_int),
                ("slot_connect", [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint, opts],
                 ctypes.c_int),
                ("slot_decision", [ctypes.c_int, ctypes.POINTER(_Decision), opts],
                 ctypes.c_int),
                ("slot_attach_self", [opts], ctypes.c_int),
                ("slot_strerror", [], ctypes.c_char_p),
                ("slot_version", [], ctypes.c_char_p)):
            f = getattr(lib, fn)
            f.argtypes = args
            f.restype = res
        _lib = lib
        return lib


def _error(lib):
    """OSError from errno and the text of the call just made (same thread)."""
    e = ctypes.get_errno()
    text = lib.slot_strerror().decode("utf-8", "replace") or os.strerror(e)
    return OSError(e, text)


def _check(lib, rc):
    if rc == -1:
        raise _error(lib)


def _opts(lib, relay=None, avoid=(), deadline_ms=0, fallback=True, socket_path=None):
    """A struct slot_opts for one call; the caller frees it."""
    o = lib.slot_opts_new()
    if not o:
        raise OSError(_errno.ENOMEM, "out of memory")
    try:
        if relay is not None:
            # A chain: a list of relays, first relay first.
            if not isinstance(relay, (str, bytes)):
                relay = ",".join(r.decode("ascii") if isinstance(r, bytes) else r
                                 for r in relay)
            _check(lib, lib.slot_opts_set_relay(o, _bytes("relay", relay)))
        if isinstance(avoid, (str, bytes)):
            avoid = (avoid,)
        for ep in avoid:
            _check(lib, lib.slot_opts_avoid_relay(o, _bytes("avoid", ep)))
        if not isinstance(deadline_ms, int) or isinstance(deadline_ms, bool) or \
                not 0 <= deadline_ms <= DEADLINE_MAX:
            raise OSError(_errno.EINVAL, "deadline_ms %r: expected 0 (slotd's own) or 1..%d"
                          % (deadline_ms, DEADLINE_MAX))
        _check(lib, lib.slot_opts_set_deadline(o, deadline_ms))
        _check(lib, lib.slot_opts_set_fallback(o, 1 if fallback else 0))
        if socket_path is not None:
            _check(lib, lib.slot_opts_set_socket(o, os.fsencode(socket_path)))
    except BaseException:
        lib.slot_opts_free(o)
        raise
    return o


def _bytes(what, s):
    if isinstance(s, bytes):
        s = s.decode("ascii", "replace")
    if not isinstance(s, str) or "\0" in s:
        raise OSError(_errno.EINVAL, "%s %r: expected \"ADDR:PORT\" or \"[V6]:PORT\"" % (what, s))
    return s.encode("ascii", "replace")


def _sockaddr(family, address):
    """struct sockaddr_in or sockaddr_in6 for a numeric (host, port[, flowinfo,
    scope_id]) tuple: no name lookups here."""
    if not isinstance(address, tuple) or len(address) < 2 or \
            not isinstance(address[0], str) or not isinstance(address[1], int):
        raise OSError(_errno.EINVAL, "address %r: expected a (host, port) tuple" % (address,))
    host, port = address[0], address[1]
    if not 0 <= port <= 65535:
        raise OSError(_errno.EINVAL, "port %d: expected 1..65535" % port)
    if family == socket.AF_INET:
        if len(address) != 2:
            raise OSError(_errno.EINVAL, "address %r: expected (host, port)" % (address,))
        try:
            a = socket.inet_pton(socket.AF_INET, host)
        except OSError:
            raise OSError(_errno.EINVAL, "%r is no numeric IPv4 address" % host) from None
        return struct.pack("=HH4s8x", socket.AF_INET, socket.htons(port), a)
    if family == socket.AF_INET6:
        if len(address) > 4:
            raise OSError(_errno.EINVAL, "address %r: expected (host, port[, flowinfo, "
                          "scope_id])" % (address,))
        flow = address[2] if len(address) > 2 else 0
        scope = address[3] if len(address) > 3 else 0
        try:
            a = socket.inet_pton(socket.AF_INET6, host)
        except OSError:
            raise OSError(_errno.EINVAL, "%r is no numeric IPv6 address" % host) from None
        return struct.pack("=HHI16sI", socket.AF_INET6, socket.htons(port),
                           socket.htonl(flow), a, scope)
    raise OSError(_errno.EAFNOSUPPORT, "socket family %r: expected AF_INET or AF_INET6"
                  % (family,))


def _wait_connected(sock, e, timeout):
    """A connect under way (a socket with a timeout is non-blocking inside):
    wait for it as socket.connect would."""
    fd = sock.fileno()
    if timeout == 0.0:
        raise OSError(e, os.strerror(e))
    _, w, _ = select.select([], [fd], [], timeout)
    if not w:
        raise socket.timeout("timed out")
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise OSError(err, os.strerror(err))


def connect(sock, address, relay=None, avoid=(), deadline_ms=0, fallback=True,
            socket_path=None):
    """sock.connect(address) through slot (slot_connect).

    sock: an unconnected socket.socket, AF_INET or AF_INET6, SOCK_STREAM.
    address: (host, port), host numeric. relay: force this relay
    ("ADDR:PORT", "[V6]:PORT"), or a chain of up to 3 relays, first relay
    first (a list, or "EP1,EP2[,EP3]"); avoid: relays never to use (at most 8);
    deadline_ms: 1..60000, no path chosen by then means direct (0: slotd's
    own); fallback: connect directly if slotd cannot be reached (else raise);
    socket_path: slotd's lib socket (else $SLOT_LIB_SOCKET, else the default).
    """
    if not isinstance(sock, socket.socket):
        raise OSError(_errno.ENOTSOCK, "%r is no socket.socket" % (sock,))
    lib = _load()
    sa = _sockaddr(sock.family, address)
    o = _opts(lib, relay, avoid, deadline_ms, fallback, socket_path)
    try:
        rc = lib.slot_connect(sock.fileno(), sa, len(sa), o)
        if rc == -1:
            err = _error(lib)
            timeout = sock.gettimeout()
            # slotd said yes and connect(2) is under way: as sock.connect.
            if err.errno in (_errno.EINPROGRESS, _errno.EINTR) and timeout != 0.0:
                _wait_connected(sock, err.errno, timeout)
            else:
                raise err
    finally:
        lib.slot_opts_free(o)


def decision(sock, socket_path=None):
    """What slotd did with the connected sock (slot_decision): a Decision.
    state "fallback" when slotd cannot be reached."""
    if not isinstance(sock, socket.socket):
        raise OSError(_errno.ENOTSOCK, "%r is no socket.socket" % (sock,))
    lib = _load()
    o = _opts(lib, socket_path=socket_path)
    try:
        d = _Decision()
        _check(lib, lib.slot_decision(sock.fileno(), ctypes.byref(d), o))
    finally:
        lib.slot_opts_free(o)
    return Decision(state=_STATES.get(d.state, str(d.state)),
                    relay=d.relay.decode("ascii", "replace"),
                    path_rtt_us=d.path_rtt_us, direct_rtt_us=d.direct_rtt_us,
                    cached=bool(d.cached), why=d.why.decode("utf-8", "replace"))


def attach_self(socket_path=None):
    """Every TCP connection this process and its children open from now on
    is offered to slotd (slot_attach_self; needs slotd's run cgroup)."""
    lib = _load()
    o = _opts(lib, socket_path=socket_path)
    try:
        _check(lib, lib.slot_attach_self(o))
    finally:
        lib.slot_opts_free(o)


def version():
    """The loaded libslot's version."""
    return _load().slot_version().decode()

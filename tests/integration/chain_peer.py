"""One end of a TCP stream exercise for test_chain.py, run in a host of the
test bed: "serve" in the server (listens, takes one connection), "connect"
in the client (through slotd with libslot's Python binding, forcing a relay
or a chain). Both ends run the same scenario, each its own part, and print
one JSON line: what they sent and received (sha256 and sizes) and how the
stream ended for them ("eof", or "reset" for ECONNRESET/EPIPE).

usage: chain_peer.py serve PORT SCENARIO SIZE
       chain_peer.py connect HOST PORT SCENARIO SIZE LIB_SOCKET RELAYS|- PYTHON_DIR

SCENARIO (the connecting end is C, the serving end S):
  download   S sends SIZE bytes and closes; C reads to EOF.
  upload     C sends SIZE bytes and shuts its write side; S reads to EOF,
             then closes; C reads its EOF.
  cfirst     C sends SIZE bytes, shuts its write side; S reads to EOF, then
             sends SIZE bytes back and closes (the other direction flows
             after C's FIN).
  sfirst     the same with the roles swapped: S sends and shuts first.
  creset     C sends 64 KiB, waits for S's one byte, then resets (SO_LINGER 0);
             S reads until the end of the stream.
  sreset     the same with the roles swapped.
  stream     S sends until its stream breaks; C reads until its breaks, and
             prints "started" once 1 MiB is in (the test then kills a relay).
"""

import hashlib
import json
import os
import socket
import struct
import sys
import time

CHUNK = 64 * 1024


def send_random(s, size):
    h = hashlib.sha256()
    left = size
    while left:
        b = os.urandom(min(left, CHUNK))
        s.sendall(b)
        h.update(b)
        left -= len(b)
    return h.hexdigest()


def read_all(s, on_bytes=None):
    """(sha256, bytes, how): until EOF ("eof") or a reset ("reset")."""
    h = hashlib.sha256()
    n = 0
    how = "eof"
    while True:
        try:
            b = s.recv(CHUNK)
        except (ConnectionResetError, BrokenPipeError):
            how = "reset"
            break
        if not b:
            break
        h.update(b)
        n += len(b)
        if on_bytes:
            on_bytes(n)
    return h.hexdigest(), n, how


def reset(s):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def sender_part(s, scenario, size):
    """The part of the end that sends first (C in cfirst, S in sfirst...)."""
    out = {}
    if scenario in ("upload", "download"):
        out["sent"] = send_random(s, size)
        s.shutdown(socket.SHUT_WR)
        out["rsha"], out["rbytes"], out["how"] = read_all(s)
    elif scenario in ("cfirst", "sfirst"):
        out["sent"] = send_random(s, size)
        s.shutdown(socket.SHUT_WR)
        # the other direction still flows after our FIN
        out["rsha"], out["rbytes"], out["how"] = read_all(s)
    elif scenario in ("creset", "sreset"):
        out["sent"] = send_random(s, CHUNK)
        s.recv(1)                       # the other end read it all
        reset(s)
        out["how"] = "reset-sent"
        return out
    s.close()
    return out


def receiver_part(s, scenario, size):
    out = {}
    if scenario in ("upload", "download"):
        out["rsha"], out["rbytes"], out["how"] = read_all(s)
        s.close()
    elif scenario in ("cfirst", "sfirst"):
        out["rsha"], out["rbytes"], out["how"] = read_all(s)
        out["sent"] = send_random(s, size)
        s.close()
    elif scenario in ("creset", "sreset"):
        h = hashlib.sha256()
        got = b""
        while len(got) < CHUNK:
            b = s.recv(CHUNK - len(got))
            if not b:
                break
            got += b
        h.update(got)
        out["rsha"], out["rbytes"] = h.hexdigest(), len(got)
        s.sendall(b"!")
        _, _, out["how"] = read_all(s)
        s.close()
    return out


def streamer(s, is_client):
    out = {}
    if not is_client:
        n = 0
        how = "eof"
        try:
            while True:
                s.sendall(os.urandom(CHUNK))
                n += CHUNK
        except (ConnectionResetError, BrokenPipeError):
            how = "reset"
        out["sbytes"], out["how"] = n, how
        return out
    started = [False]

    def progress(n):
        if n >= 1024 * 1024 and not started[0]:
            started[0] = True
            print("started", flush=True)
    _, out["rbytes"], out["how"] = read_all(s, progress)
    return out


def first_mover(scenario):
    """Which end sends first: 'C' or 'S'."""
    return {"download": "S", "upload": "C", "cfirst": "C", "sfirst": "S",
            "creset": "C", "sreset": "S"}[scenario]


def run(s, scenario, size, me):
    if scenario == "stream":
        return streamer(s, me == "C")
    if first_mover(scenario) == me:
        return sender_part(s, scenario, size)
    return receiver_part(s, scenario, size)


def main():
    if sys.argv[1] == "serve":
        port, scenario, size = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("0.0.0.0", port))
        ls.listen(4)
        print("listening", flush=True)
        s, peer = ls.accept()
        ls.close()
        out = run(s, scenario, size, "S")
        out["peer"] = peer[0]
        print(json.dumps(out), flush=True)
        return
    host, port, scenario, size = sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    lib_sock, relays, pydir = sys.argv[6], sys.argv[7], sys.argv[8]
    sys.path.insert(0, pydir)
    import slot
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    kw = {"socket_path": lib_sock, "deadline_ms": 10000}
    if relays != "-":
        kw["relay"] = relays.split(",")
    t0 = time.monotonic()
    slot.connect(s, (host, port), **kw)
    d = slot.decision(s, socket_path=lib_sock)
    dec = d if isinstance(d, dict) else vars(d)
    print(json.dumps({"decision": dec, "connect_s": time.monotonic() - t0}), flush=True)
    out = run(s, scenario, size, "C")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

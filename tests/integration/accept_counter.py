"""A fragile server for tests: it handles one connection at a time, logs
every accept(2) with the peer, answers an HTTP GET with the bytes of a file
and closes. Run in the server host of a test bed:

    python3 accept_counter.py PORT BODY_FILE LOG_FILE [6]

With 6 it listens on IPv6 ([::], IPv6 only) instead of IPv4.

Log lines: "accept IP PORT", then "served IP PORT" once a request was
answered, or "dropped IP PORT REASON" (reset, EOF or timeout before a whole
request: a connection the application saw but that carried nothing)."""

import socket
import sys


def main():
    port, body_path, log_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    v6 = len(sys.argv) > 4 and sys.argv[4] == "6"
    with open(body_path, "rb") as f:
        body = f.read()
    head = ("HTTP/1.0 200 OK\r\nContent-Type: application/octet-stream\r\n"
            "Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)).encode()
    ls = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if v6:
        ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    ls.bind(("::" if v6 else "0.0.0.0", port))
    ls.listen(128)
    log = open(log_path, "a", buffering=1)
    log.write("listening %d\n" % port)
    while True:
        c, peer = ls.accept()
        ip, cport = peer[0], peer[1]
        log.write("accept %s %d\n" % (ip, cport))
        # Long enough for a request and the body under the loss tests' 20%
        # each way (TCP backs off for seconds), short of curl's 60 s.
        c.settimeout(50)
        req = b""
        why = None
        try:
            while b"\r\n\r\n" not in req:
                b = c.recv(4096)
                if not b:
                    why = "eof"
                    break
                req += b
            if why is None:
                c.sendall(head + body)
        except socket.timeout:
            why = "timeout"
        except OSError as e:
            why = "error-%d" % (e.errno or 0)
        finally:
            c.close()
        log.write(("served %s %d\n" % (ip, cport)) if why is None
                  else ("dropped %s %d %s\n" % (ip, cport, why)))


if __name__ == "__main__":
    main()

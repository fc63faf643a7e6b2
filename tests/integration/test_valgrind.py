"""The relay under valgrind: a few pipes, refusals, probes, a reload and a
graceful SIGTERM, with no memory errors and no definite leaks."""

import os
import re
import shutil
import socket
import subprocess

import pytest

from conftest import make_client, random_file, recv_all, send_file
from netns import sha256_file

pytestmark = pytest.mark.serial     # under valgrind: alone (run.sh)


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")
def test_relay_under_valgrind(net, relays, key, wrong_key, servers, port):
    relay = relays({"limits": {"connect_timeout": "2s", "pending_timeout": "1s"}},
                   valgrind=True)
    client = make_client(net, relay, key)
    up, up_digest = random_file(net, "vg_up", 256 * 1024)
    down, down_digest = random_file(net, "vg_down", 512 * 1024)
    p = port()

    def serve(c):
        got = recv_all(c)
        send_file(c, down)
        c.shutdown(socket.SHUT_WR)
        return got

    srv = servers(p, serve, conns=3)
    for i in range(3):
        out = os.path.join(net.dir, "vg%d.out" % i)
        r = client.run(p, stdin=up, stdout=out, timeout=60)
        assert r.rc == 0, r
        assert srv.result(i, 30) == (256 * 1024, up_digest)
        assert sha256_file(out) == down_digest

    assert client.run(port(), timeout=30).rc == 3                        # refused
    assert client.run(p, server_ip="127.0.0.1", timeout=30).rc == 3      # policy
    assert client.run(p, "--wrong-key", wrong_key, timeout=30).rc == 4   # auth
    assert client.run(p, "--replay", timeout=30).rc == 4                 # replay (pipe expires)
    q = subprocess.run(net.cmd("client", *client.argv(None, "--no-pipe", "--timeout", 20)),
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert q.returncode == 5, q.stderr
    r = client.run(p, "--probe", "--probe-port", relay.probe_port, timeout=30)
    assert r.rc == 0, r
    r = client.run(p, "--rst-after", 0, stdin=up, timeout=30)              # client RST

    relay.hup()
    relay.wait_counter("pipes_expired", lambda v: v >= 1, timeout=20)
    relay.counters()
    relay.json()

    rc = relay.stop(timeout=30)
    vg = relay.valgrind_log()
    assert rc == 0, (rc, vg[-4000:], relay.log()[-3000:])
    m = re.search(r"ERROR SUMMARY: (\d+) errors", vg)
    assert m and m.group(1) == "0", vg[-6000:]
    m = re.search(r"definitely lost: ([\d,]+) bytes", vg)
    assert m is None or m.group(1) == "0", vg[-6000:]

"""[pipe] send_buffer: the first time a leg the relay sends on finds its send
buffer full, the relay raises it to send_buffer and leaves the kernel free
to grow it further (the unlock itself is checked in the unit test of
sock_raise_sndbuf); off leaves the kernel's own. Every transfer checks its
bytes by sha256."""

import hashlib
import os
import subprocess
import time

import pytest

from conftest import MiB, make_client, recv_all


def upload(net, relay, key, servers, port, wait_raised=True):
    """4 MiB through relay to a server that reads late: the relay sends on
    the server leg only. The server reads nothing until the relay raised
    that leg's send buffer (10 s at most), so that the leg fills however
    slowly a loaded machine sends; wait_raised False: for 1 s. Returns the
    relay's counter deltas."""
    p = port()
    before = relay.counters()

    def slow_reader(c):
        end = time.monotonic() + (10 if wait_raised else 1)
        while time.monotonic() < end and (not wait_raised or relay.counters()[
                "send_buffers_raised"] == before["send_buffers_raised"]):
            time.sleep(0.05)
        return recv_all(c)

    srv = servers(p, slow_reader)
    proc = make_client(net, relay, key).start(p, stdin=subprocess.PIPE)
    data = os.urandom(4 * MiB)
    proc.stdin.write(data)
    proc.stdin.close()
    assert proc.wait(30) == 0, proc.stderr.read()
    assert srv.result(timeout=30) == (4 * MiB, hashlib.sha256(data).hexdigest())
    relay.wait_counter("pipes_open", lambda v: v == 0, timeout=10)
    after = relay.counters()
    return {k: after[k] - before[k] for k in after if isinstance(after[k], int)}


@pytest.mark.parametrize("conf", [{}, {"pipe": {"send_buffer": "512k"}}],
                         ids=["default", "512k"])
def test_a_full_leg_is_raised_once(net, relays, key, servers, port, conf):
    relay = relays(conf)
    d = upload(net, relay, key, servers, port)
    # The server leg filled while the server did not read; the client leg
    # carried nothing back.
    assert d["send_buffers_raised"] == 1, d


def test_off_leaves_the_kernels(net, relays, key, servers, port):
    relay = relays({"pipe": {"send_buffer": "off"}})
    d = upload(net, relay, key, servers, port, wait_raised=False)
    assert d["send_buffers_raised"] == 0, d


@pytest.mark.parametrize("value,want", [
    ("1k", "[pipe] send_buffer = 1k: size 1k is out of range [65536, 67108864] bytes; or off"),
    ("lots", "[pipe] send_buffer = lots: invalid size \"lots\""),
])
def test_bad_values_refused(net, relays, value, want):
    relay = relays({"pipe": {"send_buffer": value}}, start=False)
    rc, err = relay.check_config()
    assert rc != 0 and want in err, err

"""[probe] handover at the relay alone (the pipes that take a measurement's
connection are tested with slotd in test_synprobe.py): a measurement is a
connect whose handshake's last ACK the relay defers, held for handover and
then reset, so the server's application accepts nothing; bad values are
refused."""

import contextlib
import re
import time

import pytest

from conftest import make_client
from earlyack import EarlyAcker
from synrto import SynTimeoutCgroup

PROBE_FLAG_CACHED = 1             # include/slot/proto.h


def probe(net, relay, key, p):
    """One probe of the server on port p through relay, answered ok."""
    r = make_client(net, relay, key).run(p, "--probe", "--probe-port", relay.probe_port,
                                         timeout=10)
    assert r.line("probe status")["status"] == "ok", r
    return r


def probe_a_server(net, relay, key, servers, port):
    """One probe of a listening server through relay, answered ok; no pipe
    follows. Returns (the server, its port, the relay's counters before)."""
    p = port()
    srv = servers(p, lambda c: None)
    before = relay.counters()
    probe(net, relay, key, p)
    return srv, p, before


def deltas(before, after):
    return {k: after[k] - before[k] for k in after if isinstance(after[k], int)}


# The hold counts from the SYN-ACK, and the reset is due 150 ms (the
# default) after it, 40-50 ms before the kernel's deferred ACK; a relay busy
# enough to run its timer that late would let the server accept (the relay
# cannot reset sooner than its loop runs). 50 ms leaves a loaded machine room.
SHORT_HOLD = {"probe": {"handover": "50ms"}}


def test_an_unused_measurement_is_never_accepted(net, relays, key, servers, port):
    relay = relays(SHORT_HOLD)
    # the start-up check found this kernel deferring the ACK (2), as
    # handover needs; 1 while it runs, 180 ms from the start
    relay.wait_counter("handover_kernel", lambda v: v == 2)
    srv, _, before = probe_a_server(net, relay, key, servers, port)
    relay.wait_counter("handovers_held", lambda v: v == 0)
    d = deltas(before, relay.counters())
    assert d["measure_connect"] == 1 and d["measure_syn"] == 0, d
    assert d["handovers_unused"] == 1 and d["handovers"] == 0, d
    # past the kernel's 200 ms bound on the deferred ACK: the reset came
    # first, so the server's application never saw the measurement
    time.sleep(0.3)
    assert srv.accepted == 0


def test_a_cached_answer_preconnects(net, relays, key, servers, port):
    """An answer from the RTT cache begins a connect for handover all the
    same (the first measurement's connection has gone unused by then); it
    too is reset unused, never accepted."""
    relay = relays(SHORT_HOLD)
    srv, p, _ = probe_a_server(net, relay, key, servers, port)
    relay.wait_counter("handovers_held", lambda v: v == 0)
    before = relay.counters()
    r = probe(net, relay, key, p)
    assert int(r.line("probe status")["flags"]) & PROBE_FLAG_CACHED, r
    relay.wait_counter("handovers_unused", lambda v: v == before["handovers_unused"] + 1)
    after = relay.counters()
    d = deltas(before, after)
    # not a measurement: the cache keeps its entry
    assert d["handover_preconnects"] == 1 and d["measure_connect"] == 0, d
    assert d["handovers"] == 0 and after["handovers_held"] == 0, d
    time.sleep(0.3)
    assert srv.accepted == 0


def test_preconnect_no(net, relays, key, servers, port):
    """[probe] preconnect = no: a cached answer begins no connect; a
    measurement's connection is still held for handover."""
    relay = relays({"probe": {"preconnect": "no"}})
    _, p, before = probe_a_server(net, relay, key, servers, port)
    relay.wait_counter("handovers_held", lambda v: v == 0)
    r = probe(net, relay, key, p)
    assert int(r.line("probe status")["flags"]) & PROBE_FLAG_CACHED, r
    time.sleep(0.2)
    d = deltas(before, relay.counters())
    assert d["measure_connect"] == 1 and d["handovers_unused"] == 1, d
    assert d["handover_preconnects"] == 0, d


def test_off_measures_with_a_bare_syn(net, relays, key, servers, port):
    relay = relays({"probe": {"handover": "off"}})
    # checked all the same, for a reload that turns handover on
    relay.wait_counter("handover_kernel", lambda v: v == 2)
    srv, _, before = probe_a_server(net, relay, key, servers, port)
    after = relay.counters()
    assert after["measure_syn"] == before["measure_syn"] + 1, (before, after)
    assert after["measure_connect"] == before["measure_connect"], (before, after)
    assert after["handovers_held"] == 0 and srv.accepted == 0


@pytest.mark.parametrize("key_,value,want", [
    ("handover", "250ms", "[probe] handover = 250ms: must be 0 (off) or between 1 ms and 180 ms"),
    ("handover", "soon", "[probe] handover = soon:"),
    ("preconnect", "maybe", "[probe] preconnect = maybe:"),
])
def test_bad_values_refused(net, relays, key_, value, want):
    relay = relays({"probe": {key_: value}}, start=False)
    rc, err = relay.check_config()
    assert rc != 0 and want in err, err


def test_a_kernel_that_acks_early_turns_handover_off(net, relays, key, servers, port):
    """The start-up check on a kernel that sends a connect's last ACK at
    once (emulated on the relay's loopback by EarlyAcker): handover goes
    off for the process's lifetime, with a warning; measurements are bare
    SYNs, cached answers begin no connect, and the server accepts nothing."""
    relay = relays(start=False)
    with EarlyAcker(net, "relay") as acker:
        relay.start()
        relay.wait_counter("handover_kernel", lambda v: v == 3)
    assert acker.sent >= 1
    assert "handover off: this kernel completed a connect's deferred handshake" in relay.log()
    srv, p, before = probe_a_server(net, relay, key, servers, port)
    r = probe(net, relay, key, p)
    assert int(r.line("probe status")["flags"]) & PROBE_FLAG_CACHED, r
    time.sleep(0.3)
    after = relay.counters()
    d = deltas(before, after)
    assert d["measure_syn"] == 1 and d["measure_connect"] == 0, d
    assert d["handover_preconnects"] == 0 and after["handovers_held"] == 0, d
    assert after["handover_kernel"] == 3 and srv.accepted == 0


@pytest.mark.parametrize("jiffies", [None, 50])
def test_bare_syn_at_the_syns_own_timeout(net, relays, key, port, jiffies):
    """An unanswered measurement's connect gives way to a bare SYN at 0.9
    of that SYN's own timeout, read from the socket: the kernel's 1 s, or
    what the host's sock_ops program set (BPF_SOCK_OPS_TIMEOUT_INIT, here
    50 jiffies for the relay's cgroup), so that the kernel's own second SYN
    never comes first."""
    p = port()
    silent = "10.%d.2.99" % net.x      # no host there: no SYN-ACK, ever
    cg = SynTimeoutCgroup(jiffies) if jiffies else contextlib.nullcontext()
    with cg:
        relay = relays(wrapper=cg.wrapper if jiffies else None)
        try:
            relay.wait_counter("handover_kernel", lambda v: v == 2)
            before = relay.counters()
            make_client(net, relay, key).run(p, "--probe", "--probe-port", relay.probe_port,
                                             server_ip=silent, timeout=10)
            after = relay.counters()
        finally:
            relay.stop()        # out of the cgroup before it goes
    m = re.search(r"measuring %s:%d: no SYN-ACK to the connect within (\d+) ms \(0\.9 of "
                  r"its SYN's timeout\): a bare SYN goes on" % (re.escape(silent), p), relay.log())
    assert m, relay.log()[-3000:]
    assert after["measure_connect"] - before["measure_connect"] == 1
    assert after["measure_syn"] - before["measure_syn"] == 1
    if jiffies:
        # 500 ms a jiffy at HZ=100, 200 ms at HZ=250: well below the kernel's 1 s
        assert int(m.group(1)) <= 0.9 * jiffies * 10, m.group(0)
    else:
        assert int(m.group(1)) == 900, m.group(0)

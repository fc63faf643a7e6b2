"""Relay chains (issue 17, docs/relay.md "Chains"): client -> relay1 ->
relay2 [-> relay3] -> server, forced through libslot (relay=EP1,EP2[,EP3]).

One bed for the module: three relays 10 ms from the client and the server
and from each other, the server 80 ms direct. tests/integration/chain_peer.py
runs both ends of each exchange: the client through slotd with the Python
binding, the server a plain listener, each printing what it sent and
received (sha256) and how its stream ended.

- A 2-relay and a 3-relay chain carry a download and an upload of a few MB,
  sha256 checked both ways; the server sees the last relay; the relays'
  counters show who was first, middle and last.
- Half-close in both orders: after one end's FIN the other direction still
  flows and arrives complete.
- Reset in both orders: one end's RST arrives at the other as a reset.
- A relay that disallows chains ([chain] allow = no) stops saying on its
  control links that it takes them (KEEPALIVE's CHAINS, docs/protocol.md):
  slotd then sends no chain that it would forward (as the first or a middle
  relay; the lib's fallback goes direct), but still one that ends at it (it
  gets a plain PIPE_ESTABLISH). A PIPE_ESTABLISH_CHAIN sent to it anyway
  (slot-testclient) gets PIPE_FAIL next-hop (EPERM), and the control
  connection stays open (a keepalive after it is answered).
- The middle relay killed (SIGKILL) mid-transfer: the client and the server
  both see a reset, not a clean EOF.
"""

import errno
import json
import os
import re
import shutil
import signal
import subprocess

import pytest

from slotbed import BUILD, ROOT, SlotBed, deltas, sha256_file, unix_request, wait_for

MiB = 1024 * 1024
SIZE = 3 * MiB
PY = "/usr/bin/python3"
PEER = os.path.join(ROOT, "tests", "integration", "chain_peer.py")
PYDIR = os.path.join(ROOT, "python")
RELAYS = ("relay1", "relay2", "relay3")
LIBGET = os.path.join(BUILD, "tests", "slot-libget")
TESTCLIENT = os.path.join(BUILD, "tests", "slot-testclient")

_port = [9100]
# No directory here: the relays take any relay of the CA as a next hop, at
# the data port the request names (test_chain_select checks the listing).
ANY_HOP = {"chain": {"next_hops": "any"}}


@pytest.fixture(scope="module")
def sb():
    bed = SlotBed({r: (10, 10) for r in RELAYS}, direct_rtt=80, other_rtt=10,
                  relay_conf=ANY_HOP)
    with bed:                           # nginx started by up(), for slot-libget
        bed.nginx.add_file("chain.bin", SIZE)
        yield bed


@pytest.fixture(scope="module")
def slotd(sb):
    # Keepalives every second: slotd learns within one that a reloaded relay
    # no longer takes chains (the bed's default is 30 s).
    s = sb.slotd([sb.relay(r) for r in RELAYS],
                 overrides={"relays": {"keepalive_interval": "1s"}}).start()
    yield s
    s.stop()


def chain(sb, *names):
    return [sb.relay(n).control for n in names]


def start_server(sb, scenario, size):
    _port[0] += 1
    port = _port[0]
    srv = sb.bed.popen("server", [PY, PEER, "serve", str(port), scenario, str(size)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = srv.stdout.readline()
    assert line.strip() == "listening", (line, srv.stderr.read() if srv.poll() else "")
    return srv, port


def start_client(sb, slotd, port, scenario, size, relays):
    env = dict(os.environ, SLOT_LIBSLOT=os.path.join(BUILD, "libslot.so.1"))
    return sb.bed.popen("client", [PY, PEER, "connect", sb.ip("server"), str(port), scenario,
                                   str(size), slotd.lib_sock, ",".join(relays) or "-", PYDIR],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish(p, what, timeout=90):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError("%s did not finish: %s %s" % (what, out, err))
    lines = [l for l in out.splitlines() if l.startswith("{")]
    assert p.returncode == 0 and lines, (what, p.returncode, out, err)
    return [json.loads(l) for l in lines]


def exchange(sb, slotd, scenario, relays, size=SIZE):
    """Runs scenario through the forced relays: (decision, client, server)."""
    srv, port = start_server(sb, scenario, size)
    cli = start_client(sb, slotd, port, scenario, size, relays)
    c = finish(cli, "client")
    s = finish(srv, "server")
    assert len(c) == 2, c
    return c[0]["decision"], c[1], s[0]


def logs(sb, tail=3000):
    return {r: sb.relay(r).log()[-tail:] for r in RELAYS}


def counters(sb):
    return {r: sb.relay(r).counters() for r in RELAYS}


def changes(before, sb):
    return {r: deltas(before[r], sb.relay(r).counters()) for r in RELAYS}


def assert_relayed(sb, dec, srv, names):
    assert dec["state"] == "relayed" and dec["relay"] == sb.relay(names[0]).control, dec
    assert "chain" in dec["why"], dec
    assert srv["peer"] == sb.relay(names[-1]).ip, srv


@pytest.mark.parametrize("names", [RELAYS[:2], RELAYS], ids=["2relays", "3relays"])
def test_chain_download_and_upload(sb, slotd, names):
    c0 = counters(sb)
    dec, cli, srv = exchange(sb, slotd, "download", chain(sb, *names))
    assert_relayed(sb, dec, srv, names)
    assert cli["rbytes"] == SIZE and cli["rsha"] == srv["sent"], (cli, srv)
    assert cli["how"] == "eof" and srv["how"] == "eof", (cli, srv)

    dec, cli, srv = exchange(sb, slotd, "upload", chain(sb, *names))
    assert_relayed(sb, dec, srv, names)
    assert srv["rbytes"] == SIZE and srv["rsha"] == cli["sent"], (cli, srv)
    assert cli["how"] == "eof" and srv["how"] == "eof", (cli, srv)

    d = changes(c0, sb)
    first, last = names[0], names[-1]
    # the first relay (and the middle one of three) took chain requests;
    # the last one plain pipes; each carried both transfers
    assert d[first]["chains_requested"] == 2 and d[first]["chains_joined"] == 2, d
    assert d[first]["chains_failed"] == 0, d
    if len(names) == 3:
        assert d["relay2"]["chains_requested"] == 2 and d["relay2"]["chains_joined"] == 2, d
    assert d[last]["chains_requested"] == 0 and d[last]["pipes_total"] == 2, d
    for n in names:
        assert d[n]["pipes_total"] == 2, (n, d)
        assert d[n]["bytes_server_to_client"] >= SIZE, (n, d)
        assert d[n]["bytes_client_to_server"] >= SIZE, (n, d)
    assert sb.relay(first).counters()["chain_links"] >= 1
    # the pipe's log line names the chain
    via = " via " + " > ".join(sb.relay(n).control for n in names[1:])
    assert via in sb.relay(first).log(), sb.relay(first).log()[-3000:]


def test_chain_data_connection_goes_with_the_request(sb, slotd):
    """relay1 opens its data connection to relay2 right behind its request,
    not after relay2's PIPE_OK: relay2's connect to the server is slowed by
    a second (its first SYN dropped), and relay1's data connection reaches
    relay2 while that pipe is still connecting (counted data_early there;
    data_held_joined had it overtaken the request)."""
    srv, port = start_server(sb, "download", MiB)
    rule = ["OUTPUT", "-p", "tcp", "--syn", "--dport", str(port), "-m", "statistic",
            "--mode", "nth", "--every", "1000000", "--packet", "0", "-j", "DROP"]
    sb.bed.run("relay2", "iptables", "-w", "-I", *rule)
    try:
        c0 = counters(sb)
        cli = start_client(sb, slotd, port, "download", MiB, chain(sb, "relay1", "relay2"))
        c = finish(cli, "client")
        s = finish(srv, "server")
    finally:
        sb.bed.run("relay2", "iptables", "-w", "-D", *rule, check=False)
    dec, cli, srv = c[0]["decision"], c[1], s[0]
    assert_relayed(sb, dec, srv, ("relay1", "relay2"))
    assert cli["rbytes"] == MiB and cli["rsha"] == srv["sent"], (cli, srv)
    d = changes(c0, sb)
    assert d["relay2"]["data_early"] + d["relay2"]["data_held_joined"] == 1, d
    assert d["relay2"]["pipes_total"] == 1 and d["relay1"]["chains_joined"] == 1, d


def test_chain_with_slot_libget(sb, slotd):
    """The C program of test_libslot passes a chain with -r EP1,EP2: an HTTP
    download on a port slotd does not hijack, through relay1 and relay2."""
    out = os.path.join(sb.dir, "libget-chain.out")
    r = sb.run_client(LIBGET, "-r", ",".join(chain(sb, "relay1", "relay2")), "-s",
                      slotd.lib_sock, sb.ip("server"), 8080, "/f/chain.bin?libget", out,
                      check=False, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["state"] == "relayed" and res["relay"] == sb.relay("relay1").control, res
    assert sha256_file(out) == sb.nginx.files["chain.bin"][1]
    assert sb.nginx.peer_of("libget") == sb.relay("relay2").ip
    assert "via %s > %s" % tuple(chain(sb, "relay1", "relay2")) in slotd.log()

    # a relay of the chain that slotd does not know: refused at once
    r = sb.run_client(LIBGET, "-r", chain(sb, "relay1")[0] + ",192.0.2.99:7600", "-s",
                      slotd.lib_sock, sb.ip("server"), 8080, "/f/chain.bin?unknown", out,
                      check=False, timeout=60)
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert r.returncode == 2 and res["errno"] == 2, res            # ENOENT
    assert "no relay 192.0.2.99:7600" in res["error"], res


@pytest.mark.parametrize("scenario", ["cfirst", "sfirst"])
def test_chain_half_close(sb, slotd, scenario):
    """One end shuts its write side first; the other direction keeps
    flowing and arrives complete, then both see a clean EOF."""
    dec, cli, srv = exchange(sb, slotd, scenario, chain(sb, *RELAYS))
    assert_relayed(sb, dec, srv, RELAYS)
    assert cli["rbytes"] == SIZE and srv["rbytes"] == SIZE, (cli, srv)
    assert cli["rsha"] == srv["sent"] and srv["rsha"] == cli["sent"], (cli, srv)
    assert cli["how"] == "eof" and srv["how"] == "eof", (cli, srv)


@pytest.mark.parametrize("scenario", ["creset", "sreset"])
def test_chain_reset(sb, slotd, scenario):
    """One end resets: the other sees a reset, not an EOF."""
    c0 = counters(sb)
    dec, cli, srv = exchange(sb, slotd, scenario, chain(sb, *RELAYS))
    assert_relayed(sb, dec, srv, RELAYS)
    sender, receiver = (cli, srv) if scenario == "creset" else (srv, cli)
    assert receiver["rsha"] == sender["sent"], (cli, srv)
    assert sender["how"] == "reset-sent" and receiver["how"] == "reset", (cli, srv)
    # every relay of the chain passed the reset on
    for n in RELAYS:
        wait_for(lambda: deltas(c0[n], sb.relay(n).counters())["pipes_reset"] == 1, 5,
                 "%s counts the reset" % n)


def takes_chains(slotd):
    """slotd's "relays json": {control endpoint: takes_chains}."""
    t = json.loads(unix_request(slotd.sock, b"relays json\n"))
    return {x["relay"]: x["takes_chains"] for x in t["relays"]}


def run_testclient(sb, relay, *args, role="client"):
    """slot-testclient in the client host, with a certificate of role:
    (exit code, stderr lines)."""
    a = sb.auth_for(role, "chain-test" + role)
    r = subprocess.run(sb.bed.cmd("client", TESTCLIENT, "--id-key", a["key"], "--id-cert",
                                  a["certificate"], "--ca", a["ca"], "--relay", relay.control,
                                  "--timeout", "20", *args),
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stderr.splitlines()


def test_chain_capability_advertised(sb, slotd):
    """Every relay here takes chains and says so; a client that does not
    ask (an older slotd: KEEPALIVE with OBSERVE alone) is not told."""
    wait_for(lambda: set(takes_chains(slotd).values()) == {True}, 10,
             "slotd to see every relay take chains")
    r1 = sb.relay("relay1")
    rc, err = run_testclient(sb, r1, "--count", "0", "--keepalive", "3")
    assert rc == 0 and any(re.match(r"keepalive answer=\S+ chains=yes$", l) for l in err), err
    rc, err = run_testclient(sb, r1, "--count", "0", "--keepalive", "1")
    assert rc == 0 and any(re.match(r"keepalive answer=\S+ chains=no$", l) for l in err), err
    text = unix_request(slotd.sock, b"relays\n").splitlines()
    assert text[0].split()[-1] == "chains", text
    assert all(l.split()[-1] == "yes" for l in text[1:]), text


def test_chain_through_a_relay_that_disallows_chains(sb, slotd):
    r2 = sb.relay("relay2")
    r2.reload({"chain": {"allow": "no"}})
    try:
        # slotd learns it at the next keepalive
        wait_for(lambda: takes_chains(slotd)[r2.control] is False, 10,
                 "slotd to see that relay2 no longer takes chains")
        assert "relay %s: does not take chains" % r2.control in slotd.log()

        # relay2 first: slotd does not send it the chain
        c0 = counters(sb)
        dec, cli, srv = exchange(sb, slotd, "download", chain(sb, "relay2", "relay3"))
        assert dec["state"] == "direct", dec
        assert cli["rsha"] == srv["sent"] and cli["rbytes"] == SIZE, (cli, srv)
        assert srv["peer"] == sb.ip("client"), srv
        d = changes(c0, sb)
        assert d["relay2"]["chains_requested"] == 0 and d["relay2"]["pipes_total"] == 0, d
        assert d["relay3"]["pipes_total"] == 0, d
        assert "forced chain: relay %s does not take chains" % r2.control in slotd.log()

        # relay2 in the middle: nor through relay1 to it
        c0 = counters(sb)
        dec, cli, srv = exchange(sb, slotd, "download", chain(sb, *RELAYS))
        assert dec["state"] == "direct", dec
        assert cli["rsha"] == srv["sent"] and cli["rbytes"] == SIZE, (cli, srv)
        d = changes(c0, sb)
        assert all(d[n]["chains_requested"] == 0 and d[n]["pipes_total"] == 0
                   for n in RELAYS), d

        # relay2 last: it only gets relay1's plain PIPE_ESTABLISH
        c0 = counters(sb)
        dec, cli, srv = exchange(sb, slotd, "download", chain(sb, "relay1", "relay2"))
        assert_relayed(sb, dec, srv, ("relay1", "relay2"))
        assert cli["rsha"] == srv["sent"] and cli["rbytes"] == SIZE, (cli, srv)
        d = changes(c0, sb)
        assert d["relay1"]["chains_joined"] == 1, d
        assert d["relay2"]["chains_requested"] == 0 and d["relay2"]["pipes_total"] == 1, d

        # A chain request sent to relay2 all the same (a client that does
        # not look): PIPE_FAIL next-hop, EPERM; the connection stays open.
        c0 = counters(sb)
        r3 = sb.relay("relay3")
        rc, err = run_testclient(sb, r2, "--server", "%s:%d" % (sb.ip("server"), 9),
                             "--hop", "%s=%s:%d" % (r3.control, r3.ip, r3.data_port),
                             "--no-connect", "0", "--keepalive", "3")
        assert rc == 3, (rc, err)
        assert any(l.startswith("pipe fail next-hop detail=1 ") for l in err), err
        assert any(re.match(r"keepalive answer=\S+ chains=no$", l) for l in err), err
        d = changes(c0, sb)
        assert d["relay2"]["chains_requested"] == 1 and d["relay2"]["chains_refused"] == 1, d
        assert d["relay3"]["pipes_total"] == 0, d
        assert "chains disabled" in r2.log()
    finally:
        r2.reload({"chain": {"allow": "yes"}})
    wait_for(lambda: takes_chains(slotd)[r2.control] is True, 10,
             "slotd to see that relay2 takes chains again")


def test_chain_pipes_view(sb, slotd):
    """slotctl pipes at the first relay names the next relay and the hops."""
    srv, port = start_server(sb, "stream", 0)
    cli = start_client(sb, slotd, port, "stream", 0, chain(sb, *RELAYS))
    try:
        assert json.loads(cli.stdout.readline())["decision"]["state"] == "relayed"
        line = cli.stdout.readline().strip()
        assert line == "started", (line, logs(sb))
        text = unix_request(sb.relay("relay1").stats, b"pipes\n")
        assert "next" in text and sb.relay("relay2").control in text, text
    finally:
        cli.kill()
        srv.kill()
        cli.communicate()
        srv.communicate()


def test_chain_middle_relay_killed(sb, slotd):
    """relay2 dies (SIGKILL) mid-transfer: its sockets' RSTs reach relay1 and
    relay3, which reset theirs: the client and the server see a reset."""
    srv, port = start_server(sb, "stream", 0)
    cli = start_client(sb, slotd, port, "stream", 0, chain(sb, *RELAYS))
    line = cli.stdout.readline()                # the decision
    dec = json.loads(line)["decision"]
    assert dec["state"] == "relayed", dec
    line = cli.stdout.readline().strip()
    assert line == "started", (line, logs(sb))
    r2 = sb.relay("relay2")
    r2.proc.send_signal(signal.SIGKILL)
    r2.proc.wait(timeout=10)
    c = finish(cli, "client", timeout=60)
    s = finish(srv, "server", timeout=60)
    assert c[-1]["how"] == "reset" and s[0]["how"] == "reset", (c, s, logs(sb))
    assert c[-1]["rbytes"] >= MiB, c
    r2.start()
    slotd.wait_relays_up(3, timeout=20)

VALGRIND = ["valgrind", "--vgdb=no", "--leak-check=full",
            "--errors-for-leak-kinds=definite,indirect", "--error-exitcode=99"]


def check_valgrind(what, rc, vg_log, log):
    text = open(vg_log, errors="replace").read()
    # the first error's stack, after valgrind's banner
    first = text[text.find("\n", text.find("Command:")):][:5000]
    assert rc == 0, "%s exited %r under valgrind:\n%s\n%s" % (what, rc, first, log[-3000:])
    assert re.search(r"ERROR SUMMARY: 0 errors", text), text[-5000:]
    for kind in ("definitely", "indirectly"):
        assert "%s lost" % kind not in text or \
            re.search(r"%s lost: 0 bytes" % kind, text), text[-5000:]


@pytest.mark.serial     # under valgrind: alone (run.sh)
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")
def test_chain_under_valgrind():
    """relay1 (first relay: the links, the asking), relay2 (middle) and slotd
    (the forced chains) under valgrind: chains of two and three, a reset, a
    next relay that is down (NEXT_HOP), links closed when idle, a reload and
    a graceful stop, with no memory errors and no leaks."""
    bed = SlotBed({r: (10, 10) for r in RELAYS}, direct_rtt=80, other_rtt=10, nginx=False,
                  relay_conf=ANY_HOP)
    with bed:
        logs_vg = {}
        for n in ("relay1", "relay2"):
            r = bed.relay(n)
            r.stop()
            logs_vg[n] = os.path.join(bed.dir, "%s.valgrind" % n)
            r.wrapper = VALGRIND + ["--log-file=" + logs_vg[n]]
            r.update({"chain": {"link_idle_timeout": "1s"}})
            r.start(timeout=60)
        vg_slotd = os.path.join(bed.dir, "slotd.valgrind")
        s = bed.slotd([bed.relay(r) for r in RELAYS],
                      wrapper=VALGRIND + ["--log-file=" + vg_slotd])
        s.start(timeout=60)
        s.wait_relays_up(3, timeout=60)
        for names in (RELAYS[:2], RELAYS):
            dec, cli, srv = exchange(bed, s, "download", chain(bed, *names), size=MiB)
            assert_relayed(bed, dec, srv, names)
            assert cli["rsha"] == srv["sent"], (cli, srv)
        dec, cli, srv = exchange(bed, s, "creset", chain(bed, *RELAYS))
        assert cli["how"] == "reset-sent" and srv["how"] == "reset", (cli, srv)
        # links unused for 1 s close
        wait_for(lambda: bed.relay("relay1").counters()["chain_links"] == 0, 30,
                 "relay1's idle link to close")
        # relay3 down: relay2 cannot reach it, relay1 passes that on
        r3 = bed.relay("relay3")
        r3.stop()
        c0 = bed.relay("relay2").counters()
        dec, cli, srv = exchange(bed, s, "download", chain(bed, *RELAYS), size=MiB)
        assert dec["state"] == "direct" and cli["rsha"] == srv["sent"], (dec, cli, srv)
        assert deltas(c0, bed.relay("relay2").counters())["chains_next_hop_failed"] == 1
        r3.start()
        bed.relay("relay1").reload({"chain": {"allow": "no"}})
        dec, cli, srv = exchange(bed, s, "download", chain(bed, *RELAYS[:2]), size=MiB)
        assert dec["state"] == "direct", dec

        for n in ("relay1", "relay2"):
            r = bed.relay(n)
            check_valgrind(n, r.stop(timeout=60), logs_vg[n], r.log())
        check_valgrind("slotd", s.stop(timeout=60), vg_slotd, s.log())


def test_a_relay_has_the_limits_of_a_relay(sb, slotd):
    """A relay asks the next relay for the chains of all its clients, from
    one address: relay2 applies max_pending_per_relay (and relay_control_rate)
    to a peer with a relay certificate, not a client's limits. With one
    pending pipe allowed per client, a client asking for three pipes at once
    gets one; a relay gets all three."""
    r2 = sb.relay("relay2")
    server = "%s:8080" % sb.ip("server")
    r2.reload({"limits": {"max_pending_per_client": "1"}})
    try:
        rc, err = run_testclient(sb, r2, "--server", server, "--count", "3",
                                 "--no-connect", "0.2")
        ok = [l for l in err if l.startswith("pipe ok")]
        fail = [l for l in err if l.startswith("pipe fail")]
        assert len(ok) == 1 and len(fail) == 2 and rc == 3, err
        assert all("client" in l for l in fail), fail
        rc, err = run_testclient(sb, r2, "--server", server, "--count", "3",
                                 "--no-connect", "0.2", role="relay")
        ok = [l for l in err if l.startswith("pipe ok")]
        assert len(ok) == 3 and rc == 0, err
    finally:
        r2.reload({"limits": {"max_pending_per_client": "256"}})



def chain_request(sb, relay, hop_ctl, hop_data, role="client"):
    """One PIPE_ESTABLISH_CHAIN to relay with one next hop: its failure
    detail (an errno), or None if it succeeded."""
    rc, err = run_testclient(sb, relay, "--server", "%s:%d" % (sb.ip("server"), 9),
                             "--hop", "%s=%s" % (hop_ctl, hop_data), "--no-connect", "0",
                             role=role)
    for l in err:
        m = re.match(r"pipe fail next-hop detail=(\d+) ", l)
        if m:
            return int(m.group(1))
    assert rc == 0, (rc, err)
    return None


def test_chain_hop_where_no_server_may_be(sb, slotd):
    """A next relay must be where a server could be: a hop on loopback, at a
    cloud's metadata address or in a network the destination policy does not
    allow is refused (NEXT_HOP, EACCES) before any connection is tried, so
    that a chain cannot reach, or scan, the network behind the relay."""
    r1 = sb.relay("relay1")
    # Something listens on relay1's loopback: it must hear nothing.
    lst = sb.bed.popen("relay1", [PY, "-c", (
        "import socket,select\n"
        "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('127.0.0.1', 17600)); s.listen(8); print('listening', flush=True)\n"
        "n=0\n"
        "while select.select([s,0],[],[],30)[0] == [s]: s.accept(); n+=1\n"
        "print(n, flush=True)\n")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert lst.stdout.readline().strip() == "listening"
        c0 = r1.counters()
        for ctl in ("127.0.0.1:17600", "169.254.169.254:80", "172.31.77.1:7600"):
            data = ctl.rsplit(":", 1)[0] + ":17601"
            assert chain_request(sb, r1, ctl, data) == errno.EACCES, ctl
        d = deltas(c0, r1.counters())
        assert d["chains_requested"] == 3 and d["chains_refused"] == 3, d
        assert r1.counters()["chain_links"] == c0["chain_links"]
        assert "a next relay's address refused by [policy]" in r1.log()
    finally:
        lst.stdin.write("\n")
        lst.stdin.flush()
        out, _ = lst.communicate(timeout=10)
    assert out.strip() == "0", out


def test_without_a_directory_listed_next_hops_refuse_every_chain(sb, slotd):
    """[chain] next_hops = listed (the default) on a relay without a
    [directory]: no listing names the next relays, so every chain is refused
    (NEXT_HOP, ENOENT) before any connection, and the relay says why at
    start (and on reload); next_hops = any takes the same chain again."""
    r1, r2 = sb.relay("relay1"), sb.relay("relay2")
    hop = "%s=%s:%d" % (r2.control, r2.ip, r2.data_port)

    def ask():
        return run_testclient(sb, r1, "--server", "%s:80" % sb.ip("server"), "--hop", hop,
                              "--no-connect", "0")

    rc, err = ask()
    assert rc == 0 and any(l.startswith("pipe ok") for l in err), err
    r1.reload({"chain": {"next_hops": "listed"}})
    try:
        assert "[chain] next_hops = listed and no [directory] urls" in r1.log()
        c0 = r1.counters()
        rc, err = ask()
        assert any(l.startswith("pipe fail next-hop detail=%d " % errno.ENOENT)
                   for l in err), err
        d = deltas(c0, r1.counters())
        assert d["chains_refused"] == 1 and d["pipes_total"] == 0, d
        assert d["chain_links"] == 0, d
        assert "no directory listing yet to find the next relays in" in r1.log()
    finally:
        r1.reload({"chain": {"next_hops": "any"}})
    rc, err = ask()
    assert rc == 0 and any(l.startswith("pipe ok") for l in err), err


def test_chain_links_down_or_beyond_max_links_close(sb, slotd):
    """A link to an address where no relay answers closes once no chain
    waits on it, not after link_idle_timeout (5 min), so that it does not
    retry meanwhile; at [chain] max_links the link unused the longest
    closes for the new one."""
    r1, r2, r3 = (sb.relay(n) for n in RELAYS)
    links = r1.counters()["chain_links"]
    closed = "%s:7999" % sb.ip("server")         # allowed, nothing listens
    assert chain_request(sb, r1, closed, closed) == errno.ECONNREFUSED
    wait_for(lambda: r1.counters()["chain_links"] == links, 5,
             "relay1 to close the link that is down")
    assert "chain link to %s: down and unused, closed" % closed in r1.log()
    # A chain through relay2, then one through relay3 with max_links 1.
    dec, cli, srv = exchange(sb, slotd, "download", chain(sb, "relay1", "relay2"))
    assert_relayed(sb, dec, srv, ("relay1", "relay2"))
    assert cli["rsha"] == srv["sent"] and cli["rbytes"] == SIZE, (cli, srv)
    r1.reload({"chain": {"max_links": "1"}})
    try:
        dec, cli, srv = exchange(sb, slotd, "download", chain(sb, "relay1", "relay3"))
        assert_relayed(sb, dec, srv, ("relay1", "relay3"))
        assert cli["rsha"] == srv["sent"] and cli["rbytes"] == SIZE, (cli, srv)
        assert r1.counters()["chain_links"] == 1
        assert re.search(r"chain link to \S+: closed for a new one \(\[chain\] max_links 1\)",
                         r1.log()), r1.log()[-2000:]
    finally:
        r1.reload({"chain": {"max_links": "256"}})


def test_chain_links_follow_a_new_identity(sb, slotd):
    """relay1 reloads with a new key and certificate: its link to relay2
    held a pair key made with the old key, which relay2 would refuse at the
    next message (the chain failing, NEXT_HOP); the link is dropped at the
    reload and the next chain through relay1 and relay2 goes through."""
    r1 = sb.relay("relay1")
    old = dict(r1.conf["auth"])
    wait_for(lambda: set(takes_chains(slotd).values()) == {True}, 10,
             "slotd to see every relay take chains")
    dec, cli, srv = exchange(sb, slotd, "download", chain(sb, "relay1", "relay2"))
    assert_relayed(sb, dec, srv, ("relay1", "relay2"))
    assert r1.counters()["chain_links"] >= 1
    r1.reload({"auth": sb.auth_for("relay", "relay1-rekeyed", owner="nobody")})
    try:
        assert "control connection lost: our identity changed" in r1.log()
        # relay1 closed slotd's link too: slotd takes its new certificate
        wait_for(lambda: "is 'relay1-rekeyed'" in slotd.log() and
                 takes_chains(slotd).get(r1.control) is True, 15,
                 "slotd's link to relay1 up again")
        c0 = r1.counters()
        dec, cli, srv = exchange(sb, slotd, "download", chain(sb, "relay1", "relay2"))
        assert_relayed(sb, dec, srv, ("relay1", "relay2"))
        assert cli["rsha"] == srv["sent"] and cli["rbytes"] == SIZE, (cli, srv)
        assert deltas(c0, r1.counters())["chains_next_hop_failed"] == 0
    finally:
        n = slotd.log().count("is 'relay1' ")
        r1.reload({"auth": old})
        wait_for(lambda: slotd.log().count("is 'relay1' ") > n and
                 takes_chains(slotd).get(r1.control) is True, 15,
                 "slotd's link to relay1 up again")

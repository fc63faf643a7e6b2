"""Learned initial windows ([pipe] learn_initcwnd, docs/relay.md "Learned
initial windows") on the emulated WAN test bed:

    client --80 ms-- server              (direct)
    client --20-- relay1 --20-- server   the relay wins

A download through slot teaches the relay the client prefix's window; the
next connection from that prefix starts with it: its client leg, idle, shows
that congestion window in ss -ti (the kernel's 10 before). Every download is
checked by sha256. The program is attached to the relay's own cgroup while
the relay runs and to nothing once it is gone, by SIGTERM or SIGKILL; a
restarted relay starts from an empty table. An upload teaches the server
leg the same way. Under valgrind: no memory errors, no definite leaks.
"""

import ctypes
import os
import re
import signal
import struct

import pytest

import slotbed
from slotbed import MiB

HOLD_PORT = 9100           # a server that accepts and says nothing


def need_bpf():
    if os.geteuid() != 0:
        pytest.skip("needs root")
    if tuple(int(x) for x in re.findall(r"\d+", os.uname().release)[:2]) < (6, 5):
        pytest.skip("Linux before 6.5: the map cannot be written without privileges")


# ---- BPF_PROG_QUERY through ctypes: what is attached to a cgroup ----

_libc = ctypes.CDLL(None, use_errno=True)
SYS_BPF = 321               # x86_64
BPF_PROG_QUERY = 16
BPF_CGROUP_SOCK_OPS = 3


def sock_ops_programs(cgroup_dir):
    """How many sock_ops programs are attached to the cgroup (0 if it is gone)."""
    try:
        fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return 0
    try:
        attr = ctypes.create_string_buffer(128)
        struct.pack_into("IIII", attr, 0, fd, BPF_CGROUP_SOCK_OPS, 0, 0)
        if _libc.syscall(SYS_BPF, BPF_PROG_QUERY, attr, 128) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return struct.unpack_from("I", attr, 24)[0]
    finally:
        os.close(fd)


# ---- the bed ----

@pytest.fixture(scope="module")
def sb():
    need_bpf()
    b = slotbed.SlotBed({"relay1": (20, 20)}, direct_rtt=80,
                        relay_conf={"pipe": {"learn_initcwnd": "yes"}}).up()
    try:
        b.nginx.add_file("1M", MiB)
        b.nginx.start()
        b.hold = b.bed.popen("server", ["python3", "-c", HOLD_SERVER, str(HOLD_PORT)])
        yield b
    finally:
        b.hold.kill()
        b.down()


HOLD_SERVER = r"""
import socket, sys, threading, time
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(16)

def hold(c):
    while c.recv(4096):
        pass
    c.close()

while True:
    c, _ = s.accept()
    threading.Thread(target=hold, args=(c,), daemon=True).start()
"""

HOLD_CLIENT = r"""
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
print("connected", flush=True)
time.sleep(60)
"""


@pytest.fixture
def slotd(sb, request):
    s = sb.slotd([sb.relay("relay1")], {"hijack": {"ports": "80, %d" % HOLD_PORT}})
    s.start()
    yield s
    s.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print("---- slotd ----\n%s" % s.log()[-8000:])
        print("---- relay1 ----\n%s" % sb.relay("relay1").log()[-8000:])
    sb.remove_slot_rules()


def download(sb, tag):
    """1 MiB through slot, checked; returns once the relay's pipe has ended
    (curl may finish first) and been looked at."""
    relay = sb.relay("relay1")
    n = relay.counters()["pipes_total"]
    url = sb.nginx.url("1M", query="id=" + tag)
    r = sb.curl(url)
    size, sha = sb.nginx.files["1M"]
    assert r.rc == 0 and r.status == 200, r
    assert r.size == size and r.sha == sha, r
    # through the relay, not direct
    assert sb.nginx.peer_of("id=%s " % tag) == sb.ip("relay1")
    relay.wait_counter("pipes_total", lambda v: v > n)
    relay.wait_counter("pipes_open", lambda v: v == 0)
    return r


def idle_leg_cwnd(sb, relay, leg="client"):
    """Opens a connection through slot to the holding server, says nothing,
    and reads the congestion window of one of its legs in the relay: the
    client leg (the accepted socket on the data port) or the server leg
    (the socket connected to the holding server): the window it starts
    with."""
    filt = "( sport = :%d )" % relay.data_port if leg == "client" else \
        "( dport = :%d )" % HOLD_PORT
    cwnd_re = re.compile(r"cwnd:(\d+)")
    p = sb.bed.popen("client", ["python3", "-c", HOLD_CLIENT, sb.ip("server"), str(HOLD_PORT)],
                     stdout=slotbed.subprocess.PIPE)
    try:
        assert p.stdout.readline().strip() == b"connected"
        found = []

        def one():
            out = sb.bed.run("relay1", "ss", "-Htin", "state", "established", filt).stdout
            found[:] = [int(m.group(1)) for m in cwnd_re.finditer(out)]
            return len(found) == 1
        slotbed.wait_for(one, 10, "the %s leg in relay1" % leg)
        return found[0]
    finally:
        p.kill()
        p.wait()


def learned(relay):
    return relay.initcwnd_table()


def client_prefix(sb, host="client"):
    a = sb.ip(host).split(".")
    return "%s.%s.%s.0/24" % tuple(a[:3])


def own_cgroup_restart(relay, slotd):
    """The relay in a cgroup of its own, as systemd runs it."""
    if relay.cgroup is None:
        relay.stop()
        relay.own_cgroup()
        relay.start()
        slotd.wait_relays_up(1)


# ---- tests ----

def test_not_alone_in_its_cgroup_it_does_not_learn(sb):
    """At the bed's start the relay shares the test's cgroup: the program
    would act on the others' sockets, so it stays off and says why."""
    r = sb.relay("relay1")
    if r.cgroup is not None:
        pytest.skip("already restarted in its own cgroup")
    assert "learn_initcwnd: off:" in r.log()
    assert r.counters()["initcwnd_on"] == 0


def test_second_transfer_starts_with_the_learned_window(sb, slotd):
    r = sb.relay("relay1")
    own_cgroup_restart(r, slotd)
    assert r.counters()["initcwnd_on"] == 1
    assert sock_ops_programs(r.cgroup) == 1
    # Nothing learned yet: the kernel's own window.
    assert learned(r) == {}
    assert idle_leg_cwnd(sb, r) == 10
    c0 = r.counters()
    download(sb, "iw-first")
    table = learned(r)
    iw = table.get(client_prefix(sb))
    assert iw is not None and 10 < iw <= 40, table
    c1 = r.counters()
    assert c1["initcwnd_learned"] > c0["initcwnd_learned"]
    # The next connection from that prefix starts with it.
    assert idle_leg_cwnd(sb, r) == iw
    assert r.counters()["initcwnd_applied"] > c1["initcwnd_applied"]
    # And a download with it arrives whole.
    download(sb, "iw-second")


def test_upload_teaches_the_server_leg(sb, slotd):
    """An upload: the relay sends on the leg it connected to the server, and
    learns the server's prefix; the next connection's server leg starts
    with that window, its client leg with whatever the client's prefix has."""
    r = sb.relay("relay1")
    own_cgroup_restart(r, slotd)
    server = client_prefix(sb, "server")
    if server in learned(r):
        # a download before also wrote a little to the server: start afresh
        r.reload({"pipe": {"learn_initcwnd": "no"}})
        r.reload({"pipe": {"learn_initcwnd": "yes"}})
    assert server not in learned(r)
    assert idle_leg_cwnd(sb, r, leg="server") == 10
    path, sha = sb.random_file("up1M", MiB)
    n = r.counters()["pipes_total"]
    res = sb.upload(path, sb.nginx.upload_url("iw-up"))
    assert res.rc == 0 and res.status in (200, 201, 204), res
    assert slotbed.sha256_file(sb.nginx.upload_path("iw-up")) == sha
    r.wait_counter("pipes_total", lambda v: v > n)
    r.wait_counter("pipes_open", lambda v: v == 0)
    iw = learned(r).get(server)
    assert iw is not None and 10 < iw <= 40, learned(r)
    assert idle_leg_cwnd(sb, r, leg="server") == iw


def test_reload_off_forgets_and_on_again_learns(sb, slotd):
    r = sb.relay("relay1")
    own_cgroup_restart(r, slotd)
    download(sb, "iw-reload-1")
    assert learned(r)
    r.reload({"pipe": {"learn_initcwnd": "no"}})
    assert learned(r) == {}
    assert r.counters()["initcwnd_on"] == 0
    assert idle_leg_cwnd(sb, r) == 10
    download(sb, "iw-reload-2")
    assert learned(r) == {}
    # On again without a restart: the program stayed attached.
    r.reload({"pipe": {"learn_initcwnd": "yes"}})
    assert r.counters()["initcwnd_on"] == 1
    download(sb, "iw-reload-3")
    assert client_prefix(sb) in learned(r)


def test_nothing_left_after_exit_or_sigkill(sb, slotd):
    r = sb.relay("relay1")
    own_cgroup_restart(r, slotd)
    cg = r.cgroup
    download(sb, "iw-kill-1")
    assert learned(r) and sock_ops_programs(cg) == 1
    # SIGKILL: no clean-up code runs; the link dies with the process.
    r.proc.send_signal(signal.SIGKILL)
    r.proc.wait(10)
    slotbed.wait_for(lambda: sock_ops_programs(cg) == 0, 5, "the program to be detached")
    # Restarted: attached once (not twice), and nothing remembered.
    r.start()
    slotd.wait_relays_up(1)
    assert sock_ops_programs(cg) == 1
    assert learned(r) == {}
    assert idle_leg_cwnd(sb, r) == 10
    # SIGTERM: detached as well, and the cgroup removable.
    download(sb, "iw-kill-2")
    r.proc.send_signal(signal.SIGTERM)
    r.proc.wait(15)
    assert sock_ops_programs(cg) == 0
    r.stop()
    assert not os.path.exists(cg)
    r.start()
    slotd.wait_relays_up(1)


@pytest.mark.serial     # under valgrind: alone (run.sh)
@pytest.mark.skipif(slotbed.shutil.which("valgrind") is None, reason="valgrind not installed")
def test_under_valgrind(sb, slotd):
    """Loading, learning, a reload off and on, forgetting and SIGTERM under
    valgrind: no memory errors, no definite leaks."""
    r = sb.relay("relay1")
    own_cgroup_restart(r, slotd)
    r.stop()
    vg_log = os.path.join(sb.dir, "relay-iw.valgrind")
    base = list(r.wrapper)
    r.wrapper = base + ["valgrind", "--vgdb=no", "--leak-check=full",
                        "--errors-for-leak-kinds=definite,indirect", "--error-exitcode=99",
                        "--log-file=" + vg_log]
    try:
        r.start(timeout=60)
        slotd.wait_relays_up(1, timeout=30)
        assert r.counters()["initcwnd_on"] == 1
        download(sb, "iw-vg-1")
        assert client_prefix(sb) in learned(r)
        r.reload({"pipe": {"learn_initcwnd": "no"}}, timeout=20)
        r.reload({"pipe": {"learn_initcwnd": "yes", "initcwnd_max": 30}}, timeout=20)
        download(sb, "iw-vg-2")
        assert learned(r).get(client_prefix(sb)) == 30
        rc = r.stop(timeout=60)
    finally:
        r.wrapper = base
    log = open(vg_log, errors="replace").read()
    assert rc == 0, "slot-relayd exited %r under valgrind:\n%s" % (rc, log[-5000:])
    assert re.search(r"ERROR SUMMARY: 0 errors", log), log[-5000:]
    assert "definitely lost" not in log or re.search(r"definitely lost: 0 bytes", log), log
    r.start()
    slotd.wait_relays_up(1)

#!/usr/bin/python3
"""The emulated WAN test bed: N host namespaces on one router namespace.

    host i  10.A.i.2/24    <-veth->  10.A.i.1/24    router  (i = 1..N)
            fd00:A:i::2/64           fd00:A:i::1/64          (A, i in hex)

Every host is dual-stack unless its "family" says "ipv4" or "ipv6". A LAN
(topology key "lans") hangs further namespaces off a host, its gateway:

    LAN host m  192.168.k.(m+1)/24  <-veth->  bridge in the gateway
                fd01:A:k::(m+1)/64            192.168.k.1, fd01:A:k::1

The router forwards between the hosts (ip_forward); every forwarded packet goes
through NFQUEUE to slot-wanem, which holds it for the one-way delay of its
(source, destination) pair and applies that pair's loss; tbf on both ends of a
host's veth sets its access rate (host egress = up, router egress = down).
Everything is built from one topology description (JSON, see docs/testbed.md).

Every name carries a per-run tag "slw<pid><letter>" (the pid of the process
that owns the topology, a letter per topology of that process): namespaces
"<tag>-router" and "<tag>-<host>", veth ends "<tag>h<i>" (host side) and
"<tag>r<i>" (router side), LAN veth ends "<tag>l<j>" (LAN host side) and
"<tag>g<j>" (gateway side) and bridges "<tag>b<k>", the run directory
/tmp/<tag>-*. Leftovers of runs
whose process is gone are swept at the start of every run (only this
pattern: the relay tests' "sltit" and the benchmarks' "slb"/"sb" names are
never touched). Teardown runs on every exit path: down(), the context
manager, atexit, SIGINT/SIGTERM.

Library use:

    import topo
    with topo.Testbed({"hosts": ["a", "b"], "pairs": [{"a": "a", "b": "b", "rtt": 80}]}) as bed:
        bed.run("a", "ping", "-c", "3", bed.ip("b"))

Command line:

    topo.py up FILE [--detach]     build; foreground until ^C/SIGTERM, or --detach
    topo.py down TAG | --all-dead  remove one topology (e.g. slw1234a), or every dead one
    topo.py plan FILE              print the commands `up` would run (no changes made)
    topo.py cities "Paris,Tokyo"   print a topology with the measured RTTs of these cities
    topo.py list                   topologies present, alive or dead
"""

import argparse
import atexit
import csv
import ctypes
import itertools
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

PREFIX = "slw"
TAG_RE = re.compile(r"^%s(\d+)[a-z]$" % PREFIX)
NAME_RE = re.compile(r"^%s(\d+)[a-z]-" % PREFIX)            # namespaces, run directories
LINK_RE = re.compile(r"^%s(\d+)[a-z][hrlgb]\d+$" % PREFIX)   # veth ends, bridges
HOST_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WANEM = os.path.join(os.environ.get("SLOT_BUILD", os.path.join(ROOT, "build")), "slot-wanem")
MAX_HOSTS = 254
MAX_LAN_HOSTS = 253             # per LAN: 192.168.k.2 ..
MAX_LANS = 255
FAMILIES = ("dual", "ipv4", "ipv6")

# Link-layer bytes per full TCP segment on a 1500-byte MTU veth with timestamps:
# 1448 payload + 32 TCP + 20 IP + 14 Ethernet. tbf counts the Ethernet frame.
MSS = 1448
WIRE_PER_SEGMENT = 1514


# ---------------------------------------------------------------- helpers

def sh(*args, check=True, timeout=60, **kw):
    """Runs a command, output captured as text. Raises with the output on failure."""
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True,
                       timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s%s" % (" ".join(map(str, args)), r.returncode,
                                                  r.stdout, r.stderr))
    return r


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_ns_pids(ns):
    r = sh("ip", "netns", "pids", ns, check=False)
    for p in r.stdout.split():
        try:
            os.kill(int(p), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def _netns_list():
    r = sh("ip", "netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.split()]


def _root_links():
    r = sh("ip", "-o", "link", "show", check=False)
    out = []
    for line in r.stdout.splitlines():
        parts = line.split(":")
        if len(parts) >= 2:
            out.append(parts[1].strip().split("@")[0])
    return out


def remove_tag(tag):
    """Removes everything named after tag (slw<pid><letter>): processes in its
    namespaces, the namespaces (their veths go with them), root-namespace links,
    run directories. Returns the names removed."""
    if not TAG_RE.match(tag):
        raise ValueError("not a test bed tag: %r (want %s<pid><letter>)" % (tag, PREFIX))
    removed = []
    for ns in _netns_list():
        if ns.startswith(tag + "-"):
            kill_ns_pids(ns)
    for ns in _netns_list():
        if ns.startswith(tag + "-"):
            sh("ip", "netns", "del", ns, check=False)
            removed.append(ns)
    for name in _root_links():
        if LINK_RE.match(name) and name[:len(tag)] == tag and name[len(tag)] in "hrlgb":
            sh("ip", "link", "del", name, check=False)
            removed.append(name)
    tmp = tempfile.gettempdir()
    for d in os.listdir(tmp):
        if d.startswith(tag + "-"):
            shutil.rmtree(os.path.join(tmp, d), ignore_errors=True)
            removed.append(d)
    return removed


def tags_present():
    """{tag: owner pid alive?} for every test bed with something left on the machine."""
    tags = set()
    for ns in _netns_list():
        m = NAME_RE.match(ns)
        if m:
            tags.add(ns.split("-")[0])
    for name in _root_links():
        if LINK_RE.match(name):
            tags.add(name[:-len(re.match(r".*?([hrlgb]\d+)$", name).group(1))])
    for d in os.listdir(tempfile.gettempdir()):
        if NAME_RE.match(d):
            tags.add(d.split("-")[0])
    return {t: pid_alive(int(TAG_RE.match(t).group(1))) for t in tags if TAG_RE.match(t)}


def sweep():
    """Removes the leftovers of test beds whose owning process is gone."""
    removed = []
    for tag, alive in sorted(tags_present().items()):
        if not alive:
            removed += remove_tag(tag)
    return removed


_RATE_UNITS = {
    "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
    "kibit": 1024, "mibit": 1024 ** 2, "gibit": 1024 ** 3,
    "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9,
    "kibps": 8 * 1024, "mibps": 8 * 1024 ** 2, "gibps": 8 * 1024 ** 3,
}


def parse_rate(v):
    """A rate in bit/s: a number is Mbit/s; a string uses tc's units
    ("50mbit", "1gbit", "12500kbps" = bytes). None/0/"" means unlimited."""
    if v is None or v == "" or v == 0:
        return None
    if isinstance(v, bool):
        raise ValueError("bad rate %r" % v)
    if isinstance(v, (int, float)):
        if v < 0:
            raise ValueError("bad rate %r" % v)
        return int(round(v * 1e6))
    m = re.match(r"^\s*([0-9.]+)\s*([a-zA-Z]*)\s*$", str(v))
    if not m or m.group(2).lower() not in _RATE_UNITS:
        raise ValueError("bad rate %r (a number of Mbit/s, or e.g. \"50mbit\", \"1gbit\")" % v)
    return int(round(float(m.group(1)) * _RATE_UNITS[m.group(2).lower()]))


def parse_size(v):
    """Bytes: a number, or a string with k/m suffix (1024-based, as tc)."""
    if v is None:
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return int(v)
    m = re.match(r"^\s*([0-9.]+)\s*([kKmM]?)[bB]?\s*$", str(v))
    if not m:
        raise ValueError("bad size %r" % v)
    return int(float(m.group(1)) * {"": 1, "k": 1024, "m": 1024 ** 2}[m.group(2).lower()])


# ---------------------------------------------------------------- real RTT data

def data_dir():
    """The RTT data directory: $SLOT_DATA, else <repo>/data, <repo>/../shared/data,
    /work/shared/data."""
    for d in (os.environ.get("SLOT_DATA"), os.path.join(ROOT, "data"),
              os.path.join(ROOT, "..", "shared", "data"), "/work/shared/data"):
        if d and os.path.isdir(os.path.join(d, "wondernetwork")):
            return d
    raise RuntimeError("RTT data not found: no wondernetwork/ in $SLOT_DATA, data/ in the "
                       "repository, ../shared/data beside it or /work/shared/data (set "
                       "SLOT_DATA to the directory holding it)")


def read_matrix_file(path):
    """A plain NxN RTT matrix: one row per line, whitespace-separated
    milliseconds, no header ('#' comments and blank lines ignored). A negative,
    non-finite ("inf", "nan") or "-" entry is missing (None)."""
    rows = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            row = []
            for tok in line.replace(",", " ").split():
                try:
                    v = float(tok)
                except ValueError:
                    if tok in ("-", "NA", "na"):
                        v = None
                    else:
                        raise ValueError("%s: bad matrix entry %r" % (path, tok))
                if v is not None and (not math.isfinite(v) or v < 0):
                    v = None
                row.append(v)
            rows.append(row)
    for r in rows:
        if len(r) != len(rows):
            raise ValueError("%s: not a square matrix (%d rows, a row of %d)"
                             % (path, len(rows), len(r)))
    return rows


def _norm(s):
    return re.sub(r"[^a-z0-9]", "", s.lower())


class CityData:
    """The WonderNetwork servers and pings (data/README.md). rtt(a, b) is the
    symmetric mean of the two directions' avg (or the one that exists)."""

    def __init__(self, directory=None):
        d = os.path.join(directory or data_dir(), "wondernetwork")
        self.servers = {}
        with open(os.path.join(d, "servers-2020-07-19.csv"), newline="") as f:
            for row in csv.DictReader(f):
                self.servers[int(row["id"])] = row
        self.avg = {}
        with open(os.path.join(d, "pings-2020-07-19-2020-07-20-grouped.csv"), newline="") as f:
            for row in csv.DictReader(f):
                s, t = int(row["source"]), int(row["destination"])
                if s != t:
                    self.avg[(s, t)] = float(row["avg"])
        self._index = {}
        for sid, row in self.servers.items():
            for key in (row["name"], row["title"], row["location"]):
                if key:
                    self._index.setdefault(_norm(key), set()).add(sid)

    def find(self, city):
        """Server id of a city: its name, title or location (case, spaces and
        punctuation ignored), or "id:N"."""
        if city.startswith("id:"):
            sid = int(city[3:])
            if sid not in self.servers:
                raise KeyError("no server with id %d" % sid)
            return sid
        ids = self._index.get(_norm(city))
        if not ids:
            near = sorted(k for k in self._index if _norm(city)[:4] and k.startswith(_norm(city)[:4]))
            raise KeyError("no city %r in the data%s" % (city, (" (close: %s)" % ", ".join(near[:8]))
                                                          if near else ""))
        if len(ids) > 1:
            raise KeyError("city %r is ambiguous: ids %s (use id:N)" % (city, sorted(ids)))
        return next(iter(ids))

    def rtt(self, a, b):
        v = [x for x in (self.avg.get((a, b)), self.avg.get((b, a))) if x is not None]
        return sum(v) / len(v) if v else None

    def host_name(self, sid):
        return _norm(self.servers[sid]["name"])[:32]


def city_topology(cities, data=None, rate=None, cc=None):
    """A topology description (dict) for these cities, with the measured RTTs
    written out as explicit pairs. Pairs with no data are left to the default
    and listed under "_missing"."""
    data = data or CityData()
    ids = [data.find(c.strip()) for c in cities if c.strip()]
    if len(set(ids)) != len(ids):
        raise ValueError("a city is given twice")
    names = [data.host_name(i) for i in ids]
    spec = {"_source": "WonderNetwork pings 2020-07-19/20, rtt = mean of both directions' avg (ms)",
            "hosts": [], "pairs": []}
    for sid, n in zip(ids, names):
        r = data.servers[sid]
        spec["hosts"].append({"name": n, "_city": "%s, %s (id %d)" % (r["title"], r["country"], sid)})
    missing = []
    for i, j in itertools.combinations(range(len(ids)), 2):
        v = data.rtt(ids[i], ids[j])
        if v is None:
            missing.append([names[i], names[j]])
        else:
            spec["pairs"].append({"a": names[i], "b": names[j], "rtt": round(v, 3)})
    if missing:
        spec["_missing"] = missing
    hd = {}
    if rate:
        hd["rate"] = rate
    if cc:
        hd["sysctls"] = {"net.ipv4.tcp_congestion_control": cc}
    if hd:
        spec["host_defaults"] = hd
    return spec


# ---------------------------------------------------------------- topology

class HostSpec:
    def __init__(self, name, index):
        self.name = name
        self.index = index            # 1..N: subnet 10.A.index.0/24 (a LAN host: 1.. in its LAN)
        self.family = "dual"          # "dual", "ipv4" or "ipv6"
        self.lan = None               # a LAN host: its LanSpec
        self.rate_up = None           # bit/s, host -> router (tbf on the host's veth)
        self.rate_down = None         # bit/s, router -> host (tbf on the router's veth)
        self.queue_ms = 50.0          # tbf queue, in ms at its rate
        self.burst = None             # tbf bucket, bytes (default: see tbf_args)
        self.gso = True               # False: gso_max_segs 1 on the host veth
        self.sysctls = {}

    @property
    def v4(self):
        return self.family != "ipv6"

    @property
    def v6(self):
        return self.family != "ipv4"


class LanSpec:
    """A LAN behind a host: hosts on a bridge in the gateway's namespace, the
    gateway routing them (masquerade: behind its address, as a home NAT)."""

    def __init__(self, name, number, gateway, masquerade):
        self.name = name
        self.number = number          # k: 192.168.k.0/24, fd01:A:k::/64
        self.gateway = gateway        # HostSpec
        self.masquerade = masquerade
        self.hosts = []               # HostSpec, index m = 1..: 192.168.k.(m+1)
        self.v4, self.v6 = gateway.v4, gateway.v6


_TOP_KEYS = {"hosts", "cities", "pairs", "matrix", "default", "host_defaults", "router_sysctls",
             "wanem", "subnet", "data", "lans"}
_HOST_KEYS = {"name", "rate", "rate_up", "rate_down", "queue_ms", "burst", "gso", "sysctls",
              "family"}
_LAN_KEYS = {"name", "gateway", "hosts", "masquerade"}
_LAN_HOST_KEYS = {"name", "family", "sysctls"}
_WANEM_KEYS = {"enabled", "queue", "maxlen", "seed", "verbose", "binary"}


def _check_keys(d, allowed, where):
    if not isinstance(d, dict):
        raise ValueError("%s: want an object with keys %s" % (where, ", ".join(sorted(allowed))))
    bad = [k for k in d if k not in allowed and not k.startswith("_")]
    if bad:
        raise ValueError("%s: unknown key(s) %s (allowed: %s)" % (where, ", ".join(sorted(bad)),
                                                                ", ".join(sorted(allowed))))


class Topology:
    """A parsed topology description. Delays are one-way, in ms; loss is a
    probability per direction. Keys starting with "_" are comments."""

    def __init__(self):
        self.hosts = []
        self.lans = []                # LanSpec
        self.delay = {}               # (i, j) host indices -> one-way ms
        self.loss = {}                # (i, j) -> probability
        self.default_delay = 0.0
        self.default_loss = 0.0
        self.router_sysctls = {}
        self.wanem = {"enabled": True, "queue": 0, "maxlen": None, "seed": None,
                      "verbose": False, "binary": None}
        self.subnet = None            # the A of 10.A.i.x; None: derived from the tag

    # -- loading --

    @classmethod
    def load(cls, path):
        with open(path) as f:
            try:
                d = json.load(f)
            except ValueError as e:
                raise ValueError("%s: %s" % (path, e))
        return cls.from_dict(d, os.path.dirname(os.path.abspath(path)))

    @classmethod
    def from_dict(cls, d, base_dir="."):
        if not isinstance(d, dict):
            raise ValueError("a topology is a JSON object")
        _check_keys(d, _TOP_KEYS, "topology")
        t = cls()
        hd = d.get("host_defaults", {})
        _check_keys(hd, _HOST_KEYS - {"name"}, "host_defaults")
        data = None
        entries = list(d.get("hosts", []))
        cities = d.get("cities", [])
        if isinstance(cities, str):
            cities = cities.split(",")
        city_ids = {}
        if cities:
            data = CityData(d.get("data"))
            for c in cities:
                sid = data.find(c.strip())
                entries.append(data.host_name(sid))
                city_ids[data.host_name(sid)] = sid
        if not entries:
            raise ValueError("topology: no hosts")
        if len(entries) > MAX_HOSTS:
            raise ValueError("topology: %d hosts, at most %d" % (len(entries), MAX_HOSTS))
        for n, e in enumerate(entries, 1):
            if isinstance(e, str):
                e = {"name": e}
            _check_keys(e, _HOST_KEYS, "host %r" % e.get("name"))
            h = HostSpec(e.get("name"), n)
            if not isinstance(h.name, str) or not HOST_NAME_RE.match(h.name) or h.name == "router":
                raise ValueError("bad host name %r (lower case letters, digits, _ and -, at most "
                                 "32, not \"router\")" % h.name)
            if any(x.name == h.name for x in t.hosts):
                raise ValueError("host %r given twice" % h.name)
            m = dict(hd)
            m.update(e)
            both = parse_rate(m.get("rate"))
            h.rate_up = parse_rate(m["rate_up"]) if "rate_up" in m else both
            h.rate_down = parse_rate(m["rate_down"]) if "rate_down" in m else both
            if "queue_ms" in m:
                h.queue_ms = float(m["queue_ms"])
            h.burst = parse_size(m.get("burst"))
            h.gso = bool(m.get("gso", True))
            h.sysctls = dict(hd.get("sysctls", {}))
            h.sysctls.update(e.get("sysctls", {}))
            h.family = _family(m.get("family", "dual"), "host %r" % h.name)
            t.hosts.append(h)
        t._parse_lans(d.get("lans", []))
        idx = {h.name: h.index - 1 for h in t.hosts}

        def hi(name, where):
            if name not in idx:
                raise ValueError("%s: no host %r" % (where, name))
            return idx[name]

        dflt = d.get("default", {})
        _check_keys(dflt, {"rtt", "delay", "loss"}, "default")
        if "rtt" in dflt:
            t.default_delay = _ms(dflt["rtt"], "default rtt") / 2
        if "delay" in dflt:
            t.default_delay = _ms(dflt["delay"], "default delay")
        t.default_loss = _prob(dflt.get("loss", 0), "default loss")
        # 1. cities: measured RTTs
        if city_ids:
            names = list(city_ids)
            for a, b in itertools.combinations(names, 2):
                v = data.rtt(city_ids[a], city_ids[b])
                if v is not None:
                    t.set_rtt(idx[a], idx[b], v)
        # 2. matrix (hosts in order): one-way i->j = M[i][j] / 2, so that the RTT
        #    is the mean of M[i][j] and M[j][i]
        m = d.get("matrix")
        if m is not None:
            if isinstance(m, str):
                m = read_matrix_file(os.path.join(base_dir, m))
            if len(m) != len(t.hosts) or any(len(r) != len(t.hosts) for r in m):
                raise ValueError("matrix: want %dx%d (the hosts, in order)" % ((len(t.hosts),) * 2))
            for i, row in enumerate(m):
                for j, v in enumerate(row):
                    if i != j and v is not None and v >= 0 and math.isfinite(v):
                        t.delay[(i, j)] = v / 2
        # 3. pairs, in order, each overriding what came before
        for n, p in enumerate(d.get("pairs", [])):
            where = "pairs[%d]" % n
            if "from" in p or "to" in p:
                _check_keys(p, {"from", "to", "delay", "loss"}, where)
                i, j = hi(p.get("from"), where), hi(p.get("to"), where)
                dirs = [(i, j)]
                if "delay" in p:
                    t.delay[(i, j)] = _ms(p["delay"], where)
            else:
                _check_keys(p, {"a", "b", "rtt", "loss"}, where)
                i, j = hi(p.get("a"), where), hi(p.get("b"), where)
                dirs = [(i, j), (j, i)]
                if "rtt" in p:
                    t.set_rtt(i, j, _ms(p["rtt"], where))
            if i == j:
                raise ValueError("%s: a host with itself" % where)
            if "loss" in p:
                for k in dirs:
                    t.loss[k] = _prob(p["loss"], where)
        rs = d.get("router_sysctls", {})
        t.router_sysctls = dict(rs)
        w = d.get("wanem", {})
        if w is False:
            w = {"enabled": False}
        _check_keys(w, _WANEM_KEYS, "wanem")
        t.wanem.update(w)
        if "subnet" in d:
            t.subnet = int(d["subnet"])
            if not 0 <= t.subnet <= 255:
                raise ValueError("subnet: 0..255 (the A of 10.A.i.x)")
        return t

    def _parse_lans(self, lans):
        if not isinstance(lans, list):
            raise ValueError("lans: want a list of {\"name\", \"gateway\", \"hosts\", "
                             "\"masquerade\"}")
        if len(lans) > MAX_LANS:
            raise ValueError("lans: %d, at most %d" % (len(lans), MAX_LANS))
        names = {h.name for h in self.hosts}
        for k, l in enumerate(lans, 1):
            where = "lans[%d]" % (k - 1)
            _check_keys(l, _LAN_KEYS, where)
            name = l.get("name", "lan%d" % k)
            if not isinstance(name, str) or not HOST_NAME_RE.match(name):
                raise ValueError("%s: bad name %r" % (where, name))
            where = "lan %r" % name
            if any(x.name == name for x in self.lans):
                raise ValueError("%s given twice" % where)
            gw = [h for h in self.hosts if h.name == l.get("gateway")]
            if not gw:
                raise ValueError("%s: gateway %r is not a host (want one of %s)"
                                 % (where, l.get("gateway"), ", ".join(h.name for h in self.hosts)))
            masq = l.get("masquerade", True)
            if not isinstance(masq, bool):
                raise ValueError("%s: masquerade is true or false" % where)
            lan = LanSpec(name, k, gw[0], masq)
            entries = l.get("hosts")
            if not isinstance(entries, list) or not entries:
                raise ValueError("%s: hosts: want a list of host names" % where)
            if len(entries) > MAX_LAN_HOSTS:
                raise ValueError("%s: %d hosts, at most %d" % (where, len(entries), MAX_LAN_HOSTS))
            for m, e in enumerate(entries, 1):
                if isinstance(e, str):
                    e = {"name": e}
                _check_keys(e, _LAN_HOST_KEYS, "%s host" % where)
                h = HostSpec(e.get("name"), m)
                if not isinstance(h.name, str) or not HOST_NAME_RE.match(h.name) or \
                        h.name == "router":
                    raise ValueError("%s: bad host name %r" % (where, h.name))
                if h.name in names:
                    raise ValueError("%s: host %r given twice" % (where, h.name))
                names.add(h.name)
                # a LAN has the families of its gateway; a host may narrow them
                want = _family(e.get("family", "dual"), "%s host %r" % (where, h.name))
                v4, v6 = lan.v4 and want != "ipv6", lan.v6 and want != "ipv4"
                if not (v4 or v6):
                    raise ValueError("%s: host %r: family %s, but the gateway %r is %s"
                                     % (where, h.name, want, gw[0].name, gw[0].family))
                h.family = "dual" if v4 and v6 else "ipv4" if v4 else "ipv6"
                h.sysctls = dict(e.get("sysctls", {}))
                h.lan = lan
                lan.hosts.append(h)
            self.lans.append(lan)
        if sum(len(l.hosts) for l in self.lans) > MAX_HOSTS:
            raise ValueError("lans: at most %d LAN hosts in all" % MAX_HOSTS)

    # -- queries and changes --

    def index(self, name):
        for h in self.hosts:
            if h.name == name:
                return h.index - 1
        raise KeyError("no host %r" % name)

    def lan_host(self, name):
        for l in self.lans:
            for h in l.hosts:
                if h.name == name:
                    return h
        return None

    def delay_index(self, name):
        """The index whose delays a host's packets get: its own, or a LAN
        host's gateway's (routed: slot-wanem maps its addresses to the
        gateway; masqueraded: they carry the gateway's address)."""
        h = self.lan_host(name)
        return self.index(h.lan.gateway.name if h is not None else name)

    def set_rtt(self, i, j, rtt_ms):
        self.delay[(i, j)] = self.delay[(j, i)] = rtt_ms / 2

    def one_way(self, i, j):
        return self.delay.get((i, j), self.default_delay)

    def rtt(self, a, b):
        """Configured RTT between two hosts (names or indices), ms. A LAN host
        has its gateway's; within a LAN, and to its gateway, none."""
        i = a if isinstance(a, int) else self.delay_index(a)
        j = b if isinstance(b, int) else self.delay_index(b)
        if i == j:
            return 0.0
        return self.one_way(i, j) + self.one_way(j, i)

    def pair_loss(self, i, j):
        return self.loss.get((i, j), self.default_loss)

    def matrix_text(self, addrs):
        """The slot-wanem matrix file (format in wanem_matrix.h). addrs[i]:
        the addresses of host i (in host order; a string or a list: IPv4,
        IPv6, a routed LAN's), which all get host i's delays. Host i is
        "h<i+1>" in the file."""
        out = ["# slot-wanem matrix, written by tests/testbed/topo.py:",
               "# host hN ADDR...; SRC DST ONE_WAY_DELAY_MS [LOSS]",
               "default %s %s" % (_fmt(self.default_delay), _fmt(self.default_loss))]
        n = len(self.hosts)
        for i, h in enumerate(self.hosts):
            a = [addrs[i]] if isinstance(addrs[i], str) else list(addrs[i])
            out.append("# h%d = %s" % (i + 1, h.name))
            for c in range(0, len(a), 8):          # a line holds at most 14
                out.append("host h%d %s" % (i + 1, " ".join(a[c:c + 8])))
        for i in range(n):
            for j in range(n):
                if i == j:
                    continue
                if (i, j) not in self.delay and (i, j) not in self.loss:
                    continue
                out.append("h%d h%d %s %s" % (i + 1, j + 1, _fmt(self.one_way(i, j)),
                                              _fmt(self.pair_loss(i, j))))
        return "\n".join(out) + "\n"

    def congestion_controls(self):
        return sorted({h.sysctls["net.ipv4.tcp_congestion_control"] for h in self.hosts
                       if "net.ipv4.tcp_congestion_control" in h.sysctls})


def _ms(v, where):
    try:
        v = float(v)
    except (TypeError, ValueError):
        raise ValueError("%s: bad time %r (ms)" % (where, v))
    if not math.isfinite(v) or v < 0:
        raise ValueError("%s: bad time %r (ms)" % (where, v))
    return v


def _family(v, where):
    if v not in FAMILIES:
        raise ValueError("%s: family %r (want \"dual\", \"ipv4\" or \"ipv6\")" % (where, v))
    return v


def _prob(v, where):
    try:
        v = float(v)
    except (TypeError, ValueError):
        raise ValueError("%s: bad loss %r" % (where, v))
    if not 0 <= v <= 1:
        raise ValueError("%s: loss %r not in 0..1" % (where, v))
    return v


def _fmt(x):
    return ("%.6f" % x).rstrip("0").rstrip(".") or "0"


def tbf_args(rate, queue_ms, burst=None):
    """tbf parameters for a rate in bit/s: burst = the larger of 2 ms at the rate
    and 10 full frames; limit = queue_ms at the rate plus the burst."""
    bps = rate / 8
    burst = burst or max(int(bps * 0.002), 10 * WIRE_PER_SEGMENT)
    limit = int(bps * queue_ms / 1000) + burst
    return ["rate", _fmt_rate(rate), "burst", str(burst), "limit", str(limit)]


def _fmt_rate(bps):
    for unit, f in (("gbit", 10 ** 9), ("mbit", 10 ** 6), ("kbit", 10 ** 3)):
        if bps % f == 0:
            return "%d%s" % (bps // f, unit)
    return "%dbit" % bps


# ---------------------------------------------------------------- the running test bed

class Host:
    """A host up: ip/gw (IPv4, None if it has none), ip6/gw6 (IPv6, None if
    none), dev (its end of the link), rdev (the other end: in the router, or
    for a LAN host in its gateway)."""

    def __init__(self, spec, ns, ip, gw, dev, rdev, ip6=None, gw6=None):
        self.name, self.index = spec.name, spec.index
        self.spec = spec
        self.ns, self.ip, self.gw, self.dev, self.rdev = ns, ip, gw, dev, rdev
        self.ip6, self.gw6 = ip6, gw6
        self.lan = spec.lan           # LanSpec for a LAN host, else None

    def __repr__(self):
        return "Host(%s %s in %s)" % (self.name, " ".join(a for a in (self.ip, self.ip6) if a),
                                      self.ns)


_live = []                      # test beds up in this process
_live_lock = threading.Lock()
_old_handlers = {}
_serial = itertools.count()


def _on_signal(sig, frame):
    for bed in list(_live):
        bed.down()
    old = _old_handlers.get(sig)
    if callable(old):
        old(sig, frame)
        return
    if sig == signal.SIGINT and old != signal.SIG_IGN:
        raise KeyboardInterrupt
    if old == signal.SIG_IGN:
        return
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)


def _register(bed):
    with _live_lock:
        if not _live:
            atexit.register(_atexit)
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    _old_handlers[sig] = signal.signal(sig, _on_signal)
                except ValueError:      # not the main thread: atexit and down() only
                    pass
        _live.append(bed)


def _unregister(bed):
    with _live_lock:
        if bed in _live:
            _live.remove(bed)
        if not _live:
            for sig, h in list(_old_handlers.items()):
                try:
                    if signal.getsignal(sig) is _on_signal:
                        signal.signal(sig, h)
                except (ValueError, TypeError):
                    pass
            _old_handlers.clear()
            try:
                atexit.unregister(_atexit)
            except Exception:
                pass


def _atexit():
    for bed in list(_live):
        bed.down()


class PingResult:
    def __init__(self, sent, received, rtts, summary_min=None):
        self.sent, self.received, self.rtts = sent, received, rtts
        self._min = summary_min

    @property
    def loss(self):
        return 1 - self.received / self.sent if self.sent else float("nan")

    @property
    def min(self):
        return self._min if self._min is not None else (min(self.rtts) if self.rtts else None)

    @property
    def median(self):
        return statistics.median(self.rtts) if self.rtts else None

    def __repr__(self):
        return "PingResult(sent=%d received=%d min=%s median=%s)" % (
            self.sent, self.received, self.min, self.median)


CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def in_netns(nsname, fn):
    """Calls fn() on a thread that has entered the namespace nsname and returns
    its result (os.setns is Python 3.12+: libc's). Sockets keep the namespace
    they were created in, so fn may return one for use from any thread."""
    out = {}

    def body():
        try:
            fd = os.open("/run/netns/" + nsname, os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    e = ctypes.get_errno()
                    raise OSError(e, "setns: " + os.strerror(e))
            finally:
                os.close(fd)
            out["v"] = fn()
        except BaseException as e:   # handed to the caller
            out["e"] = e

    th = threading.Thread(target=body)
    th.start()
    th.join()
    if "e" in out:
        raise out["e"]
    return out["v"]


class Testbed:
    """One topology, built by up() and removed by down() (or the context manager).

    topo: a Topology, a dict in the file format, or a path to a JSON file.
    wanem: the slot-wanem binary (default build/slot-wanem, or $SLOT_BUILD/slot-wanem)."""

    def __init__(self, topo, wanem=None, keep_dir=None):
        if isinstance(topo, str):
            topo = Topology.load(topo)
        elif isinstance(topo, dict):
            topo = Topology.from_dict(topo)
        self.topo = topo
        self.pid = os.getpid()
        s = next(_serial)
        if s >= 26:
            raise RuntimeError("at most 26 test beds per process")
        self.tag = "%s%d%s" % (PREFIX, self.pid, chr(ord("a") + s))
        if len(self.tag) + 1 + len(str(MAX_HOSTS)) > 15:
            raise RuntimeError("interface names would exceed 15 characters")
        self.subnet = topo.subnet if topo.subnet is not None else 1 + (self.pid * 26 + s) % 250
        self.router_ns = "%s-router" % self.tag
        self.hosts = {}               # the hosts on the router
        for h in topo.hosts:
            i = h.index
            v4, v6 = "10.%d.%d." % (self.subnet, i), "fd00:%x:%x::" % (self.subnet, i)
            self.hosts[h.name] = Host(h, "%s-%s" % (self.tag, h.name),
                                      v4 + "2" if h.v4 else None, v4 + "1" if h.v4 else None,
                                      "%sh%d" % (self.tag, i), "%sr%d" % (self.tag, i),
                                      v6 + "2" if h.v6 else None, v6 + "1" if h.v6 else None)
        self.lan_hosts = {}           # the hosts on LANs behind them
        j = 0
        for lan in topo.lans:
            v4, v6 = "192.168.%d." % lan.number, "fd01:%x:%x::" % (self.subnet, lan.number)
            for h in lan.hosts:
                j += 1
                m = h.index + 1
                self.lan_hosts[h.name] = Host(h, "%s-%s" % (self.tag, h.name),
                                              v4 + str(m) if h.v4 else None,
                                              v4 + "1" if h.v4 else None,
                                              "%sl%d" % (self.tag, j), "%sg%d" % (self.tag, j),
                                              "%s%x" % (v6, m) if h.v6 else None,
                                              v6 + "1" if h.v6 else None)
        self.wanem_bin = topo.wanem.get("binary") or wanem or WANEM
        self.keep_dir = keep_dir if keep_dir is not None else bool(os.environ.get("SLOT_KEEP"))
        self.dir = None
        self.matrix_path = None
        self.stats_path = None
        self.wanem_log = None
        self.wanem = None
        self.procs = []
        self.made = []                # namespaces created
        self._state = "new"
        self._lock = threading.Lock()
        self._log_f = None

    # -- plan: the commands, in order --

    def nfqueue_rule(self):
        return ["FORWARD", "-j", "NFQUEUE", "--queue-num", str(self.topo.wanem["queue"])]

    def has_v6(self):
        return any(h.spec.v6 for h in self.hosts.values())

    def lan_bridge(self, lan):
        return "%sb%d" % (self.tag, lan.number)

    def lan_subnets(self, lan):
        """(IPv4 /24 or None, IPv6 /64 or None) of a LAN."""
        return ("192.168.%d.0/24" % lan.number if lan.v4 else None,
                "fd01:%x:%x::/64" % (self.subnet, lan.number) if lan.v6 else None)

    def wanem_argv(self):
        w = self.topo.wanem
        a = [self.wanem_bin, "--queue", str(w["queue"]), "--matrix", self.matrix_path,
             "--stats", self.stats_path]
        if w.get("maxlen"):
            a += ["--maxlen", str(w["maxlen"])]
        if w.get("seed") is not None:
            a += ["--seed", str(w["seed"])]
        if w.get("verbose"):
            a += ["--verbose"]
        return a

    def plan(self):
        """[(kind, args)]: ("run", argv), ("write", (path, text)), ("wanem", argv)."""
        steps = []
        run = lambda *a: steps.append(("run", [str(x) for x in a]))
        r = self.router_ns
        need = [cc for cc in self.topo.congestion_controls() if cc not in allowed_ccs()]
        if need:
            run("sysctl", "-qw", "net.ipv4.tcp_allowed_congestion_control=%s"
                % " ".join(allowed_ccs() + need))
        # IPv6 addresses usable at once: no duplicate address detection
        nodad = ["net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"]

        def new_ns(ns, *sysctls):
            run("ip", "netns", "add", ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
            run("ip", "netns", "exec", ns, "sysctl", "-qw", *(nodad + list(sysctls)))

        def addrs(ns, dev, ip, ip6):
            if ip:
                run("ip", "-n", ns, "addr", "add", ip + "/24", "dev", dev)
            if ip6:
                run("ip", "-n", ns, "addr", "add", ip6 + "/64", "dev", dev, "nodad")
            else:
                run("ip", "netns", "exec", ns, "sysctl", "-qw",
                    "net.ipv6.conf.%s.disable_ipv6=1" % dev)

        def routes(h):
            if h.ip:
                run("ip", "-n", h.ns, "route", "add", "default", "via", h.gw)
            if h.ip6:
                run("ip", "-n", h.ns, "-6", "route", "add", "default", "via", h.gw6)

        new_ns(r, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1",
               *["%s=%s" % kv for kv in self.topo.router_sysctls.items()])
        for h in self.hosts.values():
            s = h.spec
            new_ns(h.ns)
            run("ip", "link", "add", h.dev, "netns", h.ns, "type", "veth",
                "peer", "name", h.rdev, "netns", r)
            addrs(h.ns, h.dev, h.ip, h.ip6)
            addrs(r, h.rdev, h.gw, h.gw6)
            if not s.gso:
                run("ip", "-n", h.ns, "link", "set", h.dev, "gso_max_segs", "1")
            run("ip", "-n", h.ns, "link", "set", h.dev, "up")
            run("ip", "-n", r, "link", "set", h.rdev, "up")
            routes(h)
            if s.rate_up:
                run("tc", "-n", h.ns, "qdisc", "replace", "dev", h.dev, "root", "tbf",
                    *tbf_args(s.rate_up, s.queue_ms, s.burst))
            if s.rate_down:
                run("tc", "-n", r, "qdisc", "replace", "dev", h.rdev, "root", "tbf",
                    *tbf_args(s.rate_down, s.queue_ms, s.burst))
            if s.sysctls:
                run("ip", "netns", "exec", h.ns, "sysctl", "-qw",
                    *["%s=%s" % kv for kv in s.sysctls.items()])
        for lan in self.topo.lans:
            g = self.hosts[lan.gateway.name]
            br = self.lan_bridge(lan)
            run("ip", "netns", "exec", g.ns, "sysctl", "-qw", "net.ipv4.ip_forward=1",
                "net.ipv6.conf.all.forwarding=1")
            run("ip", "-n", g.ns, "link", "add", br, "type", "bridge")
            net4, net6 = self.lan_subnets(lan)
            addrs(g.ns, br, net4 and net4.replace(".0/24", ".1"),
                  net6 and net6.replace("::/64", "::1"))
            run("ip", "-n", g.ns, "link", "set", br, "up")
            for hs in lan.hosts:
                h = self.lan_hosts[hs.name]
                new_ns(h.ns)
                run("ip", "link", "add", h.dev, "netns", h.ns, "type", "veth",
                    "peer", "name", h.rdev, "netns", g.ns)
                addrs(h.ns, h.dev, h.ip, h.ip6)
                run("ip", "-n", g.ns, "link", "set", h.rdev, "master", br, "up")
                run("ip", "-n", h.ns, "link", "set", h.dev, "up")
                routes(h)
                if hs.sysctls:
                    run("ip", "netns", "exec", h.ns, "sysctl", "-qw",
                        *["%s=%s" % kv for kv in hs.sysctls.items()])
            if lan.masquerade:
                # a home NAT: the rest of the bed sees only the gateway's address
                for tool, net in (("iptables", net4), ("ip6tables", net6)):
                    if net:
                        run("ip", "netns", "exec", g.ns, tool, "-w", "-t", "nat", "-A",
                            "POSTROUTING", "-s", net, "-o", g.dev, "-j", "MASQUERADE")
            else:
                # routed: the router reaches the LAN through the gateway
                if net4:
                    run("ip", "-n", r, "route", "add", net4, "via", g.ip)
                if net6:
                    run("ip", "-n", r, "-6", "route", "add", net6, "via", g.ip6)
        if self.topo.wanem["enabled"]:
            steps.append(("write", (self.matrix_path, self.matrix_text())))
            run("ip", "netns", "exec", r, "iptables", "-w", "-t", "mangle", "-A", *self.nfqueue_rule())
            if self.has_v6():
                run("ip", "netns", "exec", r, "ip6tables", "-w", "-t", "mangle", "-A",
                    *self.nfqueue_rule())
            steps.append(("wanem", ["ip", "netns", "exec", r] + self.wanem_argv()))
        return steps

    def matrix_text(self):
        """A host's addresses, and those of the LAN hosts routed behind it,
        share its delays."""
        addrs = {h.name: [a for a in (h.ip, h.ip6) if a] for h in self.hosts.values()}
        for h in self.lan_hosts.values():
            if not h.lan.masquerade:
                addrs[h.lan.gateway.name] += [a for a in (h.ip, h.ip6) if a]
        return self.topo.matrix_text([addrs[h.name] for h in self.topo.hosts])

    def script(self):
        """The plan as a shell script (what a reader would type)."""
        out = ["# test bed %s: %d hosts, 10.%d.i.2 (host) / 10.%d.i.1 (router), "
               "fd00:%x:i::2 / ::1" % (self.tag, len(self.hosts), self.subnet, self.subnet,
                                       self.subnet)]
        for kind, a in self.plan():
            if kind == "run":
                out.append(" ".join(shlex.quote(x) for x in a))
            elif kind == "write":
                out.append("cat > %s <<'EOF'\n%sEOF" % (a[0], a[1]))
            else:
                out.append(" ".join(shlex.quote(x) for x in a) + " &")
        return "\n".join(out) + "\n"

    # -- life cycle --

    def up(self):
        with self._lock:
            if self._state != "new":
                raise RuntimeError("test bed %s is %s" % (self.tag, self._state))
            self._state = "up"
        sweep()
        _register(self)
        try:
            self.dir = tempfile.mkdtemp(prefix=self.tag + "-")
            os.chmod(self.dir, 0o755)
            self.matrix_path = os.path.join(self.dir, "matrix")
            self.stats_path = os.path.join(self.dir, "wanem.sock")
            self.wanem_log = os.path.join(self.dir, "wanem.log")
            if self.topo.wanem["enabled"] and not os.access(self.wanem_bin, os.X_OK):
                raise RuntimeError("%s is missing: build it first (make build/slot-wanem)"
                                   % self.wanem_bin)
            for kind, a in self.plan():
                if kind == "run":
                    if a[:3] == ["ip", "netns", "add"]:
                        self.made.append(a[3])
                    sh(*a)
                elif kind == "write":
                    _write_atomic(*a)
                else:
                    self._start_wanem(a)
            self._wait_links()
        except BaseException:
            self.down()
            raise
        return self

    def _wait_links(self, timeout=10):
        """Waits until every link of the bed is operationally up. The kernel
        reports a veth's carrier up to a second late (linkwatch), and until
        then IPv6 holds the link's packets (IPv4 does not wait for it)."""
        if not self.has_v6():
            return
        want = {self.router_ns: [h.rdev for h in self.hosts.values()]}
        for h in list(self.hosts.values()) + list(self.lan_hosts.values()):
            want.setdefault(h.ns, []).append(h.dev)
        for h in self.lan_hosts.values():
            want.setdefault(self.hosts[h.lan.gateway.name].ns, []).append(h.rdev)
        end = time.monotonic() + timeout
        while want:
            for ns in list(want):
                out = sh("ip", "-n", ns, "-o", "link", "show", check=False).stdout
                up = {l.split(":")[1].strip().split("@")[0] for l in out.splitlines()
                      if len(l.split(":")) > 2 and "state UP" in l}
                want[ns] = [d for d in want[ns] if d not in up]
                if not want[ns]:
                    del want[ns]
            if not want:
                return
            if time.monotonic() > end:
                raise RuntimeError("links not up after %ds: %s" % (timeout, want))
            time.sleep(0.05)

    def _start_wanem(self, argv, timeout=10):
        self._log_f = open(self.wanem_log, "ab")
        self.wanem = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log_f,
                                      stderr=self._log_f)
        self.procs.append(self.wanem)
        end = time.monotonic() + timeout
        while True:
            if self.wanem.poll() is not None:
                raise RuntimeError("slot-wanem exited with %d at start:\n%s"
                                   % (self.wanem.returncode, self.wanem_output()))
            try:
                self.counters(timeout=1)
                return
            except OSError:
                pass
            if time.monotonic() > end:
                raise RuntimeError("slot-wanem not answering on %s after %ds:\n%s"
                                   % (self.stats_path, timeout, self.wanem_output()))
            time.sleep(0.02)

    def down(self):
        """Stops our processes, deletes the namespaces (and with them the veths,
        tbf qdiscs and iptables rule), removes the run directory. Idempotent."""
        with self._lock:
            if self._state in ("down", "new"):
                self._state = "down"
                return
            self._state = "down"
        try:
            if self.wanem is not None and self.wanem.poll() is None:
                self.wanem.terminate()
                try:
                    self.wanem.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            for p in self.procs:
                if p.poll() is None:
                    try:
                        p.kill()
                        p.wait(5)
                    except (ProcessLookupError, subprocess.TimeoutExpired):
                        pass
            for ns in self.made:
                kill_ns_pids(ns)
            for ns in self.made:
                sh("ip", "netns", "del", ns, check=False)
            for name in _root_links():       # none unless a creation went half way
                if name.startswith(self.tag) and LINK_RE.match(name):
                    sh("ip", "link", "del", name, check=False)
            if self._log_f:
                self._log_f.close()
            if self.dir and self.keep_dir:
                print("testbed: run directory kept in %s" % self.dir, file=sys.stderr)
            elif self.dir:
                shutil.rmtree(self.dir, ignore_errors=True)
        finally:
            _unregister(self)

    def __enter__(self):
        if self._state == "new":
            self.up()
        return self

    def __exit__(self, *exc):
        self.down()
        return False

    # -- names --

    def host(self, name):
        """The Host of a host on the router or on a LAN."""
        h = self.hosts.get(name) or self.lan_hosts.get(name)
        if h is None:
            raise KeyError("no host %r (hosts: %s)" % (name, ", ".join(
                list(self.hosts) + list(self.lan_hosts))))
        return h

    def ip(self, name):
        """A host's IPv4 address (an error for an IPv6-only host: see ip6, addr)."""
        h = self.host(name)
        if h.ip is None:
            raise ValueError("host %r has no IPv4 address (family %s): use ip6()"
                             % (name, h.spec.family))
        return h.ip

    def ip6(self, name):
        """A host's IPv6 address (an error for an IPv4-only host)."""
        h = self.host(name)
        if h.ip6 is None:
            raise ValueError("host %r has no IPv6 address (family %s): use ip()"
                             % (name, h.spec.family))
        return h.ip6

    def addr(self, name, family=None):
        """A host's address: family 4 or 6, or None: IPv4 if it has one, else IPv6."""
        if family not in (None, 4, 6):
            raise ValueError("family %r: 4, 6 or None" % family)
        h = self.host(name)
        if family == 6 or (family is None and h.ip is None):
            return self.ip6(name)
        return self.ip(name)

    def is_host(self, name):
        return name in self.hosts or name in self.lan_hosts

    def ns(self, name):
        if name == "router":
            return self.router_ns
        return self.host(name).ns

    def in_ns(self, name, fn):
        """fn() run inside host name's namespace (see in_netns)."""
        return in_netns(self.ns(name), fn)

    def rtt(self, a, b):
        return self.topo.rtt(a, b)

    # -- commands in the namespaces --

    def cmd(self, name, *args):
        return ["ip", "netns", "exec", self.ns(name)] + [str(a) for a in args]

    def run(self, name, *args, check=True, timeout=60, **kw):
        return sh(*self.cmd(name, *args), check=check, timeout=timeout, **kw)

    def popen(self, name, args, **kw):
        """A background process in a namespace; killed at down() if still running."""
        kw.setdefault("stdin", subprocess.DEVNULL)
        p = subprocess.Popen(self.cmd(name, *args), **kw)
        self.procs = [q for q in self.procs if q.poll() is None] + [p]
        return p

    def wait_listen(self, name, port, proc=None, timeout=10):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError("process in %s exited with %d before listening on %d"
                                   % (name, proc.returncode, port))
            out = self.run(name, "ss", "-Hltn", check=False).stdout
            if any(l.split()[3].endswith(":%d" % port) for l in out.splitlines() if len(l.split()) > 3):
                return
            time.sleep(0.05)
        raise RuntimeError("nothing listens on port %d in %s" % (port, name))

    # -- measurements --

    def ping(self, src, dst, count=5, interval=0.2, wait=None, size=None, preload=None,
             family=None):
        """ping from host src to dst (a host name or an address). family: 4
        or 6 (default: that of an address; for a host name IPv4 if both ends
        have it, else IPv6). wait: seconds to wait for late replies after the
        last request (default: 1 s + 3x the configured RTT). preload: requests
        in flight (ping -l); by default enough for the interval to hold when
        it is shorter than the RTT (ping otherwise waits for replies)."""
        if self.is_host(dst):
            if family is None:
                family = 4 if self.host(src).ip and self.host(dst).ip else 6
            dip = self.addr(dst, family)
        else:
            dip = dst
            family = family or (6 if ":" in dst else 4)
        rtt = self.rtt(src, dst) if self.is_host(dst) else None     # ms
        if wait is None:
            wait = 1 + 3 * (rtt if rtt is not None else 1000) / 1000
        a = ["ping", "-%d" % family, "-n", "-c", str(count), "-i", str(interval),
             "-W", "%g" % wait]
        if preload is None and rtt is not None and interval * 1000 < rtt:
            preload = min(1000, 2 * int(rtt / (interval * 1000)) + 5)
        if preload and preload > 1:
            a += ["-l", str(preload)]
        if size is not None:
            a += ["-s", str(size)]
        deadline = count * interval + wait + 5
        r = self.run(src, *(a + [dip]), check=False, timeout=deadline + 10)
        sent = received = 0
        rtts = []
        smin = None
        for line in r.stdout.splitlines():
            m = re.search(r"time=([0-9.]+) ms", line)
            if m and "bytes from" in line:
                rtts.append(float(m.group(1)))
            m = re.match(r"(\d+) packets transmitted, (\d+) (?:packets )?received", line)
            if m:
                sent, received = int(m.group(1)), int(m.group(2))
            m = re.match(r"rtt min/avg/max/mdev = ([0-9.]+)/", line)
            if m:
                smin = float(m.group(1))
        if sent == 0:
            raise RuntimeError("ping %s -> %s: %s%s" % (src, dst, r.stdout[-2000:], r.stderr))
        return PingResult(sent, received, rtts, smin)

    def iperf3_server(self, name, port=5201):
        """A one-off iperf3 server on the host's address; returns the process."""
        p = self.popen(name, ["iperf3", "-s", "-1", "-B", self.addr(name), "-p", str(port)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.wait_listen(name, port, p)
        return p

    def iperf3_client(self, name, dst, port=5201, seconds=10, args=(), timeout=None):
        """Runs iperf3 -c from host name to dst (host name or address): the JSON result."""
        dip = self.addr(dst) if self.is_host(dst) else dst
        a = ["iperf3", "-J", "-c", dip, "-p", str(port), "-t", "%g" % seconds] + list(args)
        r = self.run(name, *a, check=False, timeout=timeout or seconds + 60)
        try:
            j = json.loads(r.stdout)
        except ValueError:
            raise RuntimeError("iperf3 %s -> %s: exit %d: %s %s" % (name, dst, r.returncode,
                                                                 r.stdout[-2000:], r.stderr))
        if "error" in j:
            raise RuntimeError("iperf3 %s -> %s: %s" % (name, dst, j["error"]))
        return j

    def iperf3(self, client, server, port=5201, seconds=10, args=()):
        """iperf3 from host client to host server; the JSON result."""
        p = self.iperf3_server(server, port)
        try:
            return self.iperf3_client(client, server, port, seconds, args)
        finally:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()

    # -- the emulator --

    def restart_wanem(self, timeout=10):
        """Stops slot-wanem (SIGTERM: it releases what it holds) and starts it
        again, with fresh counters. Forwarded traffic is dropped meanwhile."""
        if self.wanem is not None and self.wanem.poll() is None:
            self.wanem.terminate()
            try:
                self.wanem.wait(timeout)
            except subprocess.TimeoutExpired:
                self.wanem.kill()
                self.wanem.wait()
        if self._log_f:
            self._log_f.close()
            self._log_f = None
        self._start_wanem(["ip", "netns", "exec", self.router_ns] + self.wanem_argv(), timeout)

    def wanem_running(self):
        return self.wanem is not None and self.wanem.poll() is None

    def wanem_output(self):
        try:
            with open(self.wanem_log, errors="replace") as f:
                return f.read()[-20000:]
        except (OSError, TypeError):
            return ""

    def counters(self, timeout=5):
        """slot-wanem's counters, from its stats socket: {name: number}."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(self.stats_path)
            s.sendall(b"counters\n")
            chunks = []
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
        finally:
            s.close()
        out = {}
        for line in b"".join(chunks).decode(errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 2:
                try:
                    out[parts[0]] = int(parts[1])
                except ValueError:
                    try:
                        out[parts[0]] = float(parts[1])
                    except ValueError:
                        out[parts[0]] = parts[1]
        return out

    def set_pair(self, a, b, rtt=None, loss=None, one_way=False):
        """Changes a pair in the matrix (call reload() to apply). rtt: ms
        (one_way=True: the one-way delay a->b only); loss: per direction."""
        i, j = self.topo.index(a), self.topo.index(b)
        dirs = [(i, j)] if one_way else [(i, j), (j, i)]
        if rtt is not None:
            if one_way:
                self.topo.delay[(i, j)] = float(rtt)
            else:
                self.topo.set_rtt(i, j, float(rtt))
        if loss is not None:
            for k in dirs:
                self.topo.loss[k] = float(loss)

    def reload(self, timeout=5):
        """Rewrites the matrix file and sends SIGHUP; waits until the reloads
        counter moves."""
        before = self.counters().get("reloads")
        _write_atomic(self.matrix_path, self.matrix_text())
        self.wanem.send_signal(signal.SIGHUP)
        if before is None:
            return
        end = time.monotonic() + timeout
        while self.counters().get("reloads", 0) <= before:
            if not self.wanem_running():
                raise RuntimeError("slot-wanem exited on reload:\n%s" % self.wanem_output())
            if time.monotonic() > end:
                raise RuntimeError("slot-wanem did not count the reload")
            time.sleep(0.02)

    def nfqueue(self, on):
        """Adds (on) or removes the NFQUEUE rules: off = plain kernel forwarding."""
        for tool in ("iptables", "ip6tables") if self.has_v6() else ("iptables",):
            self.run("router", tool, "-w", "-t", "mangle", "-A" if on else "-D",
                     *self.nfqueue_rule())


def _write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.rename(tmp, path)


def allowed_ccs():
    with open("/proc/sys/net/ipv4/tcp_allowed_congestion_control") as f:
        return f.read().split()


def mathis_bps(rtt_s, p, mss=MSS):
    """Mathis et al.: throughput of a Reno flow = 1.22 * MSS / (RTT * sqrt(p)), bit/s."""
    return 1.22 * mss * 8 / (rtt_s * math.sqrt(p))


# ---------------------------------------------------------------- command line

def _cmd_up(args):
    topo = Topology.load(args.file)
    if os.geteuid() != 0:
        sys.exit("topo.py: must run as root")
    if args.detach:
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid:
            os.close(wfd)
            msg = b""
            while True:
                b = os.read(rfd, 65536)
                if not b:
                    break
                msg += b
            text = msg.decode(errors="replace")
            if not text.startswith("ok\n"):
                sys.stderr.write(text or "topo.py: the topology holder died\n")
                sys.exit(1)
            sys.stdout.write(text[3:])
            return
        os.close(rfd)
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
    bed = Testbed(topo, wanem=args.wanem)
    try:
        bed.up()
    except BaseException as e:
        if args.detach:
            os.write(wfd, ("topo.py: %s\n" % e).encode())
            os._exit(1)
        raise
    info = _describe(bed)
    if args.detach:
        os.write(wfd, ("ok\n" + info).encode())
        os.close(wfd)
    else:
        sys.stdout.write(info + "(^C or SIGTERM removes it)\n")
        sys.stdout.flush()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.is_set():
        if bed.topo.wanem["enabled"] and not bed.wanem_running():
            sys.stderr.write("topo.py: slot-wanem exited:\n%s\n" % bed.wanem_output())
            break
        stop.wait(1)
    bed.down()


def _describe(bed):
    lines = ["tag %s" % bed.tag, "router %s" % bed.router_ns]
    for h in bed.hosts.values():
        lines.append("host %s %s %s %s" % (h.name, h.ns, h.ip or "-", h.ip6 or "-"))
    for h in bed.lan_hosts.values():
        lines.append("lanhost %s %s %s %s lan=%s gateway=%s %s" % (
            h.name, h.ns, h.ip or "-", h.ip6 or "-", h.lan.name, h.lan.gateway.name,
            "masquerade" if h.lan.masquerade else "routed"))
    if bed.topo.wanem["enabled"]:
        lines.append("matrix %s" % bed.matrix_path)
        lines.append("stats %s" % bed.stats_path)
        lines.append("wanem_pid %d" % bed.wanem.pid)
    return "\n".join(lines) + "\n"


def _cmd_down(args):
    if args.all_dead:
        for n in sweep():
            print("removed %s" % n)
        return
    if not args.tag:
        sys.exit("topo.py down: give a tag (slw<pid><letter>) or --all-dead")
    m = TAG_RE.match(args.tag)
    if not m:
        sys.exit("topo.py down: %r is not a test bed tag (slw<pid><letter>)" % args.tag)
    pid = int(m.group(1))
    if pid_alive(pid) and pid != os.getpid():
        os.kill(pid, signal.SIGTERM)       # its owner tears it down
        end = time.monotonic() + 15
        while time.monotonic() < end and args.tag in tags_present():
            time.sleep(0.1)
    for n in remove_tag(args.tag):
        print("removed %s" % n)
    print("%s: down" % args.tag)


def _cmd_list(args):
    for tag, alive in sorted(tags_present().items()):
        print("%s %s" % (tag, "alive" if alive else "dead"))


def _cmd_plan(args):
    bed = Testbed(Topology.load(args.file), wanem=args.wanem)
    bed.dir = os.path.join(tempfile.gettempdir(), bed.tag + "-RUNDIR")
    bed.matrix_path = os.path.join(bed.dir, "matrix")
    bed.stats_path = os.path.join(bed.dir, "wanem.sock")
    sys.stdout.write(bed.script())


def dump_json(spec):
    """JSON with one host or pair per line."""
    out = []
    for k, v in spec.items():
        if isinstance(v, list) and v:
            out.append(" %s: [\n%s\n ]" % (json.dumps(k), ",\n".join("  " + json.dumps(x)
                                                                     for x in v)))
        else:
            out.append(" %s: %s" % (json.dumps(k), json.dumps(v)))
    return "{\n" + ",\n".join(out) + "\n}\n"


def _cmd_cities(args):
    spec = city_topology(args.cities.split(","), CityData(args.data), rate=args.rate, cc=args.cc)
    sys.stdout.write(dump_json(spec))
    for a, b in spec.get("_missing", []):
        print("topo.py: no RTT data between %s and %s (left to the default)" % (a, b),
              file=sys.stderr)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Emulated WAN test bed (docs/testbed.md)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("up", help="build a topology from a JSON file")
    p.add_argument("file")
    p.add_argument("--detach", action="store_true",
                   help="leave it up in the background (remove with `down TAG`)")
    p.add_argument("--wanem", default=None, help="slot-wanem binary (default %s)" % WANEM)
    p.set_defaults(fn=_cmd_up)
    p = sub.add_parser("down", help="remove a topology, or all whose owner is gone")
    p.add_argument("tag", nargs="?")
    p.add_argument("--all-dead", action="store_true")
    p.set_defaults(fn=_cmd_down)
    p = sub.add_parser("list", help="topologies present")
    p.set_defaults(fn=_cmd_list)
    p = sub.add_parser("plan", help="print the commands `up` runs")
    p.add_argument("file")
    p.add_argument("--wanem", default=None)
    p.set_defaults(fn=_cmd_plan)
    p = sub.add_parser("cities", help="print a topology of real cities (measured RTTs)")
    p.add_argument("cities", help='comma-separated, e.g. "Paris,Tokyo,New York"')
    p.add_argument("--rate", default=None, help="access rate of every host (e.g. 100mbit)")
    p.add_argument("--cc", default=None, help="tcp_congestion_control of every host")
    p.add_argument("--data", default=None, help="data directory (default $SLOT_DATA, else "
                   "data/ in the repository, else ../shared/data beside it, else "
                   "/work/shared/data)")
    p.set_defaults(fn=_cmd_cities)
    args = ap.parse_args(argv)
    try:
        args.fn(args)
    except (ValueError, KeyError, RuntimeError, OSError) as e:
        sys.exit("topo.py: %s" % (e.args[0] if isinstance(e, KeyError) and e.args else e))


if __name__ == "__main__":
    main()

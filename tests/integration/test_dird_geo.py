"""slot-dird's grouping over real HTTP on 60 cities of the WonderNetwork RTT
data (/work/shared/data/wondernetwork, or $SLOT_DATA/wondernetwork).

The cities: servers with a continent and coordinates in the servers CSV whose
pings cover nearly every other server both ways (pings as source and as
destination to at least 240 of the 250 servers), a fixed quota per continent
(the file's codes: North America 16, South America 8, Europe and Asia 24,
Oceania 6, Africa 6), picked within each continent evenly spaced in
longitude order, and registered in that order (continent code, then
longitude). Each city is a relay (198.18.0.N:7600) that reports, in
microseconds, the data's avg RTT from it (source) to every other city
(destination); missing directions are not reported (2 of the 3540 are
missing, so those pairs count one way). The RTT of a pair is the mean of both
reports, or the one there is, as the directory computes it
(docs/directory.md, Grouping).

Checked, after the directory has regrouped with every report (measured
figures in brackets; the data and the clustering are deterministic):

- with max_intra_rtt = 50 ms (the default of etc/dird.conf): every pair of
  cities in one group within 50 ms [49.9 ms at most]; at least 80% of the
  groups of two or more cities on one continent of the servers CSV (whose
  code 3 is Europe and Asia together) [9 of 10: Palermo, Algiers and Tunis
  share one]; the mean RTT inside groups under a quarter of the mean RTT
  between cities of different groups [28 ms against 192 ms]; neither
  scattered nor one blob: at least 6 groups of two or more holding at least
  30 cities, fewer than 40 groups, none over 20 cities [29 groups, 10 of
  two or more holding 41 cities, largest 11];
- a relay registered without any RTT report is a group of its own;
- with max_intra_rtt = 0 (no bound) in a second directory: continent-sized
  groups, 2 to 6 of them and under a third as many as with the bound, the
  largest of 15 cities or more, a pair inside a group over 100 ms [4 groups
  of 29, 22, 6 and 3 cities, widest pair 434 ms].

A run takes about two seconds.
"""

import csv
import itertools
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testbed"))
import topo  # noqa: E402

from test_dird import dirds, wait_for  # noqa: F401 (dirds: the fixture, starts a Dird)

NCITIES = 60
QUOTA = {"1": 16, "2": 8, "3": 24, "4": 6, "5": 6}     # servers CSV continent codes
CONTINENT = {"1": "N. America", "2": "S. America", "3": "Europe+Asia", "4": "Oceania",
             "5": "Africa"}
BOUND_MS = 50
CHUNK = 250         # report entries per call: ~195 bytes each within max_body 64k
LONE = "198.18.255.1:7600"


def data_dir():
    try:
        return os.path.join(topo.data_dir(), "wondernetwork")
    except RuntimeError:
        return None


class Cities:
    """The 60 relays: addr -> server id, name and continent; rep[(a, b)] the
    rtt_us a reports about b; rtt(a, b) the directory's view in ms."""

    def __init__(self, d):
        servers = {}
        with open(os.path.join(d, "servers-2020-07-19.csv"), newline="") as f:
            for row in csv.DictReader(f):
                servers[int(row["id"])] = row
        avg = {}
        with open(os.path.join(d, "pings-2020-07-19-2020-07-20-grouped.csv"), newline="") as f:
            for row in csv.DictReader(f):
                s, t = int(row["source"]), int(row["destination"])
                if s != t:
                    avg[(s, t)] = float(row["avg"])
        out_n, in_n = {}, {}
        for s, t in avg:
            out_n[s] = out_n.get(s, 0) + 1
            in_n[t] = in_n.get(t, 0) + 1
        ok = [i for i, r in servers.items()
              if r["continent"] in QUOTA and r["latitude"] and r["longitude"]
              and out_n.get(i, 0) >= 240 and in_n.get(i, 0) >= 240]
        picked = []
        for cont, q in sorted(QUOTA.items()):
            c = sorted((float(servers[i]["longitude"]), i) for i in ok
                       if servers[i]["continent"] == cont)
            assert len(c) >= q, (cont, len(c))
            picked += [c[int((k + 0.5) * len(c) / q)][1] for k in range(q)]
        assert len(picked) == NCITIES == len(set(picked))
        self.addrs = ["198.18.0.%d:7600" % (k + 1) for k in range(NCITIES)]
        self.sid = dict(zip(self.addrs, picked))
        self.name = {a: servers[i]["title"] for a, i in self.sid.items()}
        self.cont = {a: servers[i]["continent"] for a, i in self.sid.items()}
        self.rep = {}
        for a, b in itertools.permutations(self.addrs, 2):
            v = avg.get((self.sid[a], self.sid[b]))
            if v is not None:
                self.rep[(a, b)] = int(round(v * 1000))

    def rtt(self, a, b):
        v = [self.rep[k] for k in ((a, b), (b, a)) if k in self.rep]
        return sum(v) / len(v) / 1000.0 if v else None


@pytest.fixture(scope="module")
def cities():
    d = data_dir()
    if d is None:
        pytest.skip("no wondernetwork data under $SLOT_DATA or /work/shared/data")
    return Cities(d)


def populate(d, c, lone=False):
    """Registers the cities (and, if asked, LONE), sends every report, waits
    for a regroup that saw them all; returns the listing."""
    for a in c.addrs:
        d.register(a, 7601)
    if lone:
        d.register(LONE, 7601)
    for a in c.addrs:
        rtts = [(b, c.rep[(a, b)]) for b in c.addrs if (a, b) in c.rep]
        for i in range(0, len(rtts), CHUNK):
            part = rtts[i:i + CHUNK]
            assert d.report(a, part) == {"ok": True, "accepted": len(part)}
    # Regroups run on a thread of their own. One may have been running
    # while the reports came in: wait until one has finished since r0 with
    # nothing pending and none running (under the directory's lock, so
    # the last one saw every report). Repeating one entry (same value) makes
    # sure a regroup follows.
    r0 = d.counters()["regroups"]
    a, b = c.addrs[0], c.addrs[1]
    assert d.report(a, [(b, c.rep[(a, b)])])["accepted"] == 1

    def settled():
        ctr = d.counters()
        return (ctr["regroups"] > r0 and not ctr["regroup_pending"]
                and not ctr["regroup_running"])
    wait_for(settled, timeout=10, what="a regroup")
    listing = d.list()
    ctr = d.counters()
    assert ctr["regroup_errors"] == 0 and ctr["report_entries"] >= len(c.rep), ctr
    assert ctr["groups"] == len({r["group"] for r in listing["relays"]}), ctr
    return listing


def groups_of(listing):
    g = {}
    for r in listing["relays"]:
        g.setdefault(r["group"], []).append(r["relay"])
    return sorted(g.values(), key=len, reverse=True)


def measure(c, groups):
    """Figures of a grouping of the cities (pair RTTs as the directory's)."""
    gi = {a: k for k, g in enumerate(groups) for a in g}
    intra, inter = [], []
    for a, b in itertools.combinations(c.addrs, 2):
        v = c.rtt(a, b)
        if v is not None:
            (intra if gi[a] == gi[b] else inter).append(v)
    multi = [g for g in groups if len(g) > 1]
    pure = [g for g in multi if len({c.cont[a] for a in g}) == 1]
    return {
        "groups": len(groups), "multi": len(multi), "largest": len(groups[0]),
        "grouped": sum(len(g) for g in multi),
        "max_intra": max(intra, default=0.0),
        "mean_intra": sum(intra) / len(intra) if intra else 0.0,
        "mean_inter": sum(inter) / len(inter) if inter else 0.0,
        "purity": len(pure) / len(multi) if multi else 0.0,
    }


def describe(c, groups, m):
    lines = ["%(groups)d groups, %(multi)d of 2+ (%(grouped)d cities, largest %(largest)d), "
             "intra max %(max_intra).1f mean %(mean_intra).1f ms, inter mean "
             "%(mean_inter).1f ms, one-continent %(purity).2f" % m]
    for g in groups:
        lines.append("  [%d] %s" % (len(g), ", ".join(
            "%s (%s)" % (c.name[a], CONTINENT[c.cont[a]]) for a in g)))
    return "\n".join(lines)


def conf(bound):
    return {"groups": {"regroup_interval": "200ms", "max_intra_rtt": bound}}


def test_bounded_groups_follow_geography(dirds, cities):
    t0 = time.monotonic()
    d = dirds(conf(BOUND_MS))
    groups = groups_of(populate(d, cities, lone=True))

    # A relay without RTTs is a group of its own.
    assert [g for g in groups if LONE in g] == [[LONE]], groups
    geo = [g for g in groups if LONE not in g]
    m = measure(cities, geo)
    why = describe(cities, geo, m)
    print("max_intra_rtt %d ms, %.1f s: %s" % (BOUND_MS, time.monotonic() - t0, why))

    # The bound, on every pair inside a group (measured: 49.9 ms at most).
    for g in geo:
        for a, b in itertools.combinations(g, 2):
            v = cities.rtt(a, b)
            assert v is None or v <= BOUND_MS, (cities.name[a], cities.name[b], v, why)
    # Geography (measured: 9 of 10 on one continent; mean intra 28 ms
    # against 192 ms between groups).
    assert m["purity"] >= 0.8, why
    assert m["mean_intra"] < m["mean_inter"] / 4, why
    # Not degenerate (measured: 29 groups, 10 of 2+ holding 41 cities,
    # largest 11): neither scattered into singletons nor one blob.
    assert m["multi"] >= 6 and m["grouped"] >= NCITIES / 2, why
    assert m["groups"] < NCITIES * 2 / 3 and m["largest"] <= NCITIES / 3, why


def test_no_bound_gives_continent_groups(dirds, cities):
    t0 = time.monotonic()
    bounded = measure(cities, groups_of(populate(dirds(conf(BOUND_MS)), cities)))
    groups = groups_of(populate(dirds(conf(0)), cities))
    m = measure(cities, groups)
    why = describe(cities, groups, m)
    print("max_intra_rtt 0, %.1f s: %s" % (time.monotonic() - t0, why))
    # Measured: 4 groups of 29, 22, 6 and 3 cities (Europe, Asia and Africa;
    # the Americas and Tokyo; Oceania; Quito, Medellin, Bogota), widest pair
    # 434 ms, against 29 groups with the bound.
    assert 2 <= m["groups"] <= 6 and m["groups"] < bounded["groups"] / 3, why
    assert m["largest"] >= NCITIES / 4, why
    assert m["max_intra"] > 2 * BOUND_MS, why

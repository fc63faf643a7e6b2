#!/usr/bin/python3
"""Issue 13, groups: slot-dird's regroup of 10,000 relays, time and peak
memory, against the old dense figure (4,096 relays: 41 s, ~400 MB, on the
main thread; docs/directory.md before the change).

Input: `slot-sim --synthetic N --synth-sites S --save-matrix FILE` (N relays
at S sites spread uniformly over the sphere, a few hundred microseconds
inside a site, great-circle RTTs with route stretch between sites), made
once per run in a temporary directory. build/tests/slot-regroup-bench runs
the directory's regroup code on it (src/core/mcl.c's graph builder keeping
each relay's 32 nearest within max_intra_rtt 50 ms, MCL capped at 64 entries
a row, src/core/grpstab.c's stable ids), reading the matrix's upper triangle
as a stream so that the process never holds the n x n RTTs, and reports the
clustering's time (MCL and the split), the stabilisation's, and its peak RSS
(getrusage ru_maxrss: the whole process, reading included). Then it regroups
once more on the same RTTs each jittered by up to +-2% (seeded), starting
from the first grouping, and counts the relays whose group changed.

Repetitions: --reps (5) runs of the tool; median (min - max). The exact
dense-input path (mcl_groups, which slot-sim uses: every measured pair, no
row cap) is run once at --exact-n (2,000) relays for a same-machine contrast.
Reading the 770 MB text matrix is not part of a regroup (the directory holds
its reports in memory) and is reported apart.

usage: dird_regroup.py [--reps 5] [--n 10000] [--sites 2000] [--exact-n 2000]
       [--out docs/bench/dird_regroup.md] [--build DIR]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import _needs  # scripts/bench/_needs.py: checked before measuring

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TARGET_S, TARGET_MB = 5.0, 200.0
OLD = "4,096 relays: 41 s, ~400 MB (dense MCL over three n x n arrays, on the main thread)"


def run_tool(tool, args):
    out = subprocess.run([tool] + args, check=True, capture_output=True, text=True).stdout
    return dict(kv.split("=", 1) for kv in out.split())


def make_matrix(sim, n, sites, path):
    # Few clients and servers, one sampled pair: slot-sim only makes and
    # saves the matrix here.
    subprocess.run([sim, "--synthetic", str(n), "--synth-sites", str(sites), "--save-matrix",
                    path, "--split", "2:2:%d" % (n - 4), "--sample-pairs", "1", "-s", "random"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def mmm(v, fmt="%.2f"):
    return (fmt + " (" + fmt + " - " + fmt + ")") % (statistics.median(v), min(v), max(v))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--sites", type=int, default=2000)
    ap.add_argument("--exact-n", type=int, default=2000)
    ap.add_argument("--build", default=os.environ.get("SLOT_BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench", "dird_regroup.md"))
    ap.add_argument("--check", action="store_true",
                    help="check what the run and its report need, then exit")
    a = ap.parse_args()
    build = os.path.abspath(a.build if os.path.isabs(a.build) else os.path.join(ROOT, a.build))
    tool = os.path.join(build, "tests", "slot-regroup-bench")
    sim = os.path.join(build, "slot-sim")
    _needs.check("dird_regroup", a, files=(tool, sim), root=False)

    with tempfile.TemporaryDirectory() as tmp:
        big = os.path.join(tmp, "m%d.txt" % a.n)
        print("making the %d-relay matrix" % a.n, file=sys.stderr)
        make_matrix(sim, a.n, a.sites, big)
        runs = []
        for r in range(a.reps):
            print("regroup %d/%d" % (r + 1, a.reps), file=sys.stderr)
            runs.append(run_tool(tool, ["--jitter", "0.02", big]))
        os.unlink(big)
        small = os.path.join(tmp, "m%d.txt" % a.exact_n)
        make_matrix(sim, a.exact_n, a.exact_n // 5, small)
        exact = run_tool(tool, ["--dense", small])
        sparse_small = run_tool(tool, [small])

    regroup = [float(x["cluster_s"]) + float(x["stable_s"]) for x in runs]
    jitter_s = [float(x["jitter_regroup_s"]) for x in runs]
    mb = [int(x["maxrss_kb"]) / 1024.0 for x in runs]
    read = [float(x["read_build_s"]) for x in runs]
    changed = [int(x["jitter_changed"]) for x in runs]
    forced = [int(x["jitter_forced"]) for x in runs]
    x0 = runs[0]
    met_t = max(regroup) <= TARGET_S
    met_m = max(mb) <= TARGET_MB
    lines = [
        "## Directory regroup (slot-dird groups, 10,000 relays)",
        "",
        "`scripts/bench/dird_regroup.py`: %d relays of `slot-sim --synthetic %d --synth-sites %d` "
        "(sites spread over the world), regrouped by build/tests/slot-regroup-bench with "
        "slot-dird's code and settings: a graph of each relay's %s nearest peers within "
        "max_intra_rtt %s ms (wider pairs kept only as a bit each), MCL capped at %s entries a "
        "row, then stable ids. %d runs; median (min - max). Peak RSS is the whole process's "
        "(getrusage), reading the matrix included."
        % (a.n, a.n, a.sites, x0["keep"], x0["bound"], x0["max_entries"], a.reps),
        "",
        "| figure | value |",
        "|---|---|",
        "| relays, graph edges, groups | %s, %s, %s |" % (x0["n"], x0["edges"], x0["groups"]),
        "| regroup: MCL, split, stable ids (s) | %s |" % mmm(regroup, "%.3f"),
        "| peak RSS (MB) | %s |" % mmm(mb, "%.1f"),
        "| regroup again, RTTs jittered by up to 2%% (s) | %s |" % mmm(jitter_s, "%.3f"),
        "| relays whose group that changed (of %s) | %s |" % (x0["n"], mmm(changed, "%d")),
        "| of them, forced out by the 50 ms bound | %s |" % mmm(forced, "%d"),
        "| reading the text matrix into the graph (s; not part of a regroup) | %s |"
        % mmm(read, "%.1f"),
        "",
        "Old dense code, from docs/directory.md before this change: %s. Same machine, %d "
        "relays: the exact dense-input path (mcl_groups, every measured pair, no row cap; "
        "slot-sim's) %.2f s and %.0f MB, slot-dird's path %.3f s and %.0f MB."
        % (OLD, a.exact_n, float(exact["cluster_s"]), int(exact["maxrss_kb"]) / 1024.0,
           float(sparse_small["cluster_s"]) + float(sparse_small["stable_s"]),
           int(sparse_small["maxrss_kb"]) / 1024.0),
        "",
        "**Target: regroup 10,000 relays in <= %.0f s and <= %.0f MB: %s** (slowest %.3f s, "
        "largest %.1f MB)." % (TARGET_S, TARGET_MB, "met" if met_t and met_m else "not met",
                               max(regroup), max(mb)),
    ]
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

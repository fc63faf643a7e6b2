#!/usr/bin/env python3
"""Plots slot-sim's CSV output (slot-sim -o DIR) as PNG figures.

    scripts/sim_plot.py DIR IMGDIR [--data "WonderNetwork 2020, 250 cities"] [--prefix wn_]

Writes into IMGDIR, for what DIR holds:
  PREFIXgain_cdf.png      gain-ratio CDFs of Optimal-1, Select-All, Random-k, RandGroup-k
  PREFIXrandom_k.png      Random-k for every k of the sweep against Select-All (paper Fig. 8)
  PREFIXrandgroup_k.png   RandGroup-k likewise (paper Fig. 9)
  PREFIXk_sweep.png       share of Select-All's average reduction and benefit against k
  PREFIXmultihop.png      optimal paths with 1..I intermediaries, and phi(i,i+1)
  PREFIXchains.png        with --max-chain: the runs with chains against the optimal paths
Needs matplotlib (Debian: python3-matplotlib, in scripts/deps.sh).
"""

import argparse
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

GAIN_AXIS = "gain ratio = direct RTT / path RTT (path: its slowest hop)"
CDF_AXIS = "fraction of pairs with a lower gain ratio (CDF)"


def read(path):
    if not os.path.isfile(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def curves(cdf):
    """label -> (kind, k, xs, ys), in file order; a label's first run only."""
    out, skip = {}, False
    for r in cdf:
        if float(r["cdf"]) == 0:
            skip = r["label"] in out
        if skip:
            continue
        c = out.setdefault(r["label"], (r["kind"], int(r["k"]), [], []))
        c[2].append(float(r["gain_ratio"]))
        c[3].append(float(r["cdf"]))
    return out


def cdf_axes(ax, title, xmax):
    ax.set_title(title)
    ax.set_xlabel(GAIN_AXIS)
    ax.set_ylabel(CDF_AXIS)
    ax.set_xlim(0.95, xmax)
    ax.set_ylim(0, 1)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")


def step(ax, c, **kw):
    ax.step(c[2], c[3], where="post", **kw)


def xmax_of(cs):
    """A range that shows 99% of every curve."""
    m = 1.5
    for c in cs:
        for x, y in zip(c[2], c[3]):
            if y <= 0.99:
                m = max(m, x)
    return m * 1.05


def save(fig, imgdir, name):
    path = os.path.join(imgdir, name)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(path)


def plot_main(cs, data, imgdir, prefix, k):
    want = ["Optimal-1", "Select-All", "Cover-%d" % k, "Random-%d" % k, "RandGroup-%d" % k]
    got = [cs[w] for w in want if w in cs]
    if not got:
        return
    fig, ax = plt.subplots(figsize=(7, 4.8))
    styles = {"Optimal-1": "k:", "Select-All": "k-"}
    for w in want:
        if w in cs:
            step(ax, cs[w], label=w, **({"color": styles[w][0], "linestyle": styles[w][1:]}
                                         if w in styles else {}))
    cdf_axes(ax, "Gain ratio per strategy, with the wait rule\n" + data, xmax_of(got))
    save(fig, imgdir, prefix + "gain_cdf.png")


def plot_family(cs, kind, name, fig_no, data, imgdir, prefix):
    fam = sorted((c for c in cs.values() if c[0] == kind), key=lambda c: c[1])
    # The sweep's curves only: those of the main run repeat one of them.
    seen, keep = set(), []
    for c in fam:
        if c[1] not in seen:
            seen.add(c[1])
            keep.append(c)
    if len(keep) < 2 or "Select-All" not in cs:
        return
    fig, ax = plt.subplots(figsize=(7, 4.8))
    cmap = plt.get_cmap("viridis")
    for i, c in enumerate(keep):
        step(ax, c, label="%s-%d" % (name, c[1]), color=cmap(i / max(1, len(keep) - 1)))
    step(ax, cs["Select-All"], label="Select-All", color="k", linewidth=2)
    cf = " (cf. Slot paper Fig. %d)" % fig_no if fig_no else ""
    cdf_axes(ax, "%s-k against Select-All%s\n%s" % (name, cf, data),
             xmax_of(keep + [cs["Select-All"]]))
    save(fig, imgdir, prefix + name.lower() + "_k.png")


def plot_sweep(summary, data, imgdir, prefix):
    ref = next((r for r in summary if r["kind"] == "select-all"), None)
    pts = {}
    for r in summary:
        if r["kind"] in ("random", "randgroup", "cover") and r["frac_select_all_reduction"]:
            pts.setdefault(r["kind"], {})[int(r["k"])] = (
                float(r["frac_select_all_reduction"]), float(r["frac_select_all_benefit"]),
                float(r["probes_per_decision"]))
    if ref is None or not any(len(v) > 1 for v in pts.values()):
        return
    fig, ax = plt.subplots(figsize=(7, 4.8))
    names = {"random": "Random-k", "randgroup": "RandGroup-k", "cover": "Cover-k"}
    for kind, col in (("random", "tab:blue"), ("randgroup", "tab:orange"),
                      ("cover", "tab:green")):
        if kind not in pts:
            continue
        ks = sorted(pts[kind])
        ax.plot(ks, [100 * pts[kind][k][0] for k in ks], "o-", color=col,
                label=names[kind] + ": average reduction")
        ax.plot(ks, [100 * pts[kind][k][1] for k in ks], "s--", color=col,
                label=names[kind] + ": pairs with benefit")
    ax.axhline(100, color="k", linewidth=1)
    ax.set_xscale("log")
    ks = sorted(set(k for v in pts.values() for k in v))
    ax.set_xticks(ks)
    ax.set_xticklabels([str(k) for k in ks])
    ax.set_title("Share of Select-All's gain against k (Select-All: %s%% benefit, "
                 "%s%% average reduction)\n%s" % (ref["benefit_pct"][:4],
                                                 ref["avg_reduction_pct"][:4], data),
                 fontsize="medium")
    ax.set_xlabel("k (relays probed; RandGroup-k: groups sampled, one relay each)")
    ax.set_ylabel("percent of Select-All's figure (%)")
    ax.set_ylim(0, 105)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    save(fig, imgdir, prefix + "k_sweep.png")


def plot_multihop(cs, phicdf, data, imgdir, prefix):
    opt = sorted((c for c in cs.values() if c[0] == "optimal"), key=lambda c: c[1])
    if len(opt) < 2:
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.6))
    for c in opt:
        step(a, c, label="up to %d intermediar%s" % (c[1], "y" if c[1] == 1 else "ies"))
    cdf_axes(a, "Optimal min-max paths\n" + data, xmax_of(opt))
    by = {}
    for r in phicdf:
        by.setdefault(int(r["i"]), ([], []))
        by[int(r["i"])][0].append(float(r["ratio"]))
        by[int(r["i"])][1].append(float(r["cdf"]))
    for i in sorted(by):
        b.step(by[i][0], by[i][1], where="post", label="phi(%d,%d)" % (i, i + 1))
    b.set_title("phi(i,i+1) = best path RTT with up to i over up to i+1\n"
                "intermediaries, per pair")
    b.set_xlabel("phi (ratio of path RTTs)")
    b.set_ylabel("fraction of pairs with a lower phi (CDF)")
    b.set_ylim(0, 1)
    b.grid(True, alpha=0.3)
    b.legend(loc="lower right", fontsize="small")
    save(fig, imgdir, prefix + "multihop.png")


def plot_chains(cs, data, imgdir, prefix):
    """Runs with chains (labels like Cover-20+3) against the optimal paths."""
    chains = [l for l in cs if "+" in l]
    if not chains:
        return
    opt = sorted((l for l, c in cs.items() if c[0] == "optimal"), key=lambda l: cs[l][1])
    fig, ax = plt.subplots(figsize=(7, 4.8))
    for l in opt:
        n = cs[l][1]
        step(ax, cs[l], label="optimal, up to %d relay%s" % (n, "" if n == 1 else "s"),
             color="k", linestyle=[":", "--", "-."][min(n, 3) - 1])
    for l in chains:
        step(ax, cs[l], label=l + " (chains of up to %s relays)" % l.split("+")[1])
    cdf_axes(ax, "Chains of relays, with the wait rule\n" + data,
             xmax_of([cs[l] for l in chains + opt]))
    save(fig, imgdir, prefix + "chains.png")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="slot-sim's --out directory")
    ap.add_argument("imgdir", help="where the PNG files go")
    ap.add_argument("--data", default="", help="the data set, for the titles")
    ap.add_argument("--prefix", default="", help="file name prefix")
    ap.add_argument("-k", type=int, default=20, help="k of the main run (default 20)")
    a = ap.parse_args()
    summary = read(os.path.join(a.dir, "summary.csv"))
    cdf = read(os.path.join(a.dir, "gain_cdf.csv"))
    if not summary or not cdf:
        sys.exit("sim_plot.py: %s has no summary.csv or gain_cdf.csv (slot-sim -o DIR)" % a.dir)
    os.makedirs(a.imgdir, exist_ok=True)
    cs = curves(cdf)
    plot_main(cs, a.data, a.imgdir, a.prefix, a.k)
    plot_family(cs, "random", "Random", 8, a.data, a.imgdir, a.prefix)
    plot_family(cs, "randgroup", "RandGroup", 9, a.data, a.imgdir, a.prefix)
    plot_family(cs, "cover", "Cover", 0, a.data, a.imgdir, a.prefix)
    plot_sweep(summary, a.data, a.imgdir, a.prefix)
    plot_multihop(cs, read(os.path.join(a.dir, "phi_cdf.csv")), a.data, a.imgdir, a.prefix)
    plot_chains(cs, a.data, a.imgdir, a.prefix)


if __name__ == "__main__":
    main()

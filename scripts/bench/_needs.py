"""What a benchmark needs, checked before it measures anything, and its
figures drawn so that a figure that fails costs that figure, never the
report's tables (issue 18: a run under another python3 than Debian's, one
from pyenv first on PATH, measured for minutes and then died importing
matplotlib, losing every figure and table).

Each benchmark calls check() once its arguments are parsed: a missing Python
module, program or binary stops it there, with one message naming the
interpreter it runs under; `--check` stops after the check (run.sh checks
every benchmark it is about to run before measuring any). Then it draws each
figure through draw(), which returns a note for the report instead of
raising. Not a benchmark itself: run.sh skips scripts/bench/_*.py."""

import importlib
import os
import shutil
import sys

SYSTEM_PY = "/usr/bin/python3"
# Debian's packages of the modules the benchmarks import (scripts/deps.sh)
PACKAGES = {"matplotlib": "python3-matplotlib", "cryptography": "python3-cryptography"}


def interpreter():
    """This interpreter, as a message names it: its path and version."""
    return "%s (Python %s)" % (sys.executable or "python3", sys.version.split()[0])


def is_system_python():
    """Debian's python3 (/usr/bin/python3), not a virtualenv or pyenv's:
    the one whose modules `make deps` installs."""
    return sys.prefix == sys.base_prefix == "/usr"


def _oneline(e):
    s = " ".join(str(e).split())
    return "%s: %s" % (type(e).__name__, s) if s else type(e).__name__


def _import(name):
    if name == "matplotlib":
        # as the figures use it: no display, pyplot
        import matplotlib
        matplotlib.use("Agg")
        importlib.import_module("matplotlib.pyplot")
    else:
        importlib.import_module(name)


def _found(tool):
    return shutil.which(tool) is not None or any(
        os.access(os.path.join(d, tool), os.X_OK) for d in ("/usr/sbin", "/sbin"))


def missing(modules=(), tools=(), files=()):
    """([module, why], [tool], [file]) of these that this interpreter cannot
    import, PATH (or /usr/sbin, /sbin) does not have, or that are not
    executable."""
    mods = []
    for m in modules:
        try:
            _import(m)
        except Exception as e:          # ImportError, or an installation that is broken
            mods.append((m, _oneline(e)))
    return (mods, [t for t in tools if not _found(t)],
            [f for f in files if not os.access(f, os.X_OK)])


def check(name, args=None, modules=(), tools=(), files=(), root=True):
    """Exits 1 with a message if anything the run and its report need is
    missing (root too, unless root=False); with args.check set, exits 0
    once all is there. Call it before measuring anything."""
    mods, tls, fls = missing(modules, tools, files)
    lines = []
    if root and os.geteuid() != 0:
        lines.append("must run as root (network namespaces)")
    if mods:
        lines.append("%s cannot import %s" % (interpreter(), "; ".join(
            "%s (%s)" % m for m in mods)))
        pkgs = sorted({PACKAGES.get(m, "python3-" + m) for m, _ in mods})
        if not is_system_python():
            lines.append("run it with %s, Debian's python3, as `make bench` does (`make deps` "
                         "installs %s there), or install them for %s"
                         % (SYSTEM_PY, ", ".join(pkgs), sys.executable))
        else:
            lines.append("`make deps` installs them (%s)" % ", ".join(pkgs))
    if tls:
        lines.append("not installed: %s (`make deps`)" % ", ".join(tls))
    if fls:
        lines.append("missing: %s (make all; SLOT_BUILD names the tree)" % ", ".join(fls))
    if lines:
        sys.stderr.write("%s: cannot run, nothing measured:\n%s\n"
                         % (name, "\n".join("%s:   %s" % (name, l) for l in lines)))
        sys.exit(1)
    if args is not None and getattr(args, "check", False):
        print("%s: ready (%s)" % (name, interpreter()))
        sys.exit(0)


def draw(name, what, fn, *a, **kw):
    """(fn(*a, **kw), None) when the figure is drawn; (None, note) when it
    fails, whatever the reason: the note, for the report in the figure's
    place, says which figure and why, and the tables are written all the
    same."""
    try:
        return fn(*a, **kw), None
    except Exception as e:
        why = _oneline(e)
        sys.stderr.write("%s: %s not drawn: %s (under %s)\n" % (name, what, why, interpreter()))
        return None, ("*(Figure not drawn (%s): %s, under %s. The tables are complete; "
                      "run the benchmark again under %s with python3-matplotlib for the "
                      "figure.)*\n" % (what, why, interpreter(), SYSTEM_PY))

"""The benchmarks (scripts/bench) under an interpreter that lacks what their
report needs (issue 18: a run under pyenv's python3 measured for minutes and
then died importing matplotlib, losing every figure and table).

Checked, with matplotlib made unimportable (a directory on PYTHONPATH whose
`matplotlib` package raises ImportError) or under another python3 (a
virtualenv without Debian's packages): each benchmark's check fails at once,
before measuring, and its message names the interpreter and the module;
run.sh checks every benchmark before any measures; and a report whose
figures cannot be drawn is written all the same, its tables whole and a note
in each figure's place. Nothing here measures."""

import json
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BENCH = os.path.join(ROOT, "scripts", "bench")
BUILD = os.environ.get("SLOT_BUILD", os.path.join(ROOT, "build"))
PY = "/usr/bin/python3"

# The benchmarks whose reports draw figures, and those that only write tables.
PLOTTING = ["e2e_chain", "e2e_files", "e2e_geo", "e2e_initcwnd", "e2e_latency", "e2e_scale",
            "e2e_throughput"]
TABLES_ONLY = ["dird_regroup", "gateway_throughput", "relay_throughput",
               "testbed_limits"]


def benchmarks():
    return sorted(os.path.splitext(f)[0] for f in os.listdir(BENCH)
                  if f.endswith(".py") and not f.startswith("_"))


@pytest.fixture
def no_matplotlib(tmp_path):
    """A PYTHONPATH directory where `import matplotlib` fails."""
    d = tmp_path / "fake"
    (d / "matplotlib").mkdir(parents=True)
    (d / "matplotlib" / "__init__.py").write_text(
        'raise ImportError("matplotlib: made unimportable by test_bench.py")\n')
    return str(d)


@pytest.fixture(scope="module")
def other_python(tmp_path_factory):
    """Another python3: a virtualenv, which sees none of Debian's modules."""
    d = tmp_path_factory.mktemp("venv")
    r = subprocess.run([PY, "-m", "venv", "--without-pip", str(d)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip("no virtualenv here: %s" % r.stderr.strip()[-200:])
    py = str(d / "bin" / "python3")
    if subprocess.run([py, "-c", "import matplotlib"], capture_output=True).returncode == 0:
        pytest.skip("the virtualenv imports matplotlib")
    return py


def env(**kw):
    e = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    e["SLOT_BUILD"] = BUILD
    e.update(kw)
    return e


def run(argv, timeout=120, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT, **kw)


def test_lists_are_every_benchmark():
    assert sorted(PLOTTING + TABLES_ONLY) == benchmarks()


def test_every_benchmark_is_ready_here():
    # Debian's python3 with make deps: every check passes (else the tests
    # below would prove nothing)
    for n in benchmarks():
        r = run([PY, os.path.join(BENCH, n + ".py"), "--check"], env=env())
        assert r.returncode == 0, (n, r.stdout + r.stderr)
        assert "%s: ready (%s (Python " % (n, PY) in r.stdout, (n, r.stdout)


@pytest.mark.parametrize("name", PLOTTING)
def test_check_fails_fast_without_matplotlib(name, no_matplotlib):
    r = run([PY, os.path.join(BENCH, name + ".py"), "--check"], env=env(PYTHONPATH=no_matplotlib))
    assert r.returncode == 1, r.stdout + r.stderr
    err = r.stderr
    assert "%s: cannot run, nothing measured" % name in err, err
    assert re.search(r"%s \(Python [\d.]+\) cannot import matplotlib \(ImportError: "
                     r"matplotlib: made unimportable" % re.escape(PY), err), err
    assert "python3-matplotlib" in err, err


@pytest.mark.parametrize("name", TABLES_ONLY)
def test_tables_only_benchmarks_do_not_need_matplotlib(name, no_matplotlib):
    r = run([PY, os.path.join(BENCH, name + ".py"), "--check"], env=env(PYTHONPATH=no_matplotlib))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("name", ["e2e_files", "e2e_geo"])
def test_a_real_run_under_another_python_stops_before_measuring(name, other_python, tmp_path):
    # The run: no --check, a python3 first on PATH that is not
    # Debian's. It stops before anything is set up, says which interpreter
    # lacks what, and points at /usr/bin/python3; no report is written.
    out = tmp_path / "bench" / (name + ".md")
    r = run([other_python, os.path.join(BENCH, name + ".py"), "--quick", "--out", str(out)],
            env=env())
    assert r.returncode == 1, r.stdout + r.stderr
    err = r.stderr
    assert "%s: cannot run, nothing measured" % name in err, err
    assert "%s (Python " % other_python in err and "cannot import matplotlib" in err, err
    assert "run it with %s" % PY in err, err
    if name == "e2e_geo":
        assert "cryptography" in err, err
    assert not out.exists() and not (tmp_path / "img").exists()
    # nothing of a test bed was made: no namespace of its process
    assert "slw" not in r.stdout + err


def test_run_sh_checks_every_benchmark_before_measuring(tmp_path, no_matplotlib):
    # run.sh in a scratch copy of scripts/bench (the tests and the build are
    # the repository's): with matplotlib unimportable, it names the
    # benchmarks that are not ready and measures none, not even the ones
    # that are (testbed_limits draws no figure).
    tree = tmp_path / "slot"
    shutil.copytree(BENCH, tree / "scripts" / "bench")
    os.symlink(os.path.join(ROOT, "tests"), tree / "tests")
    r = run(["sh", str(tree / "scripts" / "bench" / "run.sh"), "testbed_limits", "e2e_files",
             "e2e_scale"], env=env(PYTHONPATH=no_matplotlib))
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert re.search(r"bench: not ready: e2e_files e2e_scale \(see above\); nothing measured",
                     out), out
    assert "e2e_files: cannot run, nothing measured" in out, out
    assert "bench: testbed_limits" not in out, out        # its measuring line
    assert os.listdir(tree / "docs" / "bench") == [], out
    assert not (tree / "docs" / "benchmarks.md").exists()


def raw_cases():
    """A --raw file of e2e_throughput.py with every scenario and case, made
    up. loss1 and paper are as raw files had them before the sub-hops' losses
    could differ (sub_loss alone); relayleg loses only on client-relay."""
    def case(sc, name, title, d, dl=0.0, sl=0.0, k=1.0):
        lossy = bool(dl or sl)
        c = {"scenario": sc, "name": name, "title": title, "direct_rtt": d,
             "sub_rtt": d / 2, "direct_loss": dl, "sub_loss": sl,
             "seconds": 6 if lossy else 4, "streams": 4 if lossy else 1,
             "res": {"direct": [5.0 * k, 5.2 * k], "slot": [9.6 * k, 9.9 * k],
                     "ideal": [10.0 * k, 10.1 * k], "haproxy": [9.5 * k, 9.8 * k]},
             "sub": {"client-relay": [10.2 * k, 10.3 * k],
                     "relay-server": [10.0 * k, 10.1 * k]},
             "tandem": [9.9 * k, 10.0 * k] if lossy else [], "selection_misses": [],
             "switches": [8, 8] if lossy else []}
        if lossy:
            c["res"].update({"slot-cubic": [9.0 * k, 9.2 * k], "slot-bbr": [9.6 * k, 9.9 * k],
                             "haproxy-bbr": [9.6 * k, 9.7 * k]})
        return c
    relayleg = case(2, "relayleg", "1% on the relay's\nsending leg only", 80, 0.01, 0.0)
    relayleg.update({"cr_loss": 0.01, "rs_loss": 0.0, "seq_ideal": True,
                     "res": {"direct": [2.0, 2.2], "slot": [18.0, 19.0], "ideal": [3.0, 3.2],
                             "haproxy": [3.3, 3.4], "slot-cubic": [3.4, 3.5],
                             "slot-bbr": [20.0, 19.0], "haproxy-bbr": [18.0, 18.5]},
                     "switches": [4, 3],
                     "sub": {"client-relay": [3.0, 3.2], "relay-server": [23.6, 23.7]},
                     "tandem": [3.0, 3.2]})
    cases = [case(1, "window", "80 = 40 + 40 ms", 80),
             case(2, "loss1", "1% loss\neverywhere", 80, 0.01, 0.01, 0.5),
             case(2, "paper", "1% direct,\n0.5% sub-hops (paper)", 80, 0.01, 0.005, 0.6),
             relayleg]
    cases += [case(3, "rtt%d" % r, "%d ms" % r, r, k=100.0 / r) for r in (30, 100, 250)]
    return {"args": {"reps": 2, "seconds": 4, "loss_seconds": 6, "loss_streams": 4,
                     "quick": True}, "elapsed": 100.0, "busy": 0.2, "cases": cases}


def write_report(tmp_path, tag, pythonpath=None, raw_data=None):
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps(raw_data or raw_cases()))
    out, img = tmp_path / tag / "bench" / "e2e_throughput.md", tmp_path / tag / "img"
    e = env(PYTHONPATH=pythonpath) if pythonpath else env()
    r = run([PY, os.path.join(BENCH, "e2e_throughput.py"), "--from-raw", str(raw), "--out",
             str(out), "--img", str(img)], env=e)
    return r, out, img


def tables(text):
    return [l for l in text.splitlines() if l.startswith("|")]


def test_report_without_matplotlib_keeps_its_tables(tmp_path, no_matplotlib):
    # The report step alone (--from-raw measures nothing), drawn normally and
    # with matplotlib unimportable: the same tables, a note for each figure.
    r, out, img = write_report(tmp_path, "drawn")
    assert r.returncode == 0, r.stdout + r.stderr
    drawn = out.read_text()
    assert len(re.findall(r"!\[scenario \d\]\(img/bench_throughput_\w+\.png\)", drawn)) == 3
    assert sorted(os.listdir(img)) == ["bench_throughput_loss.png", "bench_throughput_rtt.png",
                                       "bench_throughput_window.png"]

    r, out, img = write_report(tmp_path, "bare", no_matplotlib)
    assert r.returncode == 0, r.stdout + r.stderr
    bare = out.read_text()
    assert tables(bare) == tables(drawn) and len(tables(bare)) > 20, bare
    assert "![" not in bare, bare
    notes = re.findall(r"\*\(Figure not drawn \((scenario \d)\): ImportError: matplotlib: made "
                       r"unimportable by test_bench\.py, under (\S+) \(Python [\d.]+\)\. The "
                       r"tables are complete", bare)
    assert notes == [("scenario 1", PY), ("scenario 2", PY), ("scenario 3", PY)], bare
    assert not img.exists() or os.listdir(img) == []
    for s in (1, 2, 3):
        assert "e2e_throughput: scenario %d not drawn: ImportError" % s in r.stderr, r.stderr


def test_report_relayleg_case_and_separate_run(tmp_path):
    # scenario 2's third case, loss on the relay's sending leg alone, merged
    # from a run of its own: its setup, its column of issue 17's ratios,
    # its verdicts per case, and the full run's figures kept apart from its.
    raw = raw_cases()
    raw["args"]["relay_cc"] = "auto"       # slot-relayd's defaults
    raw["separate"] = [{"cases": ["relayleg"], "reps": 2, "elapsed": 50.0, "busy": 0.1}]
    r, out, img = write_report(tmp_path, "relayleg", raw_data=raw)
    assert r.returncode == 0, r.stdout + r.stderr
    text = out.read_text()
    # the legacy cases read without cr_loss/rs_loss: both sub-hops sub_loss
    assert "- **1% loss everywhere**: 1% on the direct pair, 1% on each sub-hop." in text, text
    assert ("- **1% on the relay's sending leg only**: 1% on the direct pair, 1% on "
            "client-relay1 and 0% on relay1-server." in text), text
    assert "**1% on the relay's sending leg only**\n\n| path |" in text, text
    # its ideal's two legs were measured one after the other (seq_ideal)
    assert "they share no link; in relayleg one after the other, see scenario 2)" in text, text
    assert "; the two legs measured one after the other, each alone:" in text, text
    assert "| ratio | loss1 | paper | relayleg | target |" in text, text
    rows = {l.split(" | ")[0]: l for l in tables(text) if l.startswith("| slot")}
    # relayleg: slot / HAProxy 18/3.3 and 19/3.4, slot / ideal 18/3.0 and 19/3.2
    assert rows["| slot / HAProxy (cubic, the host's default)"].endswith(
        " | 5.52 [5.45-5.59] | >= 1.3 |"), rows
    assert rows["| slot / ideal (the slower cubic sub-hop alone)"].endswith(
        " | 5.97 [5.94-6.00] | >= 1.0 |"), rows
    assert rows["| slot / slot with the relay's legs cubic"].endswith(
        " | 5.36 [5.29-5.43] |  |"), rows
    # slot's legs start cubic and take bbr at a loss, counted per run
    assert ("(legs switched per run of 4 streams, median [min-max]: loss1 8 [8-8]; "
            "paper 8 [8-8]; relayleg 3.5 [3-4])" in text), text
    # ... against bbr throughout
    assert rows["| slot / slot with the relay's legs bbr from the start"].endswith(
        " | 0.95 [0.90-1.00] |  |"), rows
    assert ("- **relayleg** (1% on the direct pair, 1% on client-relay1 and 0% on "
            "relay1-server): slot >= 1.3x HAProxy (cubic) **met** (5.52); slot >= 1.0x the "
            "ideal of cubic legs **met** (5.97). Why: the lossy leg is the relay's own" in text), text
    assert re.search(r"- \*\*loss1\*\* \([^)]*\): slot >= 1.3x HAProxy \(cubic\) \*\*not met\*\* "
                     r"\(1.01\)", text), text
    assert "Issue 17's targets were posed for scenario 2 as it stood (loss1 and paper)" in text
    # the issue-17 target lines list the new case and keep the verdicts per case
    assert re.search(r"slot >= 1.3x HAProxy with the host's cubic under loss: \*\*not met in "
                     r"loss1, paper\*\*\..*relayleg 5.52 \[5.45-5.59\]\.", text), text
    assert ("The relayleg case was measured later in a run of its own (`--cases relayleg`, "
            "the same build and settings, 2 repetitions, 50 s, the machine 10% busy)" in text), text
    assert "during the full run's measurements (this benchmark's 6 test beds" in text, text
    assert "bench_throughput_loss.png" in os.listdir(img)

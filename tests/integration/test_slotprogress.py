"""The integration tests' progress lines (tests/integration/slotprogress.py):
`make integration`, and tests/integration/run.sh as a person runs it, print
one line per test as it finishes (the clock, the count, the outcome, its time,
its name, its worker) instead of pytest's row of dots.

Each test here copies run.sh, the plugin and the Makefile into a scratch
tree whose tests/integration holds a few tiny generated tests (no namespaces,
nothing built), and runs them there, as a person would in the real tree."""

import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))

TINY = '''
import time
import pytest

def test_passes():
    time.sleep(0.2)

def test_fails():
    assert 1 + 1 == 3

@pytest.mark.skip(reason="not today")
def test_skipped():
    pass

@pytest.mark.serial
def test_alone():
    pass
'''

TINY2 = '''
def test_other_module():
    pass
'''

CONFTEST = '''
def pytest_configure(config):
    config.addinivalue_line("markers", "serial: alone (run.sh's second phase)")
'''

# "  0:03 [ 2/4] PASSED     0.2s test_tiny.py::test_passes (gw1)"
LINE = r"(?m)^\s*\d+:\d\d \[\s*\d+/\d+\] %s\s+\d+\.\ds (?:tests/integration/)?%s(?: \(gw\d+\))?$"


@pytest.fixture
def tree(tmp_path):
    """A scratch copy of the repository's test runner around tiny tests."""
    t = tmp_path / "slot"
    (t / "tests" / "integration").mkdir(parents=True)
    for f in ("run.sh", "slotprogress.py"):
        shutil.copy2(os.path.join(HERE, f), t / "tests" / "integration" / f)
    shutil.copy2(os.path.join(ROOT, "Makefile"), t / "Makefile")
    (t / "tests" / "integration" / "conftest.py").write_text(CONFTEST)
    (t / "tests" / "integration" / "test_tiny.py").write_text(TINY)
    (t / "tests" / "integration" / "test_tiny2.py").write_text(TINY2)
    return t


def env(**kw):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("PYTEST_", "SLOT_TEST_")) and k != "PYTHONPATH"}
    e.update(kw)
    return e


def check_lines(out, workers):
    """A line per test, with its outcome, its time and its name (and
    worker when xdist ran it); no row of dots."""
    gw = r" \(gw\d+\)" if workers else ""
    for outcome, name in (("PASSED", "test_tiny.py::test_passes"),
                          ("FAILED", "test_tiny.py::test_fails"),
                          ("SKIPPED", "test_tiny.py::test_skipped"),
                          ("PASSED", "test_tiny2.py::test_other_module")):
        pat = LINE % (outcome, re.escape(name))
        assert re.search(pat, out), (outcome, name, out)
        if workers:
            assert re.search(pat.replace(r"(?: \(gw\d+\))?$", gw + "$"), out), (name, out)
    # the serial test: in the second phase with workers, alone (no worker)
    assert re.search(LINE % ("PASSED", re.escape("test_tiny.py::test_alone")), out), out
    # its own time, fixtures included: the sleeping test is not shown as 0.0s
    t = float(re.search(r"([\d.]+)s (?:tests/integration/)?test_tiny.py::test_passes", out)
              .group(1))
    assert t > 0.0, out
    assert not re.search(r"(?m)^[.FsExX]{2,}", out), out
    assert "slowest modules" in out, out


def test_run_sh_prints_a_line_per_test_with_workers(tree):
    r = subprocess.run(["sh", "tests/integration/run.sh"], cwd=str(tree), capture_output=True,
                       text=True, timeout=300, env=env(SLOT_TEST_JOBS="2"))
    out = r.stdout + r.stderr
    assert r.returncode == 1, out          # test_fails
    if "no pytest-xdist" in out:
        pytest.skip("no pytest-xdist: run.sh ran serially")
    assert "phase 1" in out and "phase 2" in out, out
    check_lines(out, workers=True)
    # phase 1 counts its four tests, phase 2 its one
    assert re.search(r"(?m)^\s*\d+:\d\d \[4/4\] ", out) and \
        re.search(r"(?m)^\s*\d+:\d\d \[1/1\] PASSED", out), out


def test_run_sh_prints_a_line_per_test_in_one_process(tree):
    r = subprocess.run(["sh", "tests/integration/run.sh"], cwd=str(tree), capture_output=True,
                       text=True, timeout=300, env=env(SLOT_TEST_JOBS="1"))
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    check_lines(out, workers=False)
    assert re.search(r"(?m)^\s*\d+:\d\d \[5/5\] ", out), out


def test_make_integration_prints_a_line_per_test(tree):
    # `make integration` is `all` (the build, taken as done here) and run.sh
    r = subprocess.run(["make", "-o", "all", "integration"], cwd=str(tree),
                       capture_output=True, text=True, timeout=300, env=env(SLOT_TEST_JOBS="1"))
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    check_lines(out, workers=False)


def test_make_check_runs_the_integration_tests_through_make_integration():
    r = subprocess.run(["make", "-n", "check"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert re.search(r"(?m)^make .*\bintegration$", r.stdout), r.stdout

"""A pytest plugin for tests/integration/run.sh: one line per test as it
finishes (clock since the start, count, outcome, the test's own time with
its fixtures, name, and the xdist worker that ran it) instead of a row of
dots, and at the end the modules that took longest, so that a person
watching CI sees where it is and where the time goes. Loaded with
`-p slotprogress`; the test outcomes and pytest's summary are unchanged."""

import os
import time

import pytest

ROOT_PREFIX = "tests/integration/"


class Progress:
    def __init__(self, config):
        self.config = config
        # run.sh's start, so that the clock runs on across its two phases
        self.t0 = time.monotonic() - max(0.0, time.time() - float(
            os.environ.get("SLOT_TEST_T0") or time.time()))
        self.total = None
        self.done = 0
        self.took = {}           # nodeid -> seconds so far (setup + call + teardown)
        self.state = {}          # nodeid -> "passed", "failed", "error", "skipped"
        self.modules = {}        # module path -> seconds

    def tr(self):
        return self.config.pluginmanager.get_plugin("terminalreporter")

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session):
        self.total = len(session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        self.total = len(ids)

    # The dots (or letters) would interleave with the lines: blank them.
    @pytest.hookimpl(hookwrapper=True)
    def pytest_report_teststatus(self, report, config):
        outcome = yield
        res = outcome.get_result()
        if isinstance(res, tuple) and len(res) == 3 and res[1]:
            outcome.force_result((res[0], "", res[2]))

    def pytest_runtest_logreport(self, report):
        nid = report.nodeid
        self.took[nid] = self.took.get(nid, 0.0) + report.duration
        st = self.state.get(nid, "passed")
        if report.failed:
            st = "failed" if report.when == "call" else "error"
        elif report.skipped and st == "passed":
            st = "xfailed" if hasattr(report, "wasxfail") else "skipped"
        self.state[nid] = st
        if report.when != "teardown":
            return
        self.done += 1
        took = self.took.pop(nid)
        st = self.state.pop(nid)
        mod = nid.split("::", 1)[0]
        self.modules[mod] = self.modules.get(mod, 0.0) + took
        el = int(time.monotonic() - self.t0)
        worker = getattr(getattr(report, "node", None), "gateway", None)
        w = len(str(self.total or self.done))
        line = "%3d:%02d [%*d/%s] %-7s %6.1fs %s%s" % (
            el // 60, el % 60, w, self.done, self.total or "?", st.upper(), took,
            nid[len(ROOT_PREFIX):] if nid.startswith(ROOT_PREFIX) else nid,
            " (%s)" % worker.id if worker is not None else "")
        tr = self.tr()
        if tr is not None:
            tr.write_line(line, red=st in ("failed", "error"), yellow=st == "skipped")
            tr.flush()

    def pytest_terminal_summary(self, terminalreporter):
        if not self.modules:
            return
        top = sorted(self.modules.items(), key=lambda kv: -kv[1])[:10]
        terminalreporter.write_sep("-", "slowest modules (test time, fixtures included)")
        for mod, s in top:
            terminalreporter.write_line("%7.1fs %s" % (s, mod))


def pytest_configure(config):
    # In an xdist worker the controller prints; the worker stays quiet.
    if hasattr(config, "workerinput"):
        return
    config.pluginmanager.register(Progress(config), "slotprogress-lines")

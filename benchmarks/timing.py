"""pytest plugin that timestamps every test in the pytest process (``-p benchmarks.timing``).

It is active only when ``NPU_LAZY_BENCH_TIMING`` names a file; it takes the
variable out of the environment at configure time, so processes started by
the run (spawned children, subprocesses of a test) neither record nor write.
At the end of the session it writes, as JSON, the moments (time.perf_counter)
of session start, collection finish, and for each test its
``pytest_runtest_logstart`` and ``pytest_runtest_logfinish``, all seen in the
pytest process (for isolated tests: the controller's process, not the child),
and per test the outcome of each report that counts (subtests by their
message and parameters).
"""

from __future__ import annotations

import json
import os
import time

import pytest

ENV = "NPU_LAZY_BENCH_TIMING"


class Timing:
    def __init__(self, path: str) -> None:
        self.path = path
        self.pid = os.getpid()
        self.data: dict = {"configure": time.perf_counter(), "tests": [], "outcomes": {}, "per_test": {}}

    def pytest_sessionstart(self, session) -> None:
        self.data["sessionstart"] = time.perf_counter()

    def pytest_collection_finish(self, session) -> None:
        self.data["collection_finish"] = time.perf_counter()
        self.data["collected"] = len(session.items)

    def pytest_runtest_logstart(self, nodeid, location) -> None:
        if os.getpid() == self.pid:
            self.data["tests"].append([nodeid, time.perf_counter(), None])

    def pytest_runtest_logfinish(self, nodeid, location) -> None:
        if os.getpid() != self.pid:
            return
        for entry in reversed(self.data["tests"]):
            if entry[0] == nodeid and entry[2] is None:
                entry[2] = time.perf_counter()
                break

    def pytest_runtest_logreport(self, report) -> None:
        if os.getpid() != self.pid:
            return
        outcomes = self.data["outcomes"]
        if report.when == "call" or report.outcome != "passed":
            if hasattr(report, "wasxfail"):
                outcome = "xfailed" if report.outcome == "skipped" else "xpassed"
            elif report.when != "call" and report.outcome == "failed":
                outcome = "error"
            else:
                outcome = report.outcome
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            context = getattr(report, "context", None)  # a subtest's report carries its msg and kwargs
            label = "" if context is None else " ".join(
                ([f"[{context.msg}]"] if context.msg is not None else [])
                + [f"{k}={v}" for k, v in (context.kwargs or {}).items()])
            self.data["per_test"].setdefault(report.nodeid, []).append([report.when, label, outcome])

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus) -> None:
        if os.getpid() != self.pid:
            return
        self.data["sessionfinish"] = time.perf_counter()
        self.data["exitstatus"] = int(exitstatus)
        with open(self.path, "w", encoding="utf-8") as handle:
            json.dump(self.data, handle)


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.pop(ENV, None)
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Timing(path), "npu_lazy_bench_timing")

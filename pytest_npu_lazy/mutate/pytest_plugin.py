"""The runner's eyes inside each pytest run it starts (``-p pytest_npu_lazy.mutate.pytest_plugin``).

It writes one JSON object a line to the file named by :data:`RESULTS_ENV`,
in the controlling pytest process only (under xdist, the controller, which
sees every worker's reports):

- ``{"event": "window", "nodeid", "start", "end"}``: the test's span on
  CLOCK_MONOTONIC, the clock the coverage pass's hits carry (logstart to
  logfinish: for an isolated test this holds its child's whole life);
- ``{"event": "report", "nodeid", "when", "outcome", "message"}``: each
  report's outcome and the first lines of a failure, for the table.

Where :data:`TIMEOUTS_ENV` names a JSON object (node id -> seconds), each
isolated test with no timeout of its own gets that limit: a mutant that
deadlocks a set-up is stopped at a few times what the test took unmutated,
not at the run's one limit for every test.
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from .. import role
from ..role import MUTATION_RESULTS_ENV

RESULTS_ENV = MUTATION_RESULTS_ENV  # named where the role is decided: a mutation run is one
TIMEOUTS_ENV = "PYTEST_NPU_LAZY_MUTATE_TIMEOUTS"
_MESSAGE_CHARS = 400


class _Recorder:
    def __init__(self, path: str):
        self.path = path
        self.started: dict[str, float] = {}

    def write(self, **event) -> None:
        with open(self.path, "a") as handle:
            handle.write(json.dumps(event) + "\n")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid, location):
        self.started[nodeid] = time.monotonic()

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid, location):
        self.write(event="window", nodeid=nodeid, start=self.started.pop(nodeid, None), end=time.monotonic())

    def pytest_runtest_logreport(self, report):
        message = ""
        if report.failed:
            message = getattr(report, "longreprtext", "") or str(report.longrepr)
            # not xdist's "[gw0] linux -- Python 3.11 /path/to/python" header: it names the machine, not the failure
            lines = [line for line in message.splitlines() if line.strip() and not re.match(r"\[gw\d+\] ", line)]
            said = [line for line in lines if line.startswith("E ")]
            # an assertion says itself in its E lines; a crash or a timeout in its first line
            message = "\n".join(said[:6]) if said else "\n".join(lines[:2])
        self.write(event="report", nodeid=report.nodeid, when=report.when, outcome=report.outcome,
                   message=message[:_MESSAGE_CHARS])

    def pytest_collectreport(self, report):
        if report.failed:
            self.write(event="report", nodeid=report.nodeid, when="collect", outcome="failed",
                       message=str(report.longrepr)[-_MESSAGE_CHARS:])


def pytest_collection_modifyitems(items):
    path = os.environ.get(TIMEOUTS_ENV)
    if not path:
        return
    from ..settings import marker_options

    with open(path) as handle:
        limits = json.load(handle)
    for item in items:
        # only a test that already carries the marker: adding one would isolate a test the suite runs in-process
        if item.nodeid in limits and item.get_closest_marker("npu_lazy") is not None:
            if "timeout" not in marker_options(item):
                item.add_marker(pytest.mark.npu_lazy(timeout=limits[item.nodeid]))


def pytest_configure(config):
    this = role.of(config)
    if this.mutation_results and not this.worker:
        config.pluginmanager.register(_Recorder(this.mutation_results), "npu_lazy_mutate_recorder")

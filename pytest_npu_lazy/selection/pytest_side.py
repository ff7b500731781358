"""The selection map's two sides in pytest: taking it (:class:`MapTaker`, :class:`MapWriter`) and using it
(:class:`ChangeFilter`).

A test's evidence is taken where the test runs: in the pytest process (or an xdist worker) for a
test run in-process, in its child for an isolated one; :class:`MapTaker`, registered before the
zygotes fork, is inherited by every one of them. The evidence rides on the test's teardown report
(``npu_lazy_map``), serialised by pytest and pytest-xdist like any report attribute, to the one
process that reports: there :class:`MapWriter` gathers it and writes the map when the session ends.

Selecting reads the change once, in the process that reports; xdist's workers get it from their
controller (``workerinput``), never from stdin or git again, so every worker selects the same tests.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Generator

import pytest

from .. import role
from ..shard import Shard
from .changes import ChangeSet, resolve
from .map import SelectionMap, installed_versions, new_map
from .rule import Selection, select
from .sources import inventory, package_roots
from .tracer import SHARD_PROCESS, EvidenceTracer

#: the report attribute a test's evidence travels on
EVIDENCE_ATTRIBUTE = "npu_lazy_map"
_WORKER_KEY = "npu_lazy_changes"


class MapTaker:
    """Cuts the tracer's lines at each phase of each test run in this process (or a fork of it)."""

    def __init__(self, tracer: EvidenceTracer) -> None:
        self.tracer = tracer

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if not self.tracer.measuring():
            pytest.exit("pytest-npu-lazy: another coverage measurement (pytest-cov's --cov, coverage run) started "
                        "after the selection map's and pauses it: take the map in a run without coverage.",
                        returncode=pytest.ExitCode.USAGE_ERROR)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.tracer.begin_test(item.nodeid)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        self.tracer.switch("call")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        self.tracer.switch("teardown")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if call.when == "teardown" and self.tracer.test == item.nodeid:
            setattr(report, EVIDENCE_ATTRIBUTE, self.tracer.end_test())
        return report


def start_tracer(packages: tuple[str, ...]) -> EvidenceTracer:
    """Measure from now on in this process; the probe's phases become the evidence's phases."""
    from ..probe.recorder import RECORDER
    from ..python_c import call

    tracer = EvidenceTracer(package_roots(packages))
    tracer.start()
    RECORDER.phase_listeners.append(tracer.switch)
    call.CALL_OBSERVERS.append(lambda args: tracer.spawned("run_python"))
    return tracer


class MapWriter:
    """In the process that reports: every test's evidence, then the map."""

    def __init__(self, path: Path, packages: tuple[str, ...], command: list[str], shard: Shard | None = None) -> None:
        self.path = path
        self.packages = packages
        self.map = new_map(list(packages), command)
        if shard is not None:
            self.map.taken["shard"] = str(shard)
        self.outcomes: dict[str, str] = {}
        self.evidence: dict[str, dict] = {}
        self.pid = os.getpid()
        self.started = time.monotonic()
        self.written: str | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if os.getpid() != self.pid:  # a child inherited this plugin; its reports reach this process anyway
            return
        if report.failed or hasattr(report, "wasxfail"):  # an xfail stops where it fails, as a failure does
            self.outcomes[report.nodeid] = "failed"
        elif report.skipped and self.outcomes.get(report.nodeid) != "failed":
            self.outcomes[report.nodeid] = "skipped"
        else:
            self.outcomes.setdefault(report.nodeid, "passed")
        evidence = getattr(report, EVIDENCE_ATTRIBUTE, None)
        if report.when == "teardown" and isinstance(evidence, dict):
            self.evidence[report.nodeid] = evidence

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if os.getpid() != self.pid:
            return
        for nodeid, outcome in self.outcomes.items():
            self.map.add_test(nodeid, outcome, self.evidence.get(nodeid))
        self.map.files = inventory(package_roots(self.packages), self.map.seen_files())
        self.map.taken["seconds"] = round(time.monotonic() - self.started, 1)
        self.map.write(self.path)
        missing = sorted(set(self.outcomes) - set(self.evidence))
        self.written = (f"npu_lazy: selection map of {len(self.outcomes)} tests written to {self.path}" +
                        (f"; {len(missing)} without evidence (skipped before they ran, or a child that died): "
                         "every change selects them" if missing else ""))
        unmeasured = sum(1 for e in self.evidence.values() if any(o.startswith("python") for o in e.get("opaque", ())))
        if unmeasured:
            self.written += (
                f"\nnpu_lazy: {unmeasured} tests are opaque: a Python process they (or an earlier test of their process) "
                "started sent no lines home, such as Inductor's compile-worker pool, which outlives tests; every change "
                "of torch_npu selects them. Take the map with TORCHINDUCTOR_COMPILE_THREADS=1 to keep Inductor's "
                "compiling in the measured process (test/dynamo's conftest sets it).")

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.written:
            terminalreporter.write_line(self.written)


class ShardFilter:
    """--npu-lazy-shard K/N: deselects the tests another shard takes (a stable hash of each node id).

    In the process that collects and runs tests (the pytest process, an xdist worker), the tracer then names
    its process as every shard does and counts its tests' order by their place in the whole collection: the
    shards' maps merge into the map of one run (python -m pytest_npu_lazy.selection.merge).
    """

    def __init__(self, config: pytest.Config, shard: Shard, tracer: EvidenceTracer | None) -> None:
        self.shard = shard
        self.tracer = tracer
        workerinput = role.xdist_worker_input(config)
        self.process = SHARD_PROCESS + (str(workerinput.get("workerid", "worker")) if workerinput else "run")
        self.kept = self.dropped = 0
        self.pid = os.getpid()

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if os.getpid() != self.pid:  # a test child inherited this plugin: its one test is this shard's already
            return
        places = {item.nodeid: place for place, item in enumerate(items)}
        kept = [item for item in items if self.shard.holds(item.nodeid)]
        dropped = [item for item in items if not self.shard.holds(item.nodeid)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
        if self.tracer is not None:
            self.tracer.name_process(self.process, {item.nodeid: places[item.nodeid] for item in kept})
        self.kept, self.dropped = len(kept), len(dropped)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.kept or self.dropped:
            terminalreporter.write_line(f"npu_lazy: shard {self.shard} of the selection map ran {self.kept} tests, "
                                        f"left {self.dropped} to the other shards")


class ChangeFilter:
    """Deselects the tests the change cannot affect, and says how many it kept and why."""

    def __init__(self, config: pytest.Config, changes: ChangeSet, smap: SelectionMap, map_path: Path,
                 ignore: tuple[str, ...]) -> None:
        self.changes = changes
        self.map = smap
        self.map_path = map_path
        self.selection: Selection = select(smap, changes, installed_versions(tuple(smap.packages)),
                                           changes.rootdir_within(Path(str(config.rootpath))), ignore)
        self.kept = self.dropped = self.new = 0

    def header(self) -> list[str]:
        selection = self.selection
        lines = [f"npu_lazy: selection by change: {self.changes.source} ({len(self.changes.files)} files), "
                 f"map {self.map_path} of {len(self.map.tests)} tests taken {self.map.taken.get('date', '?')}"]
        if selection.everything is not None:
            lines.append(f"npu_lazy: every test runs: {selection.everything}")
        else:
            lines.append(f"npu_lazy: {len(selection.selected)} of the map's {len(self.map.tests)} tests can see the "
                         "change; tests the map does not know run too")
        lines.extend(f"npu_lazy:   {note}" for note in selection.notes[:12])
        if len(selection.notes) > 12:
            lines.append(f"npu_lazy:   ... {len(selection.notes) - 12} more (python -m pytest_npu_lazy.selection "
                         "--as explain)")
        return lines

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        kept, dropped = [], []
        for item in items:
            if self.selection.covers(item.nodeid):
                kept.append(item)
            elif item.nodeid not in self.map.tests:
                kept.append(item)
                self.new += 1
            else:
                dropped.append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
        self.kept, self.dropped = len(kept), len(dropped)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.kept or self.dropped:
            terminalreporter.write_line(
                f"npu_lazy: change-driven selection ran {self.kept} tests ({self.new} unknown to the map), "
                f"left out {self.dropped}")

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        """xdist's controller hands each worker the change it read."""
        node.workerinput[_WORKER_KEY] = self.changes.to_dict()


def changes_for(config: pytest.Config, spec: str) -> ChangeSet:
    """The change, read once: from the controller in an xdist worker, else from ``spec``."""
    workerinput = role.xdist_worker_input(config)
    if workerinput is not None and _WORKER_KEY in workerinput:
        return ChangeSet.from_dict(workerinput[_WORKER_KEY])
    from ..compat import read_stdin_under_capture

    return resolve(spec, Path(str(config.rootpath)), lambda: read_stdin_under_capture(config))


"""Reports for people and CI: terminal summary, JSON, JUnit properties, import budget, HTML.

Each isolated test's child attaches its :class:`~pytest_npu_lazy.probe.summary.Summary`
to its teardown report as ``report.npu_lazy`` (plain data). The :class:`Reporter`
reads it back once, where pytest's
own reports are logged: the pytest process, or under pytest-xdist the
controller (xdist forwards the attribute), never a worker or a child. So
there is one place that sees every test, and ``-n 2`` writes one file.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from .. import compat, role
from ..probe.summary import ERROR_ATTRIBUTE, SUMMARY_ATTRIBUTE, VIOLATION_ATTRIBUTE, Summary
from ..settings import GROUP
from ..version import __version__
from . import budget, terminal
from .schema import (ReportError, document, load_baseline, relative_paths, result_entry,
                     write_json, write_text)


def add_options(parser: pytest.Parser) -> None:
    """Options and ini keys of the reports."""
    group = parser.getgroup(*GROUP)
    group.addoption("--npu-lazy-json", metavar="PATH", default=None,
                    help="write a JSON report (schema in docs/reports.md): environment, and per test its outcome, "
                         "phases, watched modules with import chains, module counts")
    group.addoption("--npu-lazy-json-modules", action="store_true", default=False,
                    help="also write every module first loaded per phase, with importer, start and duration "
                         "(large; what `python -m pytest_npu_lazy.reports.html` draws)")
    group.addoption("--npu-lazy-html", metavar="PATH", default=None,
                    help="write an HTML page: per test a timeline of its phases, the modules of each as an "
                         "expandable import tree with durations")
    group.addoption("--npu-lazy-summary", choices=terminal.SUMMARY_CHOICES, default="auto",
                    help="which isolated tests the end-of-run section 'npu_lazy: phases and watched modules' "
                         "lists: auto (default: those that failed, broke a guarantee or their import budget, or "
                         "could not be judged against it; every test with -v), failed, all, none")
    group.addoption("--npu-lazy-save-baseline", metavar="FILE", default=None,
                    help="write the import budget baseline: per test and phase, the modules it loads")
    group.addoption("--npu-lazy-baseline", metavar="FILE", default=None,
                    help="check every isolated test against an import budget baseline: a phase that starts "
                         "loading a watched module, or loads more than npu_lazy_budget_growth more modules, "
                         "fails the test (ERROR at teardown)")


@dataclass
class Result:
    """What the pytest process learnt about one test from its reports."""

    nodeid: str
    duration: float = 0.0
    seen: list[tuple[str, str, bool, bool]] = field(default_factory=list)  # when, outcome, xfail, npu_lazy_error
    message: str | None = None
    violation: dict | None = None
    summary: Summary | None = None
    budget: list[dict] | None = None
    #: why the budget gate did not judge this test (a cold cache against a warm baseline...)
    not_judged: str | None = None
    worker: str | None = None

    def add(self, report: pytest.TestReport) -> None:
        self.duration += report.duration
        xfail = hasattr(report, "wasxfail")
        self.seen.append((report.when, report.outcome, xfail, bool(getattr(report, ERROR_ATTRIBUTE, False))))
        self.worker = self.worker or getattr(report, "worker_id", None)
        if report.failed and self.message is None:
            self.message = _failure_message(report)
            self.violation = getattr(report, VIOLATION_ATTRIBUTE, None)  # probe.fixture.broken_guarantee
        elif report.skipped and self.message is None:
            self.message = f"xfail: {report.wasxfail}" if xfail else _skip_reason(report)
        elif xfail and report.passed and report.when == "call":
            self.message = f"xpass: {report.wasxfail}"

    @property
    def outcome(self) -> str:
        """What a person sees: error before failed before xpassed, xfailed, skipped, passed."""
        failed = [(when, error) for when, outcome, _, error in self.seen if outcome == "failed"]
        if any(error for _, error in failed):
            return "error"
        if any(when == "call" for when, _ in failed):
            return "failed"
        if failed:
            return "error"
        if any(when == "call" and outcome == "passed" and xfail for when, outcome, xfail, _ in self.seen):
            return "xpassed"
        if any(outcome == "skipped" and xfail for _, outcome, xfail, _ in self.seen):
            return "xfailed"
        if any(outcome == "skipped" for _, outcome, _, _ in self.seen):
            return "skipped"
        return "passed"

    def entry(self, with_modules: bool) -> dict:
        return result_entry(self.nodeid, self.outcome, self.duration, message=self.message,
                            violation=self.violation, budget=self.budget, not_judged=self.not_judged,
                            worker=self.worker,
                            summary=self.summary, with_modules=with_modules)


def _failure_message(report: pytest.TestReport) -> str:
    """The crash entry's message, else the failure's own text: not ``report.longreprtext``, which under xdist
    starts with the worker's line ("[gw0] linux -- Python ..."), pytest's header for a report from a worker."""
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        text = crash.message
    elif longrepr is None or isinstance(longrepr, tuple):
        text = report.longreprtext
    else:
        text = str(longrepr)
    text = text.strip()
    return text if len(text) <= 2000 else text[:2000] + " ..."


def _skip_reason(report: pytest.TestReport) -> str | None:
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        return str(report.longrepr[2])
    return report.longreprtext or None


def junit_properties(result: Result, summary: Summary) -> list[tuple[str, str]]:
    """The key facts of an isolated test (``summary``: the one its teardown report carried) as JUnit
    ``<property>`` elements."""
    phases = summary.phases
    props = [
        ("npu_lazy.isolation", str(summary.isolation)),
        ("npu_lazy.phases", ", ".join(f"{p['name']} {p['duration']:.3f}s ({terminal.phase_modules(p)})"
                                      for p in phases)),
    ]
    first: dict[str, tuple[str, dict]] = {}
    for phase in phases:
        for watched in phase.get("watched", []):
            first.setdefault(watched["pattern"], (phase["name"], watched))
    for pattern in summary.watch:
        if pattern in first:
            phase_name, watched = first[pattern]
            props.append((f"npu_lazy.first_loaded.{pattern}", phase_name))
            props.append((f"npu_lazy.chain.{pattern}", " <- ".join(watched["chain"])))
        else:
            props.append((f"npu_lazy.first_loaded.{pattern}", "not loaded"))
    if result.violation:
        v = result.violation
        props.append(("npu_lazy.violation", f"{v['module']} ({v['kind']}) in phase {v['phase']}: "
                                            + " <- ".join(v["chain"])))
    if result.budget:
        props.append(("npu_lazy.budget", budget.short(result.budget)))
    if summary.cann_mode:
        props.append(("npu_lazy.cann_mode", summary.cann_mode))
    for check in summary.checks:
        props.append((f"npu_lazy.checked.{check['phase']}", " ".join(terminal.check_units(check))))
    return props


class Reporter:
    """Collects the ``npu_lazy`` data of every test report and writes the reports at session end."""

    def __init__(self, config: pytest.Config, resolver, cann, gate=None) -> None:
        """``resolver``: the session's settings (watch, budget growth); ``cann``: the CANN status the plugin
        activated; ``gate``: the requires_npu gate, whose answer the environment reports (None in a child)."""
        self.config = config
        self.cann = cann
        self.gate = gate
        self.results: dict[str, Result] = {}
        self.started = time.time()
        self.written: list[str] = []
        self.write_errors: list[str] = []
        self.watch = resolver.watch
        self.growth = resolver.budget_growth
        self.inductor_cache = resolver.inductor_cache
        self.baseline_path = config.getoption("npu_lazy_baseline")
        self.baseline: dict | None = None
        if self.baseline_path and not role.of(config).worker:
            try:
                self.baseline = load_baseline(self.baseline_path)
            except ReportError as exc:
                raise pytest.UsageError(f"--npu-lazy-baseline: {exc}") from None

    def _reporting(self) -> bool:
        """Only where pytest's reports are logged for good: not in xdist workers, not in isolated children."""
        return role.of(self.config).reports

    # -- collecting ---------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Before junitxml, the terminal and the session count it: judge the budget, add the properties."""
        if not self._reporting():
            return
        result = self.results.setdefault(report.nodeid, Result(report.nodeid))
        data = getattr(report, SUMMARY_ATTRIBUTE, None)
        summary = None
        if report.when == "teardown" and isinstance(data, dict):
            summary = result.summary = Summary.from_dict(data)
            if self.baseline is not None:
                self._judge_budget(report, result, summary, self.baseline)
        result.add(report)
        if summary is not None:
            report.user_properties.extend(junit_properties(result, summary))

    def _judge_budget(self, report: pytest.TestReport, result: Result, summary: Summary, baseline: dict) -> None:
        entry = baseline["tests"].get(report.nodeid)
        if entry is None:
            return
        if summary.incomplete:
            result.not_judged = "the child died before it could report what it loaded"
            return
        result.not_judged = budget.not_comparable(entry, summary)
        if result.not_judged:
            return
        problems = budget.check(entry, summary, summary.watch, self.growth)
        if not problems:
            return
        result.budget = problems
        text = budget.describe(problems, self.baseline_path, self.growth)
        if report.failed:
            report.sections.append(("npu_lazy import budget", text))
        else:
            report.outcome = "failed"
            report.longrepr = text

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """The environment as testsuite properties of the JUnit XML."""
        if not self._reporting():
            return
        xml = compat.junit_xml(self.config)
        if xml is None:
            return
        for key, value in relative_paths(self.environment(), self.path_roots()).items():
            # as the JSON report has them: lists and tables as JSON, and no path of this machine
            text = json.dumps(value) if isinstance(value, (list, tuple, dict)) else "" if value is None else str(value)
            xml.add_global_property(f"npu_lazy.{key}", text)

    # -- writing ------------------------------------------------------------
    def environment(self) -> dict:
        from .environment import describe

        return describe(self.cann, self.gate.answer if self.gate else None).to_dict()

    def document(self, exitstatus: int, with_modules: bool) -> dict:
        option = self.config.option
        run = {
            "args": [str(a) for a in self.config.invocation_params.args],
            "rootdir": str(self.config.rootpath),
            "exitstatus": int(exitstatus),
            "duration": time.time() - self.started,
            "xdist_workers": getattr(option, "numprocesses", None) if role.of(self.config).controller else None,
            "watch": list(self.watch),
            "baseline": self.baseline_path,
            "budget_growth": self.growth,
            "inductor_cache_policy": self.inductor_cache,
            "plugin_version": __version__,
        }
        return relative_paths(document(self.environment(), run, [r.entry(with_modules) for r in self.results.values()]),
                              self.path_roots())

    def path_roots(self) -> list[str]:
        """The directories that reports name paths relative to: the CANN stub's cache root, then the rootdir."""
        return [root for root in (getattr(self.cann, "cache_dir", None), str(self.config.rootpath)) if root]

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self._reporting():
            return
        option = self.config.option
        outputs = []
        if option.npu_lazy_json:
            outputs.append((option.npu_lazy_json, "JSON report", lambda: write_json(
                option.npu_lazy_json, self.document(exitstatus, option.npu_lazy_json_modules))))
        if option.npu_lazy_html:
            from .html import render

            outputs.append((option.npu_lazy_html, "HTML view",
                            lambda: write_text(option.npu_lazy_html, render(self.document(exitstatus, True)))))
        if option.npu_lazy_save_baseline:
            summaries = {r.nodeid: r.summary for r in self.results.values() if r.summary is not None}
            outputs.append((option.npu_lazy_save_baseline, "import budget baseline",
                            lambda: write_json(option.npu_lazy_save_baseline,
                                               relative_paths(budget.baseline_document(self.environment(), self.watch, summaries),
                                                              self.path_roots()))))
        for path, what, write in outputs:
            try:
                write()
                self.written.append(f"{what}: {path}")
            except OSError as exc:
                self.write_errors.append(f"cannot write the {what} to {path}: {exc}")
        if self.write_errors and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.USAGE_ERROR

    # -- the terminal -------------------------------------------------------
    def _verdict(self, result: Result) -> str | None:
        """The budget gate's word on one test, when a baseline is checked."""
        if self.baseline is None:
            return None
        if result.budget:
            return f"OVER: {budget.short(result.budget)}"
        if result.nodeid not in self.baseline["tests"]:
            return "not in the baseline, not judged"
        if result.not_judged:
            return f"not judged: {result.not_judged}"
        return "within the baseline"

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        if not self._reporting():
            return
        verbosity = config.get_verbosity()
        width = config.get_terminal_writer().fullwidth
        write = terminalreporter.write_line
        isolated = {r.nodeid: r for r in self.results.values() if r.summary is not None}
        entries = [r.entry(with_modules=verbosity > 1) for r in isolated.values()]
        listed = terminal.shown(entries, config.getoption("npu_lazy_summary"), verbosity)
        if listed:
            terminalreporter.write_sep("=", terminal.SECTION)
            for entry in listed:
                verdict = self._verdict(isolated[entry["nodeid"]])
                for text, markup in terminal.entry_lines(entry, verbosity, width, verdict):
                    write(text, **markup)
        tally = terminal.check_tally(entries)
        if tally:
            terminalreporter.write_sep("=", "npu_lazy: compiled values checked")
            for line in tally:  # a node id is never broken (pytest does not break it either)
                for text in ([line] if line.startswith("  ") else terminal.fit(line.split(" "), "", width)):
                    write(text)
        skipped = terminalreporter.stats.get("skipped", [])
        if skipped and config.getoption("npu_lazy_summary") != "none" and compat.skips_hidden_by_pytest(terminalreporter):
            terminalreporter.write_sep("=", "npu_lazy: skipped, by reason")
            for line in terminal.skip_tally([_skip_reason(report) or "" for report in skipped], width):
                write(line)
        if self.baseline is not None:
            over = [e for e in self.results.values() if e.budget]
            terminalreporter.write_sep("=", "npu_lazy import budget", red=bool(over), green=not over)
            known = [r for r in isolated.values() if r.nodeid in self.baseline["tests"]]
            judged = sum(1 for r in known if r.not_judged is None)
            if over:
                for result in over:
                    write(f"OVER BUDGET {result.nodeid}: {budget.short(result.budget or [])}", red=True)
            else:
                write(f"{judged} isolated test(s) within the budget of {self.baseline_path} "
                      f"(growth allowed: {self.growth:.0%})", green=True)
            unknown = len(isolated) - len(known)
            if unknown:
                write(f"{unknown} isolated test(s) not in the baseline, not judged")
            for reason, count in Counter(r.not_judged for r in known if r.not_judged).items():
                write(f"{count} isolated test(s) not judged, not comparable with the baseline: {reason}", yellow=True)
            if any("Inductor cache" in r.not_judged for r in known if r.not_judged):
                write("  (a cold Inductor cache compiles through more modules than a warm one; to gate every run, "
                      "record the baseline and check in the same state, e.g. each with a fresh "
                      "TORCHINDUCTOR_CACHE_DIR, or after a warm-up run)")
        for line in self.written:
            write(f"npu_lazy: wrote the {line}")
        for line in self.write_errors:
            write(f"npu_lazy: {line}", red=True)

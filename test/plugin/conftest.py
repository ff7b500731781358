"""Helpers for the plugin's own tests: run pytest in a subprocess, read every report it logged.

The recording plugin is written into each pytester directory as a conftest,
so it sees exactly what terminal, junitxml and xdist see: the reports
logged in the pytest process (the controller under xdist).
"""

from __future__ import annotations

import json
import sys
import textwrap
from dataclasses import dataclass

import pytest

RECORDING_CONFTEST = '''
import json, os

_REPORTS = []

def pytest_runtest_logreport(report):
    _REPORTS.append({
        "nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
        "wasxfail": getattr(report, "wasxfail", None) is not None,
        "longrepr": str(report.longrepr) if report.longrepr else "",
        "sections": [list(s) for s in report.sections],
        "npu_lazy": getattr(report, "npu_lazy", None),
        "npu_lazy_error": getattr(report, "npu_lazy_error", False),
    })

def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):
        return
    path = os.environ.get("NPU_LAZY_TEST_REPORTS")
    if path:
        with open(path, "w") as f:
            json.dump(_REPORTS, f)
'''


@dataclass
class Run:
    result: pytest.RunResult
    reports: list[dict]

    @property
    def outcomes(self) -> dict[str, str]:
        """nodeid -> the outcome a person sees: passed, failed, error, skipped, xfailed, xpassed."""
        final: dict[str, str] = {}
        for rep in self.reports:
            nodeid, when, outcome = rep["nodeid"], rep["when"], rep["outcome"]
            if rep["npu_lazy_error"] and outcome == "failed":
                final[nodeid] = "error"
            elif when in ("setup", "teardown") and outcome == "failed":
                final[nodeid] = "error"
            elif outcome == "skipped" and rep["wasxfail"]:
                final[nodeid] = "xfailed"
            elif when == "call" and outcome == "passed" and rep["wasxfail"]:
                final[nodeid] = "xpassed"
            elif when == "call" or (when == "setup" and outcome == "skipped"):
                final.setdefault(nodeid, outcome)
                if final[nodeid] != "error":
                    final[nodeid] = outcome
        return final

    def report(self, nodeid_suffix: str, when: str) -> dict:
        found = [r for r in self.reports if r["nodeid"].endswith(nodeid_suffix) and r["when"] == when]
        assert len(found) == 1, f"expected one {when} report for {nodeid_suffix}, got {found}"
        return found[0]

    def text(self) -> str:
        return self.result.stdout.str() + self.result.stderr.str()


@pytest.fixture
def run_pytest(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    """Run pytest in a fresh subprocess (zygotes fork it) and collect its reports."""
    pytester.makeconftest(RECORDING_CONFTEST)
    counter = iter(range(1000))

    def run(*args: str, timeout: float = 300, basetemp: bool = True) -> Run:
        """``basetemp=False``: no ``--basetemp`` (pytester adds one), so pytest picks its own directory."""
        path = pytester.path / f"reports-{next(counter)}.json"
        monkeypatch.setenv("NPU_LAZY_TEST_REPORTS", str(path))
        # test order matters in some scenarios; pytest-randomly, where installed, would shuffle it
        args = ("-p", "no:cacheprovider", "-p", "no:randomly", *args)
        if basetemp:
            result = pytester.runpytest_subprocess(*args, timeout=timeout)
        else:
            result = pytester.run(sys.executable, "-m", "pytest", *args, timeout=timeout)
        reports = json.loads(path.read_text()) if path.exists() else []
        return Run(result, reports)

    return run


@pytest.fixture
def fake_heavy_package(pytester: pytest.Pytester):
    """A package that nothing imports unless a test does: 'heavy' with submodules."""
    pkg = pytester.mkpydir("heavy")
    (pkg / "__init__.py").write_text("LOADED = True\n")
    (pkg / "core.py").write_text("from heavy import helpers\n")
    (pkg / "helpers.py").write_text("VALUE = 42\n")
    (pkg / "lazy.py").write_text(textwrap.dedent("""
        import importlib

        def setup():
            return importlib.import_module("heavy.helpers")

        def has_flag():
            pass
        has_flag.has_run = False
    """))
    return pkg


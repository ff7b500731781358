"""Helpers for the plugin's own tests: run pytest in a subprocess, read every report it logged.

The recording plugin is written into each pytester directory as a conftest,
so it sees exactly what terminal, junitxml and xdist see: the reports
logged in the pytest process (the controller under xdist).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import pytest

#: what each importable name of ``@pytest.mark.needs(...)`` is installed as
NEEDS = {"torch": "torch", "torch_npu": "torch-npu", "triton": "triton-ascend", "xdist": "pytest-xdist", "pytest_timeout": "pytest-timeout",
         "pytest_forked": "pytest-forked"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs(*modules): skip, saying so, unless these modules are installed "
                                       f"(one of {', '.join(NEEDS)})")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for mark in item.iter_markers("needs"):
            unknown = [m for m in mark.args if m not in NEEDS]
            if unknown:
                raise pytest.UsageError(f"{item.nodeid}: needs({', '.join(unknown)}): not one of {', '.join(NEEDS)}")
            missing = [NEEDS[m] for m in mark.args if find_spec(m) is None]
            if missing:
                item.add_marker(pytest.mark.skip(reason=f"needs {', '.join(missing)}, which is not installed"))


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

    def run(*args: str, timeout: float = 300, basetemp: bool = True, python: str | None = None) -> Run:
        """``basetemp=False``: no ``--basetemp`` (pytester adds one), so pytest picks its own directory.

        ``python``: run that interpreter's pytest instead of this one's (with ``--basetemp`` as pytester's).
        """
        path = pytester.path / f"reports-{next(counter)}.json"
        monkeypatch.setenv("NPU_LAZY_TEST_REPORTS", str(path))
        # test order matters in some scenarios; pytest-randomly, where installed, would shuffle it
        args = ("-p", "no:cacheprovider", "-p", "no:randomly", *args)
        if python is not None:
            args = (*args, f"--basetemp={pytester.path / f'basetemp-{next(counter)}'}")
            result = pytester.run(python, "-m", "pytest", *args, timeout=timeout)
        elif basetemp:
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



# -- the CANN tests (test_cann, test_cann_emulation, test_cann_plugin) ---------------

@pytest.fixture(scope="session")
def installed_spec():
    """What the installed torch_npu needs from CANN (``cann.StubSpec``); a skip without torch_npu."""
    from pytest_npu_lazy import cann

    if find_spec("torch_npu") is None:
        pytest.skip("needs torch_npu (pip install torch-npu), which is not installed")
    return cann.analyse()


@pytest.fixture(scope="session")
def stub_cache(tmp_path_factory) -> Path:
    """One cache shared by the tests that only need *a* stub, so it is built once."""
    return tmp_path_factory.mktemp("cann-cache")


@pytest.fixture
def without_inherited_stub(monkeypatch):
    """This pytest process activated the stub, and its children inherit it through LD_LIBRARY_PATH."""
    from pytest_npu_lazy.cann import ENV_MODE, MANIFEST_NAME

    kept = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
            if d and not os.path.isfile(os.path.join(d, MANIFEST_NAME))]
    monkeypatch.setenv("LD_LIBRARY_PATH", os.pathsep.join(kept))
    monkeypatch.delenv(ENV_MODE, raising=False)


# -- pytest-forked, on a pytest it supports ---------------------------------------

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def forked_python(tmp_path_factory) -> str:
    """A Python whose pytest runs pytest-forked: a side venv (benchmarks/forked_venv.py) with an older pytest.

    It sees this venv's packages, and this checkout's plugin through
    PYTHONPATH. When it cannot be built, the tests using it fail in CI
    (``CI`` set) and skip elsewhere, saying why.
    """
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from benchmarks.forked_venv import FORKED_PYTEST, make_forked_venv, python_of

    venv = tmp_path_factory.mktemp("forked") / "venv"
    error = make_forked_venv(venv)
    if error is None:
        import subprocess

        probe = subprocess.run([str(python_of(venv)), "-c", "import pytest, pytest_forked, pytest_npu_lazy; "
                                "print(pytest.__version__)"], capture_output=True, text=True,
                               env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                                   p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)))
        if probe.returncode != 0 or probe.stdout.strip() != FORKED_PYTEST:
            error = (f"the side venv for pytest-forked does not give pytest {FORKED_PYTEST} with pytest-forked "
                     f"and this plugin: {(probe.stdout + probe.stderr)[-800:]}")
    if error is not None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(error)
        pytest.skip(f"needs a side venv with pytest {FORKED_PYTEST} and pytest-forked, which could not be made: {error}")
    return str(python_of(venv))


"""The plugin's own suite ends in failure when a warning nobody explained reaches its warnings summary.

A user reads every warning a run shows as something to act on. Each one this
suite can show is either hidden by the plugin with its reason in the header
(pytest_npu_lazy/reports/known_warnings.py), filtered by the test that causes
it, or explained below and in the README. A new one fails the run, naming
itself and these three places, so it is explained before a user meets it.
"""

from __future__ import annotations

import re

import pytest

#: (message pattern, category name, why it is shown and left alone)
EXPLAINED = (
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", "FutureWarning",
     "torch 2.13's own: its ONNX exporter copies a tree spec holding a LeafSpec (test/dynamo/test_export.py); "
     "raised inside torch, under its own warning filters, so a test's filter does not reach it"),
)

_SEEN = pytest.StashKey[list]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SEEN] = []


def pytest_warning_recorded(warning_message, when, nodeid, location) -> None:
    config = _CONFIG[0]
    if config is None:
        return
    message, category = str(warning_message.message), warning_message.category.__name__
    if any(re.match(pattern, message) and category == name for pattern, name, _ in EXPLAINED):
        return
    config.stash[_SEEN].append(f"{nodeid or when}: {category}: {message.splitlines()[0][:200]}")


_CONFIG: list = [None]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _CONFIG[0] = None if hasattr(session.config, "workerinput") else session.config  # the controller judges


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    seen = session.config.stash.get(_SEEN, [])
    if _CONFIG[0] is None or not seen or exitstatus != 0:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = ["unexplained warnings in the plugin's own suite (a user would read each as theirs to act on):",
             *(f"  {line}" for line in dict.fromkeys(seen)),
             "hide it with its reason (pytest_npu_lazy/reports/known_warnings.py), filter it in the test that "
             "causes it, or explain it in test/warning_gate.py's EXPLAINED and the README"]
    if reporter is not None:
        reporter.write_line("\n".join(lines), red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED

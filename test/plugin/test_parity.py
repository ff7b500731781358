"""Isolated tests behave like in-process ones: warnings as errors, temporary paths, environment.

Each scenario runs the same test files twice, in-process (``--npu-lazy-isolate=off``)
and with every test isolated in a bare zygote (``--npu-lazy-isolate=all
--npu-lazy-preload=``), and compares what a user sees.
"""

from __future__ import annotations

import getpass
import json

import pytest

IN_PROCESS = ("--npu-lazy-isolate=off",)
ISOLATED = ("--npu-lazy-isolate=all", "--npu-lazy-preload=")

EVERYDAY_TESTS = """
import logging, os, sys, warnings
import pytest

def test_prints(capsys):
    print("out")
    print("err", file=sys.stderr)
    assert capsys.readouterr().out == "out\\n"

def test_writes_to_fd(capfd):
    os.write(1, b"fd out\\n")
    assert "fd out" in capfd.readouterr().out

def test_tmp_path(tmp_path):
    (tmp_path / "x").write_text("x")

def test_logs(caplog):
    logging.getLogger("x").warning("w")
    assert "w" in caplog.text

def test_expected_warning():
    with pytest.warns(UserWarning):
        warnings.warn("expected")

def test_unexpected_warning_is_an_error():
    warnings.warn("boom", DeprecationWarning)

def test_fails():
    assert 1 == 2
"""


@pytest.mark.parametrize("capture", ["--capture=fd", "--capture=sys", "-s"])
def test_warnings_as_errors_give_the_in_process_outcomes(run_pytest, pytester, capture):
    """The child's capture must not leave unclosed files behind (ResourceWarning under -W error)."""
    pytester.makeini("[pytest]\nfilterwarnings =\n    error\n")
    pytester.makepyfile(test_everyday=EVERYDAY_TESTS)
    in_process = run_pytest("-W", "error", capture, *IN_PROCESS)
    isolated = run_pytest("-W", "error", capture, *ISOLATED)
    assert isolated.outcomes == in_process.outcomes, isolated.text()
    assert in_process.outcomes == {
        **{f"test_everyday.py::{name}": "passed" for name in
           ("test_prints", "test_writes_to_fd", "test_tmp_path", "test_logs", "test_expected_warning")},
        "test_everyday.py::test_unexpected_warning_is_an_error": "failed",
        "test_everyday.py::test_fails": "failed",
    }, in_process.text()


TMP_TESTS = """
import pytest

@pytest.mark.parametrize("name", ["a", "b", "c"])
def test_writes(tmp_path, tmp_path_factory, name):
    (tmp_path / f"{name}.txt").write_text(name)
    (tmp_path_factory.mktemp(f"shared-{name}") / "f.txt").write_text(name)
    assert tmp_path.parent == tmp_path_factory.getbasetemp()

def test_fails_and_keeps_its_files(tmp_path):
    (tmp_path / "kept.txt").write_text("kept")
    assert False
"""


def _files_under(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_tmp_paths_live_in_the_session_basetemp(run_pytest, pytester, monkeypatch):
    """One basetemp per session, the retention policy applied, no stale locks: as in-process."""
    pytester.makeini("[pytest]\ntmp_path_retention_policy = failed\n")
    pytester.makepyfile(test_tmp=TMP_TESTS)
    temproot = pytester.path / "temproot"
    layouts = {}
    for mode, args in (("in-process", IN_PROCESS), ("isolated", ISOLATED)):
        monkeypatch.setenv("PYTEST_DEBUG_TEMPROOT", str(temproot / mode))
        (temproot / mode).mkdir(parents=True)
        run = run_pytest(*args, basetemp=False)
        assert set(run.outcomes.values()) == {"passed", "failed"}, run.text()
        user_root = temproot / mode / f"pytest-of-{getpass.getuser()}"
        sessions = [p for p in user_root.iterdir() if p.name.startswith("pytest-") and not p.is_symlink()]
        assert len(sessions) == 1, f"{mode}: one basetemp per session, got {sorted(p.name for p in sessions)}"
        assert not list(user_root.rglob("*.lock")), f"{mode}: stale locks"
        layouts[mode] = _files_under(sessions[0])
    assert layouts["isolated"] == layouts["in-process"]
    assert "test_fails_and_keeps_its_files0/kept.txt" in layouts["isolated"]
    assert not any(path.startswith("test_writes") for path in layouts["isolated"])  # passed: removed


@pytest.mark.needs("xdist")
def test_isolated_tests_never_delete_each_others_files(run_pytest, pytester):
    """With --basetemp and -n 2, every test's directory survives the tests after it."""
    pytester.makepyfile(test_tmp=TMP_TESTS)
    basetemp = pytester.path / "given-basetemp"
    run = run_pytest("-n", "2", f"--basetemp={basetemp}", *ISOLATED)
    assert sum(v == "passed" for v in run.outcomes.values()) == 3, run.text()
    names = {p.rsplit("/", 1)[-1] for p in _files_under(basetemp)}
    assert {"a.txt", "b.txt", "c.txt", "kept.txt"} <= names, _files_under(basetemp)
    assert sum(p.endswith("/f.txt") for p in _files_under(basetemp)) == 3


ENVIRONMENT_TESTS = """
import json, os, signal

def describe(handler):
    return getattr(handler, "__qualname__", None) or repr(handler)

def test_records_what_it_sees():
    seen = {"autoload": os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD"),
            "handlers": {s.name: describe(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM)}}
    with open(os.environ["SEEN"], "w") as f:
        json.dump(seen, f)
"""


def test_child_environment_is_what_an_in_process_test_sees(run_pytest, pytester, monkeypatch):
    """No TORCH_DEVICE_BACKEND_AUTOLOAD a bare baseline does not need, and pytest's own signal handlers."""
    monkeypatch.delenv("TORCH_DEVICE_BACKEND_AUTOLOAD", raising=False)
    pytester.makepyfile(test_environment=ENVIRONMENT_TESTS)
    seen = {}
    for mode, args in (("in-process", IN_PROCESS), ("isolated", ISOLATED)):
        monkeypatch.setenv("SEEN", str(pytester.path / f"{mode}.json"))
        run = run_pytest(*args)
        assert set(run.outcomes.values()) == {"passed"}, run.text()
        seen[mode] = json.loads((pytester.path / f"{mode}.json").read_text())
    assert seen["isolated"] == seen["in-process"]
    assert seen["isolated"]["autoload"] is None


def test_a_preload_still_gets_autoload_off(run_pytest, pytester, monkeypatch, fake_heavy_package):
    """What a baseline's settings need is still set: a zygote that preloads keeps autoload off."""
    monkeypatch.delenv("TORCH_DEVICE_BACKEND_AUTOLOAD", raising=False)
    pytester.makepyfile(test_preloaded="""
        import os
        import pytest

        @pytest.mark.npu_lazy(preload=["heavy"])
        def test_preloaded():
            assert os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD") == "0"

        @pytest.mark.npu_lazy(preload=[], autoload=True)
        def test_asked_for_autoload():
            assert os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD") == "1"
    """)
    run = run_pytest()
    assert set(run.outcomes.values()) == {"passed"}, run.text()

"""Fork, spawn, pytest-xdist and pytest-forked give the same outcomes; options are discoverable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from outcome_kinds import ALL_KINDS, EXPECTED

pytestmark = pytest.mark.usefixtures("fake_heavy_package")

CLEAN_AND_BROKEN = """
import pytest

@pytest.mark.npu_lazy(preload=[])
def test_clean(npu_lazy):
    npu_lazy.assert_not_loaded("heavy")
    import heavy.core
    assert npu_lazy.first_loaded("heavy.helpers") == "test"

@pytest.mark.npu_lazy(preload=[])
def test_broken(npu_lazy):
    import heavy.core
    npu_lazy.assert_not_loaded("heavy")
"""


def _short(outcomes):
    return {k.split("::", 1)[1]: v for k, v in outcomes.items()}


def test_spawn_gives_the_same_outcomes_as_fork(run_pytest, pytester):
    pytester.makepyfile(test_kinds=ALL_KINDS, test_clean=CLEAN_AND_BROKEN)
    spawned = run_pytest("--npu-lazy-isolation=spawn")
    forked = run_pytest()
    assert spawned.outcomes == forked.outcomes, spawned.text()
    assert _short({k: v for k, v in spawned.outcomes.items() if "kinds" in k}) == EXPECTED
    assert spawned.outcomes["test_clean.py::test_broken"] == "failed"
    summaries = {r["npu_lazy"]["isolation"] for r in spawned.reports if r["npu_lazy"]}
    assert summaries == {"spawn"}


@pytest.mark.needs("xdist")
def test_xdist_gives_the_same_outcomes(run_pytest, pytester):
    pytester.makepyfile(test_kinds=ALL_KINDS, test_clean=CLEAN_AND_BROKEN)
    distributed = run_pytest("-n", "2")
    single = run_pytest("-n", "0")
    assert distributed.outcomes == single.outcomes, distributed.text()
    assert _short({k: v for k, v in distributed.outcomes.items() if "kinds" in k}) == EXPECTED
    assert "2 workers" in distributed.result.stdout.str()


@pytest.mark.needs("pytest_forked")
def test_marked_tests_use_the_zygote_under_forked(run_pytest, pytester):
    pytester.makepyfile(test_a_polluter="""
        import heavy.core

        def test_polluter():
            pass
    """, test_b_forked="""
        import pytest

        @pytest.mark.npu_lazy(preload=[])
        def test_marked(npu_lazy):
            npu_lazy.assert_not_loaded("heavy")
            assert npu_lazy.isolation == "fork"
    """)
    run = run_pytest("--forked")
    assert run.outcomes["test_b_forked.py::test_marked"] == "passed", run.text()


def test_guard_under_pytest_forked(run_pytest, pytester, forked_python, monkeypatch):
    """Unmarked tests fork the polluted parent there; the guard says so.

    pytest-forked 1.7.5 fails every test on pytest 9.2, so this runs on the
    pytest of a side venv that it supports (the ``forked_python`` fixture).
    """
    from benchmarks.forked_venv import FORKED_PYTEST

    repo = str(Path(__file__).resolve().parents[2])  # the side venv does not see an editable install's .pth
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p))
    pytester.makepyfile(test_a_polluter="""
        import heavy.core

        def test_polluter():
            pass
    """, test_b_forked="""
        def test_unmarked_uses_probe(npu_lazy):
            npu_lazy.assert_not_loaded("heavy")
    """)
    run = run_pytest("--forked", python=forked_python)
    assert f"pytest-{FORKED_PYTEST}," in run.text(), run.text()  # the side venv's pytest ran
    assert run.outcomes["test_b_forked.py::test_unmarked_uses_probe"] == "error", run.text()
    message = run.report("test_unmarked_uses_probe", "call")["longrepr"]
    assert "The test started from a fork of the pytest process (pytest-forked)" in message


def test_isolate_all_and_off(run_pytest, pytester):
    pytester.makepyfile(test_any="""
        import os

        def test_pid():
            print(os.getpid())
    """)
    isolated = run_pytest("--npu-lazy-isolate=all")
    plain = run_pytest("--npu-lazy-isolate=off")
    assert isolated.outcomes == plain.outcomes == {"test_any.py::test_pid": "passed"}
    isolated_summary = isolated.report("test_pid", "teardown")["npu_lazy"]
    assert isolated_summary["isolation"] == "fork"
    assert plain.report("test_pid", "teardown")["npu_lazy"] is None


def test_marker_misuse_is_an_error_naming_the_fix(run_pytest, pytester):
    pytester.makepyfile(test_bad="""
        import pytest

        @pytest.mark.npu_lazy(preloads=["torch"])
        def test_unknown_option():
            pass

        @pytest.mark.npu_lazy(preload="torch")
        def test_wrong_type():
            pass

        @pytest.mark.npu_lazy("torch")
        def test_positional():
            pass

        @pytest.mark.npu_lazy(isolation="thread")
        def test_bad_mode():
            pass

        def test_unaffected():
            pass
    """)
    run = run_pytest()
    assert run.outcomes == {
        "test_bad.py::test_unknown_option": "error",
        "test_bad.py::test_wrong_type": "error",
        "test_bad.py::test_positional": "error",
        "test_bad.py::test_bad_mode": "error",
        "test_bad.py::test_unaffected": "passed",
    }, run.text()
    assert "unknown option 'preloads'. Did you mean 'preload'?" in run.report("test_unknown_option", "setup")["longrepr"]
    assert "preload must be a list of strings, got str 'torch'; write preload=['torch']" in \
        run.report("test_wrong_type", "setup")["longrepr"]
    assert "takes keyword options only" in run.report("test_positional", "setup")["longrepr"]
    assert "isolation='thread' is not a mode; choose 'fork' or 'spawn'" in run.report("test_bad_mode", "setup")["longrepr"]


def test_bad_ini_value_is_a_usage_error(run_pytest, pytester):
    pytester.makeini("[pytest]\nnpu_lazy_isolation = threads\n")
    run = run_pytest()
    assert run.result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ini npu_lazy_isolation = 'threads' is not valid; choose one of fork, spawn" in run.text()


def test_markers_and_fixtures_are_documented(pytester):
    markers = pytester.runpytest_subprocess("--markers").stdout.str()
    assert "@pytest.mark.npu_lazy(preload=[...], isolation='fork'|'spawn'" in markers
    fixtures = pytester.runpytest_subprocess("--fixtures").stdout.str()
    assert "npu_lazy -- " in fixtures
    assert "Deferred-loading probe" in fixtures
    help_text = pytester.runpytest_subprocess("--help").stdout.str()
    for option in ("--npu-lazy-isolate", "--npu-lazy-isolation", "--npu-lazy-preload", "npu_lazy_preload"):
        assert option in help_text

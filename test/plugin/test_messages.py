"""What the plugin says: each message names the real cause and a fix that applies to this run."""

from __future__ import annotations

import pytest
from packaging.version import Version

from pytest_npu_lazy.reports.environment import triton_flavour

PYTEST_9 = Version(pytest.__version__) >= Version("9")
PYTEST_9_1 = Version(pytest.__version__) >= Version("9.1")

pytestmark = pytest.mark.usefixtures("fake_heavy_package")


def test_positional_marker_suggestion_keeps_the_list(run_pytest, pytester):
    pytester.makepyfile(test_pos="""
        import pytest

        @pytest.mark.npu_lazy(["heavy"])
        def test_list():
            pass

        @pytest.mark.npu_lazy("heavy", "json")
        def test_names():
            pass
    """)
    run = run_pytest()
    assert run.outcomes == {"test_pos.py::test_list": "error", "test_pos.py::test_names": "error"}, run.text()
    assert "write e.g. @pytest.mark.npu_lazy(preload=['heavy'])." in run.report("test_list", "setup")["longrepr"]
    assert "write e.g. @pytest.mark.npu_lazy(preload=['heavy', 'json'])." in \
        run.report("test_names", "setup")["longrepr"]


def test_bad_boolean_ini_names_the_key(run_pytest, pytester):
    pytester.makeini("[pytest]\nnpu_lazy_autoload = maybe\n")
    pytester.makepyfile(test_any="def test_any():\n    pass\n")
    run = run_pytest()
    assert run.result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ini npu_lazy_autoload: invalid truth value 'maybe'; use true or false" in run.text()


GUARDED = """
import pytest

@pytest.mark.npu_lazy(preload=["heavy.core"])
def test_marker_preload(npu_lazy):
    npu_lazy.assert_not_loaded("heavy.helpers")

@pytest.mark.npu_lazy()
def test_ini_preload(npu_lazy):
    npu_lazy.assert_not_loaded("heavy.helpers")
"""


def test_guard_says_where_the_preload_came_from(run_pytest, pytester):
    pytester.makeini("[pytest]\nnpu_lazy_preload = heavy.core\n")
    pytester.makepyfile(test_guarded=GUARDED)
    run = run_pytest()
    assert set(run.outcomes.values()) == {"error"}, run.text()
    marker = run.report("test_marker_preload", "call")["longrepr"]
    # the fix is the marker with the entry that loads it taken out, ready to paste
    assert "Fix: 'heavy.core' loads it: take it out of this test's marker: @pytest.mark.npu_lazy(preload=[])." \
        in marker
    assert "ini npu_lazy_preload" not in marker
    ini = run.report("test_ini_preload", "call")["longrepr"]
    assert ("'heavy.core' loads it: take it out of ini npu_lazy_preload (now ['heavy.core']), or give this test its "
            "own preload: @pytest.mark.npu_lazy(preload=[]).") in ini
    cli = run_pytest("--npu-lazy-preload=heavy.core", "-k", "ini_preload")
    assert "take it out of --npu-lazy-preload (now ['heavy.core'])" in cli.report("test_ini_preload", "call")["longrepr"]


def test_guard_under_isolate_off_does_not_suggest_the_marker(run_pytest, pytester):
    pytester.makeconftest(pytester.path.joinpath("conftest.py").read_text() + "\nimport heavy.core\n")
    pytester.makepyfile(test_guarded=GUARDED)
    run = run_pytest("--npu-lazy-isolate=off", "-k", "marker_preload")
    message = run.report("test_marker_preload", "call")["longrepr"]
    assert "The test started from the pytest process (isolation switched off)" in message, run.text()
    assert "this run has isolation switched off (--npu-lazy-isolate=off" in message
    assert "run the test isolated with @pytest.mark.npu_lazy" not in message


def test_fixture_without_the_marker_warns(run_pytest, pytester):
    pytester.makepyfile(test_unmarked="""
        import pytest

        def test_forgot_the_marker(npu_lazy):
            npu_lazy.assert_not_loaded("heavy")

        @pytest.mark.npu_lazy(preload=[])
        def test_marked(npu_lazy):
            npu_lazy.assert_not_loaded("heavy")
    """)
    run = run_pytest("-W", "error::pytest_npu_lazy.errors.NpuLazyWarning")
    assert run.outcomes == {"test_unmarked.py::test_forgot_the_marker": "error",
                            "test_unmarked.py::test_marked": "passed"}, run.text()
    message = run.report("test_forgot_the_marker", "setup")["longrepr"]
    assert "uses the npu_lazy fixture but has no @pytest.mark.npu_lazy, so it runs in the pytest process" in message
    quiet = run_pytest("--npu-lazy-isolate=off", "-W", "error::pytest_npu_lazy.errors.NpuLazyWarning")
    assert set(quiet.outcomes.values()) == {"passed"}, quiet.text()  # in-process on purpose: no warning


def test_verbose_summary_wraps_long_lines(run_pytest, pytester, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    pytester.makepyfile(test_many="""
        import pytest

        @pytest.mark.npu_lazy(preload=[])
        def test_many_modules():
            import asyncio, email.mime.text, http.client, json, unittest, xml.dom.minidom
    """)
    run = run_pytest("-vv")
    summary = run.result.stdout.str().split("npu_lazy: phases and watched modules", 1)[1]
    assert "asyncio.base_events" in summary
    assert max(len(line) for line in summary.splitlines()) <= 100, summary


def test_zygote_death_is_not_prefixed_twice(run_pytest, pytester):
    pytester.makepyfile(test_zygote="""
        import os, signal, time
        import pytest

        @pytest.mark.npu_lazy(preload=[])
        def test_kills_its_zygote():
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(30)
    """)
    run = run_pytest("-rE")
    assert run.outcomes == {"test_zygote.py::test_kills_its_zygote": "error"}, run.text()
    assert "ERROR: the zygote" not in run.text()
    if PYTEST_9:  # pytest 8 writes no message after an error's node id in the short summary
        assert "ERROR test_zygote.py::test_kills_its_zygote - the zygote (pid" in run.text()
    failures = [r["longrepr"] for r in run.reports if r["outcome"] == "failed"]
    assert any(text.startswith("the zygote (pid") for text in failures), failures


def test_preload_loggers_do_not_flood_captured_logs(run_pytest, pytester):
    """Like torch's always-DEBUG ``torch.__trace``: a non-propagating logger that the preload creates."""
    pytester.makepyfile(chatty="""
        import logging

        trace = logging.getLogger("chatty.trace")
        trace.setLevel(logging.DEBUG)
        trace.propagate = False

        def work():
            trace.debug("chatty debug record")
            logging.getLogger("chatty.trace").warning("chatty warning record")
    """, test_chatty="""
        import pytest

        @pytest.mark.npu_lazy(preload=["chatty"])
        def test_preloaded():
            import chatty
            chatty.work()
            assert 0

        def test_in_process():
            import chatty
            chatty.work()
            assert 0
    """)
    run = run_pytest()
    for name in ("test_preloaded", "test_in_process"):
        logs = dict(map(tuple, run.report(name, "call")["sections"])).get("Captured log call", "")
        assert "chatty debug record" not in logs, (name, logs)
    if not PYTEST_9_1:  # older pytest captures only what reaches the root logger: this logger's records never do
        return
    preloaded = dict(map(tuple, run.report("test_preloaded", "call")["sections"]))["Captured log call"]
    assert "chatty warning record" in preloaded  # at pytest's level records still arrive
    debug = run_pytest("--log-level=DEBUG", "-k", "preloaded")
    assert "chatty debug record" in dict(map(tuple, debug.report("test_preloaded", "call")["sections"])).get(
        "Captured log call", ""), debug.text()


def test_false_triton_ascend_warning_is_hidden_with_its_reason(run_pytest, pytester):
    if triton_flavour()[0] != "triton-ascend":
        pytest.skip("needs triton-ascend, which is not installed: the warning is only false with it")
    pytester.makepyfile(test_warns="""
        import warnings
        import pytest

        @pytest.mark.npu_lazy(preload=[])
        def test_like_the_first_compiled_call():
            warnings.warn("triton-ascend is not installed. Please install it first.")
    """)
    run = run_pytest("--npu-lazy-cann=stub", "-v")  # -v: the header gives each hidden warning's reason
    assert run.outcomes == {"test_warns.py::test_like_the_first_compiled_call": "passed"}, run.text()
    assert "Please install it first" not in run.text()
    assert "npu_lazy: hiding the warning 'triton-ascend is not installed': triton-ascend" in run.text()
    assert "finds no GPU or NPU device on the CANN host stub" in run.text()

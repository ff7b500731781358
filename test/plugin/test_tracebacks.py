"""A failing test reads as it does without the plugin: no frames of its import recorder or call tracking."""

from __future__ import annotations

import pytest

IN_PROCESS = ("--npu-lazy-isolate=off",)
ISOLATED = ("--npu-lazy-isolate=all", "--npu-lazy-preload=")

FAILING_IMPORTS = """
import pytest

def test_missing_module():
    import no_such_module_anywhere

def test_module_raises_while_importing(tmp_path, monkeypatch):
    (tmp_path / "raises_on_import.py").write_text("import json\\nraise ValueError('broken module')\\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import raises_on_import

@pytest.mark.npu_lazy(preload=[], track=["tracked_mod:explode"])
def test_tracked_function_raises(tmp_path, monkeypatch, npu_lazy):
    (tmp_path / "tracked_mod.py").write_text("def explode():\\n    raise KeyError('tracked')\\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import tracked_mod
    tracked_mod.explode()
"""


@pytest.mark.parametrize("style", ["long", "native"])
def test_tracebacks_show_no_plugin_frames(run_pytest, pytester, style):
    pytester.makepyfile(test_failing_imports=FAILING_IMPORTS)
    for args in (ISOLATED, IN_PROCESS):
        run = run_pytest(f"--tb={style}", *args)
        assert set(run.outcomes.values()) == {"failed"}, run.text()
        failures = run.result.stdout.str().split("= FAILURES =", 1)[1].split("short test summary", 1)[0]
        for name in ("no_such_module_anywhere", "broken module", "KeyError: 'tracked'"):
            assert name in failures
        for frame in ("recorder.py", "tracking.py", "_find_and_load", "pytest_npu_lazy/"):
            assert frame not in failures, f"{args}: {frame} in\n{failures}"


MISUSED_PROBE = """
import pytest

@pytest.mark.npu_lazy(preload=[])
def test_phase_used_twice(npu_lazy):
    with npu_lazy.phase("a"):
        pass
    with npu_lazy.phase("a"):
        pass

@pytest.mark.npu_lazy(preload=["json"])
def test_guard_on_a_preloaded_module(npu_lazy):
    npu_lazy.assert_not_loaded("json")

@pytest.mark.npu_lazy(preload=[], block=["turtle"])
def test_blocked_import(npu_lazy):
    import turtle
"""


@pytest.mark.parametrize("args", [ISOLATED, IN_PROCESS], ids=["isolated", "in-process"])
def test_a_misused_probe_or_a_broken_guard_is_reported_at_the_tests_line(run_pytest, pytester, args):
    """ProbeUsageError, BaselineContaminatedError and a blocked import end at the test's own line: the probe's
    modules hide their frames (``__tracebackhide__``), and a phase name is checked before the ``with`` block's
    machinery runs, so no contextlib frame shows either."""
    pytester.makepyfile(test_misused=MISUSED_PROBE)
    run = run_pytest("--tb=long", *args)
    assert set(run.outcomes.values()) <= {"failed", "error"} and len(run.outcomes) == 3, run.text()
    shown = run.result.stdout.str().split("= ERRORS =", 1)[-1].split("short test summary", 1)[0]
    for text in ("ProbeUsageError: phase 'a' was already used", "BaselineContaminatedError: npu_lazy guard: 'json'",
                 "ModuleNotFoundError"):
        assert text in run.result.stdout.str(), text
    for frame in ("pytest_npu_lazy/", "contextlib.py", "fixture.py", "state.py", "blocking.py"):
        assert frame not in shown, f"{frame} in\n{shown}"


def test_a_chain_shows_the_plugins_machinery_as_one_link(monkeypatch):
    """A zygote's preload goes through the plugin's fork server, channel and message loop: nine links a reader
    of a guard's message has no use for. The first says where the plugin asked; the rest are counted."""
    from pytest_npu_lazy.probe.recorder import ImportRecorder

    recorder = ImportRecorder()
    machinery = [(f"pytest_npu_lazy.{part}", f"pytest_npu_lazy/{part}.py:1 in f") for part in
                 ("isolation.preload", "isolation.zygote_side.server", "forks.server", "forks.channel")]
    monkeypatch.setattr(recorder, "links", lambda name: [("torch", None), *machinery, ("runpy", None)])
    assert recorder.link_texts("torch") == [
        "torch", "pytest_npu_lazy.isolation.preload (pytest_npu_lazy/isolation.preload.py:1 in f) "
                 "(+3 links of pytest-npu-lazy)", "runpy"]
    one = [("torch", None), ("pytest_npu_lazy.probe.fixture", "fixture.py:145 in NpuLazy.compile"), ("test_x", "t")]
    monkeypatch.setattr(recorder, "links", lambda name: one)
    assert recorder.link_texts("torch") == ["torch", "pytest_npu_lazy.probe.fixture (fixture.py:145 in "
                                            "NpuLazy.compile)", "test_x (t)"]  # one link: where the test called

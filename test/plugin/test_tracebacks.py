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

"""Warnings a user cannot act on: explained once in the header, hidden below every filter of the user's.

And what children and zygotes captured is shown without terminal control
sequences (triton-ascend colours its own warning's text).
"""

from __future__ import annotations

import pytest

from pytest_npu_lazy.reports.known_warnings import ASCEND_HOME_PATH, SCRIPT_METHOD, _torch_file, hidden_warnings

ESC = "\x1b"

COLOURED = """
import warnings
import pytest

@pytest.mark.npu_lazy(preload=[])
def test_like_triton_ascends_driver_check():
    warnings.warn("\\x1b[31;20m[Errno 2] No such file or directory: 'bishengir'\\x1b[0m")
"""


def test_colour_codes_are_stripped_from_captured_warnings(run_pytest, pytester):
    pytester.makepyfile(test_coloured=COLOURED)
    run = run_pytest()
    assert run.outcomes == {"test_coloured.py::test_like_triton_ascends_driver_check": "passed"}, run.text()
    summary = run.result.stdout.str().split("warnings summary", 1)[1]
    assert "UserWarning: [Errno 2] No such file or directory: 'bishengir'\n" in summary, summary
    assert ESC not in run.text()


SCRIPT_METHOD_TESTS = f"""
import warnings
import pytest

def like_torch_utils_mkldnn_imported():
    for _ in range(14):
        warnings.warn("{SCRIPT_METHOD}. Please switch to `torch.compile` or `torch.export`.", DeprecationWarning)

@pytest.mark.npu_lazy(preload=[])
def test_isolated():
    like_torch_utils_mkldnn_imported()

def test_in_process():
    like_torch_utils_mkldnn_imported()
"""


@pytest.mark.needs("torch")
def test_torchs_script_method_deprecation_is_explained_and_the_users_filters_still_see_it(run_pytest, pytester):
    pytester.makepyfile(test_jit=SCRIPT_METHOD_TESTS)
    run = run_pytest("-v")  # each hidden warning's reason is in the header with -v
    assert set(run.outcomes.values()) == {"passed"}, run.text()
    text = run.text()
    assert f"npu_lazy: hiding the warning '{SCRIPT_METHOD}': torch " in text
    assert "own torch/utils/mkldnn.py calls torch.jit.script_method 14 times as it is imported" in text
    assert "Please switch" not in text and "warnings summary" not in text, text

    shown = run_pytest("-W", "default")  # any filter of the user's beats the plugin's
    assert "DeprecationWarning: `torch.jit.script_method` is deprecated" in shown.text()
    summary = shown.text().split("warnings summary", 1)[1]
    assert "test_jit.py::test_isolated" in summary and "test_jit.py::test_in_process" in summary, summary

    strict = run_pytest("-W", "error")
    assert set(strict.outcomes.values()) == {"failed"}, strict.text()
    pytester.makeini("[pytest]\nfilterwarnings =\n    error\n")  # the user's ini lines come after the plugin's
    strict_ini = run_pytest()
    assert set(strict_ini.outcomes.values()) == {"failed"}, strict_ini.text()
    assert "DeprecationWarning: `torch.jit.script_method` is deprecated" in strict_ini.text()


@pytest.mark.needs("torch")
def test_the_script_method_explanation_is_read_from_the_installed_torch():
    caller = _torch_file("utils", "mkldnn.py")
    script = _torch_file("jit", "_script.py")
    if caller is None or script is None or SCRIPT_METHOD not in script.read_text():
        pytest.skip("needs a torch whose torch/utils/mkldnn.py sets off the torch.jit.script_method deprecation "
                    "warning: this torch does not")
    from pytest_npu_lazy.cann import CannStatus

    (hidden,) = [h for h in hidden_warnings(CannStatus("off", "off", None, None, "")) if h.message == SCRIPT_METHOD]
    assert hidden.filter == f"ignore:{SCRIPT_METHOD}:DeprecationWarning"
    assert f"calls torch.jit.script_method {caller.read_text().count('@torch.jit.script_method')} times" in hidden.reason


@pytest.fixture
def printing_preload(pytester, monkeypatch):
    """A preload that prints what torch_npu prints at import without CANN's set_env.sh."""
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(pytester.path), prepend=":")  # the zygote imports it from there
    pytester.makepyfile(printing=f"print({ASCEND_HOME_PATH!r})\n",
                        chatty=f"print({ASCEND_HOME_PATH!r})\nprint('and something else')\n",
                        test_preloaded="""
        import pytest

        @pytest.mark.npu_lazy(preload=["printing"])
        def test_preloaded():
            pass

        @pytest.mark.npu_lazy(preload=["chatty"])
        def test_chatty():
            pass
    """)
    return pytester


@pytest.mark.needs("torch_npu")
def test_ascend_home_path_on_the_stub_is_explained_not_passed_on(run_pytest, printing_preload):
    run = run_pytest("--npu-lazy-cann=stub", "-v")
    assert set(run.outcomes.values()) == {"passed"}, run.text()
    text = run.text()
    assert (f"npu_lazy: hiding the warning '{ASCEND_HOME_PATH}': torch_npu prints it at import when CANN's "
            "environment script (set_env.sh) was not sourced") in text
    assert "harmless on the CANN host stub" in text
    summary = text.split("warnings summary", 1)[1]
    assert "preload ['printing'] printed" not in summary, summary  # only that line: hidden
    assert "preload ['chatty'] printed:\n  Warning: ASCEND_HOME_PATH" in summary  # with more: all of it shown
    assert "and something else" in summary

    shown = run_pytest("--npu-lazy-cann=stub", "-W", "default")
    assert "preload ['printing'] printed:\n  Warning: ASCEND_HOME_PATH" in shown.text(), shown.text()


def test_the_users_filters_apply_to_the_plugins_own_warnings(run_pytest, printing_preload):
    """What a zygote's preload printed is a warning like any other: -W ignore hides it, -W error shows it."""
    default = run_pytest()
    assert "preload ['chatty'] printed" in default.text(), default.text()
    ignored = run_pytest("-W", "ignore::pytest_npu_lazy.errors.NpuLazyWarning")
    assert set(ignored.outcomes.values()) == {"passed"}, ignored.text()
    assert "warnings summary" not in ignored.text(), ignored.text()
    errors = run_pytest("-W", "error::pytest_npu_lazy.errors.NpuLazyWarning")
    assert set(errors.outcomes.values()) == {"passed"}, errors.text()  # no test of its own to fail
    assert "preload ['chatty'] printed" in errors.text()

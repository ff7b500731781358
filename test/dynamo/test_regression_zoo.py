"""The suite can fail: each known regression, re-created in an isolated run, is caught and explained.

Each regression runs the guarantee test it breaks in a separate pytest
process (with NPU_LAZY_REGRESSION set, see regressions.py); the same tests
also run once without any regression, as the control.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from regressions import ENV

HERE = Path(__file__).resolve().parent

ZOO = {
    "eager_inductor_setup": (
        "test_wrapper.py::test_wrapper_runs_dynamo_setup_only[plain]",
        ["'torch_npu._inductor' must not be loaded yet, but it was loaded during phase 'wrap'",
         "triggered at: torch_npu/utils/_dynamo.py",
         "in _InductorNpuRegistry.register_inductor_npu",
         "regressions (", "in eager_inductor_setup.<locals>.setup_now"],
    ),
    "eager_dynamo_import": (
        "test_import.py::test_import_torch_npu_defers_compiler_stack",
        ["'torch._dynamo' must not be loaded yet, but it was loaded during phase 'import'",
         "in eager_dynamo_import.<locals>.patch.<locals>.import_dynamo_now",
         "torch_npu.utils._dynamo (torch_npu/utils/_dynamo.py", "in add_dynamo_methods)"],
    ),
    "triton_helpers_at_wrap": (
        "test_triton.py::test_npu_triton_helpers_wait_for_the_first_call",
        # On a real NPU the helpers import and assert_not_loaded fails; on the host stub the import
        # itself raises (it initialises the NPU), and the phase's note names what it loaded.
        ["loaded during phase 'wrap'", "torch_npu._inductor.runtime.triton_helpers",
         "in triton_helpers_at_wrap.<locals>.import_helpers"],
    ),
    "wrong_first_call": (
        "test_first_call.py::test_compiled_matches_eager[sin_cos]",
        ["npu_lazy: the compiled output of 'first_call' differs from eager",
         "Mismatched elements: 64 / 64"],
    ),
}


def _pytest(nodeids: list[str], junit: Path, regression: str | None) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop(ENV, None)
    if regression:
        env[ENV] = regression
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "npu_lazy", "-p", "no:cacheprovider", "-q", "-p", "no:randomly",
         f"--junitxml={junit}", *(str(HERE / n) for n in nodeids)],
        cwd=HERE.parent.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _cases(junit: Path) -> dict[str, str | None]:
    """test name -> failure text, or None when it passed."""
    cases = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        cases[case.get("name")] = None if problem is None else (problem.get("message", "") + "\n" + (problem.text or ""))
    return cases


@pytest.fixture(scope="module")
def zoo_runs(tmp_path_factory):
    """All runs at once: the four regressions and the control."""
    folder = tmp_path_factory.mktemp("zoo")
    runs = {name: (_pytest([nodeid], folder / f"{name}.xml", name), folder / f"{name}.xml")
            for name, (nodeid, _) in ZOO.items()}
    runs["control"] = (_pytest([n for n, _ in ZOO.values()], folder / "control.xml", None), folder / "control.xml")
    results = {}
    for name, (process, junit) in runs.items():
        output, _ = process.communicate(timeout=900)
        assert junit.exists(), f"{name}: pytest wrote no report:\n{output}"
        results[name] = (_cases(junit), output)
    return results


def test_control_run_passes(zoo_runs):
    cases, output = zoo_runs["control"]
    assert len(cases) == len(ZOO) and all(text is None for text in cases.values()), output


@pytest.mark.parametrize("regression", list(ZOO))
def test_regression_is_caught_and_explained(zoo_runs, regression):
    nodeid, fragments = ZOO[regression]
    cases, output = zoo_runs[regression]
    name = nodeid.split("::")[-1]
    assert name in cases, output
    failure = cases[name]
    assert failure is not None, f"{regression} was not caught:\n{output}"
    missing = [fragment for fragment in fragments if fragment not in failure]
    assert not missing, f"{regression}: the failure does not say {missing}:\n{failure}"

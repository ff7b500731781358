"""The plugin's lines in pytest's header: two by default, on every CANN mode, with Triton importable or not; the
rest (the CANN line in full, each hidden warning's reason, the cache policy explained) with ``-v``.

pytest's own plugins add one header line or none; a run's first screen is the user's tests, not the plugin's
explanations, which wait for ``-v`` and the JSON report.
"""

from __future__ import annotations

import json

import pytest

from pytest_npu_lazy.reports.environment import HEADER_WIDTH, Environment

#: what a run prints by default, at most
DEFAULT_LINES = 2

NO_PYBIND11 = "raise ModuleNotFoundError(\"No module named 'pybind11'\", name='pybind11')\n"


def _plugin_lines(run) -> list[str]:
    """The plugin's lines of the header (above ``rootdir:``; what explicitly requested features add aside)."""
    lines = run.result.stdout.lines
    end = next(i for i, line in enumerate(lines) if line.startswith("rootdir:"))
    return [line for line in lines[:end] if line.startswith("npu_lazy:")]


@pytest.mark.needs("torch", "torch_npu", "triton")
@pytest.mark.parametrize("triton", ["importable", "not importable"])
@pytest.mark.parametrize("mode", ["stub", "emulate", "compute"])
def test_the_header_is_two_lines_by_default_and_says_the_rest_with_v(run_pytest, pytester, monkeypatch,
                                                                     without_inherited_stub, mode, triton):
    """triton-ascend installed, and pybind11 (which its Ascend backend imports) shadowed on PYTHONPATH by a
    package that raises, so ``import triton`` fails: line 1 says so. Compute mode refuses to start there
    (test_cann_compute.py), so only stub and emulate run without it."""
    if triton == "not importable":
        if mode == "compute":
            pytest.skip("needs a Triton that imports: compute mode is refused at start-up without one, by design")
        shadow = pytester.path / "no_pybind11"
        (shadow / "pybind11").mkdir(parents=True)
        (shadow / "pybind11" / "__init__.py").write_text(NO_PYBIND11)
        monkeypatch.setenv("PYTHONPATH", str(shadow), prepend=":")
    pytester.makepyfile(test_any="def test_any():\n    pass\n")

    run = run_pytest(f"--npu-lazy-cann={mode}", "--npu-lazy-json=report.json")
    assert run.outcomes == {"test_any.py::test_any": "passed"}, run.text()
    lines = _plugin_lines(run)
    assert len(lines) == DEFAULT_LINES, "\n".join(lines)
    versions, warnings = lines
    assert versions.startswith("npu_lazy: torch ") and ", torch_npu " in versions and ", device " in versions
    assert {"stub": "device cpu (no NPU: CANN host stub)", "emulate": "device npu (emulated Ascend910B3",
            "compute": "device npu (emulated Ascend910B3, computing on the host"}[mode] in versions, versions
    broken = "(does not import: ModuleNotFoundError: No module named 'pybind11')"
    assert (broken in versions) == (triton == "not importable"), versions
    hidden = json.loads((pytester.path / "report.json").read_text())["environment"]["hidden_warnings"]
    assert hidden, "every mode here hides torch's script_method deprecation at least"
    assert warnings == (f"npu_lazy: {len(hidden)} known warnings hidden (reasons: -v, or the JSON report's "
                        "environment.hidden_warnings); Inductor cache: cold"), warnings
    assert all(len(line) <= 300 for line in lines), lines

    verbose = run_pytest(f"--npu-lazy-cann={mode}", "-v")
    more = _plugin_lines(verbose)
    assert more[0] == versions and len(more) > DEFAULT_LINES, "\n".join(more)
    assert more[1].startswith("npu_lazy: CANN: "), more
    for warning in hidden:  # each reason, as the JSON report has it
        assert f"npu_lazy: hiding the warning {warning['message']!r}: {warning['reason']}" in more, more
    assert more[-1].startswith("npu_lazy: Inductor cache of isolated tests: cold (every graph lookup misses"), more


def _environment(**changes) -> Environment:
    fields = dict(torch="2.13.0+cpu", torch_npu="2.13.0", cann_mode="stub", cann_version=None,
                  cann="CANN: host stub - no NPU device (9 sonames, 190 symbols; /somewhere)",
                  triton_flavour="triton-ascend", triton="3.2.0", device="cpu (no NPU: CANN host stub)",
                  python="3.11.7", platform="linux-x86_64")
    return Environment(**{**fields, **changes})


def test_the_header_decides_in_one_place_what_shows_without_v():
    """Environment.header_lines: every mode two lines at most without -v; the CANN mode is in line 1 where the
    device does not say it; no hidden warning, no count; the cache policy joins line 2 where it fits."""
    cache = ("cold", "every graph lookup misses")
    hidden = tuple({"message": f"warning {i}", "reason": "why " * 40} for i in range(5))
    for mode, version in (("stub", None), ("emulate", "Ascend910B3"), ("compute", "Ascend910B3"),
                          ("real", "8.1.RC1"), ("off", None), ("absent", None)):
        environment = _environment(cann_mode=mode, cann_version=version, hidden_warnings=hidden)
        lines = environment.header_lines(inductor_cache=cache)
        assert len(lines) == DEFAULT_LINES, lines
        assert lines[1] == ("npu_lazy: 5 known warnings hidden (reasons: -v, or the JSON report's "
                            "environment.hidden_warnings); Inductor cache: cold")
        assert all(len(line) <= HEADER_WIDTH for line in lines[1:])
        verbose = environment.header_lines(verbose=True, inductor_cache=cache)
        assert len(verbose) == 1 + 1 + 5 + 1 + 1, verbose  # versions, CANN, five reasons, the filter note, cache
    assert _environment(cann_mode="real", cann_version="8.1.RC1").header_lines()[0].endswith(", CANN: 8.1.RC1")
    assert _environment(cann_mode="off").header_lines()[0].endswith(", CANN: off")
    assert _environment().header_lines(inductor_cache=cache) == [
        "npu_lazy: torch 2.13.0+cpu, torch_npu 2.13.0, triton triton-ascend 3.2.0, device cpu (no NPU: CANN host stub)",
        "npu_lazy: Inductor cache: cold"]
    one = _environment(hidden_warnings=hidden[:1]).header_lines()
    assert one[1] == "npu_lazy: 1 known warning hidden (reasons: -v, or the JSON report's environment.hidden_warnings)"
    broken = _environment(triton_import_error="ModuleNotFoundError: No module named 'pybind11'").header_lines()
    assert "triton triton-ascend 3.2.0 (does not import: ModuleNotFoundError: No module named 'pybind11')" in broken[0]

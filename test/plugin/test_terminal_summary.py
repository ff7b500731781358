"""The end-of-run section "npu_lazy: phases and watched modules" follows pytest's habits.

By default it lists only isolated tests that need a look (failed, errored,
broke a guarantee or their import budget, or could not be judged against
it), with their phases, the violating module's chain and the budget verdict;
every isolated test with ``-v`` or ``--npu-lazy-summary=all``; and no line
is wider than the terminal.
"""

from __future__ import annotations

import re

import pytest

from pytest_npu_lazy.reports.terminal import SECTION, entry_lines, fit, shown

CHAIN = ["torch._inductor", "torch._inductor.compiler_bisector",
         "torch (torch/__init__.py:2797 in compile)",
         "pytest_npu_lazy.probe.fixture (<site-packages>/pytest_npu_lazy/probe/fixture.py:354 in NpuLazy.compile)",
         "test_x (test_x.py:7 in test_wrapper)"]


def _phase(name: str, count: int = 0, watched: list | None = None, **extra) -> dict:
    return {"name": name, "parent": None, "duration": 0.1234, "module_count": count, "watched": watched or [],
            **extra}


def _entry(nodeid: str = "test/dynamo/test_wrapper.py::test_wrapper_runs_dynamo_setup_only[plain]",
           outcome: str = "passed", **extra) -> dict:
    watched = [{"pattern": p, "module": p, "count": n, "chain": CHAIN, "trigger": "torch/__init__.py:2797 in compile"}
               for p, n in (("torch._dynamo", 101), ("torch._inductor", 181), ("triton", 54))]
    entry = {"nodeid": nodeid, "outcome": outcome, "duration": 4.4, "isolation": "fork", "violation": None,
             "budget": None, "budget_not_judged": None,
             "phases": [_phase("collect", 5), _phase("setup"), _phase("test"), _phase("wrap", 856, watched),
                        _phase("first_call", 15), _phase("teardown")]}
    entry.update(extra)
    return entry


VIOLATION = {"kind": "loaded", "module": "torch._inductor", "phase": "wrap", "chain": CHAIN}


def test_by_default_only_what_needs_a_look_is_listed_and_everything_with_v():
    passed, failed, error = _entry("a", "passed"), _entry("b", "failed"), _entry("c", "error")
    violated = _entry("d", "passed", violation=VIOLATION)  # e.g. a violation that an xfail expected
    over = _entry("e", "passed", budget=[{"phase": "wrap", "kind": "watched", "pattern": "triton"}])
    not_judged = _entry("f", "passed", budget_not_judged="Inductor cache cold now, warm in the baseline")
    skipped, xfailed = _entry("g", "skipped"), _entry("h", "xfailed")
    entries = [passed, failed, error, violated, over, not_judged, skipped, xfailed]
    attention = [failed, error, violated, over, not_judged]
    assert shown(entries, "auto", 0) == attention
    assert shown(entries, "auto", -1) == attention
    assert shown(entries, "auto", 1) == entries
    assert shown(entries, "failed", 2) == attention
    assert shown(entries, "all", 0) == entries
    assert shown(entries, "none", 1) == []


@pytest.mark.parametrize("verbosity", [0, 1, 2])
@pytest.mark.parametrize("width", [80, 120])
def test_no_line_is_wider_than_the_terminal(verbosity, width):
    entry = _entry(outcome="failed", violation=VIOLATION,
                   budget=[{"phase": "wrap", "kind": "watched", "pattern": "triton"}])
    entry["phases"][3]["modules"] = [{"name": f"torch._inductor.module_number_{i}"} for i in range(60)]
    lines = entry_lines(entry, verbosity, width, verdict="OVER: wrap: new watched triton; wrap: 856 modules "
                                                          "(baseline 700)")
    too_wide = [text for text, _ in lines if len(text) > width]
    assert too_wide == [], "\n".join(text for text, _ in lines)
    flat = " ".join(" ".join(text for text, _ in lines).split())
    assert "<< VIOLATION: torch._inductor must not be loaded" in flat
    assert "violation: " + " <- ".join(CHAIN) in flat  # wrapped between its links, nothing lost
    assert "budget: OVER: wrap: new watched triton; wrap: 856 modules (baseline 700)" in flat
    if verbosity == 0:
        assert "wrap 0.123s +856 [torch._dynamo (101), torch._inductor (181), triton (54)]" in flat
    else:
        assert " <- ".join(CHAIN) + " [at torch/__init__.py:2797 in compile]" in flat


def test_a_unit_is_kept_whole_where_it_fits_and_cut_where_it_cannot():
    units = ["collect 0.017s +5 |", "setup 0.002s |", "wrap 1.080s +856 |", "[torch._dynamo (101), triton (54)]"]
    lines = fit(units, "    ", 50)
    assert lines == ["    collect 0.017s +5 | setup 0.002s |", "      wrap 1.080s +856 |",
                     "      [torch._dynamo (101), triton (54)]"]
    long_word = "x" * 120
    assert [len(line) <= 60 for line in fit([long_word], "  ", 60)] == [True, True, True]
    assert "".join(line.strip() for line in fit([long_word], "  ", 60)) == long_word


def test_the_head_keeps_the_node_id_whole():
    nodeid = "test/dynamo/test_wrapper.py::" + "x" * 90
    (head, _), (tail, _), *_ = entry_lines(_entry(nodeid), 0, 80)
    assert head == f"PASSED {nodeid}"
    assert tail == "    (fork, 0.37 s)"  # setup + test + teardown, as the phases under it say


def test_the_heads_time_adds_up_from_the_phases_under_it():
    entry = _entry("t", "error")  # pytest's reports said 4.4 s; the child's phases say 3 x 0.1234 s
    (head, _), *_ = entry_lines(entry, 0, 120)
    assert head.endswith("(fork, 0.37 s)"), head
    died = _entry("d", "failed", phases=[])  # a child that sent no phases: pytest's time is all there is
    (head, _), *_ = entry_lines(died, 0, 120)
    assert head.endswith("(fork, 4.40 s)"), head


PASSING = """
import pytest

pytestmark = pytest.mark.npu_lazy(preload=[])

@pytest.mark.parametrize("n", range(3))
def test_imports_heavy_in_a_phase_named_at_some_length(npu_lazy, n):
    with npu_lazy.phase("import_of_a_heavy_package"):
        import heavy.core
    npu_lazy.assert_loaded("heavy")
"""

FAILING = """
import pytest

@pytest.mark.npu_lazy(preload=[])
def test_breaks_its_guarantee(npu_lazy):
    with npu_lazy.phase("import_of_a_heavy_package"):
        import heavy.core
    npu_lazy.assert_not_loaded("heavy.helpers")
"""


def _section(text: str) -> str | None:
    if SECTION not in text:
        return None
    return re.split(r"\n=+ .* =+\n", text.split(SECTION, 1)[1].split("\n", 1)[1])[0]


@pytest.fixture
def suite(pytester, fake_heavy_package, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    pytester.makeini("[pytest]\nnpu_lazy_watch =\n    heavy.helpers\n    heavy\n")
    pytester.makepyfile(test_passing=PASSING)
    return pytester


def test_an_all_pass_run_lists_nothing_unless_asked(suite, run_pytest):
    default = run_pytest()
    assert set(default.outcomes.values()) == {"passed"}, default.text()
    assert _section(default.result.stdout.str()) is None, default.text()
    for args in (("-v",), ("--npu-lazy-summary=all",), ("-q", "--npu-lazy-summary=all")):
        section = _section(run_pytest(*args).result.stdout.str())
        assert section is not None and section.count("PASSED test_passing.py::") == 3, (args, section)
    assert _section(run_pytest("-v", "--npu-lazy-summary=failed").result.stdout.str()) is None


def test_a_failure_is_listed_with_its_chain_and_fits_the_terminal(suite, run_pytest):
    suite.makepyfile(test_failing=FAILING)
    run = run_pytest()
    assert run.outcomes["test_failing.py::test_breaks_its_guarantee"] == "failed", run.text()
    section = _section(run.result.stdout.str())
    assert section is not None, run.text()
    assert "FAILED test_failing.py::test_breaks_its_guarantee  (fork," in section
    assert "test_passing.py" not in section
    flat = " ".join(section.split())
    assert "<< VIOLATION: heavy.helpers must not be loaded" in flat
    line = FAILING.lstrip("\n").splitlines().index("        import heavy.core") + 1
    assert re.search(r"violation: heavy\.helpers <- heavy\.core \(heavy/core\.py:1 in <module>\) <- test_failing "
                     rf"\(test_failing\.py:{line} in test_breaks_its_guarantee\)", flat), section
    every = _section(run_pytest("-v").result.stdout.str())
    assert every.count("PASSED test_passing.py::") == 3
    for text in (section, every):
        assert max(len(line) for line in text.splitlines()) <= 80, text
    assert _section(run_pytest("--npu-lazy-summary=none").result.stdout.str()) is None


def test_a_check_names_where_the_compiled_code_ran():
    """Off the emulated NPU the compared values came from the compiled code on a real device type (cpu under the host
    stub): the line names it, never "the device" where there is none."""
    from pytest_npu_lazy.reports.terminal import check_units

    line = " ".join(check_units({"phase": "first_call", "outputs": [{"by": "device", "name": "cpu"}] * 2}))
    assert line == "checked first_call against eager: 2 outputs by the compiled code on cpu", line
    mixed = " ".join(check_units({"phase": "call", "outputs": [{"by": "Triton interpreter", "name": "triton_poi_0"},
                                                             {"by": "host ATen kernel", "name": "aten.addmm"}]}))
    assert "1 output by Triton kernel(s) in Triton's interpreter (triton_poi_0)" in mixed, mixed
    assert "1 output by the host's ATen (aten.addmm)" in mixed, mixed


def test_the_tally_counts_values_compared_where_the_compiled_code_ran_outside_compute_mode_too():
    """The host stub and a real device compare compiled values with eager too: the run's end says how many and
    where they were computed (only under the emulated NPU that computes does it name kernels and the host)."""
    from pytest_npu_lazy.reports.terminal import check_tally

    on_cpu = {"nodeid": "t.py::a", "checks": [{"phase": "first_call", "outputs": [{"by": "device", "name": "cpu"}] * 2,
                                               "gradients": [{"by": "device", "name": "cpu"}]}]}
    on_npu = {"nodeid": "t.py::b", "checks": [{"phase": "call", "outputs": [{"by": "device", "name": "npu"}]}]}
    unchecked = {"nodeid": "t.py::c", "checks": []}
    assert check_tally([on_cpu, on_npu, unchecked]) == [
        "4 compiled value(s) compared with eager in 2 test(s): 3 computed by the compiled code on cpu, "
        "1 computed by the compiled code on npu"]
    assert check_tally([unchecked]) == []
    interpreted = {"nodeid": "t.py::d", "checks": [{"phase": "call", "outputs": [
        {"by": "Triton interpreter", "name": "triton_poi_0"}]}]}
    lines = check_tally([interpreted])
    assert len(lines) == 1 and lines[0].startswith("compute mode (the emulated NPU"), lines


SKIPPING = '''
import pytest


@pytest.mark.parametrize("i", range(3))
def test_on_a_device(i):
    pytest.skip("needs an NPU device, real or emulated (--npu-lazy-cann=emulate)")


@pytest.mark.skip(reason="needs pytest-xdist, which is not installed")
def test_parallel():
    pass
'''


def test_skips_are_counted_by_reason_where_pytest_would_not_list_them(suite, run_pytest):
    """A newcomer's first run on a runner without a device is mostly ``s``: the reasons say which mode runs them."""
    suite.makepyfile(test_skipping=SKIPPING)
    text = run_pytest().result.stdout.str()
    section = text.split("npu_lazy: skipped, by reason", 1)[1].split("\n", 1)[1]
    assert section.splitlines()[:3] == [
        "4 test(s) skipped (-rs lists each):",
        "  3 x needs an NPU device, real or emulated (--npu-lazy-cann=emulate)",
        "  1 x needs pytest-xdist, which is not installed"], text
    for listed in ("-rs", "-ra", "-rA"):  # pytest lists each skip itself: no second list
        assert "npu_lazy: skipped, by reason" not in run_pytest(listed).result.stdout.str(), listed
    for quiet in ("-rN", "--no-summary", "--npu-lazy-summary=none"):  # asked for no summary
        assert "npu_lazy: skipped, by reason" not in run_pytest(quiet).result.stdout.str(), quiet
    suite.path.joinpath("test_skipping.py").unlink()
    assert "npu_lazy: skipped, by reason" not in run_pytest().result.stdout.str()


def test_the_skip_tally_keeps_the_commonest_reasons_and_fits_the_terminal():
    from pytest_npu_lazy.reports.terminal import skip_tally

    reasons = ["Skipped: a"] * 3 + ["b\nsecond line"] * 2 + [f"r{i}" for i in range(6)]
    assert skip_tally(reasons, most=2) == ["11 test(s) skipped (-rs lists each):", "  3 x a", "  2 x b",
                                           "  6 x 6 other reason(s)"]
    long = skip_tally(["needs " + "a very long reason " * 10, ""], width=60)
    assert max(map(len, long)) <= 60 and long[1].startswith("  1 x needs a very") and long[2].startswith("      long")
    assert long[-1] == "  1 x (no reason given)"

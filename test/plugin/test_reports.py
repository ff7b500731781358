"""Every kind of report survives the trip from the child, exactly as pytest writes it in-process."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from outcome_kinds import ALL_KINDS, EXPECTED  # shared with test_modes


@pytest.fixture
def both_ways(run_pytest, pytester):
    pytester.makepyfile(test_kinds=ALL_KINDS)
    isolated = run_pytest("-rA", "--junitxml=isolated.xml")
    in_process = run_pytest("-rA", "--junitxml=in_process.xml", "--npu-lazy-isolate=off")
    return isolated, in_process


def _short(outcomes: dict[str, str]) -> dict[str, str]:
    return {k.split("::", 1)[1]: v for k, v in outcomes.items()}


def test_outcomes_match_in_process_run(both_ways):
    isolated, in_process = both_ways
    assert _short(isolated.outcomes) == EXPECTED, isolated.text()
    assert _short(in_process.outcomes) == EXPECTED, in_process.text()
    phases = lambda run: sorted((r["nodeid"], r["when"], r["outcome"]) for r in run.reports)  # noqa: E731
    assert phases(isolated) == phases(in_process)
    assert isolated.result.ret == in_process.result.ret == pytest.ExitCode.TESTS_FAILED
    assert isolated.result.stdout.lines[-1].split(" in ")[0] == in_process.result.stdout.lines[-1].split(" in ")[0]


def test_failure_details_survive(both_ways):
    isolated, _ = both_ways
    failure = isolated.report("test_fail_rewritten", "call")["longrepr"]
    assert "assert 3 == 4" in failure
    assert "where 4 = compute()" in failure  # assertion rewriting ran in the child
    assert "RuntimeError: setup went wrong" in isolated.report("test_setup_error", "setup")["longrepr"]
    assert "RuntimeError: teardown went wrong" in isolated.report("test_teardown_error", "teardown")["longrepr"]
    sections = dict(map(tuple, isolated.report("test_output", "call")["sections"]))
    assert sections["Captured stdout call"] == "to stdout\n"
    assert sections["Captured stderr call"] == "to stderr\n"
    assert "to the log" in sections["Captured log call"]


def test_warnings_reach_the_summary(both_ways):
    isolated, in_process = both_ways
    for run in (isolated, in_process):
        text = run.result.stdout.str()
        assert "test_kinds.py::test_warning" in text and "UserWarning: careful now" in text, text


def test_junit_xml_is_the_same(both_ways, pytester):
    def cases(name):
        root = ET.parse(pytester.path / name).getroot()
        return {case.get("name"): sorted(child.tag for child in case if child.tag != "properties")
                for case in root.iter("testcase")}

    def isolation(name):
        root = ET.parse(pytester.path / name).getroot()
        return {case.get("name"): [p.get("value") for p in case.iter("property") if p.get("name") == "npu_lazy.isolation"]
                for case in root.iter("testcase")}

    assert cases("isolated.xml") == cases("in_process.xml")
    assert cases("isolated.xml")["test_fail_rewritten"] == ["failure"]
    # the only difference: isolated tests carry the plugin's facts as properties (docs/reports.md); a test its own
    # skip marks skip runs no child (isolation/pytest_side/skip_marks.py), so it has none
    marked_skip = {"test_skip_marker", "test_skipif"}
    isolated = isolation("isolated.xml")
    assert marked_skip <= set(isolated) and all(isolated[name] == [] for name in marked_skip), isolated
    assert {tuple(value) for name, value in isolated.items() if name not in marked_skip} == {("fork",)}
    assert set(map(tuple, isolation("in_process.xml").values())) == {()}


def test_module_fixtures_run_once_per_isolated_test(run_pytest, pytester):
    """The documented price of isolation: each child sets up module and session fixtures anew."""
    pytester.makepyfile(test_scope="""
        import pytest

        @pytest.fixture(scope="module")
        def counter():
            import itertools
            return itertools.count(1)

        @pytest.mark.npu_lazy(preload=[])
        @pytest.mark.parametrize("n", range(3))
        def test_fresh_module_fixture(counter, n):
            assert next(counter) == 1
    """)
    run = run_pytest()
    assert set(run.outcomes.values()) == {"passed"}, run.text()


def test_exit_codes_and_interrupts_match(run_pytest, pytester):
    pytester.makepyfile(test_exit="""
        import pytest

        @pytest.mark.npu_lazy(preload=[])
        def test_exit():
            pytest.exit("stop here", returncode=7)

        def test_never_runs():
            pass
    """)
    isolated = run_pytest()
    in_process = run_pytest("--npu-lazy-isolate=off")
    assert isolated.result.ret == in_process.result.ret == 7
    assert "stop here" in isolated.text()
    assert isolated.outcomes == in_process.outcomes == {}


def test_keyboard_interrupt_in_test_ends_the_session(run_pytest, pytester):
    pytester.makepyfile(test_ki="""
        import pytest

        @pytest.mark.npu_lazy(preload=[])
        def test_interrupts():
            raise KeyboardInterrupt

        def test_after():
            pass
    """)
    isolated = run_pytest()
    in_process = run_pytest("--npu-lazy-isolate=off")
    assert isolated.result.ret == in_process.result.ret == pytest.ExitCode.INTERRUPTED
    assert isolated.outcomes == in_process.outcomes
    assert "KeyboardInterrupt" in isolated.result.stdout.str()

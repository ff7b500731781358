"""pytest's own terminal output is the same with every test isolated as with none.

One small suite (three modules: passing, failing, erroring, skipped, xfail
and xpass tests, parametrization, a class, output to stdout and stderr, a
warning, a print at import) runs in-process (``--npu-lazy-isolate=off``)
and isolated, at ``-q``, default verbosity, ``-v``, ``--collect-only`` and
``-rA``: with module zygotes, without them (``--npu-lazy-module-zygotes=0``),
with the marker on every test instead of ``--npu-lazy-isolate=all``, and
under ``-n 2``. pytest's lines are compared one by one. Masked, and nothing
else: the run's duration in the closing line (``in 0.12s``, which also moves
its ``=`` padding), and the plugin's own end-of-run section (``npu_lazy:
phases and watched modules``: isolated runs have one, in-process runs have no
isolated test to show). The plugin's header lines are not masked: they are
the same in both runs.

Under ``-n 2`` the order in which the two workers finish is not fixed, so
there the lines are compared as a multiset, with the worker names and the
progress percentages masked and each progress line's characters sorted.
"""

from __future__ import annotations

import difflib
import re

import pytest

IN_PROCESS = ("--npu-lazy-isolate=off",)
ISOLATED = {
    "all, module zygotes": ("--npu-lazy-isolate=all", "--npu-lazy-preload="),
    "all, no module zygotes": ("--npu-lazy-isolate=all", "--npu-lazy-preload=", "--npu-lazy-module-zygotes=0"),
    "marked": ("--npu-lazy-preload=", "--npu-lazy-module-zygotes=2"),  # the conftest marks every test
}
VERBOSITIES = {"-q": ("-q",), "default": (), "-v": ("-v",), "--collect-only": ("--collect-only",), "-rA": ("-rA",)}

SUITE = {
    "test_alpha": """
        import sys
        import warnings
        import pytest

        print("printed while the module is imported")

        def test_prints():
            print("to stdout from alpha")
            print("to stderr from alpha", file=sys.stderr)

        @pytest.mark.parametrize("n", [1, 2, 3])
        def test_param(n):
            assert n < 3

        @pytest.mark.skip(reason="not today")
        def test_skipped():
            pass

        @pytest.mark.xfail(reason="known bug")
        def test_xfail():
            assert False

        @pytest.mark.xfail(reason="fixed already")
        def test_xpass():
            pass

        def test_warns():
            warnings.warn("careful", UserWarning)
    """,
    "test_beta": """
        import pytest

        @pytest.fixture
        def broken():
            raise RuntimeError("fixture broke")

        def test_uses_broken(broken):
            pass

        def test_fails_with_output():
            print("output of a failing test")
            assert 1 + 1 == 3

        class TestGroup:
            def test_method(self):
                pass

            @pytest.mark.parametrize("word", ["a b", "c::d"])
            def test_ids(self, word):
                assert word
    """,
    "test_gamma": """
        def test_only():
            pass
    """,
}

#: marks every test isolated where a run asks for it (the "marked" variant), as a user's marker would
MARKING_CONFTEST = """
import os
import pytest

def pytest_collection_modifyitems(items):
    if os.environ.get("MARK_EVERY_TEST"):
        for item in items:
            item.add_marker(pytest.mark.npu_lazy(preload=[]))
"""

_SEPARATOR = re.compile(r"^(=+) (.+) (=+)$")
_DURATION = re.compile(r" in \d+(\.\d+)?s( \(\d+:\d\d:\d\d\))?$")
PLUGIN_SECTION = "npu_lazy: phases and watched modules"


def pytest_lines(text: str) -> list[str]:
    """pytest's own lines of a run's output: the duration and the plugin's end-of-run section masked."""
    lines, skipping = [], False
    for line in text.splitlines():
        separator = _SEPARATOR.match(line)
        if separator:
            skipping = separator.group(2) == PLUGIN_SECTION
            if skipping:
                continue
            title = _DURATION.sub(" in <duration>", separator.group(2))
            line = f"= {title} =" if title != separator.group(2) else line
        elif skipping:
            continue
        else:
            line = _DURATION.sub(" in <duration>", line)
        lines.append(line)
    return lines


_WORKER = re.compile(r"\[gw\d+\]")
_PERCENT = re.compile(r"\[\s*\d+%\]")
_PROGRESS = re.compile(r"^([.FEsxX]+)(\s+)\[")


def unordered(lines: list[str]) -> list[str]:
    """Lines whose order two xdist workers decide, as a sorted list: worker and percentage masked."""
    out = []
    for line in lines:
        line = _PERCENT.sub("[ %]", _WORKER.sub("[gw]", line))
        progress = _PROGRESS.match(line)
        if progress:
            line = "".join(sorted(progress.group(1))) + line[len(progress.group(1)):]
        out.append(line)
    return sorted(out)


def _difference(expected: list[str], got: list[str], what: str) -> str:
    return f"{what} differs from the in-process run:\n" + "\n".join(
        difflib.unified_diff(expected, got, "in-process", what, lineterm=""))


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    """The suite in pytester's directory; returns ``run(*args, marked=False) -> RunResult``."""
    pytester.makepyfile(**{name: text for name, text in SUITE.items()})
    pytester.makeconftest(MARKING_CONFTEST)
    monkeypatch.setenv("COLUMNS", "80")

    def run(*args: str, marked: bool = False) -> pytest.RunResult:
        if marked:
            monkeypatch.setenv("MARK_EVERY_TEST", "1")
        else:
            monkeypatch.delenv("MARK_EVERY_TEST", raising=False)
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", *args, timeout=300)

    return run


@pytest.mark.parametrize("verbosity", list(VERBOSITIES))
def test_pytest_output_is_the_same_isolated_as_in_process(suite, verbosity):
    args = VERBOSITIES[verbosity]
    reference = suite(*IN_PROCESS, *args)
    expected = pytest_lines(reference.stdout.str())
    assert any("test_alpha.py" in line for line in expected), reference.stdout.str()
    for name, isolated_args in ISOLATED.items():
        run = suite(*isolated_args, *args, marked=name == "marked")
        got = pytest_lines(run.stdout.str())
        assert got == expected, _difference(expected, got, f"{verbosity}, isolated ({name})")
        assert run.stderr.str().strip() == reference.stderr.str().strip()
        if verbosity not in ("-q", "--collect-only"):
            assert PLUGIN_SECTION in run.stdout.str()  # the mask hid a section that is there


@pytest.mark.needs("xdist")
@pytest.mark.parametrize("verbosity", ["-q", "default", "-v", "-rA"])
def test_pytest_output_under_xdist_is_the_same_isolated_as_in_process(suite, verbosity):
    args = ("-n", "2", *VERBOSITIES[verbosity])
    reference = suite(*IN_PROCESS, *args)
    expected = unordered(pytest_lines(reference.stdout.str()))
    assert any("test_beta.py" in line for line in expected), reference.stdout.str()
    run = suite(*ISOLATED["all, module zygotes"], *args)
    got = unordered(pytest_lines(run.stdout.str()))
    assert got == expected, _difference(expected, got, f"-n 2 {verbosity}, isolated")


def test_the_mask_hides_only_the_duration_and_the_plugins_section():
    """The comparison must be able to fail: pytest's lines around the masked ones stay."""
    text = "\n".join([
        "collected 2 items",
        "",
        "test_a.py collected 2 items",
        "..                                                                       [100%]",
        "===================== npu_lazy: phases and watched modules =====================",
        "FAILED test_a.py::test_x  (fork, 0.01 s)",
        "    collect 0.025s +1 | test 0.001s",
        "=========================== short test summary info ============================",
        "FAILED test_a.py::test_x - assert 0",
        "============================== 2 passed in 0.12s ===============================",
        "2 passed in 13.01s",
    ])
    assert pytest_lines(text) == [
        "collected 2 items", "", "test_a.py collected 2 items",
        "..                                                                       [100%]",
        "=========================== short test summary info ============================",
        "FAILED test_a.py::test_x - assert 0",
        "= 2 passed in <duration> =",
        "2 passed in <duration>",
    ]
    assert unordered(["[gw1] [ 50%] PASSED a", "F.s.  [100%]"]) == ["..Fs  [ %]", "[gw] [ %] PASSED a"]

"""The warning gate of this repository's own suites (test/warning_gate.py) fails a run on a warning nobody
explained, and lets an explained one through."""

from __future__ import annotations

from pathlib import Path

import pytest

GATE = Path(__file__).resolve().parents[1] / "warning_gate.py"


@pytest.mark.parametrize("message, fails", [("a new warning nobody explained", True),
                                            ("`isinstance(treespec, LeafSpec)` is deprecated, use ...", False)])
def test_an_unexplained_warning_fails_the_run_and_an_explained_one_does_not(pytester, message, fails):
    pytester.makepyfile(warning_gate=GATE.read_text())
    pytester.makeconftest('pytest_plugins = ("warning_gate",)\n')
    pytester.makepyfile(test_warns=f'''
        import warnings

        def test_passes_but_warns():
            warnings.warn({message!r}, FutureWarning)
    ''')
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider")
    assert result.parseoutcomes().get("passed") == 1
    if fails:
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        result.stdout.fnmatch_lines(["unexplained warnings in the plugin's own suite*",
                                     "*test_warns.py::test_passes_but_warns: FutureWarning: a new warning nobody*",
                                     "hide it with its reason*"])
    else:
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()

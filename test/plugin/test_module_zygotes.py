"""Module zygotes: a test module imported and collected once, each isolated test forked from it.

Every test must still start from its module freshly imported, untouched by
its siblings, with the import in its own report; outcomes must be the ones
each test had when its child collected it alone (``--npu-lazy-module-zygotes=0``).
"""

from __future__ import annotations

import json

import pytest

PER_TEST = "--npu-lazy-module-zygotes=0"

SIBLINGS = """
import os, sys, pytest

pytestmark = pytest.mark.npu_lazy(preload=[])
import heavy.core  # imported once, in the module zygote
from pathlib import Path
(Path(__file__).parent / f"imported-by-{os.getpid()}").touch()  # the pytest process, and every isolated import

SEEN = []

@pytest.mark.parametrize("n", range(4))
def test_fresh_module(n, npu_lazy, tmp_path_factory):
    SEEN.append(n)
    assert SEEN == [n], "a sibling test left its state in the module"
    out = tmp_path_factory.getbasetemp() / f"parent-{n}"
    out.write_text(str(os.getppid()))
"""


def _imports(pytester) -> int:
    return len(list(pytester.path.glob("imported-by-*")))


def _parents(pytester) -> set[str]:
    base = pytester.path / "basetemp"
    return {path.read_text() for path in base.glob("parent-*")}


def test_tests_of_a_module_fork_from_one_zygote_and_start_fresh(pytester, run_pytest, fake_heavy_package):
    pytester.makepyfile(test_siblings=SIBLINGS)
    run = run_pytest("--npu-lazy-json=out.json", f"--basetemp={pytester.path / 'basetemp'}", basetemp=False)
    assert set(run.outcomes.values()) == {"passed"} and len(run.outcomes) == 4, run.text()
    assert len(_parents(pytester)) == 1, "the four tests should share one module zygote"
    assert _imports(pytester) == 2, "collected in the pytest process, imported once more for all four tests"
    report = json.loads((pytester.path / "out.json").read_text())
    for test in report["tests"]:
        collect = [p for p in test["phases"] if p["name"] == "collect"]
        assert collect, f"{test['nodeid']}: no collect phase; the module's import is missing from its report"
        assert collect[0]["module_count"] >= 3, test  # test_siblings, heavy, heavy.core: each test's own import


def test_per_test_collection_forks_each_test_from_its_baseline(pytester, run_pytest, fake_heavy_package):
    pytester.makepyfile(test_siblings=SIBLINGS)
    run = run_pytest(PER_TEST, f"--basetemp={pytester.path / 'basetemp'}", basetemp=False)
    assert set(run.outcomes.values()) == {"passed"}, run.text()
    assert len(_parents(pytester)) == 1  # the baseline zygote, shared by every per-test child
    assert _imports(pytester) == 5  # the pytest process, then each child


def test_different_settings_get_their_own_module_zygote(pytester, run_pytest, fake_heavy_package):
    pytester.makepyfile(test_split="""
        import os, pytest

        @pytest.mark.npu_lazy(preload=[], block=["heavy"])
        def test_blocked(tmp_path_factory):
            with pytest.raises(ImportError):
                import heavy
            (tmp_path_factory.getbasetemp() / "parent-blocked").write_text(str(os.getppid()))

        @pytest.mark.npu_lazy(preload=[])
        def test_plain(tmp_path_factory):
            import heavy
            (tmp_path_factory.getbasetemp() / "parent-plain").write_text(str(os.getppid()))
    """)
    run = run_pytest(f"--basetemp={pytester.path / 'basetemp'}", basetemp=False)
    assert run.outcomes == {"test_split.py::test_blocked": "passed", "test_split.py::test_plain": "passed"}, run.text()
    assert len(_parents(pytester)) == 2


BROKEN = """
import os, pytest
if os.environ.get("NPU_LAZY_TEST_MAIN") != str(os.getpid()):
    {failure}

@pytest.mark.npu_lazy(preload=[])
def test_one():
    pass

@pytest.mark.npu_lazy(preload=[])
def test_two():
    pass
"""
MAIN_CONFTEST = "import os\nos.environ.setdefault('NPU_LAZY_TEST_MAIN', str(os.getpid()))\n"


@pytest.mark.parametrize("failure, outcome", [
    ("raise RuntimeError('no import here')", "error"),
    ("import ctypes; ctypes.string_at(0)", "error"),  # a crash before the setup report: an error, as before
], ids=["raises", "segfaults"])
def test_a_module_that_fails_to_import_fails_each_test_as_before(pytester, run_pytest, failure, outcome):
    sub = pytester.mkpydir("suite")  # run_pytest writes the top conftest: this one goes in the folder
    (sub / "conftest.py").write_text(MAIN_CONFTEST)
    (sub / "test_broken.py").write_text(BROKEN.format(failure=failure))
    results = {mode: run_pytest(*args, "suite") for mode, args in {"module": (), "per_test": (PER_TEST,)}.items()}
    for mode, run in results.items():
        assert run.outcomes == {"suite/test_broken.py::test_one": outcome, "suite/test_broken.py::test_two": outcome}, \
            f"{mode}: " + run.text()
    text = results["module"].report("test_one", "setup")["longrepr"]
    assert ("no import here" in text) if "RuntimeError" in failure else ("signal 11" in text), text


INTERLEAVE = """
def pytest_collection_modifyitems(items):
    a = [i for i in items if "test_a" in i.nodeid]
    b = [i for i in items if "test_b" in i.nodeid]
    if a and b:  # a child collects one module: nothing to interleave there
        items[:] = [x for pair in zip(a, b) for x in pair]
"""


@pytest.mark.parametrize("limit", ["1", "4"])
def test_interleaved_modules_stay_correct_under_any_bound(pytester, run_pytest, limit):
    """Tests of one module arriving apart: still one fresh module each, whatever the bound on live zygotes."""
    body = """
import pytest
pytestmark = pytest.mark.npu_lazy(preload=[])
RUNS = []

@pytest.mark.parametrize("n", range(3))
def test_it(n):
    RUNS.append(n)
    assert RUNS == [n]
"""
    pytester.makepyfile(test_a=body, test_b=body)
    (pytester.path / "interleave_plugin.py").write_text(INTERLEAVE)
    run = run_pytest("-p", "interleave_plugin", f"--npu-lazy-module-zygotes={limit}")
    order = [r["nodeid"].split("::")[0] for r in run.reports if r["when"] == "call"]
    assert order == ["test_a.py", "test_b.py"] * 3, order
    assert set(run.outcomes.values()) == {"passed"} and len(run.outcomes) == 6, run.text()


def test_a_module_zygote_is_reaped_after_its_last_test(pytester, run_pytest):
    pytester.makepyfile(test_first="""
        import os, pytest

        @pytest.mark.npu_lazy(preload=[])
        def test_remember(tmp_path_factory):
            (tmp_path_factory.getbasetemp() / "zygote").write_text(str(os.getppid()))
    """, test_second="""
        import os, time, pytest

        @pytest.mark.npu_lazy(preload=[])
        def test_it_is_gone(tmp_path_factory):
            pid = int((tmp_path_factory.getbasetemp() / "zygote").read_text())
            assert pid != os.getppid()
            for _ in range(200):
                try:
                    with open(f"/proc/{pid}/stat") as stat:
                        state = stat.read().rsplit(")", 1)[1].split()[0]
                except FileNotFoundError:
                    return
                if state == "Z":  # ended, waiting for its parent to reap it
                    return
                time.sleep(0.01)
            raise AssertionError(f"the module zygote {pid} of test_first.py still runs")
    """)
    run = run_pytest(f"--basetemp={pytester.path / 'basetemp'}", basetemp=False)
    assert set(run.outcomes.values()) == {"passed"}, run.text()


@pytest.mark.parametrize("option, value", [("--npu-lazy-module-zygotes", "-1"), ("--npu-lazy-module-zygotes", "x")])
def test_bad_bound_is_refused_naming_the_fix(pytester, option, value):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess(f"{option}={value}") if value != "x" else \
        pytester.runpytest_subprocess("-o", f"npu_lazy_module_zygotes={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "is not a count; use e.g. 4, or 0" in result.stderr.str()


def test_bad_memory_bound_is_refused(pytester):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("-o", "npu_lazy_module_zygote_memory=lots")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "is not an amount of memory; use e.g. 2GiB or 512MiB" in result.stderr.str()


def test_under_xdist_each_worker_keeps_its_own(pytester, run_pytest, fake_heavy_package):
    pytest.importorskip("xdist")
    pytester.makepyfile(test_siblings=SIBLINGS, test_more=SIBLINGS)
    run = run_pytest("-n", "2")
    assert set(run.outcomes.values()) == {"passed"} and len(run.outcomes) == 8, run.text()

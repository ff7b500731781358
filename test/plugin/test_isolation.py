"""Marked tests start from a clean zygote, whatever collection imported in the pytest process."""

from __future__ import annotations

import json
import textwrap

import pytest

pytestmark = pytest.mark.usefixtures("fake_heavy_package")

POLLUTER = """
import heavy.core  # imported while pytest collects this module

def test_polluter_sees_it():
    import sys
    assert "heavy.core" in sys.modules
"""

CLEAN_TESTS = """
import sys
import pytest

@pytest.mark.npu_lazy(preload=[])
@pytest.mark.parametrize("attempt", range(3))
def test_each_starts_clean(npu_lazy, attempt):
    npu_lazy.assert_not_loaded("heavy")
    import heavy.core
    npu_lazy.assert_loaded("heavy", "heavy.helpers")
    assert npu_lazy.first_loaded("heavy.helpers") == "test"
"""


def test_collection_import_does_not_leak_into_marked_tests(run_pytest, pytester):
    pytester.makepyfile(test_a_polluter=POLLUTER, test_b_clean=CLEAN_TESTS)
    run = run_pytest("-v")
    assert run.outcomes == {
        "test_a_polluter.py::test_polluter_sees_it": "passed",
        "test_b_clean.py::test_each_starts_clean[0]": "passed",
        "test_b_clean.py::test_each_starts_clean[1]": "passed",
        "test_b_clean.py::test_each_starts_clean[2]": "passed",
    }, run.text()


def test_same_tests_without_isolation_are_caught_by_the_guard(run_pytest, pytester):
    """The clean result above is not vacuous: in the polluted process the guard fires."""
    pytester.makepyfile(test_a_polluter=POLLUTER, test_b_clean=CLEAN_TESTS)
    run = run_pytest("--npu-lazy-isolate=off")
    clean = {k: v for k, v in run.outcomes.items() if "clean" in k}
    assert set(clean.values()) == {"error"}, run.text()
    message = run.report("test_each_starts_clean[0]", "call")["longrepr"]
    assert "'heavy' cannot be checked" in message
    assert "test_a_polluter.py:1" in message  # who imported it
    assert "this run has isolation switched off (--npu-lazy-isolate=off" in message


def test_marked_test_imports_stay_in_their_child(run_pytest, pytester):
    """A marked test that imports a module leaves the pytest process and later tests clean."""
    pytester.makepyfile(test_order="""
        import sys
        import pytest

        @pytest.mark.npu_lazy(preload=[])
        def test_1_imports(npu_lazy):
            import heavy.core
            assert "heavy.core" in sys.modules

        def test_2_parent_is_clean():
            assert "heavy" not in sys.modules

        @pytest.mark.npu_lazy(preload=[])
        def test_3_next_child_is_clean(npu_lazy):
            npu_lazy.assert_not_loaded("heavy")
    """)
    run = run_pytest()
    assert set(run.outcomes.values()) == {"passed"}, run.text()


def test_preload_baseline_is_imported_once_per_zygote(run_pytest, pytester):
    pytester.makepyfile(test_preload="""
        import os, sys
        import pytest

        @pytest.mark.npu_lazy(preload=["heavy.core"])
        @pytest.mark.parametrize("n", range(2))
        def test_preloaded(npu_lazy, n):
            assert "heavy.core" in sys.modules
            print("zygote", os.getppid())
            assert npu_lazy.import_chain("heavy.helpers")[:2] == ["heavy.helpers", "heavy.core"]

        @pytest.mark.npu_lazy(preload=[])
        def test_other_baseline(npu_lazy):
            assert "heavy" not in sys.modules
            print("zygote", os.getppid())
    """)
    run = run_pytest()
    assert set(run.outcomes.values()) == {"passed"}, run.text()
    zygote_of = {r["nodeid"].split("::")[1]: next(c for n, c in r["sections"] if "stdout" in n).split()[1]
                 for r in run.reports if r["when"] == "call"}
    assert zygote_of["test_preloaded[0]"] == zygote_of["test_preloaded[1]"] != zygote_of["test_other_baseline"]


def test_guard_names_the_preload(run_pytest, pytester):
    pytester.makepyfile(test_guard="""
        import pytest

        @pytest.mark.npu_lazy(preload=["heavy.core"])
        def test_asserts_about_preloaded(npu_lazy):
            npu_lazy.assert_not_loaded("heavy.helpers")
    """)
    run = run_pytest()
    assert run.outcomes == {"test_guard.py::test_asserts_about_preloaded": "error"}, run.text()
    message = run.report("test_asserts_about_preloaded", "call")["longrepr"]
    assert "by the zygote's preload ['heavy.core']" in message
    assert "import chain: heavy.helpers <- heavy.core" in message
    assert "'heavy.core' loads it: take it out of this test's marker" in message
    assert "1 error" in run.result.stdout.lines[-1]


def test_guard_names_a_conftest_import(run_pytest, pytester):
    pytester.makepyfile(conftest_extra="")
    conftest = pytester.path / "conftest.py"
    conftest.write_text("import heavy.core\n" + conftest.read_text())
    pytester.makepyfile(test_guard="""
        import pytest

        @pytest.mark.npu_lazy(preload=[])
        def test_asserts(npu_lazy):
            npu_lazy.assert_not_loaded("heavy")
    """)
    run = run_pytest()
    assert run.outcomes == {"test_guard.py::test_asserts": "error"}, run.text()
    message = run.report("test_asserts", "call")["longrepr"]
    assert "in the pytest process before the zygote forked at conftest.py:1" in message
    assert "keep that import out of conftest.py files" in message


@pytest.mark.needs("torch")
def test_the_pytest_process_never_imports_what_the_plugin_watches(run_pytest, pytester):
    """The plugin, its header, the CANN activation, zygotes and reports leave torch, torch_npu, triton and NumPy to
    children."""
    pytester.makepyfile(test_heavy_child="""
        import sys
        import pytest

        @pytest.mark.npu_lazy(preload=["torch"])
        def test_imports_torch_in_its_child(npu_lazy):
            import torch
            assert "torch" in sys.modules
    """)
    conftest = pytester.path / "conftest.py"
    conftest.write_text(conftest.read_text() + textwrap.dedent("""
        import sys

        def pytest_unconfigure(config):
            heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "torch_npu", "triton", "numpy"))
            with open(os.environ["NPU_LAZY_TEST_REPORTS"] + ".heavy", "w") as f:
                json.dump(heavy, f)
    """))
    run = run_pytest("-p", "npu_lazy", "--npu-lazy-json=report.json", "--junitxml=junit.xml")
    assert run.outcomes == {"test_heavy_child.py::test_imports_torch_in_its_child": "passed"}, run.text()
    (heavy_file,) = pytester.path.glob("reports-*.json.heavy")
    assert json.loads(heavy_file.read_text()) == []

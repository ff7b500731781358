"""Any node id pytest can collect runs isolated; a child that cannot find its test says why."""

from __future__ import annotations

import pytest

ISOLATED = ("--npu-lazy-isolate=all", "--npu-lazy-preload=")

SPEC_COLLECTOR = """
import pytest

class SpecItem(pytest.Item):
    def runtest(self):
        assert self.name.count("::") == 1

class SpecFile(pytest.File):
    def collect(self):
        for name in self.path.read_text().split():
            yield SpecItem.from_parent(self, name=name)

def pytest_collect_file(file_path, parent):
    if file_path.suffix == ".spec":
        return SpecFile.from_parent(parent, path=file_path)
"""


@pytest.mark.parametrize("isolation", ["fork", "spawn"])
def test_awkward_node_ids_run_isolated(run_pytest, pytester, isolation):
    """A directory named case[1], ids and item names containing '::' are found by their exact names."""
    case = pytester.mkdir("case[1]")
    (case / "test_in_brackets.py").write_text(
        "import pytest\n\n"
        "def test_plain():\n    pass\n\n"
        "@pytest.mark.parametrize('x', ['a::b', 'c[d]'])\n"
        "def test_ids(x):\n    assert x in ('a::b', 'c[d]')\n")
    specs = pytester.mkdir("specs")
    (specs / "conftest.py").write_text(SPEC_COLLECTOR)
    (specs / "cases.spec").write_text("first::one second::two\n")
    run = run_pytest(*ISOLATED, f"--npu-lazy-isolation={isolation}")
    assert run.outcomes == {
        "case[1]/test_in_brackets.py::test_plain": "passed",
        "case[1]/test_in_brackets.py::test_ids[a::b]": "passed",
        "case[1]/test_in_brackets.py::test_ids[c[d]]": "passed",
        "specs/cases.spec::first::one": "passed",
        "specs/cases.spec::second::two": "passed",
    }, run.text()


def test_the_childs_usage_error_is_shown(run_pytest, pytester):
    """When pytest in the child cannot collect the test, its own words reach the report."""
    elsewhere = pytester.mkdir("elsewhere")
    (elsewhere / "conftest.py").write_text(
        "import os, pathlib\n\n"
        "FIRST = pathlib.Path(__file__).with_name('first-collector')\n"
        "if not FIRST.exists():\n"
        "    FIRST.write_text(str(os.getpid()))\n\n"
        "def pytest_pycollect_makeitem(collector, name, obj):\n"
        "    # the pytest process collects this test; the child (another process) does not\n"
        "    if name == 'test_vanishing' and FIRST.read_text() != str(os.getpid()):\n"
        "        return []\n")
    (elsewhere / "test_vanishing.py").write_text("def test_vanishing():\n    pass\n")
    run = run_pytest(*ISOLATED)
    assert run.outcomes == {"elsewhere/test_vanishing.py::test_vanishing": "error"}, run.text()
    message = run.report("test_vanishing", "setup")["longrepr"]
    assert "pytest could not collect 'elsewhere/test_vanishing.py::test_vanishing' in the isolated child" in message
    assert "not found:" in message and "test_vanishing.py::test_vanishing" in message.split("not found:")[1]


def test_a_parametrization_that_differs_in_the_child_fails_clearly(run_pytest, pytester):
    """The same id naming another case in the child must not quietly run that other case."""
    pytester.makepyfile(test_unstable="""
        import pathlib
        import pytest

        # The pytest process imports this module first; every later import sees the flag and
        # builds the list in the other order, as a set of objects hashed by address may do.
        FLAG = pathlib.Path(__file__).with_name("imported-once")
        VALUES = ["b", "a"] if FLAG.exists() else ["a", "b"]
        FLAG.touch()

        @pytest.mark.parametrize("value", VALUES, ids=["first", "second"])
        def test_case(value):
            pass
    """)
    run = run_pytest(*ISOLATED)
    assert run.outcomes == {"test_unstable.py::test_case[first]": "error",
                            "test_unstable.py::test_case[second]": "error"}, run.text()
    message = run.report("test_case[first]", "setup")["longrepr"]
    assert "'test_unstable.py::test_case[first]' has different parameters in the isolated child" in message
    assert "value: 'a' in the pytest process, 'b' in the child" in message
    assert "sorted(" in message

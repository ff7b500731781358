"""Module zygotes: a test module imported and collected once, each isolated test forked from it.

Every test must still start from its module freshly imported, untouched by
its siblings, with the import in its own report; outcomes must be the ones
each test had when its child collected it alone (``--npu-lazy-module-zygotes=0``).
"""

from __future__ import annotations

import json
import textwrap

import pytest
from siblings import FIND_SIBLINGS

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


def test_a_module_zygote_forks_a_child_ahead_for_each_test_but_not_after_its_last(pytester, run_pytest):
    """Where the order is known, the child forked ahead while a test runs serves the next test of the module;
    after the module's last test none is forked (it would be killed unused: a fork and a child's start, a module).
    Seen from the tests: the first finds a sibling waiting, the last finds none."""
    pytester.makepyfile(test_ahead=textwrap.dedent("""
        import os, time, pytest

        pytestmark = pytest.mark.npu_lazy(preload=[])

        def test_1_a_child_waits_for_the_next_test():
            for _ in range(300):
                if siblings():
                    return
                time.sleep(0.01)
            raise AssertionError("no child was forked ahead for the next test")

        def test_2_middle():
            pass

        def test_3_none_waits_after_the_last():
            time.sleep(0.3)  # a fork asked for now would have happened
            assert siblings() == [], "a child was forked ahead after the module's last test"
    """) + FIND_SIBLINGS)
    run = run_pytest()
    assert set(run.outcomes.values()) == {"passed"}, run.text()


@pytest.mark.parametrize("workers", [[], ["-n", "1", "--dist", "loadfile"]], ids=["in-order", "xdist-worker"])
def test_the_next_modules_zygote_collects_while_this_module_runs(pytester, run_pytest, workers):
    """The first test of a module must not wait for its module's import: that zygote starts one module ahead.

    test_first's first test looks for a second module zygote beside its own (a child of the same baseline
    zygote) while it runs; test_second's test must be forked from that one. An xdist worker learns its tests
    from its controller, a batch at a time: it starts ahead from the tests it was sent (``--dist loadfile``
    sends one worker both files at the start; ``load`` would send test_second.py's test only once one of
    test_first.py's ended).
    """
    pytester.makepyfile(test_first="""
        import os, time, pytest

        pytestmark = pytest.mark.npu_lazy(preload=[])

        def module_zygotes_beside(own: int, baseline: int) -> list[int]:
            found = []
            for entry in os.listdir("/proc"):
                if not entry.isdigit() or int(entry) == own:
                    continue
                try:
                    with open(f"/proc/{entry}/stat") as stat:
                        parent = int(stat.read().rsplit(")", 1)[1].split()[1])
                    with open(f"/proc/{entry}/comm") as comm:
                        name = comm.read().strip()
                except (OSError, ValueError, IndexError):
                    continue
                if parent == baseline and name == "npu-lazy module":
                    found.append(int(entry))
            return found

        def test_one(tmp_path_factory):
            own = os.getppid()
            with open(f"/proc/{own}/stat") as stat:
                baseline = int(stat.read().rsplit(")", 1)[1].split()[1])
            deadline = time.monotonic() + 10
            while not (ahead := module_zygotes_beside(own, baseline)):
                assert time.monotonic() < deadline, "no module zygote for test_second.py started while test_first.py ran"
                time.sleep(0.01)
            (tmp_path_factory.getbasetemp() / "ahead").write_text(" ".join(map(str, ahead)))

        def test_two():
            pass
    """, test_second="""
        import os, pytest

        @pytest.mark.npu_lazy(preload=[])
        def test_forked_from_the_zygote_started_ahead(tmp_path_factory):
            ahead = (tmp_path_factory.getbasetemp() / "ahead").read_text().split()
            assert str(os.getppid()) in ahead, (os.getppid(), ahead)
    """)
    run = run_pytest(f"--basetemp={pytester.path / 'basetemp'}", *workers, basetemp=False)
    assert run.outcomes == {"test_first.py::test_one": "passed", "test_first.py::test_two": "passed",
                            "test_second.py::test_forked_from_the_zygote_started_ahead": "passed"}, run.text()


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


FROZEN_SUMMARY = """
import pytest

pytestmark = pytest.mark.npu_lazy(preload=[])
import heavy.core  # the collect phase of every test: heavy, heavy.core, heavy.helpers, frozen in the zygote

@pytest.mark.parametrize("n", range(3))
def test_case(n):
    if n == 1:
        import heavy.lazy  # a watched load of its own, in the test phase
"""

EARLY_IMPORT = """
def pytest_runtest_logstart(nodeid, location):
    if nodeid.endswith("[2]"):
        import heavy.lazy  # in the child before setup: a load of its own in the frozen collect phase
"""


def _without_times(value):
    """A report's phases with every time left out: two runs agree on everything else."""
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in ("start", "duration")}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def test_a_module_zygotes_frozen_imports_give_every_test_the_summary_of_its_own_collection(
        pytester, run_pytest, fake_heavy_package):
    """A module zygote groups its collection's loads once for every child (ProbeState.freeze_imports); each test's
    phases, counts, module lists and watched chains must be what collecting alone gives it, including a child's
    own load in the frozen phase (merged) and a later phase's."""
    pytester.makepyfile(test_frozen=FROZEN_SUMMARY, early_import=EARLY_IMPORT)
    pytester.makeini("[pytest]\nnpu_lazy_watch =\n    heavy\n    heavy.lazy\n    heavy.helpers\n")
    reports = {}
    for mode, extra in (("module zygotes", []), ("per-test collection", [PER_TEST])):
        run = run_pytest("-p", "early_import", "--npu-lazy-json=out.json", "--npu-lazy-json-modules", *extra)
        assert set(run.outcomes.values()) == {"passed"} and len(run.outcomes) == 3, run.text()
        tests = json.loads((pytester.path / "out.json").read_text())["tests"]
        reports[mode] = {test["nodeid"]: _without_times(test["phases"]) for test in tests}
    assert reports["module zygotes"] == reports["per-test collection"]
    collect = {nodeid: next(p for p in phases if p["name"] == "collect")
               for nodeid, phases in reports["module zygotes"].items()}
    merged = collect["test_frozen.py::test_case[2]"]
    assert merged["module_count"] == collect["test_frozen.py::test_case[0]"]["module_count"] + 1
    assert {w["pattern"]: (w["module"], w["count"]) for w in merged["watched"]} == {
        "heavy": ("heavy", 4), "heavy.lazy": ("heavy.lazy", 1), "heavy.helpers": ("heavy.helpers", 1)}


def test_merged_phase_imports_name_the_module_a_pattern_names_exactly():
    from pytest_npu_lazy.probe.state import merge_imports

    def entry(pattern, module, count):
        return {"pattern": pattern, "module": module, "count": count, "duration": 0.1, "chain": [], "trigger": None}

    earlier = (2, [{"name": "a.x"}], [entry("a", "a.x", 2), entry("b", "b", 1)])
    later = (3, [{"name": "a"}], [entry("a", "a", 1), entry("c", "c.y", 1)])
    count, modules, watched = merge_imports(earlier, later, ("c", "a", "b", "d"))
    assert (count, [m["name"] for m in modules]) == (5, ["a.x", "a"])
    assert [(w["pattern"], w["module"], w["count"]) for w in watched] == [("c", "c.y", 1), ("a", "a", 3), ("b", "b", 1)]
    _, _, watched = merge_imports((1, [], [entry("a", "a", 1)]), (1, [], [entry("a", "a.z", 1)]), ("a",))
    assert [(w["module"], w["count"]) for w in watched] == [("a", 2)]


def test_zygotes_start_ahead_for_the_modules_that_run_next_in_order():
    """The runs ahead of a module: in run order, up to the first more than AHEAD_TESTS tests away, the
    cursor moving forward so a module that runs twice gets the modules after its current run."""
    from pytest_npu_lazy.isolation.pytest_side.module_zygotes import AHEAD_TESTS, ModuleZygotes

    zygotes = ModuleZygotes(4, 2 ** 31, counting=True)
    order = ["a"] * 3 + ["b"] + ["c"] * (AHEAD_TESTS + 5) + ["d"] + ["a"] * 2
    for n, key in enumerate(order):
        zygotes.expect(key, f"item {n}", "settings")
    assert [(run.key, run.item, run.tests) for run in zygotes.ahead_of("a")] == [
        ("b", "item 3", 1), ("c", "item 4", AHEAD_TESTS + 5)]
    assert [run.key for run in zygotes.ahead_of("c")] == ["d", "a"]
    assert zygotes.ahead_of("a") == [], "the second run of a is the last"
    assert zygotes.ahead_of("b") == [], "b ran before: the cursor does not go back"
    xdist = ModuleZygotes(4, 2 ** 31, counting=False)
    assert xdist.ahead_of("a") == []  # under xdist, before its worker hears of any test
    xdist.replan([("a", "item 0", "s"), ("a", "item 1", "s"), (None, "item 2", "s"), ("b", "item 3", "s"),
                  ("c", "item 4", "s")])
    assert [(run.key, run.item, run.tests) for run in xdist.ahead_of("a")] == [("b", "item 3", 1), ("c", "item 4", 1)]
    zygotes.replan([("b", "item 9", "s")])
    assert zygotes.ahead_of("c") == [], "a process that knows its order keeps it"


COLLECT_LOG = """
import os
from pathlib import Path

def pytest_collect_file(file_path, parent):
    with open(Path(__file__).parent / "collect-log", "a") as log:
        log.write(f"{os.getpid()} {file_path.name}\\n")
"""

SUITE_MODULE = """
import pytest

pytestmark = pytest.mark.npu_lazy(preload=[])

def test_one():
    pass

def test_two():
    pass
"""


@pytest.mark.parametrize("per_test", [False, True], ids=["module-zygotes", "per-test"])
def test_an_isolated_collection_makes_no_node_for_the_files_beside_its_own(pytester, run_pytest, per_test):
    """A module zygote (or a child collecting its own test) collects its one file: pytest's directory collector
    would make a node for every file beside it first (a hundred nodes for one module of a folder of a hundred),
    and those must be skipped, while the pytest process still collects them all."""
    suite = pytester.mkdir("suite")
    (suite / "conftest.py").write_text(COLLECT_LOG)
    names = [f"test_m{index}.py" for index in range(5)]
    for name in names:
        (suite / name).write_text(SUITE_MODULE)
    run = run_pytest("suite", *([PER_TEST] if per_test else []))
    assert set(run.outcomes.values()) == {"passed"} and len(run.outcomes) == 10, run.text()
    seen: dict[str, list[str]] = {}
    for line in (suite / "collect-log").read_text().splitlines():
        pid, name = line.split()
        if name in names:  # not the conftest or the log itself
            seen.setdefault(pid, []).append(name)
    everything = [pid for pid, files in seen.items() if sorted(files) == names]
    assert len(everything) == 1, f"only the pytest process collects every file: {seen}"
    isolated = {pid: files for pid, files in seen.items() if pid not in everything}
    assert isolated, "no isolated collection was logged"
    assert all(len(files) == 1 for files in isolated.values()), (
        f"an isolated collection made nodes for files beside its own: {isolated}")

"""Change-driven selection on a small watched package: the map, the rule, its conservative cases, bad input.

A package ``watched`` stands in for torch_npu (ini ``npu_lazy_map_packages = watched``): its functions
are run by some tests (isolated; one test runs a suite in-process), in pytest's phases and the probe's. Each test takes
the map in a real pytest run and selects with a real change (a diff, git, stdin, a file list).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

WATCHED = '''\
LEVEL = 1


def used(x):
    if x:
        return 1
    return 2


def unused():
    return 3


def in_fixture():
    return 4


class Box:
    def opened(self):
        return 5
'''

TESTS = '''\
import subprocess
import sys

import pytest
import watched

# each test in a child of its own: what one runs cannot be left for another (test_in_process_... shows that case)
pytestmark = pytest.mark.npu_lazy(preload=[])


@pytest.fixture
def prepared():
    return watched.in_fixture()


def test_used():
    assert watched.used(1) == 1


def test_fixture_only(prepared):
    assert prepared == 4


@pytest.mark.npu_lazy(preload=[])
def test_isolated_in_a_phase(npu_lazy):
    with npu_lazy.phase("open"):
        import watched as again
        assert again.Box().opened() == 5


def test_nothing():
    pass


def test_python_subprocess():
    subprocess.run([sys.executable, "-c", "import watched; watched.unused()"], check=True)


def test_unmeasured_python():
    subprocess.run([sys.executable, "-I", "-c", "pass"], check=True)  # -I: no PYTHONPATH, no site measuring


@pytest.mark.skip(reason="needs nothing: skipped before it runs")
def test_skipped():
    pass


@pytest.mark.npu_lazy(preload=[])
def test_child_dies():
    import os
    os._exit(3)
'''


def _diff(path: str, line: int, old: str, new: str) -> str:
    return f"--- a/{path}\n+++ b/{path}\n@@ -{line} +{line} @@\n-{old}\n+{new}\n"


@pytest.fixture
def suite(pytester: pytest.Pytester, run_pytest):
    """The package, its tests and a map taken of them."""
    pytester.makepyfile(**{"watched/__init__": WATCHED, "test_watched": TESTS})
    pytester.makeini("[pytest]\nnpu_lazy_map_packages = watched\n")
    pytester.syspathinsert()
    run = run_pytest("-p", "npu_lazy", "--npu-lazy-take-map")
    run.result.assert_outcomes(passed=6, skipped=1, failed=1)
    assert "selection map of 8 tests written" in run.text()
    assert "1 without evidence" in run.text()
    return pytester


def _map(pytester) -> dict:
    return json.loads((pytester.path / ".npu-lazy-map.json").read_text())


def _select(pytester, change: str, *extra: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_npu_lazy.selection", "--changed", change, *extra],
                          cwd=pytester.path, capture_output=True, text=True, input=stdin, timeout=120)


def _lines(data: dict, nodeid: str, phase: str) -> set[int]:
    test = data["tests"][f"test_watched.py::{nodeid}"]
    key = test["lineage"] if phase == "lineage" else test["phases"].get(phase)
    runs = data["evidence"].get(key, {}).get("watched/__init__.py", []) if key else []
    return {n for first, last in runs for n in range(first, last + 1)}


def test_the_map_keeps_each_phases_lines(suite):
    data = _map(suite)
    assert _lines(data, "test_used", "call") == {5, 6}
    assert _lines(data, "test_fixture_only", "setup") == {15}
    assert _lines(data, "test_fixture_only", "call") == set()
    assert _lines(data, "test_isolated_in_a_phase", "open") == {20}  # the probe's phase, in the child
    assert {1, 4, 10, 14, 18, 19} <= _lines(data, "test_used", "lineage")  # the import, at collection
    in_subprocess = _lines(data, "test_python_subprocess", "subprocess")  # measured there, sent home
    assert 11 in in_subprocess and 1 in in_subprocess and 5 not in in_subprocess  # its import, unused(), not used()
    assert data["tests"]["test_watched.py::test_python_subprocess"]["opaque"] == []
    assert data["tests"]["test_watched.py::test_unmeasured_python"]["opaque"] == [
        "python (1 of 1 started sent no lines home)"]
    assert data["files"]["watched/__init__.py"]["functions"] == [
        ["used", 5, 7], ["unused", 11, 11], ["in_fixture", 15, 15], ["Box.opened", 20, 20]]


def test_a_change_in_a_function_selects_the_tests_that_ran_it(suite, run_pytest):
    (suite.path / "used.diff").write_text(_diff("watched/__init__.py", 7, "    return 2", "    return 22"))
    run = run_pytest("-p", "npu_lazy", "--npu-lazy-changed=used.diff")
    # line 7 itself never ran: its function did, so its test is selected; so are the opaque test and the one
    # without evidence
    assert sorted(n.split("::")[1] for n in run.outcomes) == ["test_child_dies", "test_unmeasured_python", "test_used"]
    assert "3 of the map's 8 tests can see the change" in run.text()
    assert "watched/__init__.py:used: 1 tests ran it" in run.text()


def test_fixtures_and_probe_phases_count(suite):
    (suite.path / "two.diff").write_text(_diff("watched/__init__.py", 15, "    return 4", "    return 44") +
                                         "@@ -20 +20 @@\n-        return 5\n+        return 55\n")
    out = _select(suite, "two.diff", "--as", "explain").stdout
    assert "test_watched.py::test_fixture_only\n    ran watched/__init__.py:in_fixture (setup)" in out
    assert "test_watched.py::test_isolated_in_a_phase\n    ran watched/__init__.py:Box.opened (open)" in out


def test_a_function_no_test_runs_selects_only_the_tests_it_cannot_rule_out(suite):
    (suite.path / "unused.diff").write_text(_diff("watched/__init__.py", 11, "    return 3", "    return 33"))
    result = _select(suite, "unused.diff", "--as", "explain")
    assert "test_watched.py::test_python_subprocess\n    ran watched/__init__.py:unused (subprocess)" in result.stdout
    assert "test_watched.py::test_unmeasured_python\n    ran code in python (1 of 1 started" in result.stdout
    assert "test_watched.py::test_child_dies\n    failed without evidence" in result.stdout
    assert "3 of 8 tests" in result.stdout
    assert "unused: 1 tests ran it" in result.stdout


def test_a_module_level_change_selects_every_test_that_imported_it(suite):
    (suite.path / "level.diff").write_text(_diff("watched/__init__.py", 1, "LEVEL = 1", "LEVEL = 2"))
    assert len(_select(suite, "level.diff").stdout.split()) == 8  # collection imported it for the skipped one too


@pytest.mark.parametrize("case, expected", [
    ("a foreign file", "neither a source file of watched nor a test file"),
    ("other versions", "the map was taken with other versions"),
])
def test_what_cannot_be_ruled_out_selects_everything_and_says_why(suite, case, expected):
    if case == "a foreign file":
        change = "setup.py"
    else:
        data = _map(suite)
        data["versions"]["pytest"] = "0.0"
        (suite.path / ".npu-lazy-map.json").write_text(json.dumps(data))
        (suite.path / "used.diff").write_text(_diff("watched/__init__.py", 7, "    return 2", "    return 22"))
        change = "used.diff"
    result = _select(suite, change)
    assert len(result.stdout.split()) == 8
    assert expected in result.stderr


def test_a_diff_of_other_sources_falls_back_to_the_tests_that_loaded_the_file(suite):
    diff = ("diff --git a/watched/__init__.py b/watched/__init__.py\nindex 0123456789ab..fedcba987654 100644\n" +
            _diff("watched/__init__.py", 11, "    return 3", "    return 33"))
    out = _select(suite, "-", "--as", "explain", stdin=diff).stdout
    assert "is not the source the map was taken on" in out
    assert "8 of 8 tests" in out


def test_test_files_and_conftest(suite):
    assert _select(suite, "test_watched.py").stdout.count("test_watched.py::") == 8
    assert _select(suite, "conftest.py").stdout.count("test_watched.py::") == 8
    elsewhere = _select(suite, "other/conftest.py", "--as", "explain").stdout  # no test of the map below it
    assert "other/conftest.py: the 0 tests below it" in elsewhere and "1 of 8 tests" in elsewhere  # the dead child
    new = _select(suite, "test_new.py", "--as", "files")
    assert new.stdout.split() == ["test_watched.py", "test_new.py"]  # the dead child's file: nothing rules it out


def test_a_test_that_failed_when_the_map_was_taken_is_always_selected(suite, run_pytest):
    data = _map(suite)
    data["tests"]["test_watched.py::test_nothing"]["outcome"] = "failed"
    (suite.path / ".npu-lazy-map.json").write_text(json.dumps(data))
    (suite.path / "unused.diff").write_text(_diff("watched/__init__.py", 11, "    return 3", "    return 33"))
    assert "test_watched.py::test_nothing" in _select(suite, "unused.diff").stdout.split()


def test_git_range_revision_and_stdin_name_the_same_change(suite, run_pytest):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(git + command, cwd=suite.path, check=True)
    source = suite.path / "watched" / "__init__.py"
    source.write_text(source.read_text().replace("return 4", "return 44"))
    against_tree = _select(suite, "HEAD").stdout.split()
    subprocess.run(git + ["commit", "-qam", "change"], cwd=suite.path, check=True)
    by_range = _select(suite, "HEAD~1..HEAD").stdout.split()
    diff = subprocess.run(["git", "diff", "HEAD~1"], cwd=suite.path, capture_output=True, text=True).stdout
    by_stdin = _select(suite, "-", stdin=diff).stdout.split()
    assert against_tree == by_range == by_stdin == ["test_watched.py::test_fixture_only",
                                                    "test_watched.py::test_unmeasured_python",
                                                    "test_watched.py::test_child_dies"]
    # pytest reads the diff from its stdin, which its capture holds; the change breaks the selected test
    pytest_run = subprocess.run([sys.executable, "-m", "pytest", "-p", "npu_lazy", "-p", "no:cacheprovider",
                                 "--npu-lazy-changed=-", "-q"], cwd=suite.path, input=diff, capture_output=True,
                                text=True, timeout=300)
    assert "2 failed, 1 passed, 5 deselected" in pytest_run.stdout, pytest_run.stdout + pytest_run.stderr
    assert "FAILED test_watched.py::test_fixture_only - assert 44 == 4" in pytest_run.stdout
    unknown = _select(suite, "nosuchbranch..HEAD")
    assert unknown.returncode == 2 and "'nosuchbranch' is not a revision" in unknown.stderr


def test_under_xdist_the_map_is_whole_and_workers_select_alike(suite, run_pytest):
    pytest.importorskip("xdist")
    whole = _map(suite)
    (suite.path / ".npu-lazy-map.json").unlink()
    run = run_pytest("-p", "npu_lazy", "--npu-lazy-take-map", "-n", "2")
    run.result.assert_outcomes(passed=6, skipped=1, failed=1)
    assert _map(suite)["tests"].keys() == whole["tests"].keys()
    assert _lines(_map(suite), "test_used", "call") == {5, 6}
    (suite.path / "used.diff").write_text(_diff("watched/__init__.py", 7, "    return 2", "    return 22"))
    run = run_pytest("-p", "npu_lazy", "--npu-lazy-changed=used.diff", "-n", "2")
    assert sorted(n.split("::")[1] for n in run.outcomes) == ["test_child_dies", "test_unmeasured_python", "test_used"]


@pytest.mark.parametrize("setup, args, message", [
    ("missing", ["--npu-lazy-changed=x.py"], "no selection map at"),
    ("missing", ["--npu-lazy-changed=x.py"], "take one first, once per base revision"),
    ("corrupt", ["--npu-lazy-changed=x.py"], "is not a selection map (not JSON"),
    ("foreign", ["--npu-lazy-changed=x.py"], "is not a selection map of pytest-npu-lazy"),
    ("map", ["--npu-lazy-changed=x.py", "--npu-lazy-take-map"], "cannot be combined"),
    ("git", ["--npu-lazy-changed=nosuchrevision"], "is neither a git revision here nor a file"),
    ("map", ["--npu-lazy-changed=HEAD~1"], "is not in a git repository, so it cannot name a revision"),
    ("map", ["--npu-lazy-changed=-"], "read an empty diff from stdin"),
])
def test_bad_input_is_refused_naming_the_fix(pytester, run_pytest, setup, args, message):
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    target = pytester.path / ".npu-lazy-map.json"
    if setup == "corrupt":
        target.write_text("{not json")
    elif setup == "foreign":
        target.write_text(json.dumps({"tests": {}}))
    elif setup in ("map", "git"):
        target.write_text(json.dumps({"format": "pytest-npu-lazy selection map", "version": 1, "packages": ["json"],
                                      "versions": {}, "files": {}, "evidence": {}, "tests": {}}))
    if setup == "git":
        subprocess.run(["git", "init", "-q", str(pytester.path)], check=True)
    run = run_pytest("-p", "npu_lazy", *args)
    assert run.result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in run.text()
    assert "test_one" not in run.outcomes


def test_a_coverage_run_beside_the_map_is_refused(pytester, run_pytest):
    pytest.importorskip("pytest_cov")
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    pytester.makeini("[pytest]\nnpu_lazy_map_packages = json\n")
    run = run_pytest("-p", "npu_lazy", "--npu-lazy-take-map", "--cov=json")
    assert run.result.ret == pytest.ExitCode.USAGE_ERROR
    assert "another coverage measurement" in run.text()


def test_parse_diff_reads_git_and_plain_diffs():
    from pytest_npu_lazy.selection.changes import parse_diff

    text = textwrap.dedent("""\
        diff --git a/pkg/a.py b/pkg/a.py
        index 1111111..2222222 100644
        --- a/pkg/a.py
        +++ b/pkg/a.py
        @@ -10 +10 @@ def f():
        -    return 1
        +    return 2
        @@ -20,0 +21,2 @@ def g():
        +    a = 1
        +--- not a header
        diff --git a/pkg/new.py b/pkg/new.py
        new file mode 100644
        index 0000000..3333333
        --- /dev/null
        +++ b/pkg/new.py
        @@ -0,0 +1 @@
        +x = 1
        --- old/pkg/b.py\t2020-01-01
        +++ new/pkg/b.py\t2020-01-01
        @@ -3,3 +3,3 @@
         a
        -b
        +c
         d
        """)
    changes = {c.path: c for c in parse_diff(text)}
    assert changes["pkg/a.py"].lines == {10, 20, 21} and changes["pkg/a.py"].blob == "1111111"
    assert changes["pkg/new.py"].status == "added" and changes["pkg/new.py"].lines is None
    assert changes["old/pkg/b.py"].lines == {4}


IN_PROCESS = '''\
import watched

CACHE = {}


def test_first_sets_up():
    CACHE["value"] = watched.used(1)


def test_later_reads_what_it_left():
    assert CACHE["value"] == 1


def test_before_nothing():
    pass
'''


def test_in_process_a_later_test_is_selected_with_the_one_whose_state_it_reads(pytester, run_pytest):
    """One process: a run-once set-up ran in the first test only; the test after it reads what it left."""
    pytester.makepyfile(**{"watched/__init__": WATCHED, "test_order": IN_PROCESS})
    pytester.makeini("[pytest]\nnpu_lazy_map_packages = watched\n")
    pytester.syspathinsert()
    run_pytest("-p", "npu_lazy", "--npu-lazy-take-map").result.assert_outcomes(passed=3)
    (pytester.path / "used.diff").write_text(_diff("watched/__init__.py", 6, "        return 1", "        return 11"))
    result = _select(pytester, "used.diff", "--as", "explain")
    assert "test_order.py::test_later_reads_what_it_left\n    ran in-process after test_order.py::test_first_sets_up" \
        in result.stdout
    assert "1 tests ran it, 2 more ran after one of them in its process" in result.stdout


def test_the_selection_command_stops_quietly_when_its_reader_does(suite):
    (suite.path / "level.diff").write_text(_diff("watched/__init__.py", 1, "LEVEL = 1", "LEVEL = 2"))
    result = subprocess.run(f"{sys.executable} -m pytest_npu_lazy.selection --changed level.diff --as explain | head -1",
                            shell=True, cwd=suite.path, capture_output=True, text=True, timeout=120)
    assert result.stdout.startswith("the diff level.diff") and result.stderr == ""


def test_in_process_a_changed_test_file_selects_the_tests_after_it(pytester, run_pytest):
    """Test code leaves state for later tests of its process, as torch_npu's does."""
    pytester.makepyfile(**{"watched/__init__": WATCHED, "test_a": "STATE = []\n\ndef test_a():\n    STATE.append(1)\n",
                           "test_b": "def test_b():\n    pass\n"})
    pytester.makeini("[pytest]\nnpu_lazy_map_packages = watched\n")
    run_pytest("-p", "npu_lazy", "--npu-lazy-take-map", "test_a.py", "test_b.py").result.assert_outcomes(passed=2)
    result = _select(pytester, "test_a.py", "--as", "explain")
    assert "test_b.py::test_b\n    ran in-process after a test of the changed test_a.py" in result.stdout
    assert _select(pytester, "test_b.py").stdout.split() == ["test_b.py::test_b"]  # nothing ran after it


#: tests of one process that each stand alone (a shard runs some of them without the others)
ONE_PROCESS = IN_PROCESS.replace('assert CACHE["value"] == 1', 'assert watched.in_fixture() == 4')


def _one_run(data: dict) -> dict:
    """A map as any two runs of one suite write it alike: less when and how it was taken, each process token
    (random) named by the first test of its process."""
    tests = data["tests"]
    first: dict[str, str] = {}
    for nodeid in sorted(tests):
        first.setdefault(tests[nodeid]["process"], nodeid)
    return {**{k: v for k, v in data.items() if k != "taken"},
            "tests": {n: {**t, "process": first.get(t["process"]) if t["process"] else None} for n, t in tests.items()}}


@pytest.mark.parametrize("tests, count", [("isolated", 2), ("in-process", 3)])
def test_a_sharded_take_merges_into_the_map_one_run_writes(pytester, run_pytest, tests, count):
    """--npu-lazy-shard=K/N takes the map of its tests (disjoint, together all); the merge is one run's map: the
    same evidence, outcomes and files, and an in-process test's process and order as in one process. (Tests
    that read what an earlier test left behave otherwise in a shard without it: docs/change-selection.md.)"""
    name = "test_watched" if tests == "isolated" else "test_order"  # N=3 gives each shard one of test_order's
    pytester.makepyfile(**{"watched/__init__": WATCHED, name: TESTS if tests == "isolated" else ONE_PROCESS})
    pytester.makeini("[pytest]\nnpu_lazy_map_packages = watched\n")
    pytester.syspathinsert()
    run_pytest("-p", "npu_lazy", "--npu-lazy-take-map")
    single = _map(pytester)
    parts = []
    for k in range(1, count + 1):
        run = run_pytest("-p", "npu_lazy", "--npu-lazy-take-map", f"--npu-lazy-shard={k}/{count}",
                         f"--npu-lazy-map=map-{k}.json")
        assert f"shard {k}/{count} of the selection map ran" in run.text()
        parts.append(json.loads((pytester.path / f"map-{k}.json").read_text()))
    names = [set(part["tests"]) for part in parts]
    assert all(names) and sum(map(len, names)) == len(set().union(*names)) == len(single["tests"])
    merged = subprocess.run([sys.executable, "-m", "pytest_npu_lazy.selection.merge",
                             *(f"map-{k}.json" for k in range(count, 0, -1)), "--out", "merged.json"],
                            cwd=pytester.path, capture_output=True, text=True, timeout=120)
    assert merged.returncode == 0, merged.stderr
    data = json.loads((pytester.path / "merged.json").read_text())
    assert _one_run(data) == _one_run(single)
    command = data["taken"]["command"]
    assert "--npu-lazy-map=map-1.json" in command and not any("--npu-lazy-shard" in word for word in command)
    assert [s["shard"] for s in data["taken"]["shards"]] == [f"{k}/{count}" for k in range(1, count + 1)]
    if tests == "in-process":  # the merged map selects as one run's: a test after the one whose state it reads
        (pytester.path / "used.diff").write_text(_diff("watched/__init__.py", 6, "        return 1", "        return 11"))
        explained = _select(pytester, "used.diff", "--as", "explain", "--map", "merged.json")
        assert "test_order.py::test_later_reads_what_it_left\n    ran in-process after " \
               "test_order.py::test_first_sets_up" in explained.stdout, explained.stdout
    refused = subprocess.run([sys.executable, "-m", "pytest_npu_lazy.selection.merge", "map-1.json", "--out", "x.json"],
                             cwd=pytester.path, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and f"2/{count}" in refused.stderr and "missing" in refused.stderr, refused.stderr


@pytest.mark.parametrize("args, message", [
    (["--npu-lazy-take-map", "--npu-lazy-shard=3/2"], "K must be between 1 and N=2"),
    (["--npu-lazy-take-map", "--npu-lazy-shard=two"], "is not of the form K/N"),
    (["--npu-lazy-shard=1/2"], "add --npu-lazy-take-map"),
])
def test_a_bad_shard_is_a_usage_error_naming_the_fix(pytester, run_pytest, args, message):
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    pytester.makeini("[pytest]\nnpu_lazy_map_packages = json\n")
    run = run_pytest("-p", "npu_lazy", *args)
    assert run.result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in run.text() and "test_one" not in run.outcomes

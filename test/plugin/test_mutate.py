"""The mutation runner (python -m pytest_npu_lazy.mutate) on a small library and suite of its own.

The library has what torch_npu's deferred-loading code has: a run-once
set-up, a lazy import, a guard. Each check here could fail: the operators
must produce the edits named, the hook must apply a mutant in every process
(pytest, a zygote, its child, a ``python -c``) without touching the file,
and the runner must call a mutant caught only when a test fails or times
out, not when the harness breaks.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_npu_lazy.mutate import operators
from pytest_npu_lazy.mutate import report
from pytest_npu_lazy.mutate.config import ConfigError, digest, load
from pytest_npu_lazy.mutate.runs import SITE_DIR
from pytest_npu_lazy.mutate.session import MutationPass

from mutate_library import LIBRARY

TESTS = '''
import sys
import pytest


@pytest.mark.npu_lazy(preload=["lazylib"], timeout=5)
def test_setup_runs_once():
    import lazylib
    assert lazylib.setup() == "ran"
    assert lazylib.setup() is None
    assert lazylib._DONE == {"setup"}


def test_heavy_is_loaded_only_when_wanted():
    import lazylib
    assert lazylib.load_heavy(False) is None
    assert lazylib.load_heavy(True).__name__ == "json"
'''


def _project(tmp_path: Path, extra_config: str = "", tests: str = TESTS) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'mutation-demo'\n")
    (tmp_path / "lazylib.py").write_text(LIBRARY)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_lazylib.py").write_text(tests)
    (tmp_path / "mutation.toml").write_text(textwrap.dedent(f'''
        [run]
        tests = ["tests"]
        pytest_args = ["-p", "npu_lazy", "-p", "no:cacheprovider", "--rootdir", "."]
        test_timeout = 20
        mutant_timeout = 200

        [targets.lazylib]
        functions = ["run_once", "setup", "load_heavy", "untested"]
        {extra_config}
    '''))
    return tmp_path


def _mutate(project: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(project), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "pytest_npu_lazy.mutate", "--config", str(project / "mutation.toml"),
                           *args], cwd=project, env=env, capture_output=True, text=True, timeout=timeout)


# -- operators --------------------------------------------------------------

def test_every_operator_produces_its_edit():
    mutants = operators.generate(LIBRARY, "lazylib", {"run_once", "setup", "load_heavy", "untested"})
    by_operator = {}
    for mutant in mutants:
        by_operator.setdefault(mutant.operator, []).append(mutant.description)
    assert set(by_operator) >= {"delete-statement", "negate-condition", "drop-condition", "remove-return",
                                "change-constant", "drop-decorator", "swap-statements", "call-to-noop"}, by_operator
    assert "@run_once removed from setup" in by_operator["drop-decorator"]
    assert "@functools.wraps(f) removed from wrapper" in by_operator["drop-decorator"]
    assert "if wrapper.has_run: -> if not (wrapper.has_run):" in by_operator["negate-condition"]
    assert "'ran' -> None" not in by_operator["change-constant"] and "41 -> 42" in by_operator["change-constant"]
    assert any("wrapper.has_run = True <-> return result" in d or "result = f() <-> wrapper.has_run = True" in d
               for d in by_operator["swap-statements"]), by_operator["swap-statements"]
    assert len({m.id for m in mutants}) == len(mutants)  # ids name one mutant each
    assert set(by_operator) <= set(operators.OPERATORS), "an operator the record's table does not list"
    nested = {m.function for m in mutants}
    assert "run_once.<locals>.wrapper" in nested and "<module>" not in nested


def test_a_mutant_changes_exactly_its_own_place():
    targets = {"load_heavy"}
    original = ast.dump(ast.parse(LIBRARY))
    for mutant in operators.generate(LIBRARY, "lazylib", targets):
        tree = operators.mutate(LIBRARY, "lazylib", targets, mutant.id)
        changed = ast.unparse(tree)
        assert ast.dump(ast.parse(changed)) != original, mutant
        # everything outside load_heavy is as it was
        assert changed.split("def load_heavy")[0] == ast.unparse(ast.parse(LIBRARY)).split("def load_heavy")[0]
    with pytest.raises(KeyError):
        operators.mutate(LIBRARY, "lazylib", targets, "lazylib:1:0:no-such-operator")


REGISTRY = '''
import importlib
import os
import sys

_STEPS = set()


class Registry:
    loaded = None

    @classmethod
    def register(cls):
        current = os.getenv("BACKEND", "default")
        if cls.loaded != current:
            if "heavy" not in sys.modules:
                importlib.import_module("heavy")
            else:
                sys.modules["heavy"].reload()
            cls.loaded = current


def load():
    backend = os.getenv("BACKEND")
    loader = LOADERS[backend]
    loader()
    Registry.loaded = backend


def step(name, work):
    if name in _STEPS:
        return
    work()
    _STEPS.add(name)


def trigger(finder):
    run_setup()
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)
'''


def _moved(source, targets, mutant_id):
    return ast.unparse(operators.mutate(source, "registry", targets, mutant_id))


def test_record_before_work_moves_a_record_of_success_ahead_of_the_work_it_records():
    """The refactor "set the state, then do the work" (issue: after a failed load the next call skipped it): a
    recording statement moved ahead of the work before it in its block, or the work moved after the record;
    never where a name would be read before it is bound, and never as a second name for a neighbour swap."""
    targets = {"Registry", "load", "step", "trigger"}
    mutants = [m for m in operators.generate(REGISTRY, "registry", targets) if m.operator == "record-before-work"]
    by_description = {m.description: m for m in mutants}
    register = by_description["`cls.loaded = current` moved ahead of `if 'heavy' not in sys.modules:`"]
    assert register.function == "Registry.register"
    assert "cls.loaded = current\n            if 'heavy' not in sys.modules:" in _moved(REGISTRY, targets, register.id)
    # load(): the record reads `backend`, bound two lines up, so it moves no higher; the work moves down instead
    assert "`loader()` moved after `Registry.loaded = backend`" not in by_description  # a neighbour: swap-statements'
    assert "`loader = LOADERS[backend]` moved after `Registry.loaded = backend`" not in by_description, (
        "a move that reads `loader` before it is bound")
    assert not any(d.startswith("`Registry.loaded = backend` moved ahead") for d in by_description)
    swaps = [m.description for m in operators.generate(REGISTRY, "registry", targets)
             if m.operator == "swap-statements"]
    assert "loader() <-> Registry.loaded = backend" in swaps and "work() <-> _STEPS.add(name)" in swaps
    # a container's remove, under an `if` that does only that, is a record too: the trigger marked as fired
    trigger = by_description["`if finder in sys.meta_path:` moved ahead of `run_setup()`"]
    assert "def trigger(finder):\n    if finder in sys.meta_path:\n        sys.meta_path.remove(finder)\n    run_setup()" \
        in _moved(REGISTRY, targets, trigger.id)
    assert len({m.id for m in mutants}) == len(mutants)


def test_mutants_python_rejects_are_left_out():
    source = "def f():\n    x = 1\n    def g():\n        nonlocal x\n        x += 1\n    g()\n    return x\n"
    generated = operators.generate(source, "m", {"f"})
    kept = operators.compilable(source, "m", {"f"})
    deleted_binding = [m for m in generated if m.description == "`x = 1` deleted"]
    assert deleted_binding and deleted_binding[0] not in kept  # nonlocal x then has no binding: a SyntaxError
    assert len(kept) == len(generated) - 1


def test_text_for_people_is_not_mutated():
    source = "import warnings\ndef f(x):\n    warnings.warn('slow')\n    log.info('x %s', x)\n    raise ValueError('bad')\n"
    descriptions = [m.description for m in operators.generate(source, "m", {"f"})]
    assert not [d for d in descriptions if "slow" in d or "'x %s'" in d or "bad" in d], descriptions


def test_unknown_target_names_are_reported():
    assert operators.unknown_targets(LIBRARY, {"setup", "stup"}) == {"stup"}


# -- the hook -----------------------------------------------------------------

def _plan_env(project: Path, mode: str, mutant_id: str | None, log_dir: Path) -> dict:
    from pytest_npu_lazy.mutate.hook import ENV, Plan

    plan = Plan(mode, {"lazylib": ["setup", "run_once", "load_heavy"]}, mutant_id, str(log_dir))
    return dict(os.environ, **{ENV: plan.to_json()}, PYTHONDONTWRITEBYTECODE="1",
                PYTHONPATH=os.pathsep.join([str(SITE_DIR), str(project), os.environ.get("PYTHONPATH", "")]))


def test_the_hook_applies_a_mutant_in_every_process_and_never_touches_the_file(tmp_path):
    project = _project(tmp_path)
    before = (project / "lazylib.py").read_bytes()
    [mutant] = [m for m in operators.generate(LIBRARY, "lazylib", {"setup"}) if m.operator == "remove-return"]
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    code = textwrap.dedent("""
        import os, subprocess, sys
        import lazylib
        print("parent", lazylib.setup())
        pid = os.fork()
        if pid == 0:
            import importlib; importlib.reload(lazylib)
            print("fork", lazylib.setup(), flush=True); os._exit(0)
        os.waitpid(pid, 0)
        subprocess.run([sys.executable, "-c", "import lazylib; print('python -c', lazylib.setup())"], check=True)
    """)
    run = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True,
                         env=_plan_env(project, "mutant", mutant.id, log_dir), timeout=120)
    assert run.returncode == 0, run.stderr
    assert "Error in sitecustomize" not in run.stderr, run.stderr  # the hook is silent where it works
    assert run.stdout.split("\n")[:3] == ["parent None", "fork None", "python -c None"], run.stdout  # 'ran' unmutated
    assert (project / "lazylib.py").read_bytes() == before
    assert not list(project.rglob("*.pyc"))
    assert len(list(log_dir.glob("applied-*"))) == 3  # parent, reload in the fork, python -c


def test_the_coverage_probe_names_each_function_that_ran(tmp_path):
    project = _project(tmp_path)
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    run = subprocess.run([sys.executable, "-c", "import lazylib; lazylib.setup(); lazylib.setup()"], cwd=project,
                         env=_plan_env(project, "trace", None, log_dir), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    names = [line.split(" ", 2)[2] for f in log_dir.glob("hits-*") for line in f.read_text().splitlines()]
    assert sorted(names) == ["lazylib:<module>", "lazylib:run_once", "lazylib:run_once.<locals>.wrapper",
                             "lazylib:setup"], names  # each once, however often it ran; load_heavy never ran


def test_hits_where_no_test_is_current_belong_to_every_test():
    """A zygote started inside the first test's window preloads for all later tests: its hits name no test."""
    from pytest_npu_lazy.mutate.selection import attribute

    windows = [{"nodeid": "t1", "start": 10.0, "end": 20.0}, {"nodeid": "t2", "start": 30.0, "end": 40.0}]
    hits = [(11.0, False, "m:preloaded"), (12.0, True, "m:first"), (35.0, True, "m:first"), (25.0, True, "m:between")]
    by_function, outside = attribute(windows, hits)
    assert by_function == {"m:first": ["t1", "t2"]}
    assert outside == {"m:preloaded", "m:between"}


# -- the runner ----------------------------------------------------------------

def test_configuration_errors_name_the_fix(tmp_path):
    project = _project(tmp_path)
    (project / "mutation.toml").write_text("[targets.lazylib]\nfunctions = []\n")
    with pytest.raises(ConfigError, match=r"lists no functions; name them"):
        load(project / "mutation.toml")
    (project / "mutation.toml").write_text('[targets.lazylib]\nfunctions = ["setup"]\n[[verdict]]\nmutant = "x"\n'
                                           'kind = "device-only"\nwhy = "needs a device"\n')
    with pytest.raises(ConfigError, match="names no npu_test"):
        load(project / "mutation.toml")
    (project / "mutation.toml").write_text('[targets.lazylib]\nfunctions = ["stup"]\n')
    run = _mutate(project, "--list")
    assert run.returncode == 2 and "names stup, which lazylib does not define" in run.stderr, run.stderr
    (project / "mutation.toml").write_text('[run]\nfirst = ["stup"]\n[targets.lazylib]\nfunctions = ["setup"]\n')
    with pytest.raises(ConfigError, match=r"\[run\] first names stup, which no \[targets\] table lists"):
        load(project / "mutation.toml")
    (project / "mutation.toml").write_text('[targets.lazylib]\nfunctions = ["setup"]\n')
    run = _mutate(project, "--list", "--function", "stup")
    assert run.returncode == 2 and "--function stup: no mutant of such a function" in run.stderr, run.stderr
    run = _mutate(project, "--sample", "--expect", "recorded")  # refused before any test runs
    assert run.returncode == 2 and "give it with --against FILE" in run.stderr and "coverage" not in run.stderr
    run = _mutate(project, "--tests", "tests/test_nothing.py", "--only", "lazylib")
    assert run.returncode == 2 and "--tests tests/test_nothing.py: no such file" in run.stderr, run.stderr


VERDICT = '''
[[verdict]]
mutant = "lazylib:41:11:change-constant"
kind = "equivalent"
why = "untested() is dead code in this library"
'''


def test_a_verdict_is_refused_on_a_source_it_was_not_written_against(tmp_path):
    """Mutant ids are positions: after an upgrade the same id can name another edit, and an "equivalent" written
    for the old one would hide a live mutant. Verdicts name the source they were checked against."""
    project = _project(tmp_path, VERDICT)
    run = _mutate(project, "--only", "lazylib:41")
    assert run.returncode == 2 and 'has verdicts but no source = "..."' in run.stderr, run.stderr
    assert f'add source = "{digest(LIBRARY)}"' in run.stderr
    (tmp_path / "old").mkdir()
    (tmp_path / "stray").mkdir()
    project = _project(tmp_path / "old", 'source = "sha256:0123456789abcdef"\n' + VERDICT)
    run = _mutate(project, "--only", "lazylib:41")
    assert run.returncode == 2, run.stderr
    assert (f"the verdicts on lazylib were written against its source sha256:0123456789abcdef; the installed one "
            f"is {digest(LIBRARY)}") in run.stderr and "--without-verdicts" in run.stderr
    project = _project(tmp_path / "stray", f'source = "{digest(LIBRARY)}"\n' + VERDICT.replace(":41:11:", ":40:11:"))
    run = _mutate(project, "--only", "lazylib:41")
    assert run.returncode == 2 and "verdicts name mutants the installed source does not have: " \
        "lazylib:40:11:change-constant" in run.stderr, run.stderr


def test_a_record_goes_on_only_with_the_sources_it_was_taken_with(tmp_path):
    project = _project(tmp_path)
    record = {"provenance": {"command": "x", "sources": {"lazylib": "sha256:0123456789abcdef"}}, "mutants": []}
    (project / "old.json").write_text(json.dumps(record))
    run = _mutate(project, "--json", "old.json", "--resume", "--only", "lazylib:41")
    assert run.returncode == 2 and "old.json was taken with other sources of lazylib" in run.stderr, run.stderr
    assert "start a new record" in run.stderr and "coverage" not in run.stderr
    legacy = {"provenance": {"command": "x", "torch_npu": "1.0.0"}, "mutants": []}  # before the sources key
    (project / "legacy.json").write_text(json.dumps(legacy))
    run = _mutate(project, "--json", "legacy.json", "--report-only", "--markdown", "out.md")
    assert run.returncode == 2 and "was taken with torch_npu 1.0.0" in run.stderr, run.stderr


def test_the_record_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    """Rewritten after every mutant: a kill mid-write must leave the last whole record to resume from."""
    path = tmp_path / "record.json"
    report.write_json(path, [], {"command": "first"})
    whole = path.read_text()

    def killed(*args):
        raise KeyboardInterrupt  # as a signal arriving between the write and the rename

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        report.write_json(path, [], {"command": "second", "long": "x" * 100_000})
    assert path.read_text() == whole and [p.name for p in tmp_path.iterdir()] == ["record.json"]


@pytest.mark.needs("torch")  # the plugin's isolation runs the suite's marked test; no torch is imported
def test_the_runner_catches_survives_and_records(tmp_path):
    verdict = f'''
        source = "{digest(LIBRARY)}"
        [[verdict]]
        mutant = "lazylib:41:11:change-constant"
        kind = "equivalent"
        why = "untested() is dead code in this library"
    '''
    project = _project(tmp_path, textwrap.dedent(verdict))
    listing = _mutate(project, "--list")
    assert "lazylib:41:11:change-constant" in listing.stdout, listing.stdout
    run = _mutate(project, "--json", "out.json", "--markdown", "out.md")
    assert run.returncode == 0, run.stderr
    data = json.loads((project / "out.json").read_text())
    status = {m["mutant"]["id"]: m for m in data["mutants"]}
    # the run-once guard: dropping it runs the set-up twice, which the isolated test sees
    guard = next(m for i, m in status.items() if m["mutant"]["description"] == "@run_once removed from setup")
    assert guard["status"] == "caught" and guard["killed_by"].endswith("test_setup_runs_once"), guard
    # the lazy import's guard: the in-process test catches it
    lazy = next(m for m in status.values() if m["mutant"]["description"] == "if not wanted: -> if not (not wanted):")
    assert lazy["status"] == "caught" and lazy["killed_by"].endswith("test_heavy_is_loaded_only_when_wanted"), lazy
    # functools.wraps only copies names: no test sees it
    wraps = next(m for m in status.values() if m["mutant"]["description"] == "@functools.wraps(f) removed from wrapper")
    assert wraps["status"] == "survived", wraps
    judged = status["lazylib:41:11:change-constant"]
    assert judged["status"] == "equivalent" and "not run" in judged["message"], judged  # a full pass trusts it
    assert data["score"]["equivalent"] == 1 and data["score"]["judged"] == len(status) - 1
    assert "lazylib:41:11:change-constant" in (project / "out.md").read_text()
    assert "once, serially" in run.stderr and "] caught" in run.stderr  # progress while it runs
    # running one mutant again keeps the rest of the record
    again = _mutate(project, "--json", "out.json", "--resume", "--only", guard["mutant"]["id"])
    assert again.returncode == 0 and "1 to run" in again.stderr, again.stderr
    rerun = {m["mutant"]["id"]: m["status"] for m in json.loads((project / "out.json").read_text())["mutants"]}
    assert rerun == {ident: m["status"] for ident, m in status.items()}
    # a verdict withdrawn: the mutant recorded under it without a run is run now, not taken as a survivor
    config = (project / "mutation.toml").read_text()
    (project / "mutation.toml").write_text(config[:config.index("[[verdict]]")])
    resumed = _mutate(project, "--json", "out.json", "--resume")
    assert resumed.returncode == 0 and "not-run        0.0 s  lazylib:41:11:change-constant" in resumed.stderr, (
        resumed.stderr)
    unjudged = next(m for m in json.loads((project / "out.json").read_text())["mutants"]
                    if m["mutant"]["id"] == "lazylib:41:11:change-constant")
    assert unjudged["status"] == "not-run" and "no test" in unjudged["message"], unjudged  # untested() is dead code


BLOCK = """
source = "{source}"
[[verdict]]
block = "lazylib:{lines}"
kind = "device-only"
why = "untested() runs only on a chip this runner does not have"
npu_test = "tests/test_lazylib.py::test_on_that_chip"
"""


@pytest.mark.needs("torch")
def test_a_block_verdict_judges_every_mutant_of_its_lines(tmp_path):
    """Code that runs only on another chip than the emulated one (torch_npu's Ascend 950 branches) is argued once,
    for its block of lines; a mutant's own verdict still wins, and --without-verdicts judges by the runs."""
    own = '[[verdict]]\nmutant = "lazylib:41:11:change-constant"\nkind = "equivalent"\nwhy = "its own verdict"\n'
    project = _project(tmp_path, BLOCK.format(source=digest(LIBRARY), lines="40-41") + own)
    run = _mutate(project, "--function", "untested", "--json", "out.json", "--markdown", "out.md")
    assert run.returncode == 0, run.stderr
    status = {m["mutant"]["id"]: m["status"] for m in json.loads((project / "out.json").read_text())["mutants"]}
    assert status.pop("lazylib:41:11:change-constant") == "equivalent"
    assert status and set(status.values()) == {"device-only"}, status
    table = (project / "out.md").read_text()
    assert "runs only on a chip this runner does not have" in table and "test_on_that_chip" in table
    # the record judged again as mutation.toml says it now: a kind changed, then the block withdrawn
    config = (project / "mutation.toml").read_text()
    (project / "mutation.toml").write_text(config.replace('kind = "device-only"', 'kind = "equivalent"'))
    again = _mutate(project, "--report-only", "--json", "out.json", "--markdown", "out.md")
    assert again.returncode == 0, again.stderr
    status = {m["mutant"]["id"]: m["status"] for m in json.loads((project / "out.json").read_text())["mutants"]}
    assert set(status.values()) == {"equivalent"}, status
    (project / "mutation.toml").write_text(config[:config.index("[[verdict]]")])
    withdrawn = _mutate(project, "--report-only", "--json", "out.json", "--markdown", "out.md")
    assert withdrawn.returncode == 0, withdrawn.stderr
    status = {m["mutant"]["id"]: m["status"] for m in json.loads((project / "out.json").read_text())["mutants"]}
    assert set(status.values()) == {"not-run"}, status  # judged without a run: not run, once nothing excuses them
    bare = _mutate(project, "--function", "untested", "--json", "bare.json", "--without-verdicts")
    assert bare.returncode == 0, bare.stderr
    judged = {m["status"] for m in json.loads((project / "bare.json").read_text())["mutants"]}
    assert judged == {"not-run"}, judged  # no test runs untested(): without the argument, nothing excuses it
    # a block that holds no mutant of the configured functions (blank lines, a typo) is refused before anything runs
    (tmp_path / "empty").mkdir()
    empty = _project(tmp_path / "empty", BLOCK.format(source=digest(LIBRARY), lines="7-8"))
    refused = _mutate(empty, "--only", "lazylib:41")
    assert refused.returncode == 2 and "verdict blocks hold no mutant of the configured functions: lazylib:7-8" in (
        refused.stderr) and "coverage" not in refused.stderr, refused.stderr


def test_block_verdicts_that_cannot_be_read_are_refused_naming_the_fix(tmp_path):
    project = _project(tmp_path)
    config = project / "mutation.toml"
    base = config.read_text()
    for lines, message in [("41", "is not <module>:<first line>-<last line>"),
                           ("42-41", "is not <module>:<first line>-<last line>")]:
        config.write_text(base + BLOCK.format(source="x", lines=lines))
        with pytest.raises(ConfigError, match=message):
            load(config)
    config.write_text(base + BLOCK.format(source="x", lines="30-41") + BLOCK.split("\n", 2)[2].replace(
        "lazylib:{lines}", "lazylib:40-44"))
    with pytest.raises(ConfigError, match="the verdict blocks lazylib:30-41 and lazylib:40-44 overlap"):
        load(config)
    config.write_text(base + BLOCK.format(source="x", lines="40-41").replace(
        'block = "lazylib:40-41"', 'block = "lazylib:40-41"\nmutant = "lazylib:41:11:change-constant"'))
    with pytest.raises(ConfigError, match="names both mutant and block: give mutant"):
        load(config)
    config.write_text(base + BLOCK.format(source="x", lines="40-41").replace('block = "lazylib:40-41"\n', ""))
    with pytest.raises(ConfigError, match=r"names neither: give mutant = \"<id>\" \(one mutant\) or block"):
        load(config)
    config.write_text(base + BLOCK.format(source="x", lines="30-39") + BLOCK.split("\n", 2)[2].replace(
        "lazylib:{lines}", "lazylib:40-44"))
    assert [b.lines for b in load(config).blocks] == [(30, 39), (40, 44)]  # adjacent blocks do not overlap


def test_a_mutants_tests_run_most_likely_to_catch_first_then_cheapest():
    durations = {"slow": 9.0, "fast": 0.1, "mid": 1.0, "hero": 5.0, "own": 7.0, "ran": 3.0}
    order = MutationPass.test_order(["slow", "fast", "mid", "hero", "own", "ran"], ["ran", "hero"], ["own", "gone"],
                                    {"hero": 3, "mid": 1}, durations)
    assert order == ["own", "hero", "mid", "ran", "fast", "slow"]
    # a killer's file mates come next: a guarantee file pins one mechanism
    order = MutationPass.test_order(["a.py::slow", "b.py::hero", "a.py::own", "a.py::mate"], [], ["a.py::own"],
                                    {"b.py::hero": 3}, {"a.py::slow": 9.0, "a.py::mate": 1.0})
    assert order == ["a.py::own", "a.py::mate", "a.py::slow", "b.py::hero"]


@pytest.mark.needs("torch")
def test_a_hanging_mutant_is_caught_by_the_test_timeout_and_a_broken_suite_stops_the_run(tmp_path):
    project = _project(tmp_path)
    [busy] = [m for m in operators.generate(LIBRARY, "lazylib", {"run_once"})
              if m.description == "False -> True" and "busy" in LIBRARY.splitlines()[m.line - 1]]
    run = _mutate(project, "--only", busy.id, "--json", "hang.json")
    result = json.loads((project / "hang.json").read_text())["mutants"][0]
    assert result["status"] == "caught" and "TIMEOUT" in result["message"], (result, run.stderr)
    # a suite that fails without a mutant would catch everything: the run stops and says why
    (project / "tests" / "test_lazylib.py").write_text(TESTS + "\ndef test_broken():\n    assert False\n")
    broken = _mutate(project, "--only", busy.id, "--json", "broken.json", "--retake-coverage")
    assert broken.returncode == 2 and "does not pass without a mutant" in broken.stderr, broken.stderr
    assert "test_broken" in broken.stderr


def _marked_processes(mark: str) -> list[tuple[int, str]]:
    """(pid, command line) of every process whose environment carries ``mark``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if mark.encode() not in handle.read():
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                found.append((int(entry), handle.read().replace(b"\0", b" ").decode()))
        except OSError:
            continue
    return found


@pytest.mark.needs("torch")
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc to find the run's processes")
def test_a_pass_stopped_by_sigterm_leaves_no_process_behind(tmp_path):
    """Each mutant's run has a session of its own; killing the pass must end it, not orphan it."""
    import signal
    import time
    import uuid

    project = _project(tmp_path)
    [busy] = [m for m in operators.generate(LIBRARY, "lazylib", {"run_once"})
              if m.description == "False -> True" and "busy" in LIBRARY.splitlines()[m.line - 1]]
    mark = f"NPU_LAZY_STOP_MARK={uuid.uuid4().hex}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(project), os.environ.get("PYTHONPATH", "")]))
    env[mark.split("=")[0]] = mark.split("=")[1]
    runner = subprocess.Popen([sys.executable, "-m", "pytest_npu_lazy.mutate", "--config",
                               str(project / "mutation.toml"), "--only", busy.id, "--json", "stop.json"],
                              cwd=project, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        # the mutant's run (-x; the coverage pass has none) with its hung test under way
        while not any(" -x " in cmd for pid, cmd in _marked_processes(mark) if pid != runner.pid):
            assert runner.poll() is None and time.monotonic() < deadline, "the mutant's run never started"
            time.sleep(0.2)
        time.sleep(1.0)
        runner.send_signal(signal.SIGTERM)
        _, stderr = runner.communicate(timeout=60)
        left = _marked_processes(mark)
    finally:
        for pid, _ in _marked_processes(mark):  # what a failing pass left: this test must not leave it too
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    assert not left, f"processes outlived the stopped pass: {left}"
    assert runner.returncode == 128 + signal.SIGTERM, stderr
    assert "stopped by SIGTERM" in stderr and "--resume" in stderr, stderr


@pytest.mark.needs("torch")
def test_shards_run_side_by_side_merge_into_one_record(tmp_path):
    """The full pass takes hours: split with --function, run side by side, merged with --report-only --merge."""
    project = _project(tmp_path)
    for shard, function in (("a", "setup"), ("b", "load_heavy")):
        # a shard may name its tests too (--tests): here the suite's one file
        run = _mutate(project, "--function", function, "--json", f"{shard}.json", "--tests", "tests/test_lazylib.py")
        assert run.returncode == 0, run.stderr
    shard_b = {m["mutant"]["id"]: m["status"] for m in json.loads((project / "b.json").read_text())["mutants"]}
    merged = _mutate(project, "--report-only", "--json", "a.json", "--merge", "b.json", "--markdown", "all.md")
    assert merged.returncode == 0, merged.stderr
    data = json.loads((project / "a.json").read_text())
    statuses = {m["mutant"]["id"]: m["status"] for m in data["mutants"]}
    assert shard_b and all(statuses.get(ident) == status for ident, status in shard_b.items()), (statuses, shard_b)
    assert {m["mutant"]["function"] for m in data["mutants"]} == {"setup", "load_heavy"}
    assert "--function load_heavy" in data["provenance"]["merged"][0]["command"]
    table = (project / "all.md").read_text()
    assert "merged from a record of" in table and "--function load_heavy" in table
    refused = _mutate(project, "--json", "a.json", "--merge", "b.json")
    assert refused.returncode == 2 and "use it with --report-only" in refused.stderr, refused.stderr
    missing = _mutate(project, "--report-only", "--json", "a.json", "--merge", "nope.json", "--markdown", "x.md")
    assert missing.returncode == 2 and "nope.json: no such file" in missing.stderr, missing.stderr


def test_a_merged_record_adds_what_it_ran_and_its_catches_but_never_uncatches():
    from pytest_npu_lazy.mutate import report
    from pytest_npu_lazy.mutate.session import MutantResult

    [a, b, c, d] = operators.generate(LIBRARY, "lazylib", {"load_heavy"})[:4]
    recorded = {a.id: MutantResult(a, "survived"), b.id: MutantResult(b, "caught", "t::one"),
                c.id: MutantResult(c, "not-run")}
    prov = report.merge(recorded, {"command": "first"},
                        [MutantResult(a, "caught", "t::new"), MutantResult(b, "survived"),
                         MutantResult(c, "timeout"), MutantResult(d, "caught", "t::two")],
                        {"command": "rerun --only", "wall_seconds": 12})
    assert {i: (r.status, r.killed_by) for i, r in recorded.items()} == {
        a.id: ("caught", "t::new"), b.id: ("caught", "t::one"), c.id: ("timeout", ""), d.id: ("caught", "t::two")}
    assert prov["command"] == "first" and prov["merged"] == [{"command": "rerun --only", "then": [], "wall_seconds": 12}]


@pytest.mark.needs("torch")
def test_shards_by_id_merge_into_exactly_the_record_one_run_writes(tmp_path):
    """--shard 1/2 and 2/2, merged with --report-only --merge: the one run's results, score and tables; the
    provenance one run's, with the longest shard's wall time and each shard's command added."""
    project = _project(tmp_path)
    one = _mutate(project, "--function", "load_heavy", "--json", "one.json", "--markdown", "one.md")
    assert one.returncode == 0, one.stderr
    for k in (1, 2):
        run = _mutate(project, "--function", "load_heavy", "--shard", f"{k}/2", "--json", f"s{k}.json")
        assert run.returncode == 0, run.stderr
    shards = [json.loads((project / f"s{k}.json").read_text()) for k in (1, 2)]
    ids = [{m["mutant"]["id"] for m in shard["mutants"]} for shard in shards]
    single = json.loads((project / "one.json").read_text())
    assert ids[0] and ids[1] and not ids[0] & ids[1]  # disjoint, both with work
    assert ids[0] | ids[1] == {m["mutant"]["id"] for m in single["mutants"]}  # and together, every mutant
    assert [s["provenance"]["shard"] for s in shards] == ["1/2", "2/2"]
    # the merge writes a new record (--json need not exist), from the N shards in any order
    merged = _mutate(project, "--report-only", "--json", "all.json", "--merge", "s2.json", "--merge", "s1.json",
                     "--markdown", "all.md")
    assert merged.returncode == 0, merged.stderr
    data = json.loads((project / "all.json").read_text())

    def timeless(record):
        """Less what differs between any two runs: seconds, and the addresses a failure's message quotes."""
        import re

        return [{k: re.sub(r"0x[0-9a-f]+", "0x...", v) if isinstance(v, str) else v for k, v in m.items()
                 if k != "seconds"} for m in record["mutants"]]

    assert timeless(data) == timeless(single) and data["score"] == single["score"]
    prov, once = data["provenance"], single["provenance"]
    assert [k for k in prov if k != "shards"] == list(once)
    assert {k: v for k, v in prov.items() if k not in ("command", "wall_seconds", "coverage_seconds", "shards")} == {
        k: v for k, v in once.items() if k not in ("command", "wall_seconds", "coverage_seconds")}
    assert "--shard" not in prov["command"] and "--function load_heavy --json s1.json" in prov["command"]
    assert prov["wall_seconds"] == max(s["provenance"]["wall_seconds"] for s in shards)
    assert [s["shard"] for s in prov["shards"]] == ["1/2", "2/2"] and "--shard 2/2" in prov["shards"][1]["command"]
    table, table_once = ((project / name).read_text() for name in ("all.md", "one.md"))
    assert "| shard 2/2 | `" in table
    assert [line for line in table.splitlines() if not line.startswith("| ")] == \
        [line for line in table_once.splitlines() if not line.startswith("| ")]
    assert table[table.index("## Operators"):] == table_once[table_once.index("## Operators"):]
    # an incomplete or mixed merge is refused, naming the fix
    partial = _mutate(project, "--report-only", "--json", "part.json", "--merge", "s1.json")
    assert partial.returncode == 2 and "shard 2/2 of 2 is missing" in partial.stderr, partial.stderr
    mixed = _mutate(project, "--report-only", "--json", "mixed.json", "--merge", "s1.json", "--merge", "one.json")
    assert mixed.returncode == 2 and "one.json is not a shard's record" in mixed.stderr, mixed.stderr
    bad = _mutate(project, "--shard", "3/2", "--list")
    assert bad.returncode == 2 and "K must be between 1 and N=2" in bad.stderr, bad.stderr

"""The README and the pages it links: examples run as written, commands name what exists, links lead somewhere.

The README is what a newcomer reads first: what the plugin is, how to install it, a first test, how
to read a failure. The rest lives in docs/, one page per subject, each linked from the README.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: the README and the guides it links: every example in them runs, every command names what exists
PAGES = (README, *(DOCS / name for name in ("reference.md", "cann-modes.md", "warnings.md", "suites.md",
                                             "mutation-pass.md", "change-selection.md", "run_python.md",
                                             "isolation.md", "development.md", "reports.md", "inductor-cache.md")))
#: the README stays a page a newcomer reads to the end
README_MAX_LINES = 300


def python_blocks() -> list[str]:
    return [block for page in PAGES for block in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)]


def worked_example() -> str:
    """The first example of "Writing a test": the one the README walks through, and shows failing."""
    return re.findall(r"```python\n(.*?)```", _section("Writing a test"), flags=re.S)[0]


@pytest.mark.needs("torch")
def test_readme_examples_pass(run_pytest, pytester):
    """Every example but the worked one (test_the_first_example_tests_torch_npu_and_passes runs that one); the
    first screen's, for a new project, among them."""
    blocks = [block for block in python_blocks() if block != worked_example()]
    assert blocks, "the README lost its examples"
    pytester.makepyfile(**{f"test_readme_{i}": block for i, block in enumerate(blocks, 1)})
    run = run_pytest()
    assert run.outcomes and set(run.outcomes.values()) == {"passed"}, run.text()


@pytest.mark.needs("torch", "torch_npu")
def test_the_first_example_tests_torch_npu_and_passes(run_pytest, pytester):
    """The README's first example, copied verbatim, imports torch_npu in a phase of its own and passes here
    (triton-ascend installed: Triton comes with the wrapper), with each watched module where it says."""
    example = worked_example()
    pytester.makepyfile(test_torch_npu=example)
    run = run_pytest("-p", "npu_lazy", "--npu-lazy-json-modules")
    assert list(run.outcomes.values()) == ["passed"], run.text()
    [summary] = [report["npu_lazy"] for report in run.reports if report["when"] == "teardown"]
    phases = {phase["name"]: phase for phase in summary["phases"]}
    assert {"import", "wrap", "first_call", "eager"} <= set(phases), list(phases)
    assert "torch_npu" in [module["name"] for module in phases["import"]["modules"]], "torch_npu must load in 'import'"
    watched = {name: {w["pattern"] for w in phase["watched"]} for name, phase in phases.items()}
    assert watched["import"] == set(), watched
    assert {"torch._dynamo", "torch._inductor"} <= watched["wrap"] and "torch_npu._inductor" not in watched["wrap"]
    assert "torch_npu._inductor" in watched["first_call"], watched


@pytest.mark.needs("torch", "torch_npu", "triton")
def test_the_first_example_holds_where_triton_is_found_but_does_not_import(run_pytest, pytester, monkeypatch):
    """triton-ascend installed, pybind11 missing (shadowed on PYTHONPATH by a package that raises): find_spec finds
    Triton, `import triton` fails, torch's Dynamo loads none. The example asks triton_imports(), and passes."""
    shadow = pytester.path / "no_pybind11"
    (shadow / "pybind11").mkdir(parents=True)
    (shadow / "pybind11" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'pybind11'\", name='pybind11')\n")
    monkeypatch.setenv("PYTHONPATH", str(shadow), prepend=os.pathsep)
    pytester.makepyfile(test_torch_npu=worked_example())
    run = run_pytest("-p", "npu_lazy", "--npu-lazy-cann=stub", "--npu-lazy-json-modules")
    assert list(run.outcomes.values()) == ["passed"], run.text()
    assert "(does not import: ModuleNotFoundError: No module named 'pybind11')" in run.text()
    [summary] = [report["npu_lazy"] for report in run.reports if report["when"] == "teardown"]
    wrap = {module["name"] for phase in summary["phases"] if phase["name"] == "wrap" for module in phase["modules"]}
    assert "triton" not in wrap and any(name.startswith("triton.") for name in wrap), \
        "Dynamo tried `import triton` at wrapper creation, which failed part way: the state find_spec misreads"


def _section(title: str, page: Path = README) -> str:
    text = page.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def _plugin_env_vars() -> set[str]:
    """Every PYTEST_NPU_LAZY_* variable the plugin's code names, but the ones it sets for its own processes.

    Those are the child's descriptor, the run's Inductor cache directory (the outermost pytest process names it
    to the workers and nested runs it starts), the selection map's folder and package directories for the Python
    processes a map-taking test starts, and the mutation runner's plan and results file (the latter read by
    role.py, which decides each process's role): the runner (a tool
    beside pytest, with its own --help) sets them for the processes of each run it starts; no user sets them.
    """
    package = Path(__file__).resolve().parents[2] / "pytest_npu_lazy"
    names = set()
    for source in package.rglob("*.py"):
        if "mutate" in source.relative_to(package).parts:
            continue
        names.update(re.findall(r"PYTEST_NPU_LAZY_[A-Z_]+", source.read_text()))
    return names - {"PYTEST_NPU_LAZY_CHILD_FD", "PYTEST_NPU_LAZY_INDUCTOR_RUN_DIR", "PYTEST_NPU_LAZY_MAP_SUBPROCESS",
                     "PYTEST_NPU_LAZY_MAP_ROOTS", "PYTEST_NPU_LAZY_MUTATE_RESULTS"}


def test_every_option_ini_key_and_env_var_is_in_the_options_table_and_help(pytester):
    help_text = pytester.runpytest_subprocess("-p", "npu_lazy", "--help").stdout.str()
    options = set(re.findall(r"^\s+(--npu-lazy-[a-z-]+)", help_text, flags=re.M))
    ini_keys = set(re.findall(r"^\s+(npu_lazy_\w+) \(", help_text, flags=re.M))
    env_vars = _plugin_env_vars()
    assert {"--npu-lazy-json-modules", "npu_lazy_watch", "npu_lazy_budget_growth"} <= options | ini_keys
    assert env_vars >= {"PYTEST_NPU_LAZY_ISOLATE", "PYTEST_NPU_LAZY_CANN", "PYTEST_NPU_LAZY_CACHE"}
    missing_help = sorted(v for v in env_vars if v not in help_text)
    assert not missing_help, f"environment variables not in pytest -h: {missing_help}"
    table = "\n".join(line for line in _section("Options", DOCS / "reference.md").splitlines() if line.startswith("|"))
    missing = sorted(name for name in options | ini_keys | env_vars if f"`{name}" not in table)
    assert not missing, f"the options table of docs/reference.md lacks {missing}"


def test_options_with_choices_list_every_choice_in_the_options_table():
    """Each option that takes one of a few values shows them all (`auto|real|stub|emulate|off`), in the
    code's order, so a mode added to the code and not to the README fails here."""
    from pytest_npu_lazy.probe.inductor_cache import POLICIES
    from pytest_npu_lazy.settings import CANN_MODES, ISOLATE_CHOICES, ISOLATION_MODES

    table = _section("Options", DOCS / "reference.md")
    for option, choices in (("--npu-lazy-isolate", ISOLATE_CHOICES), ("--npu-lazy-isolation", ISOLATION_MODES),
                            ("--npu-lazy-cann", CANN_MODES), ("--npu-lazy-inductor-cache", POLICIES)):
        shown = re.search(rf"`{option}=([^`]*)`", table)
        assert shown, f"the options table has no `{option}=...` cell"
        assert shown[1].split("\\|") == list(choices), f"{option}: the table shows {shown[1]!r}, the code {choices}"
    for page in (DOCS / "cann-modes.md", README):  # the modes in full, and each mode's requirements
        missing = [mode for mode in CANN_MODES if f"\n| `{mode}`" not in page.read_text()]
        assert not missing, f"the CANN modes table of {page.name} lacks {missing}"


#: the regression that shipped (test/dynamo/regressions.py), installed in the isolated child before the test
REGRESSION_CONFTEST = """
import sys

import pytest

sys.path[:0] = [{test!r}, {dynamo!r}]
from regressions import eager_inductor_setup


@pytest.fixture(autouse=True)
def the_regression_that_shipped():
    eager_inductor_setup()
"""


def _short(line: str) -> str:
    """A failure line with the plugin's and the regression module's paths from their package down, as an
    installed plugin prints them (here they may print from this checkout's directory)."""
    return re.sub(r"[^\s(]*?((?:pytest_npu_lazy|test/dynamo)/[\w/]+\.py)", r"\1", line.rstrip())


def _same(line: str) -> str:
    """The plugin's and the regression module's line numbers move with every edit; torch's and torch_npu's
    are the point and stay."""
    return re.sub(r"((?:pytest_npu_lazy|test/dynamo)/[\w/]+\.py):\d+", r"\1:N", _short(line))


@pytest.mark.needs("torch", "torch_npu")
def test_failure_example_is_what_a_run_prints(pytester):
    """The README's failure text is the first example's failure under the regression that shipped (the
    wrapper's __init__ running the Inductor set-up), regenerated from this run when torch, torch_npu or the
    chain format changes."""
    documented = re.search(r"When a guarantee breaks.*?```\n(.*?)```", README.read_text(), flags=re.S)[1]
    test_dir = Path(__file__).resolve().parents[1]
    pytester.makeconftest(REGRESSION_CONFTEST.format(test=str(test_dir), dynamo=str(test_dir / "dynamo")))
    pytester.makepyfile(test_torch_npu=worked_example())
    result = pytester.runpytest_subprocess("-p", "npu_lazy", "-p", "no:cacheprovider", "-p", "no:randomly",
                                           timeout=300)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    printed = [_short(line) for line in result.stdout.lines if line.startswith("E ")]
    assert [_same(line) for line in documented.splitlines()] == [_same(line) for line in printed], \
        "regenerate the README's failure example from this run:\n" + "\n".join(printed)


def test_the_readme_is_short_and_links_every_guide():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move the detail to a page in docs/"
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)", README.read_text()))
    assert {str(page.relative_to(ROOT)) for page in PAGES[1:]} <= linked, "a guide the README does not link"


def _anchor(title: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def test_every_link_in_the_pages_leads_to_a_file_and_heading():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", file.read_text(), flags=re.M)
                if anchor not in {_anchor(h) for h in headings}:
                    broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []


def _commands(page: Path) -> list[str]:
    """Shell lines of a page: indented blocks and code blocks that are not Python, output or JSON."""
    text = page.read_text()
    lines = re.findall(r"^    ((?:\.venv/bin/)?(?:python|pytest|bash|git diff|NPU_LAZY|nox|pip).*)$", text, flags=re.M)
    for block in re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, flags=re.S):
        lines += [line for line in block.splitlines() if re.match(r"(\.venv/bin/)?(python|pytest) ", line)]
    return lines + re.findall(r"`((?:python|pytest) [^`]*)`", text)  # and those quoted in a sentence


def test_every_command_in_the_pages_names_options_and_modules_that_exist(pytester):
    """A command a reader copies fails on an option renamed or a module moved: each `--npu-lazy-*` option is
    one pytest -h lists (or a module's own command line takes), each `python -m pytest_npu_lazy...` exists."""
    import importlib.util

    help_text = pytester.runpytest_subprocess("-p", "npu_lazy", "--help").stdout.str()
    options = set(re.findall(r"(--npu-lazy-[a-z-]+)", help_text))
    unknown, modules = [], set()
    commands = [(page.name, line) for page in PAGES for line in _commands(page)]
    assert len(commands) > 20, commands
    for name, line in commands:
        module = re.search(r"python -m (pytest_npu_lazy[\w.]*)", line)
        if module:
            modules.add(module[1])
            continue  # a tool of its own, with its own options (--help)
        unknown += [f"{name}: {option} in `{line.strip()}`" for option in re.findall(r"(--npu-lazy-[a-z-]+)", line)
                    if option not in options]
    assert unknown == [], "options pytest -h does not list"
    missing = sorted(m for m in modules if importlib.util.find_spec(m) is None)
    assert missing == [], "modules a command runs that do not exist"
    assert {"pytest_npu_lazy.mutate", "pytest_npu_lazy.selection", "pytest_npu_lazy.reports.matrix"} <= modules

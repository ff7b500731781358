"""The README's examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


@pytest.mark.needs("torch")
def test_readme_examples_pass(run_pytest, pytester):
    blocks = python_blocks()
    assert blocks, "the README lost its examples"
    pytester.makepyfile(**{f"test_readme_{i}": block for i, block in enumerate(blocks)})
    run = run_pytest()
    assert run.outcomes and set(run.outcomes.values()) == {"passed"}, run.text()


def _section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def _plugin_env_vars() -> set[str]:
    """Every PYTEST_NPU_LAZY_* variable the plugin's code names, but the one it sets for its own children."""
    package = Path(__file__).resolve().parents[2] / "pytest_npu_lazy"
    names = set()
    for source in package.rglob("*.py"):
        names.update(re.findall(r"PYTEST_NPU_LAZY_[A-Z_]+", source.read_text()))
    return names - {"PYTEST_NPU_LAZY_CHILD_FD"}


def test_every_option_ini_key_and_env_var_is_in_the_options_table_and_help(pytester):
    help_text = pytester.runpytest_subprocess("-p", "npu_lazy", "--help").stdout.str()
    options = set(re.findall(r"^\s+(--npu-lazy-[a-z-]+)", help_text, flags=re.M))
    ini_keys = set(re.findall(r"^\s+(npu_lazy_\w+) \(", help_text, flags=re.M))
    env_vars = _plugin_env_vars()
    assert {"--npu-lazy-json-modules", "npu_lazy_watch", "npu_lazy_budget_growth"} <= options | ini_keys
    assert env_vars >= {"PYTEST_NPU_LAZY_ISOLATE", "PYTEST_NPU_LAZY_CANN", "PYTEST_NPU_LAZY_CACHE"}
    missing_help = sorted(v for v in env_vars if v not in help_text)
    assert not missing_help, f"environment variables not in pytest -h: {missing_help}"
    table = "\n".join(line for line in _section("Options").splitlines() if line.startswith("|"))
    missing = sorted(name for name in options | ini_keys | env_vars if f"`{name}" not in table)
    assert not missing, f"the README's options table lacks {missing}"


def test_options_with_choices_list_every_choice_in_the_options_table():
    """Each option that takes one of a few values shows them all (`auto|real|stub|emulate|off`), in the
    code's order, so a mode added to the code and not to the README fails here."""
    from pytest_npu_lazy.settings import CANN_MODES, ISOLATE_CHOICES, ISOLATION_MODES

    table = _section("Options")
    for option, choices in (("--npu-lazy-isolate", ISOLATE_CHOICES), ("--npu-lazy-isolation", ISOLATION_MODES),
                            ("--npu-lazy-cann", CANN_MODES)):
        shown = re.search(rf"`{option}=([^`]*)`", table)
        assert shown, f"the options table has no `{option}=...` cell"
        assert shown[1].split("\\|") == list(choices), f"{option}: the table shows {shown[1]!r}, the code {choices}"
    modes = _section("Running on a machine without Ascend software")
    missing = [mode for mode in CANN_MODES if f"\n| `{mode}`" not in modes]
    assert not missing, f"the CANN modes table lacks {missing}"


FAILING_EXAMPLE = '''import pytest


@pytest.mark.npu_lazy(preload=["torch"])
def test_wrapper(npu_lazy):
    import torch
    npu_lazy.compile(lambda x: x + 1, backend="inductor")
    npu_lazy.assert_not_loaded("torch._inductor")
'''


@pytest.mark.needs("torch")
def test_failure_example_is_what_a_run_prints(pytester):
    """The README's failure text, regenerated from this run when torch or the chain format changes."""
    import pytest_npu_lazy

    documented = re.search(r"When a guarantee breaks.*?```\n(.*?)```", README.read_text(), flags=re.S)[1]
    pytester.makepyfile(test_x=FAILING_EXAMPLE)
    result = pytester.runpytest_subprocess("-p", "npu_lazy", "-p", "no:cacheprovider", timeout=300)
    site = str(Path(pytest_npu_lazy.__file__).resolve().parent.parent)
    printed = [line.replace(site, "<site-packages>") for line in result.stdout.lines if line.startswith("E ")]

    def same(line: str) -> str:  # the plugin's own line numbers move with every edit; torch's are the point
        return re.sub(r"(pytest_npu_lazy/[\w/]+\.py):\d+", r"\1:N", line.rstrip())

    assert [same(line) for line in documented.splitlines()] == [same(line) for line in printed], \
        "regenerate the README's failure example from this run:\n" + "\n".join(printed)

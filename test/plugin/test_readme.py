"""The README's examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_examples_pass(run_pytest, pytester):
    blocks = python_blocks()
    assert blocks, "the README lost its examples"
    pytester.makepyfile(**{f"test_readme_{i}": block for i, block in enumerate(blocks)})
    run = run_pytest()
    assert run.outcomes and set(run.outcomes.values()) == {"passed"}, run.text()

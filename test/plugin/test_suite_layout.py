"""The plugin's own tests share code through conftest.py and helper modules, never by importing a test module.

Importing a test module runs its collection-time code in another module and
registers its fixtures twice; pytest can also import it under another name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def imported_test_modules(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        found += [name for name in names if name.split(".")[-1].startswith(("test_", "conftest"))]
    return found


def test_no_test_module_imports_another():
    imports = {path.name: imported_test_modules(path.read_text()) for path in sorted(HERE.glob("*.py"))}
    assert len(imports) > 10
    assert {name: found for name, found in imports.items() if found} == {}


@pytest.mark.parametrize("source", ["from test_cann import run_python", "import test_reports",
                                    "from conftest import RECORDING_CONFTEST"])
def test_the_check_catches(source):
    assert imported_test_modules(source)

"""Breaking a guarantee on purpose inside an isolated test: what test/dynamo and test/upstream share.

test/dynamo's regression zoo (regressions.py) and test/upstream's caught
tests both install a breakage, run a guarantee test's body under it and
require a failure that says what broke. Standard library and pytest only:
test/upstream uses it without torch_npu.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import traceback
from typing import Callable

import pytest


def caught(guarantee, *args, says=()) -> str:
    """Run a guarantee test's body with a regression installed: it must fail, saying each of ``says``.

    Returns the whole failure text (notes included) for further checks.
    """
    try:
        guarantee(*args)
    except pytest.skip.Exception as exc:
        raise AssertionError(f"{guarantee.__name__} skipped under the regression instead of failing: {exc}") from exc
    except BaseException as exc:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    else:
        raise AssertionError(f"{guarantee.__name__} passed with the regression installed: it cannot catch it")
    unsaid = [fragment for fragment in says if fragment not in text]
    assert not unsaid, f"the failure of {guarantee.__name__} does not say {unsaid}:\n{text}"
    return text


class AfterImport(importlib.abc.MetaPathFinder):
    """Run ``callback(module)`` right after ``name``'s code ran: the module's last line, as it were."""

    def __init__(self, name: str, callback: Callable) -> None:
        self.name = name
        self.callback = callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        exec_module = spec.loader.exec_module
        callback = self.callback

        def exec_then_patch(module):
            exec_module(module)
            callback(module)

        spec.loader.exec_module = exec_then_patch
        return spec


def after_import(name: str, callback: Callable) -> None:
    """``callback(module)`` now if ``name`` is loaded, else right after its code runs."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
    else:
        sys.meta_path.insert(0, AfterImport(name, callback))

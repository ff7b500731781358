"""Make modules look absent, as on a machine where they are not installed.

A ``None`` entry in ``sys.modules`` is the import system's own way to say
"absent": ``import`` raises ModuleNotFoundError and ``find_spec`` returns
None, whatever finder would otherwise answer. Submodules follow, because
importing them imports the blocked parent first.

Some packages discover their plugins by path instead (triton loads
``triton.language.extra.<backend>`` with ``FileFinder.find_spec`` and
``exec_module``), so the path finder is taught the same answer. A block
that is bypassed anyway is reported, never silently ignored.
"""

from __future__ import annotations

import importlib.machinery
import sys
from typing import Any, Callable

from ..errors import BlockError
from .recorder import matches

#: pytest leaves this module's frames out of a failing test's traceback: a misused probe, a broken guard
#: or a blocked import is reported at the test's own line (--fulltrace shows them)
__tracebackhide__ = True



class ModuleBlocker:
    """Blocks modules for one test and restores ``sys.modules`` afterwards."""

    def __init__(self, describe_origin: Callable[[str], str] | None = None) -> None:
        self.blocked: list[str] = []
        self._original_find_spec: Callable[..., Any] | None = None
        self._describe_origin = describe_origin or (lambda name: "")

    def block(self, *names: str) -> None:
        for name in names:
            if not isinstance(name, str) or not name or any(not part.isidentifier() for part in name.split(".")):
                raise BlockError(f"cannot block {name!r}: give a dotted module name such as 'triton' "
                                 "or 'triton.language.extra.ascend'.")
            loaded = sorted(n for n, m in list(sys.modules.items()) if m is not None and matches(n, name))
            if loaded:
                origin = self._describe_origin(loaded[0])
                raise BlockError(
                    f"cannot block {name!r}: {loaded[0]!r} is already loaded{origin}. Blocking makes a "
                    "module look absent to its first import only. Block it before anything imports it: "
                    f"@pytest.mark.npu_lazy(block=[{name!r}]) applies before the test module is imported; "
                    "keep it out of the preload baseline.")
            if name not in self.blocked:
                sys.modules[name] = None  # type: ignore[assignment]
                self.blocked.append(name)
        if self.blocked and self._original_find_spec is None:
            self._hide_from_path_finder()

    def _hide_from_path_finder(self) -> None:
        finder_class = importlib.machinery.FileFinder
        original = self._original_find_spec = finder_class.find_spec
        blocked = self.blocked

        def find_spec(finder, fullname, target=None):
            if any(matches(fullname, name) for name in blocked):
                return None
            return original(finder, fullname, target)

        finder_class.find_spec = find_spec  # type: ignore[method-assign]  # patched until restore()

    def bypassed(self) -> list[str]:
        """Blocked names that something loaded anyway, without asking the import system."""
        return [name for name in self.blocked if sys.modules.get(name, None) is not None]

    def restore(self) -> None:
        if self._original_find_spec is not None:
            importlib.machinery.FileFinder.find_spec = self._original_find_spec  # type: ignore[method-assign]  # put back
            self._original_find_spec = None
        for name in self.blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
        self.blocked.clear()

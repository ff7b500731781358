"""Make modules look absent, as on a machine where they are not installed.

A ``None`` entry in ``sys.modules`` is the import system's own way to say
"absent": ``import`` raises ModuleNotFoundError and ``find_spec`` returns
None, whatever finder would otherwise answer. Submodules follow, because
importing them imports the blocked parent first.
"""

from __future__ import annotations

import sys
from typing import Callable

from .errors import BlockError
from .recorder import matches


class ModuleBlocker:
    """Blocks modules for one test and restores ``sys.modules`` afterwards."""

    def __init__(self, describe_origin: Callable[[str], str] | None = None) -> None:
        self.blocked: list[str] = []
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

    def restore(self) -> None:
        for name in self.blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
        self.blocked.clear()

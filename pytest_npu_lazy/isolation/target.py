"""Which test a child runs: the pytest process's item, found again in a process that collects only it.

A node id is not always an argument pytest can parse back: a directory
named ``case[1]`` or a parametrization id containing ``::`` breaks the
split into path, names and parametrization. So the pytest process sends the
item's file and the exact names of the nodes below it, and the child has
pytest's own collection follow exactly those names (nothing else in the file
is collected, and every collection hook runs as usual).

The child then checks that what it found is what the pytest process
collected: the same node id and the same parameter values. A parametrization
built in another order in another process (from a set, from object
identities, from the clock) gives the same ids to different cases; running
"test[x0]" with another value would be a silent lie, so it fails instead.

This module is the description both ends share: the pytest process makes it
(:meth:`Target.of`, :func:`prepare_message`), a child reads it back
(:meth:`Target.from_dict`) and finds the test with
:mod:`pytest_npu_lazy.isolation.child_side.find`.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from .. import compat
from .messages import Prepare

_TARGET_KEY = pytest.StashKey["Target"]()
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_MAX_DESCRIPTION = 300


class TargetError(Exception):
    """The child cannot run the test the pytest process asked for; the message says why."""


@dataclass(frozen=True)
class Target:
    """An isolated test as the pytest process collected it."""

    nodeid: str
    #: the file pytest collects (absolute), or a node-id argument for items outside any file
    argument: str
    #: names of the nodes below the file, down to the item (empty: ``argument`` is a node id)
    names: tuple[str, ...] = ()
    #: parameter name -> a description of its value that is equal in every process for equal values
    params: dict[str, str] = field(default_factory=dict)
    #: the session's base temporary directory, shared by every isolated test
    basetemp: str | None = None

    @classmethod
    def of(cls, item: pytest.Item) -> "Target":
        target = item.stash.get(_TARGET_KEY, None)
        if target is None:
            chain = item.listchain()
            files = [i for i, node in enumerate(chain) if isinstance(node, pytest.File)]
            if files:
                argument, names = str(chain[files[-1]].path), tuple(n.name for n in chain[files[-1] + 1:])
            else:  # an item a directory collector made: its node id is the best pytest can take
                argument, names = node_argument(item.config, item.nodeid), ()
            target = item.stash[_TARGET_KEY] = cls(item.nodeid, argument, names, describe_params(item),
                                                   compat.session_basetemp(item.config))
        return target

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Target":
        return cls(data["nodeid"], data["argument"], tuple(data["names"]), dict(data["params"]), data["basetemp"])


def prepare_message(item: pytest.Item, settings) -> Prepare:
    """What a child is told before it runs ``item``: which test, with which settings."""
    return Prepare(item.nodeid, settings.to_dict(), Target.of(item).to_dict())


def node_argument(config: pytest.Config, nodeid: str) -> str:
    """The rootdir-relative node id as an argument pytest resolves from any directory."""
    path, sep, rest = nodeid.partition("::")
    return str(config.rootpath / path) + sep + rest


# -- parameter descriptions -------------------------------------------------------

def describe_params(item: pytest.Item) -> dict[str, str]:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return {}
    return {name: _describe(value)[:_MAX_DESCRIPTION] for name, value in callspec.params.items()}


def _describe(value: Any, depth: int = 0) -> str:
    """Equal for equal values in any two processes: no addresses, sets in sorted order."""
    if value is None or isinstance(value, (str, bytes, int, float, complex, enum.Enum)):
        return repr(value)
    kind = type(value)
    if depth < 3:
        if isinstance(value, (tuple, list)):
            return f"{kind.__name__}({', '.join(_describe(v, depth + 1) for v in value)})"
        if isinstance(value, (set, frozenset)):
            return f"{kind.__name__}({', '.join(sorted(_describe(v, depth + 1) for v in value))})"
        if isinstance(value, dict):
            items = sorted(f"{_describe(k, depth + 1)}: {_describe(v, depth + 1)}" for k, v in value.items())
            return f"{kind.__name__}({', '.join(items)})"
    try:
        text = _ADDRESS.sub("0x?", repr(value))
    except Exception:  # a broken __repr__ must not break the run
        text = "?"
    if kind.__repr__ is object.__repr__ and depth < 3 and isinstance(getattr(value, "__dict__", None), dict):
        text += " " + _describe(dict(vars(value)), depth + 1)
    return f"{kind.__module__}.{kind.__qualname__} {text}"

"""Finding the pytest process's test again in a child: pytest's own collection, led to exactly its names.

The pytest process describes the test (:class:`~pytest_npu_lazy.isolation.target.Target`);
the child makes pytest resolve that one argument to the file and the exact
node names (``_pytest.main.resolve_collection_argument``, replaced in the
child only and reached through ``pytest_npu_lazy.compat``), collects, and
checks that what it found has the same node id and parameter values.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable

import pytest

from ... import compat
from ..target import Target, TargetError, describe_params


def resolve_exactly(target: Target) -> Callable[[], None]:
    """Make pytest resolve the target's argument to its file and exact names; returns the undo.

    Everything else (path matching, conftests, every collection hook) stays
    pytest's own; only the parsing of this one argument is skipped.
    """
    if not target.names:
        return lambda: None

    def make(original):
        def resolve(invocation_path, arg, *args, **kwargs):
            if arg != target.argument:
                return original(invocation_path, arg, *args, **kwargs)
            plain = original(invocation_path, os.sep, *args, **kwargs)  # a valid argument of this pytest's shape
            if isinstance(plain, tuple):  # older pytest: (path, names)
                return Path(target.argument), list(target.names)
            changes: dict[str, Any] = {"path": Path(target.argument), "parts": list(target.names)}
            if hasattr(plain, "parametrization"):
                changes["parametrization"] = ""  # the last name already holds it: match it exactly
            return dataclasses.replace(plain, **changes)

        return resolve

    return compat.patch_resolve_collection_argument(make)


#: the name of :class:`CollectTowards` among pytest's plugins
TOWARDS_NAME = "npu_lazy_collect_towards"


class CollectTowards:
    """Skips every path that is not on the way to the one file a child or a module zygote collects.

    pytest collects a file argument from the root down, and a directory's collector makes a node for
    every entry in it before it keeps the one that matches: collecting one module of a folder of a
    hundred made a hundred nodes and asked a hundred ``pytest_ignore_collect`` hooks, the most of a
    module zygote's start (measured: 40 % of its CPU time in a folder of 40 files, and it grows with
    the folder). The siblings' nodes are never collected further (their modules are not imported, their
    folders' conftests not loaded), so saying "ignore" for them first changes nothing about the target's
    items. Off (``towards`` None) except inside :func:`collect_target`.
    """

    def __init__(self) -> None:
        self.towards: set[str] | None = None
        self._names: set[str] = set()
        self._real: set[str] = set()

    def aim(self, argument: str | None) -> None:
        """Collect towards the file ``argument`` (absolute, as :class:`Target` has it); None: collect as pytest does."""
        if argument is None:
            self.towards = None
            return
        path = Path(argument)
        self.towards = {str(path), *map(str, path.parents)}
        self._names = {path.name, *(parent.name for parent in path.parents)}
        real = Path(os.path.realpath(path))
        self._real = {str(real), *map(str, real.parents)}

    @pytest.hookimpl(tryfirst=True)
    def pytest_ignore_collect(self, collection_path: Path) -> bool | None:
        towards = self.towards
        if towards is None or str(collection_path) in towards:
            return None
        if collection_path.name in self._names and os.path.realpath(collection_path) in self._real:
            return None  # the same file or folder reached through a link
        return True


def collect_towards(config: pytest.Config) -> CollectTowards:
    """This process's :class:`CollectTowards`, registered the first time (a zygote registers it before it
    forks, so its module zygotes and children find it there)."""
    plugin = config.pluginmanager.get_plugin(TOWARDS_NAME)
    if plugin is None:
        plugin = CollectTowards()
        config.pluginmanager.register(plugin, TOWARDS_NAME)
    return plugin


def collect_target(session: pytest.Session, target: Target) -> list[pytest.Item]:
    """Collect only the target (pytest's UsageError becomes a TargetError that keeps its text)."""
    undo = resolve_exactly(target)
    towards = collect_towards(session.config)
    towards.aim(target.argument if os.path.isfile(target.argument) else None)  # else a node id (see Target)
    try:
        return list(session.perform_collect([target.argument]))
    except pytest.UsageError as exc:
        raise not_collected(target, exc) from None
    finally:
        towards.aim(None)
        undo()


def not_collected(target: Target, error: pytest.UsageError) -> TargetError:
    """pytest's own words for why it could not collect the target (it says them in its UsageError)."""
    text = "\n".join(str(arg) for arg in error.args) or "a usage error"
    return TargetError(f"pytest could not collect {target.nodeid!r} in the isolated child:\n{text}")


def index_by_nodeid(items: list[pytest.Item]) -> dict[str, pytest.Item]:
    """Each node id's first item: built once where a module's items serve many children (a module zygote),
    so that a child finds its test with one lookup instead of reading the node id of every item before it
    (pytest builds a node id's text on every read; in a module of 2,000 cases that was the child's
    costliest step)."""
    index: dict[str, pytest.Item] = {}
    for item in items:
        index.setdefault(item.nodeid, item)
    return index


def identify(target: Target, items: list[pytest.Item],
             index: dict[str, pytest.Item] | None = None) -> pytest.Item | None:
    """The item that is the target, after checking its parameters; None when none was collected.

    ``index``: :func:`index_by_nodeid` of ``items``, where it was built once for many children.
    """
    if index is not None:
        found = index.get(target.nodeid)
    else:
        found = next((item for item in items if item.nodeid == target.nodeid), None)
    if found is None:
        if items:
            raise TargetError(
                f"the isolated child collected {', '.join(repr(i.nodeid) for i in items[:5])} but not "
                f"{target.nodeid!r}: the test's module defines its tests differently on each import "
                "(ids or parametrization built from something that changes between processes).")
        return None
    params = describe_params(found)
    if params != target.params:
        differing = sorted(k for k in {*params, *target.params} if params.get(k) != target.params.get(k))
        lines = "\n".join(f"  {name}: {target.params.get(name, '(none)')} in the pytest process, "
                          f"{params.get(name, '(none)')} in the child" for name in differing)
        raise TargetError(
            f"{target.nodeid!r} has different parameters in the isolated child than in the pytest process:\n"
            f"{lines}\nThe parametrization is not built the same way in every process (from a set, object "
            "identities, random or time-dependent values), so this id names another case here. Build the "
            "values in a fixed order (e.g. sorted(...)) or give ids that are derived from the values.")
    return found

"""The rule: which tests of a map a change can affect, each with its reason.

A changed line of a watched package selects the tests that ran the code it belongs to:

- a line in a function's body: the tests that ran any line of that body (the innermost function
  holding it). Not only the line itself: an edit can change what the body binds, yields or reads,
  and every caller of the function runs some line of it;
- any other line (module level, a class body, a ``def`` line, a decorator, a default value): it
  runs when the module is imported, so the tests whose process imported the module, in a phase or
  before it (its zygote's preload, collection);
- and, with each such test, every test that ran after it in the same process (in-process runs): what
  the code left behind (a run-once set-up, a cache) decides what a later test meets. An isolated test
  has a process of its own.

What the rule cannot rule out is selected, with the reason: a map taken with other versions of
torch, torch_npu or Triton (everything); a file the map has no source for, a diff whose old side is
not the source the map was taken on, or a line past its end (every test that loaded the file); a
new file or a non-Python file inside a watched package (every test that loaded the package); a
changed test file (its tests) or ``conftest.py`` (the tests below it); any other file (everything).
Tests that failed when the map was taken (their evidence stops where they failed) and tests that
started a Python process or forked (what ran there never came home) are selected by every change of a
watched package; tests the map has no evidence of (skipped before they ran, a child that died) by every
change not ignored.
"""

from __future__ import annotations

import fnmatch
import posixpath
from dataclasses import dataclass, field

from .changes import ChangeSet, FileChange
from .map import SelectionMap
from .sources import MODULE_SCOPE, scope_of

#: files no test can observe, unless ini npu_lazy_changed_ignore says otherwise
DEFAULT_IGNORE = ("*.md", "*.rst", "docs/*")


@dataclass
class Selection:
    #: node id -> why it is selected (the first reason found)
    selected: dict[str, str] = field(default_factory=dict)
    #: why nothing can be ruled out (None: the rule ruled tests out)
    everything: str | None = None
    #: per changed file, what it selected or why it selected nothing
    notes: list[str] = field(default_factory=list)
    #: changed test files the map has no test of (their tests are new): a file-based CI must run them
    new_test_files: list[str] = field(default_factory=list)

    def covers(self, nodeid: str) -> bool:
        return self.everything is not None or nodeid in self.selected

    def add(self, nodeid: str, reason: str) -> None:
        self.selected.setdefault(nodeid, reason)


def select(smap: SelectionMap, changes: ChangeSet, versions: dict[str, str], rootdir_in_base: str = "",
           ignore: tuple[str, ...] = DEFAULT_IGNORE) -> Selection:
    """``rootdir_in_base``: where pytest's rootdir (node ids are relative to it) lies in the change's base
    directory, posix, "" for the same directory."""
    selection = Selection()
    differ = sorted(name for name in set(versions) | set(smap.versions) if versions.get(name) != smap.versions.get(name))
    if differ:
        selection.everything = ("the map was taken with other versions (" + ", ".join(
            f"{n} {smap.versions.get(n, 'absent')} there, {versions.get(n, 'absent')} here" for n in differ) +
            "): nothing can be ruled out; take the map again with these versions")
        return selection
    watched_change = considered = False
    for change in changes.files:
        if any(fnmatch.fnmatch(change.path, pattern) for pattern in ignore):
            selection.notes.append(f"{change.path}: ignored (ini npu_lazy_changed_ignore)")
            continue
        considered = True
        mapped = _map_path(smap, change.path)
        if mapped is not None:
            watched_change = True
            _watched_file(smap, change, mapped, selection)
            continue
        package = _package_of(smap, change.path)
        if package is not None:
            watched_change = True
            kind = "a new module" if change.path.endswith(".py") else "a file that is not Python source (built into it?)"
            hits = _tests_that_loaded(smap, lambda p, package=package: p.startswith(package + "/"))
            for nodeid, phase in hits.items():
                selection.add(nodeid, f"{change.path} is {kind} of {package}, which it loaded ({phase})")
            for nodeid, earlier in smap.later_in_process(hits).items():
                selection.add(nodeid, f"ran in-process after {earlier}, which loaded {package}")
            selection.notes.append(f"{change.path}: {kind} of {package}, unknown to the map: every test that loaded "
                                   f"{package} ({len(hits)})")
            continue
        if _test_file_change(smap, change, rootdir_in_base, selection):
            continue
        selection.everything = (f"{change.path} is neither a source file of {', '.join(smap.packages)} nor a test "
                                "file or conftest.py of the map: nothing can be ruled out")
        selection.notes.append(f"{change.path}: cannot be ruled out (everything selected)")
    for nodeid, test in smap.tests.items():
        if considered and not test.evidence:
            selection.add(nodeid, f"{test.outcome} without evidence when the map was taken (skipped before it ran, "
                                  "or its child died): nothing rules it out")
        elif watched_change:
            if test.outcome == "failed":
                selection.add(nodeid, "failed (or xfailed) when the map was taken: its evidence stops where it failed")
            elif test.opaque:
                selection.add(nodeid, f"ran code in {', '.join(test.opaque)}, whose lines the map cannot see")
    return selection


def _map_path(smap: SelectionMap, path: str) -> str | None:
    """The map's file for a changed path: the same path, or one it ends with (a diff from another layout)."""
    if path in smap.files:
        return path
    for known in smap.files:
        if path.endswith("/" + known):
            return known
    return None


def _package_of(smap: SelectionMap, path: str) -> str | None:
    """The watched package a changed path lies in (``torch_npu/csrc/...`` -> ``torch_npu``), or None."""
    directories = path.split("/")[:-1]
    return next((package for package in smap.packages if package in directories), None)


def _tests_that_loaded(smap: SelectionMap, wanted) -> dict[str, str]:
    found = {}
    paths = [p for p in smap.seen_files() if wanted(p)]
    for nodeid in smap.tests:
        for path in paths:
            phase = smap.loaded(nodeid, path)
            if phase is not None:
                found[nodeid] = phase
                break
    return found


def _watched_file(smap: SelectionMap, change: FileChange, path: str, selection: Selection) -> None:
    facts = smap.files[path]
    why_whole = None
    if change.blob and not facts.blob.startswith(change.blob) and set(change.blob) != {"0"}:
        why_whole = f"its old side (blob {change.blob[:12]}) is not the source the map was taken on ({facts.blob[:12]})"
    elif change.lines is None:
        why_whole = {"listed": "listed as changed, lines unknown", "deleted": "deleted"}.get(change.status,
                                                                                             change.status)
    elif max(change.lines) > facts.lines:
        why_whole = f"line {max(change.lines)} is past its end as the map knows it ({facts.lines} lines)"
    elif facts.functions is None:
        why_whole = "the map keeps no functions of it (no test ran it, or it did not parse)"
    if why_whole is not None:
        loaders = _tests_that_loaded(smap, lambda p: p == path)
        for nodeid, loaded_in in loaders.items():
            selection.add(nodeid, f"loaded {path} ({loaded_in}); {why_whole}")
        for nodeid, earlier in smap.later_in_process(loaders).items():
            selection.add(nodeid, f"ran in-process after {earlier}, which loaded {path}")
        selection.notes.append(f"{path}: {why_whole}: every test that loaded it ({len(loaders)})")
        return
    assert change.lines is not None and facts.functions is not None, "else why_whole says why the whole file"
    scopes: dict[str, tuple[int, int] | None] = {}
    for line in sorted(change.lines):
        function = scope_of(facts.functions, line)
        if function is None:
            scopes[MODULE_SCOPE] = None
        else:
            scopes[function[0]] = (function[1], function[2])
    for name, span in scopes.items():
        hits: list[str] = []
        for nodeid in smap.tests:
            if span is None:
                phase = smap.loaded(nodeid, path)
                reason = f"imported {path} ({phase}); the change is at module level"
            else:
                phase = smap.ran(nodeid, path, *span)
                reason = f"ran {path}:{name} ({phase})"
            if phase is not None:
                selection.add(nodeid, reason)
                hits.append(nodeid)
        later = smap.later_in_process(hits)
        for nodeid, earlier in later.items():
            selection.add(nodeid, f"ran in-process after {earlier}, which ran {path}:{name}: what it left decides "
                                  "what this test meets")
        where = "module level" if span is None else f"{name}"
        selection.notes.append(f"{path}:{where}: {len(hits)} tests " + ("imported it" if span is None else "ran it") +
                               (f", {len(set(later) - set(hits))} more ran after one of them in its process"
                                if set(later) - set(hits) else ""))


def _test_file_change(smap: SelectionMap, change: FileChange, rootdir_in_base: str, selection: Selection) -> bool:
    """A changed test file selects its tests; a changed conftest.py the tests below it. False: neither."""
    path = change.path
    if rootdir_in_base:
        if not path.startswith(rootdir_in_base.rstrip("/") + "/"):
            return False
        path = path[len(rootdir_in_base.rstrip("/")) + 1:]
    conftest = posixpath.basename(path) == "conftest.py"
    if conftest:
        directory = posixpath.dirname(path)
        hits = [n for n in smap.tests if not directory or n.startswith(directory + "/")]
        reason, note = f"{path} changed", f"{path}: the {len(hits)} tests below it"
    else:
        hits = [n for n in smap.tests if n.split("::")[0] == path]
        reason, note = "its test file changed", f"{path}: its {len(hits)} tests"
    if hits or conftest:  # a conftest.py with no test of the map below it selects none
        for nodeid in hits:
            selection.add(nodeid, reason)
        later = set(smap.later_in_process(hits)) - set(hits)
        for nodeid in later:  # test code leaves state for the tests after it as torch_npu's does
            selection.add(nodeid, f"ran in-process after a test of the changed {path}")
        selection.notes.append(note + (f", {len(later)} more ran after one of them in its process" if later else ""))
        return True
    name = posixpath.basename(path)
    if change.status != "deleted" and name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")):
        selection.new_test_files.append(path)
        selection.notes.append(f"{path}: a test file the map does not know: its tests are new, and run")
        return True
    return False

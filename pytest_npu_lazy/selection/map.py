"""The selection map: which lines of the watched packages each test's phases ran, as one JSON file.

Taken by a run with ``--npu-lazy-take-map`` (:mod:`.pytest_side`), read by a run with
``--npu-lazy-changed`` and by ``python -m pytest_npu_lazy.selection``. It keeps, with a format
version and the versions of torch, torch_npu and Triton it was taken with:

- ``files``: every source file of the watched packages by map path (``torch_npu/utils/_dynamo.py``),
  with its git blob id, its length and, where a test ran it, its functions' body lines;
- ``evidence``: line sets, each stored once under its digest (the lineage a zygote gives all its
  children is one entry, not one per test);
- ``tests``: per node id, its outcome, the digests of its phases and of its lineage, the watched
  modules loaded before measuring began, and the Python programs it started (opaque to the map).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from .sources import FileFacts, SelectionError

FORMAT = "pytest-npu-lazy selection map"
VERSION = 1
#: distributions whose versions a map is taken with: another version is other code than the map saw
VERSIONED = ("torch", "torch-npu", "triton", "triton-ascend")


def installed_versions(packages: tuple[str, ...] = ()) -> dict[str, str]:
    """Versions of torch, torch_npu, Triton and the watched packages' distributions, read without importing."""
    names = set(VERSIONED)
    providers = metadata.packages_distributions()
    for package in packages:
        names.update(providers.get(package, ()))
    versions = {}
    for name in sorted(names):
        try:
            versions[_normal(name)] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _normal(name: str) -> str:
    return name.lower().replace("_", "-")


def digest(files: dict[str, list[list[int]]]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class TestEntry:
    """One test in the map."""

    #: "passed", "failed" (a phase failed, or it xfailed: its evidence stops where it failed) or "skipped"
    outcome: str
    #: phase name -> evidence digest
    phases: dict[str, str]
    lineage: str | None
    preloaded: list[str] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)
    #: False: the test ran nowhere this map could measure (skipped before it ran, a child that died)
    evidence: bool = True
    #: the process it ran in (a token; an isolated test's child is one of its own) and its place among that
    #: process's tests: a test run in-process inherits what the earlier ones left (a run-once set-up, a cache)
    process: str | None = None
    order: int = 0

    def to_dict(self) -> dict:
        return {"outcome": self.outcome, "phases": self.phases, "lineage": self.lineage,
                "preloaded": self.preloaded, "opaque": self.opaque, "evidence": self.evidence,
                "process": self.process, "order": self.order}

    @classmethod
    def from_dict(cls, data: dict) -> "TestEntry":
        return cls(str(data["outcome"]), dict(data["phases"]), data.get("lineage"),
                   list(data.get("preloaded", [])), list(data.get("opaque", [])), bool(data.get("evidence", True)),
                   data.get("process"), int(data.get("order", 0)))


@dataclass
class SelectionMap:
    packages: list[str]
    versions: dict[str, str]
    files: dict[str, FileFacts]
    evidence: dict[str, dict[str, list[list[int]]]]
    tests: dict[str, TestEntry]
    taken: dict[str, Any] = field(default_factory=dict)
    _starts: dict = field(default_factory=dict, repr=False)

    # -- building -------------------------------------------------------------
    def store(self, files: dict[str, list[list[int]]]) -> str | None:
        if not files:
            return None
        key = digest(files)
        self.evidence.setdefault(key, files)
        return key

    def add_test(self, nodeid: str, outcome: str, evidence: dict | None) -> None:
        """``evidence``: what the test's process measured (:meth:`.tracer.EvidenceTracer.end_test`); None: nothing."""
        if evidence is None:
            self.tests[nodeid] = TestEntry(outcome, {}, None, evidence=False)
            return
        phases = {phase: key for phase, files in evidence.get("phases", {}).items()
                  if (key := self.store(files)) is not None}
        self.tests[nodeid] = TestEntry(outcome, phases, self.store(evidence.get("lineage", {})),
                                       list(evidence.get("preloaded", [])), list(evidence.get("opaque", [])),
                                       process=evidence.get("process"), order=int(evidence.get("order", 0)))

    def seen_files(self) -> set[str]:
        return {path for files in self.evidence.values() for path in files} | {
            path for test in self.tests.values() for path in test.preloaded}

    # -- questions --------------------------------------------------------------
    def _runs(self, key: str, path: str) -> tuple[list[int], list[list[int]]] | None:
        runs = self.evidence.get(key, {}).get(path)
        if not runs:
            return None
        cached = self._starts.get((key, path))
        if cached is None:
            cached = self._starts[(key, path)] = ([r[0] for r in runs], runs)
        return cached

    def ran(self, nodeid: str, path: str, first: int, last: int) -> str | None:
        """The phase (or "lineage") in which the test ran a line of ``path`` in ``first..last``; None: none."""
        test = self.tests[nodeid]
        for phase, key in [*test.phases.items(), ("lineage", test.lineage)]:
            found = key and self._runs(key, path)
            if not found:
                continue
            starts, runs = found
            index = bisect.bisect_right(starts, last) - 1
            if index >= 0 and runs[index][1] >= first:
                return phase
        return None

    def later_in_process(self, nodeids) -> dict[str, str]:
        """The tests that ran in the same process after one of ``nodeids``, each with the earliest such one."""
        first: dict[str, tuple[int, str]] = {}
        for nodeid in nodeids:
            test = self.tests[nodeid]
            if test.process and (test.process not in first or test.order < first[test.process][0]):
                first[test.process] = (test.order, nodeid)
        return {nodeid: first[test.process][1] for nodeid, test in self.tests.items()
                if test.process in first and test.order > first[test.process][0]}

    def loaded(self, nodeid: str, path: str) -> str | None:
        """Where the test's process had ``path`` loaded: the phase that ran a line of it, or "preloaded"."""
        if path in self.tests[nodeid].preloaded:
            return "preloaded"
        return self.ran(nodeid, path, 1, 1 << 30)

    # -- storage ----------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "taken": self.taken, "packages": self.packages,
                "versions": self.versions, "files": {p: f.to_dict() for p, f in sorted(self.files.items())},
                "evidence": self.evidence, "tests": {n: t.to_dict() for n, t in self.tests.items()}}

    def write(self, path: Path) -> None:
        from ..reports.schema import write_text

        write_text(path, json.dumps(self.to_dict(), separators=(",", ":")) + "\n")

    @classmethod
    def read(cls, path: Path) -> "SelectionMap":
        """Read a map; a missing, corrupt or foreign file is refused, naming the fix."""
        take = f"pytest -p npu_lazy --npu-lazy-take-map --npu-lazy-map={path} <tests>"
        retake = f"take it again: {take}"
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SelectionError(f"no selection map at {path}: take one first, once per base revision ({take}), "
                                 "or point --npu-lazy-map at one.") from None
        except OSError as exc:
            raise SelectionError(f"the selection map {path} cannot be read ({exc.strerror}).") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SelectionError(f"{path} is not a selection map (not JSON: {exc}); {retake}.") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise SelectionError(f"{path} is not a selection map of pytest-npu-lazy (no \"format\": {FORMAT!r}); "
                                 f"{retake}.")
        if data.get("version") != VERSION:
            raise SelectionError(f"{path} is a selection map of format version {data.get('version')!r}; this "
                                 f"plugin reads version {VERSION}: {retake}.")
        try:
            return cls(list(data["packages"]), dict(data["versions"]),
                       {p: FileFacts.from_dict(f) for p, f in data["files"].items()},
                       dict(data["evidence"]), {n: TestEntry.from_dict(t) for n, t in data["tests"].items()},
                       dict(data.get("taken", {})))
        except (KeyError, TypeError, ValueError) as exc:
            raise SelectionError(f"{path} is a damaged selection map ({type(exc).__name__}: {exc}); {retake}.") from None


def new_map(packages: list[str], command: list[str]) -> SelectionMap:
    return SelectionMap(packages, installed_versions(tuple(packages)), {}, {}, {},
                        {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": command})

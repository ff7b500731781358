"""What a test's process ran of the watched packages, phase by phase: the evidence of a selection map.

coverage.py measures (its C tracer, limited to the watched packages' files) from the moment the
map is asked for until the process ends. Lines are cut into segments at every phase change:
the segment before a test begins joins the *lineage*, everything this process and the processes
it was forked from ran outside tests (the pytest process's collection, a zygote's preload, a
module zygote's import of the test module); the segments of a test are its phases. Because a
zygote and its children are forks, the lineage travels with them in memory: an isolated child's
evidence holds what its zygote ran for it, as an in-process test's holds what collection ran.

A Python process a test starts (``python -c``, a ``subprocess`` of any Python, ``run_python``) or a
fork it makes (``os.fork``, multiprocessing's fork) runs code whose lines never come home; the test
is marked *opaque* with what it started, and the selection then cannot rule it out for any change
of a watched package.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

#: the lineage's name in a test's evidence
LINEAGE = "lineage"
#: coverage.py warnings that say nothing about the map (no line of a watched package ran yet...)
_QUIET_COVERAGE = ["no-data-collected", "module-not-imported", "module-not-measured", "already-imported",
                   "include-ignored", "no-ctracer", "dynamic-conflict", "couldnt-parse"]


def ranges(lines) -> list[list[int]]:
    """Sorted line numbers as ``[first, last]`` runs: a map stays small."""
    runs: list[list[int]] = []
    for line in sorted(lines):
        if runs and line == runs[-1][1] + 1:
            runs[-1][1] = line
        else:
            runs.append([line, line])
    return runs


class EvidenceTracer:
    """One per process that runs tests; forks inherit it, measuring on."""

    def __init__(self, roots: dict[str, Path]) -> None:
        import coverage

        if coverage.Coverage.current() is not None:
            from .sources import SelectionError

            raise SelectionError(
                "--npu-lazy-take-map measures with coverage.py and cannot run beside another coverage "
                "measurement (pytest-cov's --cov, coverage run): it would pause that one. Take the map in a "
                "run without coverage.")
        self.parents = {str(root.parent): root.name for root in roots.values()}
        self._paths: dict[str, str | None] = {}
        self.coverage = coverage.Coverage(data_file=None, config_file=False, auto_data=False,
                                          include=[f"{root}{os.sep}*" for root in roots.values()])
        self.coverage.set_option("run:disable_warnings", _QUIET_COVERAGE)
        self.coverage.npu_lazy_in_memory = True  # nothing to save at a child's exit: the report carries it
        #: files of watched modules already loaded when measuring began: nothing of them was seen run
        self.preloaded = sorted({path for name, module in list(sys.modules.items())
                                 if (path := self.map_path(getattr(module, "__file__", None) or "")) is not None})
        self.lineage: dict[str, set[int]] = {}
        self.test: str | None = None
        self.phase: str | None = None
        self.phases: dict[str, dict[str, set[int]]] = {}
        self.opaque: list[str] = []

    def map_path(self, filename: str) -> str | None:
        """``torch_npu/utils/_dynamo.py`` for a file of a watched package; None for any other."""
        if filename in self._paths:
            return self._paths[filename]
        path, found = os.path.realpath(filename) if filename else "", None
        for parent, package in self.parents.items():
            if path.startswith(os.path.join(parent, package) + os.sep) and path.endswith(".py"):
                found = os.path.relpath(path, parent).replace(os.sep, "/")
        self._paths[filename] = found
        return found

    def start(self) -> None:
        self.coverage.start()
        _watch_spawns(self)

    def _cut(self) -> dict[str, set[int]]:
        """The lines run since the last cut, by map path."""
        data = self.coverage.get_data()
        segment: dict[str, set[int]] = {}
        for filename in data.measured_files():
            path = self.map_path(filename)
            lines = data.lines(filename)
            if path is not None and lines:
                segment.setdefault(path, set()).update(lines)
        data.erase()
        return segment

    def _file(self, segment: dict[str, set[int]], into: dict[str, set[int]]) -> None:
        for path, lines in segment.items():
            into.setdefault(path, set()).update(lines)

    def measuring(self) -> bool:
        """Whether this tracer is the measurement running: a coverage.py started after it pauses it."""
        import coverage

        return coverage.Coverage.current() is self.coverage

    def begin_test(self, nodeid: str) -> None:
        self._file(self._cut(), self.lineage)
        self.test, self.phase, self.phases, self.opaque = nodeid, "setup", {}, []

    def switch(self, phase: str) -> None:
        """A phase of the running test begins (pytest's setup, call, teardown, or a probe phase)."""
        if self.test is None:
            return
        phase = "call" if phase == "test" else phase  # the probe's name for pytest's call phase
        if phase == self.phase:
            return
        self._file(self._cut(), self.phases.setdefault(self.phase, {}))
        self.phase = phase

    def end_test(self) -> dict[str, Any]:
        """The test's evidence, as plain data for its teardown report; measuring goes on, for the lineage."""
        self._file(self._cut(), self.phases.setdefault(self.phase or "teardown", {}))
        evidence = {
            "phases": {phase: {path: ranges(lines) for path, lines in sorted(files.items())}
                       for phase, files in self.phases.items() if files},
            LINEAGE: {path: ranges(lines) for path, lines in sorted(self.lineage.items())},
            "preloaded": self.preloaded,
            "opaque": sorted(set(self.opaque)),
            "pid": os.getpid(),
        }
        self.test, self.phase, self.phases, self.opaque = None, None, {}, []
        return evidence

    def spawned(self, program: str) -> None:
        if self.test is not None:
            self.opaque.append(program)


def _is_python(program: str) -> bool:
    name = os.path.basename(program)
    return name.startswith("python") or os.path.realpath(program) == os.path.realpath(sys.executable)


def _watch_spawns(tracer: EvidenceTracer) -> None:
    """Note each Python program a test starts: ``subprocess`` (its own binding of it) and ``multiprocessing``
    reach ``_posixsubprocess.fork_exec``, or ``os.posix_spawn``; ``os.system`` runs a shell."""
    import _posixsubprocess
    import subprocess

    def program_of(args: Any) -> str:
        if isinstance(args, (list, tuple)) and args:
            first = args[0]
            return os.fsdecode(first) if isinstance(first, (str, bytes, os.PathLike)) else str(first)
        return os.fsdecode(args) if isinstance(args, (str, bytes)) else "?"

    original_fork_exec = _posixsubprocess.fork_exec

    def fork_exec(args, executable_list, *rest):
        programs = [program_of(args)] + [os.fsdecode(e) for e in (executable_list or ())][:1]
        if any(_is_python(p) for p in programs):
            tracer.spawned(os.path.basename(programs[0]))
        return original_fork_exec(args, executable_list, *rest)

    _posixsubprocess.fork_exec = fork_exec
    if getattr(subprocess, "_fork_exec", None) is original_fork_exec:
        subprocess._fork_exec = fork_exec
    for name in ("posix_spawn", "posix_spawnp"):
        original = getattr(os, name, None)
        if original is None:
            continue

        def spawn(path, argv, *args, __original=original, **kwargs):
            if _is_python(os.fsdecode(path)):
                tracer.spawned(os.path.basename(os.fsdecode(path)))
            return __original(path, argv, *args, **kwargs)

        setattr(os, name, spawn)
    original_system = os.system

    def system(command):
        if "python" in str(command):
            tracer.spawned("sh: " + str(command).split()[0])
        return original_system(command)

    os.system = system

    def forked() -> None:  # zygotes fork outside tests (no test is running in them): only a test's own fork counts
        tracer.spawned("os.fork")

    os.register_at_fork(after_in_parent=forked)

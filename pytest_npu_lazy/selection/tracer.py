"""What a test's process ran of the watched packages, phase by phase: the evidence of a selection map.

coverage.py measures (its C tracer, limited to the watched packages' files) from the moment the
map is asked for until the process ends. Lines are cut into segments at every phase change:
the segment before a test begins joins the *lineage*, everything this process and the processes
it was forked from ran outside tests (the pytest process's collection, a zygote's preload, a
module zygote's import of the test module); the segments of a test are its phases. Because a
zygote and its children are forks, the lineage travels with them in memory: an isolated child's
evidence holds what its zygote ran for it, as an in-process test's holds what collection ran.

A Python process a test starts (``python -c``, Inductor's ISA check, a compile worker) measures
itself: while a test runs, this package's ``site`` folder is first on ``PYTHONPATH`` (and last on
``sys.path``, which Inductor's helpers pass on as their ``PYTHONPATH``), and its
``sitecustomize`` starts the same measurement in the new interpreter and writes its lines, at exit,
into a folder of the test's (:func:`measure_this_process`); they join the test as its phase
``subprocess``. What does not come home (a Python started with ``-I`` or ``-S``, a process killed, one
still running when the test ends, a fork, a ``run_python`` child) makes the test *opaque*, named with
what it started, and the selection cannot rule it out for any change of a watched package.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

#: the lineage's name in a test's evidence
LINEAGE = "lineage"
#: the phase of what the Python processes a test started ran
SUBPROCESS = "subprocess"
#: while a test runs: where its Python processes write their lines, and the watched packages' directories
SUBPROCESS_DIR_ENV = "PYTEST_NPU_LAZY_MAP_SUBPROCESS"
ROOTS_ENV = "PYTEST_NPU_LAZY_MAP_ROOTS"
SITE_DIR = Path(__file__).with_name("site")
#: a sharded take names each process that collects (the pytest process, an xdist worker) alike in every shard
SHARD_PROCESS = "shard:"
#: coverage.py warnings that say nothing about the map (no line of a watched package ran yet...)
_QUIET_COVERAGE = ["no-data-collected", "module-not-imported", "module-not-measured", "already-imported",
                   "include-ignored", "no-ctracer", "dynamic-conflict", "couldnt-parse"]


def _measurement(directories) -> Any:
    """coverage.py's measurement of the watched packages' directories, kept in memory: the test's report (or,
    in a Python a test started, a file of its folder) carries the lines, so nothing is saved at exit."""
    import coverage

    measure = coverage.Coverage(data_file=None, config_file=False, auto_data=False,
                                include=[f"{directory}{os.sep}*" for directory in directories])
    measure.set_option("run:disable_warnings", _QUIET_COVERAGE)
    measure.npu_lazy_in_memory = True  # type: ignore[attr-defined]  # our mark on it: isolation's child leaves it unsaved (child_side/inherit.save_coverage)
    return measure


def _map_path(parents: dict[str, str], filename: str) -> str | None:
    """``torch_npu/utils/_dynamo.py`` for a file of a watched package (``parents``: its parent directory ->
    its name); None for any other."""
    path = os.path.realpath(filename) if filename else ""
    for parent, package in parents.items():
        if path.startswith(os.path.join(parent, package) + os.sep) and path.endswith(".py"):
            return os.path.relpath(path, parent).replace(os.sep, "/")
    return None


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
        from .sources import SelectionError

        try:
            import coverage
        except ImportError:
            raise SelectionError("--npu-lazy-take-map measures with coverage.py, which is not installed here: "
                                 "pip install 'pytest-npu-lazy[map]' (or coverage).") from None
        if coverage.Coverage.current() is not None:
            raise SelectionError(
                "--npu-lazy-take-map measures with coverage.py and cannot run beside another coverage "
                "measurement (pytest-cov's --cov, coverage run): it would pause that one. Take the map in a "
                "run without coverage.")
        self.parents = {str(root.parent): root.name for root in roots.values()}
        self._paths: dict[str, str | None] = {}
        self.coverage = _measurement(roots.values())
        #: files of watched modules already loaded when measuring began: nothing of them was seen run
        self.preloaded = sorted({path for name, module in list(sys.modules.items())
                                 if (path := self.map_path(getattr(module, "__file__", None) or "")) is not None})
        self.lineage: dict[str, set[int]] = {}
        self.test: str | None = None
        self.phase: str | None = None
        self.phases: dict[str, dict[str, set[int]]] = {}
        self.opaque: list[str] = []
        self.roots = [str(root) for root in roots.values()]
        self.pythons = 0
        #: a Python a test of this process started that had not sent its lines home (Inductor's compile-worker
        #: pool): it may run code for every later test of the process, which are opaque too
        self.lingering: list[str] = []
        #: this process's token and how many tests it ran: an in-process test can see what earlier ones left
        self._process = ("", 0, -1)
        #: a sharded take (--npu-lazy-shard): each test's place in the whole collection, for this process's tests
        self.positions: dict[str, int] = {}
        self.outbox: str | None = None
        self._saved_env: dict[str, str | None] = {}

    def name_process(self, name: str, positions: dict[str, int]) -> None:
        """A sharded take: this process (not its forks) is ``name`` in every shard, and its tests' order is their
        place in the whole collection, so the shards' maps merge into one run's (:mod:`.merge`)."""
        self._process = (name, os.getpid(), self._process[2])
        self.positions = positions

    def map_path(self, filename: str) -> str | None:
        """``torch_npu/utils/_dynamo.py`` for a file of a watched package; None for any other."""
        if filename not in self._paths:
            self._paths[filename] = _map_path(self.parents, filename)
        return self._paths[filename]

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
        self.test, self.phase, self.phases, self.opaque, self.pythons = nodeid, "setup", {}, [], 0
        self.outbox = tempfile.mkdtemp(prefix="npu-lazy-map-")
        self._saved_env = {name: os.environ.get(name) for name in (SUBPROCESS_DIR_ENV, ROOTS_ENV, "PYTHONPATH")}
        os.environ[SUBPROCESS_DIR_ENV] = self.outbox
        os.environ[ROOTS_ENV] = os.pathsep.join(self.roots)
        os.environ["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), *filter(None, [self._saved_env["PYTHONPATH"]])])
        # Inductor's helpers (its ISA probe, its compile workers) pass this process's sys.path as PYTHONPATH
        sys.path.append(str(SITE_DIR))

    def _collect_subprocesses(self) -> None:
        """The lines the test's Python processes wrote home; those that wrote nothing make the test opaque."""
        while str(SITE_DIR) in sys.path:
            sys.path.remove(str(SITE_DIR))
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        measured = 0
        if self.outbox is not None:
            for entry in sorted(os.listdir(self.outbox)):
                try:
                    with open(os.path.join(self.outbox, entry), encoding="utf-8") as handle:
                        files = json.load(handle)
                except (OSError, ValueError):
                    continue
                measured += 1
                into = self.phases.setdefault(SUBPROCESS, {})
                for path, runs in files.items():
                    into.setdefault(path, set()).update(n for first, last in runs for n in range(first, last + 1))
            shutil.rmtree(self.outbox, ignore_errors=True)
        self.opaque.extend(self.lingering)
        if self.pythons > measured:
            self.opaque.append(f"python ({self.pythons - measured} of {self.pythons} started sent no lines home)")
            self.lingering = ["python started by an earlier test of this process that sent no lines home"]

    def switch(self, phase: str) -> None:
        """A phase of the running test begins (pytest's setup, call, teardown, or a probe phase)."""
        if self.test is None or self.phase is None:  # set together (begin_test, end_test)
            return
        phase = "call" if phase == "test" else phase  # the probe's name for pytest's call phase
        if phase == self.phase:
            return
        self._file(self._cut(), self.phases.setdefault(self.phase, {}))
        self.phase = phase

    def end_test(self) -> dict[str, Any]:
        """The test's evidence, as plain data for its teardown report; measuring goes on, for the lineage."""
        self._file(self._cut(), self.phases.setdefault(self.phase or "teardown", {}))
        self._collect_subprocesses()
        token, pid, order = self._process
        place = self.positions.get(self.test or "") if pid == os.getpid() else None
        if pid != os.getpid():  # a fork (an isolated test's child) is a process of its own
            token, pid, order = uuid.uuid4().hex[:16], os.getpid(), -1
        self._process = (token, pid, order + 1)
        evidence = {
            "phases": {phase: {path: ranges(lines) for path, lines in sorted(files.items())}
                       for phase, files in self.phases.items() if files},
            LINEAGE: {path: ranges(lines) for path, lines in sorted(self.lineage.items())},
            "preloaded": self.preloaded,
            "opaque": sorted(set(self.opaque)),
            "process": token,
            "order": order + 1 if place is None else place,
        }
        self.test, self.phase, self.phases, self.opaque, self.outbox = None, None, {}, [], None
        return evidence

    def spawned(self, program: str) -> None:
        """A test started something whose lines come home only if it is a Python that measures itself."""
        if self.test is None:
            return
        if program == "python":
            self.pythons += 1
        else:
            self.opaque.append(program)


def measure_this_process() -> None:
    """In a Python process a map-taking test started (``site/sitecustomize.py``): measure the watched packages
    from now on and, at exit, write the lines into the test's folder, as one JSON file of this process."""
    outbox, roots = os.environ.get(SUBPROCESS_DIR_ENV), os.environ.get(ROOTS_ENV)
    if not outbox or not roots or not os.path.isdir(outbox):
        return
    import atexit

    from ..reports.schema import write_text

    directories = [Path(root) for root in roots.split(os.pathsep) if root]
    measure = _measurement(directories)
    measure.start()
    parents = {str(root.parent): root.name for root in directories}

    def write_home() -> None:
        measure.stop()
        data = measure.get_data()
        files = {path: ranges(data.lines(filename) or ()) for filename in data.measured_files()
                 if (path := _map_path(parents, filename)) is not None}
        write_text(os.path.join(outbox, f"{os.getpid()}.json"), json.dumps(files))

    atexit.register(write_home)


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
            tracer.spawned("python")
        return original_fork_exec(args, executable_list, *rest)

    _posixsubprocess.fork_exec = fork_exec
    if getattr(subprocess, "_fork_exec", None) is original_fork_exec:
        subprocess._fork_exec = fork_exec  # type: ignore[attr-defined]  # private, not in typeshed
    for name in ("posix_spawn", "posix_spawnp"):
        original = getattr(os, name, None)
        if original is None:
            continue

        def spawn(path, argv, *args, __original=original, **kwargs):
            if _is_python(os.fsdecode(path)):
                tracer.spawned("python")
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

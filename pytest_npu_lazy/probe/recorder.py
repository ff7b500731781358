"""Import recorder: which module loaded, in which phase, why, and how long it took.

It wraps ``importlib._bootstrap._find_and_load``. CPython's ``import``
statement looks that function up on the importlib module at every load, and
``importlib.import_module`` calls it through the same module globals, so the
wrapper sees every first load, whatever ``sys.meta_path`` finder answers it
(torch_npu puts its own finder at index 0). An ``"import"`` audit hook would
miss ``importlib.import_module`` on Python 3.11, which is exactly how
torch_npu loads ``torch_npu._inductor``.

Modules that appear in ``sys.modules`` without passing through the import
system (``module_from_spec`` + ``exec_module``) are picked up by a
``sys.modules`` diff at every phase change, marked ``untracked``.
"""

from __future__ import annotations

import collections
import fnmatch
import itertools
import linecache
import importlib._bootstrap as _bootstrap
import os
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

#: this plugin's package: its links in an import chain are machinery, shown once (ImportRecorder.link_texts)
OWN_PACKAGE = __name__.split(".")[0]
#: Phases of the pytest process and of the zygote: what a test starts from.
BASELINE_PHASES = ("before-recording", "pytest", "preload")

_MACHINERY_FILES = (
    "<frozen importlib._bootstrap>",
    "<frozen importlib._bootstrap_external>",
    os.path.join("importlib", "__init__.py"),
    os.path.join("importlib", "_bootstrap.py"),
    os.path.join("importlib", "_bootstrap_external.py"),
    os.path.join("importlib", "util.py"),
)
_HARNESS_DIRS = (
    os.sep + "_pytest" + os.sep,
    os.sep + "pluggy" + os.sep,
)
#: frames kept nearest the import, and nearest the harness (the test's own lines), of a deeper code path: Dynamo
#: compiles a first call through a hundred frames, and the chain must still end at the test's line
_MAX_CALLERS = 12
_TAIL_CALLERS = 4


@dataclass(frozen=True)
class CodeLocation:
    """A frame reduced to what a person needs to find the line."""

    filename: str
    lineno: int
    function: str
    module: str

    def __str__(self) -> str:
        return f"{_short_path(self.filename)}:{self.lineno} in {self.function}"

    def source(self) -> str:
        """The line's code, stripped; "" where the file cannot be read."""
        return linecache.getline(self.filename, self.lineno).strip()

    def to_dict(self) -> dict:
        return {"filename": self.filename, "lineno": self.lineno,
                "function": self.function, "module": self.module}


@dataclass
class ImportRecord:
    """One attempt to load a module that was not in ``sys.modules``."""

    name: str
    phase: str
    started: float
    duration: float = 0.0
    #: the module whose loading was in progress on this thread (the importer)
    parent: str | None = None
    #: first frame outside the import machinery: the line that asked for it
    trigger: CodeLocation | None = None
    #: for loads that no other load caused: the code frames that led to it
    callers: tuple[CodeLocation, ...] = ()
    status: str = "loading"  # loaded | failed | blocked | untracked | loading
    error: str | None = None
    children: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "phase": self.phase,
            "started": self.started,
            "duration": self.duration,
            "parent": self.parent,
            "trigger": self.trigger.to_dict() if self.trigger else None,
            "callers": [c.to_dict() for c in self.callers],
            "status": self.status,
            "error": self.error,
        }


#: the standard library's directory: its files are shown from there down, like installed packages
_STDLIB = sysconfig.get_paths().get("stdlib", "") + os.sep


def _short_path(filename: str) -> str:
    """Show installed packages' paths (site-packages, or Debian's dist-packages) and the standard library's
    from the package down, as people read them, and naming no machine's directories."""
    for marker in (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep):
        if marker in filename:
            return filename.split(marker, 1)[1]
    if _STDLIB != os.sep and filename.startswith(_STDLIB):
        return filename[len(_STDLIB):]
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith(".." + os.sep + "..") else rel


def _is_machinery(filename: str) -> bool:
    """Import system frames, this recorder's wrapper included: never the reason for an import."""
    return filename == __file__ or filename.endswith(_MACHINERY_FILES) or filename in _MACHINERY_FILES


def _is_harness(filename: str) -> bool:
    return any(part in filename for part in _HARNESS_DIRS)


def _location(frame) -> CodeLocation:
    code = frame.f_code
    return CodeLocation(
        filename=code.co_filename,
        lineno=frame.f_lineno,
        function=getattr(code, "co_qualname", code.co_name),
        module=frame.f_globals.get("__name__", "?"),
    )


def matches(name: str, pattern: str) -> bool:
    """A pattern names a module and its submodules; globs are allowed."""
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    return name == pattern or name.startswith(pattern + ".")


def importers(name: str, importer_of: Callable[[str], "str | None"]) -> list[str]:
    """``[name, its importer, that one's importer, ...]`` until one has none or a module repeats.

    The one walk up an import chain: the recorder walks its records, the
    budget gate the module lists a child sent home.
    """
    chain = [name]
    while (parent := importer_of(chain[-1])) is not None and parent not in chain:
        chain.append(parent)
    return chain


class ImportRecorder:
    """Records first loads per phase; one instance per process, inherited by forks."""

    def __init__(self) -> None:
        self.records: dict[str, ImportRecord] = {}
        self.attempts: list[ImportRecord] = []
        self.phase = "before-recording"
        self._epoch = time.perf_counter()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._known_count = 0
        self._last_known: str | None = None
        self._load_hooks: dict[str, list[Callable[[str], object]]] = {}
        #: told each new phase's name (the selection map cuts its line evidence there)
        self.phase_listeners: list[Callable[[str], None]] = []
        self._original: Callable | None = None

    # -- installation -----------------------------------------------------
    @property
    def installed(self) -> bool:
        return self._original is not None

    def install(self, phase: str = "pytest") -> None:
        """Start recording; modules already loaded count as 'before-recording'."""
        if self.installed:
            return
        for name, module in list(sys.modules.items()):
            if module is not None and name not in self.records:
                self.records[name] = ImportRecord(name, "before-recording", 0.0, status="loaded")
        self._remember_modules()
        self.phase = phase
        self._original = _bootstrap._find_and_load  # type: ignore[attr-defined]  # private: not in typeshed
        _bootstrap._find_and_load = self._find_and_load  # type: ignore[attr-defined]

    def uninstall(self) -> None:
        if self._original is not None:
            _bootstrap._find_and_load = self._original  # type: ignore[attr-defined]
            self._original = None

    def reset_after_fork(self) -> None:
        """Locks and thread-local stacks of other threads mean nothing in a fork."""
        self._lock = threading.Lock()
        self._local = threading.local()

    # -- phases -----------------------------------------------------------
    def set_phase(self, phase: str) -> str:
        """Switch phase; returns the previous one so callers can restore it."""
        self.sweep()
        previous, self.phase = self.phase, phase
        for listener in self.phase_listeners:
            listener(phase)
        return previous

    def sweep(self) -> None:
        """Attribute modules that bypassed the import system to the phase now ending.

        New modules sit at the end of ``sys.modules`` (a dict keeps insertion
        order), so only the tail since the last sweep is read; touching every
        name would copy thousands of pages in a freshly forked child.
        """
        modules = sys.modules
        count = len(modules)
        tail = list(itertools.islice(reversed(modules), max(count - self._known_count, 0) + 1))
        if count == self._known_count and tail[:1] == [self._last_known]:
            return
        if count < self._known_count or tail[-1] != self._last_known:
            tail = list(modules)  # something was removed as well: look at everything
        now = self._now()
        for name in reversed(tail):
            if name not in self.records and modules.get(name) is not None:
                record = ImportRecord(name, self.phase, now, parent=self._enclosing_package(name), status="untracked")
                self.records[name] = record
                self.attempts.append(record)
        self._remember_modules()

    def _remember_modules(self) -> None:
        self._known_count = len(sys.modules)
        self._last_known = next(reversed(sys.modules), None)

    def _enclosing_package(self, name: str) -> str | None:
        """An untracked module was most likely loaded by its package's own code."""
        parent = name.rpartition(".")[0]
        while parent and parent not in self.records:
            parent = parent.rpartition(".")[0]
        return parent or None

    # -- load hooks ---------------------------------------------------------
    def on_load(self, module: str, callback: Callable[[str], object]) -> None:
        """Call ``callback(module)`` right after ``module`` finishes loading."""
        self._load_hooks.setdefault(module, []).append(callback)

    # -- queries ------------------------------------------------------------
    def loaded(self, pattern: str) -> list[ImportRecord]:
        """Records of modules matching ``pattern`` that are in sys.modules now."""
        self.sweep()
        found = []
        for name, module in list(sys.modules.items()):
            if module is not None and matches(name, pattern):
                found.append(self.records.get(name) or ImportRecord(
                    name, self.phase, self._now(), status="untracked"))
        return sorted(found, key=lambda r: (r.started, r.name))

    def record_of(self, name: str) -> ImportRecord | None:
        record = self.records.get(name)
        if record is None and sys.modules.get(name) is not None:
            self.sweep()
            record = self.records.get(name)
        return record

    def chain(self, name: str) -> list[ImportRecord]:
        """The record of ``name``, then of each importer up to the first one."""
        record = self.record_of(name)
        if record is None:
            return []

        def importer(module: str) -> str | None:
            parent = self.records[module].parent
            return parent if parent in self.records else None

        return [record, *(self.records[n] for n in importers(record.name, importer)[1:])]

    def links(self, name: str) -> list[tuple[str, CodeLocation | None]]:
        """The chain as (module, where its code asked for the previous link) pairs.

        Importers and the modules of the code paths between them alternate:
        ``torch_npu._inductor <- torch_npu.utils._dynamo (register_inductor_npu)
        <- ... <- the test``.
        """
        links: list[tuple[str, CodeLocation | None]] = []
        chain = self.chain(name)
        where_in_importer: CodeLocation | None = None
        for record, importer in zip(chain, [*chain[1:], None]):
            if not links or links[-1][0] != record.name:
                links.append((record.name, where_in_importer))
            where_in_importer = None
            if importer is not None and record.trigger == importer.trigger:
                continue  # a parent package loaded for the submodule asked for: same code path
            for caller in record.callers:
                if caller.module == record.parent:
                    where_in_importer = where_in_importer or caller  # the importer's own line
                elif caller.module != links[-1][0]:
                    links.append((caller.module, caller))
        return links

    def link_texts(self, name: str) -> list[str]:
        """The chain as reports print it: each module, with where its code asked for the previous link.

        A run of links inside this plugin (a zygote's preload goes through its fork server, channel and
        message loop: nine links of machinery) is cut to its first, which says where the plugin asked, and a
        count: the chain reads from the module to the code that matters to whoever reads it.
        """
        texts: list[str] = []
        own = 0
        for module, where in self.links(name):
            if module == OWN_PACKAGE or module.startswith(OWN_PACKAGE + "."):
                own += 1
                if own > 1:
                    continue
            elif own > 1:
                texts[-1] += f" (+{own - 1} link{'s' if own > 2 else ''} of pytest-npu-lazy)"
                own = 0
            else:
                own = 0
            texts.append(module if where is None else f"{module} ({where})")
        if own > 1:
            texts[-1] += f" (+{own - 1} link{'s' if own > 2 else ''} of pytest-npu-lazy)"
        return texts

    def in_phase(self, phase: str) -> list[ImportRecord]:
        return [r for r in self.records.values() if r.phase == phase]

    # -- the wrapper ----------------------------------------------------------
    def _now(self) -> float:
        return time.perf_counter() - self._epoch

    def _stack(self) -> list[str]:
        try:
            return self._local.stack
        except AttributeError:
            stack: list[str] = []
            self._local.stack = stack
            return stack

    def _find_and_load(self, name: str, import_):
        """What importlib calls for every load; an error leaves without this module's frames.

        A failing import then reads as it does without the plugin, in pytest's
        tracebacks and in Python's own (CPython drops importlib's frames only
        where no other frame sits between them).
        """
        try:
            return self._load(name, import_)
        except BaseException as exc:
            exc.__traceback__ = without_frames_of(__file__, exc.__traceback__)
            raise

    def _load(self, name: str, import_):
        # uninstall() may have put the original back while this import was on its way here: then it is importlib's
        original = self._original or _bootstrap._find_and_load  # type: ignore[attr-defined]
        existing = sys.modules.get(name, _MISSING)
        if existing is not _MISSING and existing is not None:
            return original(name, import_)
        stack = self._stack()
        record = ImportRecord(name, self.phase, self._now(),
                              parent=stack[-1] if stack else None)
        self._locate(record, sys._getframe(1), root=not stack)
        if existing is None:
            record.status = "blocked"
            self.attempts.append(record)
            return original(name, import_)
        if name not in self.records:
            self.records[name] = record
        self.attempts.append(record)
        if stack:
            parent = self.records.get(stack[-1])
            if parent is not None:
                parent.children.append(name)
        stack.append(name)
        started = time.perf_counter()
        try:
            module = original(name, import_)
        except BaseException as exc:
            record.status = "failed"
            record.error = f"{type(exc).__name__}: {exc}"
            if self.records.get(name) is record:
                del self.records[name]
            raise
        finally:
            record.duration = time.perf_counter() - started
            stack.pop()
        record.status = "loaded"
        hooks = self._load_hooks.pop(name, None)
        if hooks:
            for hook in hooks:
                hook(name)
        return module

    def _locate(self, record: ImportRecord, frame, root: bool) -> None:
        """The line that asked for the module, and the code path that led there.

        For a module imported by another module's code, the path ends where
        the importer's own import began; for the first import of a chain it
        ends at the test harness.
        """
        while frame is not None and _is_machinery(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is None:
            return
        record.trigger = _location(frame)
        callers: list[CodeLocation] = []
        tail: collections.deque = collections.deque(maxlen=_TAIL_CALLERS)  # the frames nearest the harness
        while frame is not None:
            filename = frame.f_code.co_filename
            if _is_harness(filename) or (_is_machinery(filename) and not root):
                break
            if not _is_machinery(filename):
                if len(callers) < _MAX_CALLERS:
                    callers.append(_location(frame))
                else:
                    tail.append(frame)
            frame = frame.f_back
        record.callers = tuple(callers) + tuple(_location(f) for f in tail)


_MISSING = object()


def without_frames_of(filename: str, tb):
    """The traceback from its first frame that is not in ``filename``: a wrapper's own frames removed."""
    while tb is not None and tb.tb_frame.f_code.co_filename == filename:
        tb = tb.tb_next
    return tb

#: The process-wide recorder: installed by the plugin before conftests load,
#: inherited by every zygote and child through fork.
RECORDER = ImportRecorder()

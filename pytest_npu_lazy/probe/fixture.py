"""The ``npu_lazy`` fixture: phases, compile-and-compare, and questions about imports.

Every answer comes from the process-wide import recorder. A question about a
module that was loaded before the test started (zygote preload, pytest
process, an earlier test) cannot be answered honestly, so it raises
:class:`BaselineContaminatedError` naming who loaded it, instead of
passing or failing by accident.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from . import inductor_cache
from .blocking import ModuleBlocker
from ..errors import BaselineContaminatedError, BlockError, NpuLazyWarning, ProbeUsageError
from .modules import unknown_name_problem
from .recorder import BASELINE_PHASES, RECORDER, ImportRecord, ImportRecorder, matches
from ..reports.schema import DEFAULT_WATCH
from .tracking import CallTracker

#: Phases the runner sets around pytest's own protocol; tests cannot reuse them.
RUNNER_PHASES = ("collect", "setup", "test", "teardown")
RESERVED_PHASES = RUNNER_PHASES + BASELINE_PHASES


@dataclass
class PhaseSpan:
    name: str
    started: float
    ended: float | None = None
    parent: str | None = None
    entries: int = 1

    @property
    def duration(self) -> float:
        return (self.ended if self.ended is not None else self.started) - self.started


@dataclass
class ProbeState:
    """Per-test state shared by the isolated runner and the fixture."""

    recorder: ImportRecorder
    nodeid: str
    #: records that started before this instant belong to the baseline
    baseline_cutoff: float
    #: how the test was run: "fork", "spawn" or "in-process"
    isolation: str
    #: where the baseline came from, for error messages: "zygote preload ['torch']"
    baseline_label: str = "the pytest process"
    preload: tuple[str, ...] = ()
    #: who chose the preload: "marker", "--npu-lazy-preload" or "ini npu_lazy_preload"
    preload_source: str = "ini npu_lazy_preload"
    #: why an in-process test is not isolated: "isolate-off", "not-marked" or "pytest-forked"
    in_process_reason: str | None = None
    phases: list[PhaseSpan] = field(default_factory=list)
    blocker: ModuleBlocker = field(default_factory=ModuleBlocker)
    tracker: CallTracker | None = None
    #: how many import attempts the baseline made: this test's own come after them
    attempts_before: int = 0
    #: modules whose loading a failing phase explains (ini npu_lazy_watch)
    watch: tuple[str, ...] = DEFAULT_WATCH
    #: (from, to) spans a spare child waited for its turn: no phase, and cut out of the time line
    idle: list[tuple[float, float]] = field(default_factory=list)
    _idle_since: float | None = None
    #: told of every phase as it starts and ends (a child streams them home, so a crash still shows them)
    listener: Callable[[dict], None] | None = None
    #: Inductor's cache counters when the test started: cold and warm runs load different modules
    cache_counters: dict[str, int] = field(default_factory=inductor_cache.snapshot)

    def __post_init__(self) -> None:
        if self.tracker is None:
            self.tracker = CallTracker(self.recorder)
        self.blocker._describe_origin = lambda name: self.origin_of(name, short=True)

    # -- phases -----------------------------------------------------------
    @contextlib.contextmanager
    def enter(self, name: str, repeatable: bool = False) -> Iterator[PhaseSpan]:
        span = next((p for p in self.phases if p.name == name), None)
        if span is not None and not repeatable:
            raise ProbeUsageError(
                f"phase {name!r} was already used in this test; phase names identify what loaded "
                "a module, so each one may be entered once. Give the second one its own name, "
                f"e.g. {name + '_2'!r}.")
        previous = self.recorder.set_phase(name)
        now = self.recorder._now()
        if span is None:
            span = PhaseSpan(name, now, parent=previous)
            self.phases.append(span)
            self._notify(span)
        else:
            span.entries += 1
        try:
            yield span
        except BaseException as exc:
            self._explain_failure(name, exc)
            raise
        finally:
            self.recorder.set_phase(previous)
            span.ended = self.recorder._now()
            self._notify(span)

    def _explain_failure(self, phase: str, exc: BaseException) -> None:
        """A phase that raised (a wrapper that cannot be created...) says which watched modules it loaded."""
        if not hasattr(exc, "add_note") or getattr(exc, "_npu_lazy_phase", None):  # Python < 3.11; outer phase
            return
        exc._npu_lazy_phase = phase  # the innermost phase explains; enclosing ones add nothing
        self.recorder.sweep()
        explained = False
        for pattern in self.watch:
            records = [r for r in self.recorder.loaded(pattern) if r.phase == phase]
            if records:
                first = _explaining_record(records, pattern)
                explained = True
                exc.add_note(f"npu_lazy: phase {phase!r} raised after it loaded watched module {first.name!r} "
                             f"(loaded during phase {phase!r})\n{format_chain(self.recorder, first.name)}")
        if not explained:
            exc.add_note(f"npu_lazy: raised during phase {phase!r}")

    def runner_phase(self, name: str) -> None:
        """Switch to a runner phase (setup, test, teardown), closing the previous one."""
        now = self.recorder._now()
        if self._idle_since is not None:
            self.idle.append((self._idle_since, now))
            self._idle_since = None
        self._close_runner_phase(now)
        self.recorder.set_phase(name)
        self.phases.append(PhaseSpan(name, now))
        self._notify(self.phases[-1])

    def end_runner_phase(self) -> float:
        """Close the open runner phase now: a spare child that collected its test waits for its turn, and
        waiting is no phase and no part of the test's time (reports would count the previous test twice)."""
        now = self.recorder._now()
        self._close_runner_phase(now)
        self._idle_since = now
        return now

    def _close_runner_phase(self, now: float) -> None:
        if self.phases and self.phases[-1].ended is None and self.phases[-1].name in RUNNER_PHASES:
            self.phases[-1].ended = now
            self._notify(self.phases[-1])

    def offset(self, instant: float) -> float:
        """Seconds from the test's start to ``instant``, not counting the waits before it."""
        return instant - self.baseline_cutoff - sum(end - start for start, end in self.idle if end <= instant)

    def _notify(self, span: PhaseSpan) -> None:
        if self.listener is not None:
            self.listener({"name": span.name, "parent": span.parent, "start": self.offset(span.started),
                           "duration": None if span.ended is None else span.duration})

    def finish(self) -> None:
        now = self.recorder._now()
        for span in self.phases:
            if span.ended is None:
                span.ended = now
        self.recorder.sweep()
        self.blocker.restore()

    def summary(self) -> dict:
        """Plain data for the reports (terminal, JSON, JUnit, budget, HTML), sent home with the teardown report.

        Per phase: its place in time (seconds from the test's start), the
        modules first loaded in it with importer, start and duration (the
        waterfall), their count (the budget), and for each ``watch`` pattern
        with a first load here, the module that explains it with its import
        chain. Chains are kept for watched modules only, to stay small.
        """
        watch = self.watch
        by_phase: dict[str, list[ImportRecord]] = {}
        records = self.recorder.records
        ours = [r for r in self.recorder.attempts[self.attempts_before:]  # this test's, in load order
                if r.status in ("loaded", "untracked") and records.get(r.name) is r]
        for record in sorted(ours, key=lambda r: r.started):
            by_phase.setdefault(record.phase, []).append(record)
        spans = [(span.name, span.parent, self.offset(span.started), span.duration) for span in self.phases]
        named = {span.name for span in self.phases}
        # loads between the test's start and its first runner phase keep the phase they happened in
        spans[:0] = [(name, None, self.offset(records[0].started), 0.0)
                     for name, records in by_phase.items() if name not in named]

        def watched(records: list[ImportRecord]) -> list[dict]:
            found = []
            for pattern in watch:
                hits = [r for r in records if matches(r.name, pattern)]
                if not hits:
                    continue
                first = _explaining_record(hits, pattern)
                found.append({
                    "pattern": pattern, "module": first.name, "count": len(hits), "duration": first.duration,
                    "chain": self.recorder.link_texts(first.name),
                    "trigger": str(first.trigger) if first.trigger is not None else None,
                })
            return found

        return {
            "isolation": self.isolation,
            "baseline": self.baseline_label,
            "preload": list(self.preload),
            "blocked": list(self.blocker.blocked),
            "watch": list(watch),
            "inductor_cache": inductor_cache.state(self.cache_counters, inductor_cache.snapshot()),
            "phases": [
                {"name": name, "parent": parent, "start": start, "duration": duration,
                 "module_count": len(by_phase.get(name, [])),
                 "modules": [_module_entry(r, self.offset(r.started)) for r in by_phase.get(name, [])],
                 "watched": watched(by_phase.get(name, []))}
                for name, parent, start, duration in spans
            ],
        }

    # -- provenance -------------------------------------------------------
    def in_baseline(self, record: ImportRecord) -> bool:
        return record.phase in BASELINE_PHASES or record.started < self.baseline_cutoff

    def origin_of(self, name: str, short: bool = False) -> str:
        record = self.recorder.record_of(name)
        if record is None:
            return ""
        where = f" at {record.trigger}" if record.trigger else ""
        if record.phase == "before-recording":
            text = " before pytest-npu-lazy started recording (by the interpreter, sitecustomize or a plugin loaded earlier)"
        elif record.phase == "pytest":
            text = f" in the pytest process before the zygote forked{where}"
        elif record.phase == "preload":
            text = f" by the zygote's preload {list(self.preload)}{where}"
        else:
            text = f" during phase {record.phase!r}{where}"
        if short:
            return text
        return text + "\n" + format_chain(self.recorder, name)


def _module_entry(record: ImportRecord, start: float) -> dict:
    """A module in a summary; one that no other load caused keeps the code that asked for it."""
    entry = {"name": record.name, "parent": record.parent, "start": start,
             "duration": record.duration, "untracked": record.status == "untracked"}
    if record.parent is None and record.trigger is not None:
        entry["trigger"] = f"{record.trigger.module} ({record.trigger})"
    return entry


def format_chain(recorder: ImportRecorder, name: str) -> str:
    """The chain and the line that started it, as a person wants to read it."""
    chain = recorder.chain(name)
    if not chain:
        return "  (no import record: loaded outside the import system)"
    lines = ["  import chain: " + " <- ".join(recorder.link_texts(name))]
    trigger = chain[0].trigger
    if trigger is not None:
        lines.append(f"  triggered at: {trigger}")
        source = linecache.getline(trigger.filename, trigger.lineno).strip()
        if source:
            lines.append(f"      {source}")
    return "\n".join(lines)


class CompiledFunction:
    """A ``torch.compile`` result whose calls are phases and whose first call is checked."""

    def __init__(self, probe: "NpuLazy", fn: Callable, compiled: Callable, prefix: str,
                 check_eager: bool, rtol: float | None, atol: float | None) -> None:
        self.fn = fn
        self.compiled = compiled
        self._probe = probe
        self._prefix = prefix
        self._check_eager = check_eager
        self._tolerances = {"rtol": rtol, "atol": atol} if rtol is not None or atol is not None else {}
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        state = self._probe._state
        first = self.calls == 0
        if first and self._check_eager:
            eager_args, eager_kwargs = _clone_tensors((args, kwargs))
        phase = self._prefix + ("first_call" if first else "call")
        with state.enter(phase, repeatable=True):
            out = self.compiled(*args, **kwargs)
        self.calls += 1
        if first and self._check_eager:
            with state.enter(self._prefix + "eager", repeatable=True):
                expected = self.fn(*eager_args, **eager_kwargs)
            _assert_same(out, expected, self._tolerances, phase)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.compiled, name)


def _clone_tensors(tree):
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, tree)


def _assert_same(actual, expected, tolerances: dict, phase: str) -> None:
    __tracebackhide__ = True
    import torch

    try:
        torch.testing.assert_close(actual, expected, **tolerances)
    except AssertionError as exc:
        raise AssertionError(f"npu_lazy: the compiled output of {phase!r} differs from eager:\n{exc}") from None


class NpuLazy:
    """The ``npu_lazy`` fixture object."""

    def __init__(self, state: ProbeState) -> None:
        self._state = state
        self._compiles = 0

    # -- phases -----------------------------------------------------------
    def phase(self, name: str) -> contextlib.AbstractContextManager[PhaseSpan]:
        """Attribute every module loaded inside the block to ``name``."""
        if not isinstance(name, str) or not name.strip():
            raise ProbeUsageError(f"phase name must be a non-empty string, got {name!r}.")
        if name in RESERVED_PHASES:
            raise ProbeUsageError(f"phase name {name!r} is reserved by the runner "
                                  f"({', '.join(RESERVED_PHASES)}); choose another name.")
        return self._state.enter(name)

    @property
    def phases(self) -> list[str]:
        return [p.name for p in self._state.phases]

    def phase_duration(self, name: str) -> float:
        for span in self._state.phases:
            if span.name == name:
                return span.duration
        raise ProbeUsageError(f"no phase {name!r} in this test; phases so far: {self.phases}.")

    # -- compile ----------------------------------------------------------
    def compile(self, fn: Callable, *, name: str | None = None, check_eager: bool = True,
                rtol: float | None = None, atol: float | None = None,
                **torch_compile_kwargs: Any) -> CompiledFunction:
        """``torch.compile`` in phase ``wrap``; calls run in ``first_call`` then ``call``.

        The first call is compared with eager (``torch.testing.assert_close``)
        unless ``check_eager=False``. A second compile in one test needs its
        own ``name``, which prefixes its phases (``name.wrap`` ...).
        """
        if name is None and self._compiles:
            raise ProbeUsageError("this test already compiled a function; give the next one a name: "
                                  "npu_lazy.compile(fn, name='second') records phases 'second.wrap', ...")
        prefix = f"{name}." if name else ""
        self._compiles += 1
        import torch

        with self._state.enter(prefix + "wrap"):
            compiled = torch.compile(fn, **torch_compile_kwargs)
        return CompiledFunction(self, fn, compiled, prefix, check_eager, rtol, atol)

    # -- questions --------------------------------------------------------
    def loaded(self, pattern: str) -> list[str]:
        """Loaded modules matching ``pattern`` (a module and its submodules, or a glob)."""
        self._check_patterns((pattern,), guard=True)
        return [r.name for r in self._state.recorder.loaded(pattern)]

    def assert_loaded(self, *patterns: str) -> None:
        __tracebackhide__ = True
        self._check_patterns(patterns, guard=False)
        missing = [p for p in patterns if not self._state.recorder.loaded(p)]
        if missing:
            raise AssertionError(
                f"npu_lazy: expected loaded, but not loaded (phase {self._state.recorder.phase!r}): "
                + ", ".join(missing))

    def assert_not_loaded(self, *patterns: str) -> None:
        """Fail naming the phase, the import chain and the line that loaded each one."""
        __tracebackhide__ = True
        self._check_patterns(patterns, guard=True)
        problems = []
        for pattern in patterns:
            records = self._state.recorder.loaded(pattern)
            if not records:
                continue
            first = _explaining_record(records, pattern)
            more = f"\n  with {len(records) - 1} more module(s) under {pattern!r}" if len(records) > 1 else ""
            problems.append(
                f"{first.name!r} must not be loaded yet, but it was loaded during phase {first.phase!r}\n"
                + format_chain(self._state.recorder, first.name) + more)
        if problems:
            raise AssertionError("npu_lazy: " + "\n\nnpu_lazy: ".join(problems))

    def first_loaded(self, module: str) -> str | None:
        """The phase in which ``module`` first loaded, or None if it is not loaded."""
        self._check_patterns((module,), guard=True)
        record = self._state.recorder.record_of(module)
        return record.phase if record is not None and record.status in ("loaded", "untracked") else None

    def import_chain(self, module: str) -> list[str]:
        """``[module, its importer, ..., the code that started it]``; empty if not loaded."""
        self._check_patterns((module,), guard=False)
        return [link for link, _ in self._state.recorder.links(module)]

    def explain(self, module: str) -> str:
        """Where ``module`` came from, as the failure messages say it."""
        record = self._state.recorder.record_of(module)
        if record is None:
            return f"{module!r} is not loaded"
        return f"{module!r} was loaded" + self._state.origin_of(module)

    def modules(self, phase: str) -> list[str]:
        """Modules first loaded in ``phase``."""
        return sorted(r.name for r in self._state.recorder.in_phase(phase)
                      if r.status in ("loaded", "untracked"))

    # -- functions ----------------------------------------------------------
    def ran(self, target: str) -> bool:
        """Whether ``"pkg.mod:function"`` ran, without importing ``pkg.mod``."""
        return self._state.tracker.ran(target)

    def calls(self, target: str) -> int:
        """How often a tracked function was called (it must have been tracked before its module loaded)."""
        return self._state.tracker.calls(target)

    def track(self, *targets: str) -> None:
        """Start counting calls before the function's module loads."""
        for target in targets:
            self._state.tracker.track(target)

    def block(self, *modules: str) -> None:
        """Make modules (and their submodules) look absent for the rest of the test."""
        self._state.blocker.block(*modules)

    # -- environment ----------------------------------------------------------
    @property
    def device(self) -> str:
        """"npu" with a usable NPU, else "cuda" if available, else "cpu".

        The emulated NPU (--npu-lazy-cann=emulate) is available but runs no kernels: "cpu" there.
        """
        import torch

        from ..cann.common import ENV_MODE

        if "torch_npu" in sys.modules and os.environ.get(ENV_MODE) != "emulate" and torch.npu.is_available():
            return "npu"
        if torch.cuda.is_available():
            return "cuda"
        return "cpu"

    @property
    def isolation(self) -> str:
        return self._state.isolation

    # -- checks -------------------------------------------------------------
    def _check_patterns(self, patterns, guard: bool) -> None:
        __tracebackhide__ = True
        bypassed = self._state.blocker.bypassed()
        if bypassed:
            raise BlockError(
                f"the block on {bypassed[0]!r} was bypassed: it is loaded{self._state.origin_of(bypassed[0])}\n"
                "Something loaded it without the import system (module_from_spec and exec_module on a "
                "path), so this test cannot simulate its absence by blocking; test in an environment "
                "where it is really not installed.")
        if not patterns:
            raise ProbeUsageError("name at least one module, e.g. npu_lazy.assert_not_loaded('torch._dynamo').")
        for pattern in patterns:
            if not isinstance(pattern, str) or not pattern:
                raise ProbeUsageError(f"a module pattern must be a non-empty string, got {pattern!r}.")
            problem = unknown_name_problem(pattern)
            if problem:
                raise ProbeUsageError(f"pattern {pattern!r} matches no module: {problem}")
            if guard:
                self._guard(pattern)

    def _guard(self, pattern: str) -> None:
        state = self._state
        inherited = [r for r in state.recorder.loaded(pattern) if state.in_baseline(r)]
        if inherited:
            record = _explaining_record(inherited, pattern)
            raise BaselineContaminatedError(_contamination_message(state, pattern, record))


def _explaining_record(records: list[ImportRecord], pattern: str) -> ImportRecord:
    """The package a pattern names explains best, though it loads after the submodule asked for."""
    return next((r for r in records if r.name == pattern), records[0])


def _preload_fix(state: ProbeState) -> str:
    """Where to change the preload: the marker when the test's own marker chose it, else the session default."""
    now = list(state.preload)
    if state.preload_source == "marker":
        return (f"remove it (or the module that imports it) from this test's marker: "
                f"@pytest.mark.npu_lazy(preload={now!r}).")
    return (f"remove it (or the module that imports it) from {state.preload_source} (now {now!r}), "
            f"or give this test its own preload: @pytest.mark.npu_lazy(preload=[...]).")


def _contamination_message(state: ProbeState, pattern: str, record: ImportRecord) -> str:
    if record.phase == "preload":
        fix = _preload_fix(state)
    elif state.in_process_reason == "isolate-off":
        fix = ("this run has isolation switched off (--npu-lazy-isolate=off, $PYTEST_NPU_LAZY_ISOLATE or ini "
               "npu_lazy_isolate), so even a marked test runs in the pytest process, after every conftest and "
               "test module was imported. Run without it to check deferred loading (keep it off only for "
               "--pdb and the like).")
    elif record.phase == "pytest" and state.isolation == "in-process":
        fix = ("run the test isolated with @pytest.mark.npu_lazy, so it starts from a zygote forked "
               "before test modules are imported, or move that import into a test or fixture.")
    elif record.phase in ("pytest", "before-recording"):
        fix = ("keep that import out of conftest.py files and plugins loaded at start-up (import it "
               "inside a fixture or test), so the zygote forks before it happens.")
    else:
        fix = "run the test isolated with @pytest.mark.npu_lazy so it starts from a clean baseline."
    return (f"npu_lazy guard: {pattern!r} cannot be checked: {record.name!r} was already loaded "
            f"before this test started,{state.origin_of(record.name)}\n"
            f"The test started from {state.baseline_label}; a module that is already loaded "
            f"can prove nothing about deferred loading. Fix: {fix}")


def new_state(nodeid: str, isolation: str, baseline_label: str, preload=(), recorder: ImportRecorder = RECORDER,
              preload_source: str = "ini npu_lazy_preload", in_process_reason: str | None = None) -> ProbeState:
    """State for a test starting now: everything loaded so far is its baseline."""
    if not recorder.installed:
        recorder.install()
    recorder.sweep()
    return ProbeState(recorder=recorder, nodeid=nodeid, baseline_cutoff=recorder._now(),
                      isolation=isolation, baseline_label=baseline_label, preload=tuple(preload),
                      attempts_before=len(recorder.attempts), preload_source=preload_source,
                      in_process_reason=in_process_reason)


_IN_PROCESS_LABELS = {
    "pytest-forked": "a fork of the pytest process (pytest-forked)",
    "isolate-off": "the pytest process (isolation switched off)",
    "not-marked": "the pytest process (test not isolated)",
}


def unmarked_fixture_warning(nodeid: str) -> str:
    """Why a test that asks for the probe but has no marker should not stay quiet about it."""
    return (f"{nodeid} uses the npu_lazy fixture but has no @pytest.mark.npu_lazy, so it runs in the pytest "
            "process: everything plugins, conftests and the collected test modules imported is its baseline, "
            "and a question about those modules errors instead of answering. Mark it @pytest.mark.npu_lazy "
            "to run it in a clean child (or run with --npu-lazy-isolate=all).")


@contextlib.contextmanager
def probe_for(node, settings, isolate: str = "marked") -> Iterator[NpuLazy]:
    """The fixture's object: the isolated child's own state, or one made here for an in-process test.

    ``settings`` resolves the test's marker options; it is only called in-process. ``isolate``
    is the session's --npu-lazy-isolate: under "marked" an unmarked test using the probe
    gets a warning, since it most likely forgot the marker.
    """
    state = active_state()
    if state is not None and state.nodeid == node.nodeid:
        yield NpuLazy(state)
        return
    config = node.config
    forked = bool(getattr(config.option, "forked", False)) or node.get_closest_marker("forked")
    reason = "pytest-forked" if forked else "isolate-off" if isolate == "off" else "not-marked"
    if reason == "not-marked" and isolate == "marked" and node.get_closest_marker("npu_lazy") is None:
        warnings.warn(NpuLazyWarning(unmarked_fixture_warning(node.nodeid)), stacklevel=1)
    state = new_state(node.nodeid, "in-process", _IN_PROCESS_LABELS[reason], in_process_reason=reason)
    set_active_state(state)
    try:
        options = settings()
        state.blocker.block(*options.block)
        for target in options.track:
            state.tracker.track(target)
        yield NpuLazy(state)
    finally:
        state.finish()
        set_active_state(None)
        state.recorder.set_phase("pytest")


_ACTIVE: ProbeState | None = None


def active_state() -> ProbeState | None:
    return _ACTIVE


def set_active_state(state: ProbeState | None) -> None:
    global _ACTIVE
    _ACTIVE = state

"""The ``npu_lazy`` fixture: phases, compile-and-compare, and questions about imports.

Every answer comes from the process-wide import recorder. A question about a
module that was loaded before the test started (zygote preload, pytest
process, an earlier test) cannot be answered honestly, so it raises
:class:`BaselineContaminatedError` naming who loaded it, instead of
passing or failing by accident.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import sys
import warnings
from typing import Any, Callable, Iterator

from ..cann.compute.ledger import LEDGER
from ..errors import BaselineContaminatedError, BlockError, NpuLazyWarning, ProbeUsageError
from .modules import unknown_name_problem
from .recorder import ImportRecord
from .reference import (CHECK_ATTRIBUTE, Check, EagerReference, backward, cotangents_for, gradient_inputs,
                        requires_grad)
from .state import (RESERVED_PHASES, PhaseSpan, ProbeState, _explaining_record, active_state,
                    format_chain, set_active_state)
#: the attribute of a broken guarantee's AssertionError, and of the test report it fails, that holds it as data
from .summary import VIOLATION_ATTRIBUTE

#: pytest leaves this module's frames out of a failing test's traceback: a misused probe, a broken guard
#: or a blocked import is reported at the test's own line (--fulltrace shows them)
__tracebackhide__ = True


def broken_guarantee(text: str, violation: dict | None) -> AssertionError:
    """The AssertionError a person reads, carrying the same violation as data for the reports.

    ``violation``: ``{"kind": "loaded" | "missing" | "device_call", "module", "phase", "chain"}`` (for a
    device call, ``module`` is the call's name and ``chain`` the call and the Python line behind it)
    (docs/reports.md). The plugin copies it onto the report of the phase it
    fails, so it travels from a child with pytest's own report serialisation
    and no report code ever reads the text back.
    """
    error = AssertionError(text)
    setattr(error, VIOLATION_ATTRIBUTE, violation)
    return error


class CompiledFunction:
    """A ``torch.compile`` result whose calls are phases and whose first call is checked."""

    def __init__(self, probe: "NpuLazy", fn: Callable, compiled: Callable, prefix: str,
                 check_eager: bool, check_grad: bool, rtol: float | None, atol: float | None) -> None:
        self.fn = fn
        self.compiled = compiled
        self._probe = probe
        self._prefix = prefix
        self._check_eager = check_eager
        self._check_grad = check_grad
        self._tolerances = {"rtol": rtol, "atol": atol} if rtol is not None or atol is not None else {}
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        state = self._probe._state
        first = self.calls == 0
        reference = EagerReference.for_call(self.fn, args, kwargs) if first and self._check_eager else None
        phase = self._prefix + ("first_call" if first else "call")
        computed_before = len(LEDGER.entries)
        with state.enter(phase, repeatable=True):
            out = self.compiled(*args, **kwargs)
        self.calls += 1
        if reference is not None:
            self._check(reference, out, args, kwargs, phase, computed_before)
        return out

    def _check(self, reference: EagerReference, out: Any, args: tuple, kwargs: dict, phase: str,
               computed_before: int) -> None:
        """Eager against the compiled call (outputs, inputs updated in place, and gradients where asked); every
        check is kept for the reports, a failing one too."""
        __tracebackhide__ = True
        state = self._probe._state
        with state.enter(self._prefix + "eager", repeatable=True):
            try:
                expected = reference.run()
            except Exception as error:
                raise ProbeUsageError(
                    f"npu_lazy: the eager reference of {phase!r} could not be computed, so the compiled output was "
                    f"not compared: {type(error).__name__}: {error}\n{reference.description}\nIf the function "
                    "cannot run eagerly here (an operator only the device has, state only the compiled call may "
                    "change), compile it with check_eager=False and compare what you can yourself.") from error
        check = Check(phase=phase, reference=reference.description)
        try:
            check = reference.compare(out, expected, self._tolerances, phase, computed_before,
                                      actual_inputs=(args, kwargs))
            if self._check_grad and requires_grad(out):
                self._check_gradients(reference, out, expected, args, kwargs, phase, check)
        except AssertionError as error:
            check = getattr(error, CHECK_ATTRIBUTE, check)
            check.passed = False
            raise
        finally:
            state.checks.append(check.to_dict())

    def _check_gradients(self, reference: EagerReference, out: Any, expected: Any, args: tuple, kwargs: dict,
                         phase: str, check: Check) -> None:
        __tracebackhide__ = True
        state = self._probe._state
        names, wrt = gradient_inputs(self.fn, args, kwargs)
        reference_args, reference_kwargs = reference.inputs_after()
        _, reference_wrt = gradient_inputs(reference.fn, reference_args, reference_kwargs)
        cotangents = cotangents_for(out)
        since = len(LEDGER.entries)
        with state.enter(self._prefix + "first_backward", repeatable=True):
            compiled_grads = backward(out, wrt, cotangents)
        with state.enter(self._prefix + "eager_backward", repeatable=True):
            reference_grads = backward(expected, reference_wrt, cotangents)
        reference.compare_gradients(compiled_grads, reference_grads, names, self._tolerances,
                                    self._prefix + "first_backward", since, check)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.compiled, name)


def _source_line(call) -> str:
    if call.line is None:
        return ""
    source = call.line.source()
    return f"\n      {source}" if source else ""


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
        self._state.check_new_phase(name)
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
                check_grad: bool | None = None, rtol: float | None = None, atol: float | None = None,
                **torch_compile_kwargs: Any) -> CompiledFunction:
        """``torch.compile`` in phase ``wrap``; calls run in ``first_call`` then ``call``.

        The first call is compared with eager (``torch.testing.assert_close``)
        unless ``check_eager=False``: its outputs, and inputs it updated in
        place. ``check_grad`` (default: ini ``npu_lazy_check_grad``): where an
        output requires grad, the backward too (phase ``first_backward``
        against ``eager_backward``), gradients of the tensor inputs that
        require grad and of a module's parameters. A second compile in one
        test needs its own ``name``, which prefixes its phases (``name.wrap`` ...).
        """
        if name is None and self._compiles:
            raise ProbeUsageError("this test already compiled a function; give the next one a name: "
                                  "npu_lazy.compile(fn, name='second') records phases 'second.wrap', ...")
        prefix = f"{name}." if name else ""
        self._compiles += 1
        import torch

        with self._state.enter(prefix + "wrap"):
            compiled = torch.compile(fn, **torch_compile_kwargs)
        check_grad = self._state.check_grad if check_grad is None else bool(check_grad)
        return CompiledFunction(self, fn, compiled, prefix, check_eager, check_grad, rtol, atol)

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
            phase = self._state.recorder.phase
            raise broken_guarantee(
                f"npu_lazy: expected loaded, but not loaded (phase {phase!r}): " + ", ".join(missing),
                {"kind": "missing", "module": missing[0], "phase": phase, "chain": [missing[0]]})

    def assert_not_loaded(self, *patterns: str) -> None:
        """Fail naming the phase, the import chain and the line that loaded each one."""
        __tracebackhide__ = True
        self._check_patterns(patterns, guard=True)
        problems, violation = [], None
        for pattern in patterns:
            records = self._state.recorder.loaded(pattern)
            if not records:
                continue
            first = _explaining_record(records, pattern)
            more = f"\n  with {len(records) - 1} more module(s) under {pattern!r}" if len(records) > 1 else ""
            problems.append(
                f"{first.name!r} must not be loaded yet, but it was loaded during phase {first.phase!r}\n"
                + format_chain(self._state.recorder, first.name) + more)
            violation = violation or {"kind": "loaded", "module": first.name, "phase": first.phase,
                                      "chain": self._state.recorder.link_texts(first.name)}
        if problems:
            raise broken_guarantee("npu_lazy: " + "\n\nnpu_lazy: ".join(problems), violation)

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

    # -- device calls -------------------------------------------------------
    def device_calls(self, phase: str | None = None) -> list[str]:
        """The ACL / HCCL / runtime calls this test made, in order: in ``phase``, or in every phase.

        Skips the test, saying why, where calls cannot be recorded (real CANN, no stub loaded):
        never an empty list that would read as "no calls".
        """
        return [call.name for call in self._recorded_device_calls(phase)]

    def assert_no_device_calls(self, *patterns: str, phase: str | None = None) -> None:
        """Fail if a device call matching a pattern (fnmatch: ``"aclInit"``, ``"aclrt*"``) was made, in
        ``phase`` or in any phase of this test, naming the call, its phase and the Python line behind it."""
        __tracebackhide__ = True
        if not patterns or not all(isinstance(p, str) and p for p in patterns):
            raise ProbeUsageError("name at least one device call or fnmatch pattern, e.g. "
                                  "npu_lazy.assert_no_device_calls('aclInit', 'aclrtSetDevice').")
        calls = self._recorded_device_calls(phase)
        problems, violation = [], None
        for pattern in patterns:
            hits = [call for call in calls if fnmatch.fnmatchcase(call.name, pattern)]
            if not hits:
                continue
            first = hits[0]
            more = f"\n  and {len(hits) - 1} more call(s) matching {pattern!r}" if len(hits) > 1 else ""
            problems.append(f"device call {first.name!r} must not be made, but it was made during phase "
                            f"{first.phase!r}\n  called at: {first.where()}{_source_line(first)}{more}")
            violation = violation or {"kind": "device_call", "module": first.name, "phase": first.phase,
                                      "chain": [first.name, first.where()]}
        if problems:
            raise broken_guarantee("npu_lazy: " + "\n\nnpu_lazy: ".join(problems), violation)

    @property
    def device_calls_recorded(self) -> bool:
        """Whether this process records device calls (the CANN host stub or the emulated NPU is loaded)."""
        return self._state.device_log.unavailable is None

    def device_call_records(self, phase: str | None = None) -> list:
        """Like :meth:`device_calls`, as records: name, result, phase, the Python line and the torch_npu line."""
        return self._recorded_device_calls(phase)

    def _recorded_device_calls(self, phase: str | None):
        __tracebackhide__ = True
        import pytest

        unavailable = self._state.device_log.unavailable
        if unavailable is not None:
            pytest.skip(f"npu_lazy: {unavailable}")
        calls = self._state.device_calls()
        if phase is not None:
            if phase not in self.phases and not any(call.phase == phase for call in calls):
                raise ProbeUsageError(f"no phase {phase!r} in this test; phases so far: {self.phases}.")
            calls = [call for call in calls if call.phase == phase]
        return calls

    def record(self, name: str, text: str) -> None:
        """Keep ``text`` under ``name`` in this test's report (JSON ``records``): a generated kernel's
        source, the call a first compiled call stopped at. The test's own evidence, sent home with it."""
        if not isinstance(name, str) or not name or not isinstance(text, str):
            raise ProbeUsageError(f"npu_lazy.record(name, text) takes two strings, got {name!r}, {type(text).__name__}.")
        self._state.records[name] = text

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

        The emulated NPU (--npu-lazy-cann=emulate) is available but runs no kernels: "cpu" there. Under
        --npu-lazy-cann=compute it computes (on the host, said in the report): "npu".
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


def _preload_entry(state: ProbeState, record: ImportRecord) -> str | None:
    """The preload entry that loaded ``record``: the entry its chain of importers starts from (or the module itself,
    or a package of it), else None."""
    names, seen = [record.name], {record.name}
    parent = record.parent
    while parent and parent not in seen:
        names.append(parent)
        seen.add(parent)
        importer = state.recorder.records.get(parent)
        parent = importer.parent if importer is not None else None
    for name in reversed(names):  # the outermost importer first: the entry the zygote imported
        for entry in state.preload:
            if name == entry or name.startswith(entry + "."):
                return entry
    return None


def _preload_fix(state: ProbeState, record: ImportRecord) -> str:
    """Where to change the preload: the marker when the test's own marker chose it, else the session default; with
    the entry that loaded the module taken out, where the import chain names it."""
    now = list(state.preload)
    entry = _preload_entry(state, record)
    if entry is not None:
        without = [e for e in now if e != entry]
        what = f"{entry!r} loads it" if entry != record.name else "it is preloaded"
        if state.preload_source == "marker":
            return f"{what}: take it out of this test's marker: @pytest.mark.npu_lazy(preload={without!r})."
        return (f"{what}: take it out of {state.preload_source} (now {now!r}), or give this test its own preload: "
                f"@pytest.mark.npu_lazy(preload={without!r}).")
    if state.preload_source == "marker":
        return (f"remove it (or the module that imports it) from this test's marker: "
                f"@pytest.mark.npu_lazy(preload={now!r}).")
    return (f"remove it (or the module that imports it) from {state.preload_source} (now {now!r}), "
            f"or give this test its own preload: @pytest.mark.npu_lazy(preload=[...]).")


def _contamination_message(state: ProbeState, pattern: str, record: ImportRecord) -> str:
    if record.phase == "preload":
        fix = _preload_fix(state, record)
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
        _report_unasked_tracking(state)
        return
    config = node.config
    forked = bool(getattr(config.option, "forked", False)) or node.get_closest_marker("forked")
    reason = "pytest-forked" if forked else "isolate-off" if isolate == "off" else "not-marked"
    if reason == "not-marked" and isolate == "marked" and node.get_closest_marker("npu_lazy") is None:
        warnings.warn(NpuLazyWarning(unmarked_fixture_warning(node.nodeid)), stacklevel=1)
    options = settings()
    state = ProbeState.for_settings(options, node.nodeid, in_process_reason=reason)
    set_active_state(state)
    try:
        state.blocker.block(*options.block)
        for target in options.track:
            state.tracker.track(target)
        yield NpuLazy(state)
        _report_unasked_tracking(state)
    finally:
        state.finish()
        set_active_state(None)
        state.recorder.set_phase("pytest")


def _report_unasked_tracking(state: ProbeState) -> None:
    """At the end of a test: a tracked function that cannot be tracked (a typo in ``track=[...]``), which the
    test never asked about, is an error of the test, not a silent pass."""
    problems = state.tracker.unasked_problems()
    if problems:
        __tracebackhide__ = True
        raise ProbeUsageError("npu_lazy marker: " + "; ".join(problems) + " Fix the name in track=[...], or "
                              "remove it.")

"""Tell whether a function ran, without importing its module early.

torch_npu marks its one-shot setup functions with a ``has_run`` flag; where
a function has one, that flag is the truth. Other functions are wrapped the
moment their module finishes loading, before any importer can take a
reference to them.
"""

from __future__ import annotations

import difflib
import functools
import sys
from dataclasses import dataclass

from ..errors import ProbeUsageError
from .recorder import ImportRecorder, without_frames_of

#: pytest leaves this module's frames out of a failing test's traceback: a misused probe, a broken guard
#: or a blocked import is reported at the test's own line (--fulltrace shows them)
__tracebackhide__ = True



@dataclass
class CallState:
    target: str
    calls: int = 0
    first_phase: str | None = None
    instrumented: bool = False
    problem: str | None = None
    #: whether the test asked (ran(), calls()): a problem nobody asked about is reported when the test ends
    asked: bool = False


def parse_target(target: str) -> tuple[str, str]:
    module, sep, qualname = target.partition(":")
    if not sep or not module or not qualname or not all(p.isidentifier() for p in qualname.split(".")):
        raise ProbeUsageError(
            f"cannot track {target!r}: name a function as 'package.module:function' "
            "or 'package.module:Class.method', e.g. 'torch_npu.utils._dynamo:_lazy_inductor_setup'.")
    return module, qualname


def _resolve(module_name: str, qualname: str):
    """(owner, attribute name, raw attribute) for ``qualname`` in a loaded module."""
    owner = sys.modules[module_name]
    parts = qualname.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    attr = parts[-1]
    raw = owner.__dict__[attr] if isinstance(owner, type) and attr in owner.__dict__ else getattr(owner, attr)
    return owner, attr, raw


class CallTracker:
    """Answers ``ran("pkg.mod:function")`` for one test."""

    def __init__(self, recorder: ImportRecorder) -> None:
        self.recorder = recorder
        self.states: dict[str, CallState] = {}

    def track(self, target: str) -> CallState:
        state = self.states.get(target)
        if state is not None:
            return state
        module, qualname = parse_target(target)
        state = self.states[target] = CallState(target)
        if sys.modules.get(module) is not None:
            self._instrument(state, module, qualname, late=True)
        else:
            self.recorder.on_load(module, lambda name: self._instrument(state, name, qualname, late=False))
        return state

    def ran(self, target: str) -> bool:
        module, qualname = parse_target(target)
        state = self.track(target)
        state.asked = True
        if state.problem:
            raise ProbeUsageError(state.problem)
        if sys.modules.get(module) is None:
            return False
        flag = self._has_run_flag(module, qualname)
        if flag is not None:
            return flag
        if state.instrumented:
            return state.calls > 0
        record = self.recorder.record_of(module)
        raise ProbeUsageError(
            f"cannot tell whether {target} ran: {module!r} was already loaded when tracking began "
            f"(phase {record.phase if record else 'unknown'!r}) "
            "and the function has no 'has_run' flag. Track it before its module loads: "
            f"@pytest.mark.npu_lazy(track=[{target!r}]), or call npu_lazy.ran({target!r}) before the import.")

    def calls(self, target: str) -> int:
        module, _ = parse_target(target)
        state = self.track(target)
        state.asked = True
        if state.problem:
            raise ProbeUsageError(state.problem)
        if state.instrumented or sys.modules.get(module) is None:
            return state.calls
        raise ProbeUsageError(
            f"cannot count calls of {target}: it was not instrumented (its module was already loaded "
            "when tracking began, or the function reports only a has_run flag). Track it before its "
            f"module loads: @pytest.mark.npu_lazy(track=[{target!r}]).")

    def unasked_problems(self) -> list[str]:
        """What is wrong with targets the test tracked and never asked about (a typo in ``track=[...]`` would
        otherwise pass unnoticed): checked when the test ends."""
        return [s.problem for s in self.states.values() if s.problem and not s.asked]

    def _has_run_flag(self, module: str, qualname: str) -> bool | None:
        try:
            _, _, raw = _resolve(module, qualname)
        except (AttributeError, KeyError):
            return None
        flag = getattr(raw, "has_run", None)
        return flag if isinstance(flag, bool) else None

    def _instrument(self, state: CallState, module: str, qualname: str, late: bool) -> None:
        try:
            owner, attr, raw = _resolve(module, qualname)
        except (AttributeError, KeyError):
            names = [n for n in dir(sys.modules[module]) if not n.startswith("__")]
            close = difflib.get_close_matches(qualname, names, n=3, cutoff=0.7)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            record = self.recorder.record_of(module)
            when = (f"checked when it loaded, phase {record.phase!r}" if record is not None and not late else
                    f"checked in phase {self.recorder.phase!r}; it loaded "
                    + (f"in phase {record.phase!r}" if record is not None else "before the test"))
            state.problem = f"cannot track {state.target}: module {module!r} has no {qualname!r} ({when}).{hint}"
            return
        if isinstance(getattr(raw, "has_run", None), bool):
            return  # it reports on itself; a wrapper would hide later changes of the flag from its callers
        if late:
            return  # calls before now are unknowable; ran() says so
        function = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
        if not callable(function):
            state.problem = f"cannot track {state.target}: it is a {type(raw).__name__}, not a function."
            return

        recorder = self.recorder

        @functools.wraps(function)
        def counting(*args, **kwargs):
            state.calls += 1
            if state.first_phase is None:
                state.first_phase = recorder.phase
            try:
                return function(*args, **kwargs)
            except BaseException as exc:  # the function's error, as it reads without the wrapper
                exc.__traceback__ = without_frames_of(__file__, exc.__traceback__)
                raise

        wrapped = type(raw)(counting) if isinstance(raw, (staticmethod, classmethod)) else counting
        setattr(owner, attr, wrapped)
        state.instrumented = True

"""One test's probe state: its phases, what they loaded, and the summary its reports are made of.

Shared by the isolated child, which creates it before the test is
collected and sends :meth:`ProbeState.summary` home with the teardown
report, and the ``npu_lazy`` fixture (:mod:`.fixture`), which answers the
test's questions from it. One state is active per process at a time;
:meth:`ProbeState.for_settings` makes it from the test's settings, the one
place they are copied in.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Callable, Iterator

from . import inductor_cache
from .blocking import ModuleBlocker
from ..cann import task_queue
from ..cann.common import ENV_MODE
from ..cann.compute import ledger as compute_ledger
from ..cann.emulation import REFUSAL_RESULT
from .device_calls import DEVICE_CALLS, DeviceCall, DeviceCallLog, phase_holding, place_in_phases, summarise
from ..errors import ProbeUsageError
from .recorder import BASELINE_PHASES, RECORDER, ImportRecord, ImportRecorder, matches
from .summary import DEFAULT_WATCH, PhaseSummary, Summary
from .tracking import CallTracker

#: pytest leaves this module's frames out of a failing test's traceback: a misused probe, a broken guard
#: or a blocked import is reported at the test's own line (--fulltrace shows them)
__tracebackhide__ = True


#: what an in-process test started from, by why it is not isolated (ProbeState.in_process_reason)
IN_PROCESS_LABELS = {
    "pytest-forked": "a fork of the pytest process (pytest-forked)",
    "isolate-off": "the pytest process (isolation switched off)",
    "not-marked": "the pytest process (test not isolated)",
}

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
    tracker: CallTracker = field(init=False)  # set by __post_init__, on this state's recorder
    #: how many import attempts the baseline made: this test's own come after them
    attempts_before: int = 0
    #: modules whose loading a failing phase explains (ini npu_lazy_watch)
    watch: tuple[str, ...] = DEFAULT_WATCH
    #: whether the summary lists every module of every phase, or only counts them (no report of the run
    #: uses the lists: they are the largest part of a summary, sent home per test)
    list_modules: bool = True
    #: (from, to) spans a spare child waited for its turn: no phase, and cut out of the time line
    idle: list[tuple[float, float]] = field(default_factory=list)
    _idle_since: float | None = None
    #: told of every phase as it starts and ends (a child streams them home, so a crash still shows them)
    listener: Callable[[dict], None] | None = None
    #: Inductor's cache counters when the test started: cold and warm runs load different modules
    cache_counters: dict[str, int] = field(default_factory=inductor_cache.snapshot)
    #: the cache the plugin gave the test ("shared" in the pytest process: its own caches)
    inductor_cache_policy: str | None = None
    #: the process's device-call log, and how many of its calls came before this test
    device_log: DeviceCallLog = DEVICE_CALLS
    device_calls_before: int = 0
    #: how many entries of the compute mode's ledger (what computed each value) came before this test
    computed_before: int = 0
    #: what the test recorded for its report with npu_lazy.record (a generated kernel's source, a boundary)
    records: dict[str, str] = field(default_factory=dict)
    #: each compiled call compared with eager: what computed each output, which reference (reference.Check)
    checks: list[dict] = field(default_factory=list)
    #: whether npu_lazy.compile checks gradients unless told (ini npu_lazy_check_grad)
    check_grad: bool = False
    #: the loads a module zygote made, grouped once for every child's summary (:meth:`freeze_imports`)
    _frozen: "FrozenImports | None" = None

    @classmethod
    def for_settings(cls, settings, nodeid: str, in_process_reason: str | None = None,
                     recorder: ImportRecorder = RECORDER) -> "ProbeState":
        """State for a test starting now under ``settings`` (a TestSettings): everything loaded so far is its
        baseline. ``in_process_reason`` (see :attr:`in_process_reason`): the test runs in the pytest process,
        whose baseline is everything it loaded, not a zygote's preload."""
        if in_process_reason is None:
            isolation, label, preload = settings.isolation, settings.baseline.label, settings.baseline.preload
        else:
            isolation, label, preload = "in-process", IN_PROCESS_LABELS[in_process_reason], ()
        state = new_state(nodeid, isolation, label, preload, recorder=recorder, in_process_reason=in_process_reason)
        return state.adopt(settings, nodeid)

    def adopt(self, settings, nodeid: str) -> "ProbeState":
        """Make this state the test ``nodeid``'s, under its ``settings``: a module zygote's state, made when it
        collected the module, becomes each of its tests' own in the test's child."""
        self.nodeid = nodeid
        self.preload_source = settings.preload_source
        self.watch = tuple(settings.watch)
        self.list_modules = settings.list_modules
        self.inductor_cache_policy = "shared" if self.in_process_reason is not None else settings.inductor_cache
        self.check_grad = settings.check_grad
        return self

    def __post_init__(self) -> None:
        self.tracker = CallTracker(self.recorder)
        self.blocker._describe_origin = lambda name: self.origin_of(name, short=True)

    # -- phases -----------------------------------------------------------
    def check_new_phase(self, name: str) -> None:
        """Refuse a phase name this test already used (raised before the ``with`` block's machinery, so the
        error's traceback ends in the test's line)."""
        if any(p.name == name for p in self.phases):
            raise ProbeUsageError(
                f"phase {name!r} was already used in this test; phase names identify what loaded "
                "a module, so each one may be entered once. Give the second one its own name, "
                f"e.g. {name + '_2'!r}.")

    @contextlib.contextmanager
    def enter(self, name: str, repeatable: bool = False) -> Iterator[PhaseSpan]:
        span = next((p for p in self.phases if p.name == name), None)
        if span is not None and not repeatable:
            self.check_new_phase(name)
        task_queue.wait_until_bound()  # before the span starts: the queue's call is the enclosing phase's
        previous = self._switch_phase(name)
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
            task_queue.wait_until_bound()  # before the span ends: a device started here has its queue's call here
            self._switch_phase(previous)
            span.ended = self.recorder._now()
            self._notify(span)

    def _switch_phase(self, name: str) -> str:
        """Make ``name`` the phase imports and device calls are attributed to; returns the previous one.
        A new phase samples the Python line of its first device call of each name again."""
        previous = self.recorder.set_phase(name)
        self.device_log.new_epoch()
        return previous

    def _explain_failure(self, phase: str, exc: BaseException) -> None:
        """A phase that raised (a wrapper that cannot be created...) says which watched modules it loaded."""
        if not hasattr(exc, "add_note") or getattr(exc, "_npu_lazy_phase", None):  # Python < 3.11; outer phase
            return
        # the innermost phase explains; enclosing ones add nothing (a mark of ours on the exception)
        exc._npu_lazy_phase = phase  # type: ignore[attr-defined]
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
        task_queue.wait_until_bound()  # a device started in the closing phase: its queue's call is that phase's
        now = self.recorder._now()
        if self._idle_since is not None:
            self.idle.append((self._idle_since, now))
            self._idle_since = None
        self._close_runner_phase(now)
        self._switch_phase(name)
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

    def replay_phases(self) -> None:
        """Tell the listener every phase so far, as each would have been told (a new listener catches up)."""
        for span in self.phases:
            self._notify(span)

    def finish(self) -> None:
        now = self.recorder._now()
        for span in self.phases:
            if span.ended is None:
                span.ended = now
        self.recorder.sweep()
        self.blocker.restore()

    def _own_records(self, since: int) -> list[ImportRecord]:
        """This test's first loads among the import attempts from ``since`` on, in load order."""
        records = self.recorder.records
        ours = [r for r in self.recorder.attempts[since:]
                if r.status in ("loaded", "untracked") and records.get(r.name) is r]
        return sorted(ours, key=lambda r: r.started)

    def freeze_imports(self) -> None:
        """In a module zygote, once it collected: group the loads so far by phase, for every child's summary.

        Every test of the module inherits them (the module's import is each test's collect phase), and every
        child would otherwise read each of their records again: a thousand for a module that imports sympy,
        each read a copied page in a forked child. A recorded load never changes once its import ended (a
        later import of the same name is a new attempt, and the record keeps the first), so they hold for
        every child; a child adds only its own. Each phase's counts, lists and watched chains are computed
        here too, for the settings the zygote collected with (a child with other settings computes them).
        """
        self.recorder.sweep()
        self._frozen = None
        frozen = FrozenImports(len(self.recorder.attempts),
                               {name: own for name, (_, own) in self._imports_by_phase().items()})
        for name in frozen.by_phase:
            frozen.imports_of(name, self)
        self._frozen = frozen

    def _imports_by_phase(self) -> dict[str, tuple[list[ImportRecord], list[ImportRecord]]]:
        """This test's first loads by phase, in load order: (those frozen in its module zygote, its own).

        The frozen lists are not copied: a copy would touch each of their records.
        """
        frozen = self._frozen
        by_phase: dict[str, tuple[list[ImportRecord], list[ImportRecord]]] = {}
        if frozen is not None:
            for name, records in frozen.by_phase.items():
                by_phase[name] = (records, [])
        for record in self._own_records(self.attempts_before if frozen is None else frozen.mark):
            by_phase.setdefault(record.phase, ([], []))[1].append(record)  # after every frozen one
        return by_phase

    def phase_imports(self, records: list[ImportRecord]) -> tuple[int, list[dict], list[dict]]:
        """A phase's loads as a summary gives them: (count, module list or [], watched patterns with a load)."""
        found = []
        for pattern in self.watch:
            hits = [r for r in records if matches(r.name, pattern)]
            if not hits:
                continue
            first = _explaining_record(hits, pattern)
            found.append({
                "pattern": pattern, "module": first.name, "count": len(hits), "duration": first.duration,
                "chain": self.recorder.link_texts(first.name),
                "trigger": str(first.trigger) if first.trigger is not None else None,
            })
        modules = [_module_entry(r, self.offset(r.started)) for r in records] if self.list_modules else []
        return len(records), modules, found

    def summary(self) -> Summary:
        """What the reports (terminal, JSON, JUnit, budget, HTML) read, sent home with the teardown report.

        Per phase: its place in time (seconds from the test's start), the
        modules first loaded in it with importer, start and duration (the
        waterfall), their count (the budget), and for each ``watch`` pattern
        with a first load here, the module that explains it with its import
        chain. Chains are kept for watched modules only, to stay small.
        """
        by_phase = self._imports_by_phase()
        spans = [(span.name, span.parent, self.offset(span.started), span.duration) for span in self.phases]
        named = {span.name for span in self.phases}
        # loads between the test's start and its first runner phase keep the phase they happened in
        spans[:0] = [(name, None, self.offset((frozen or own)[0].started), 0.0)
                     for name, (frozen, own) in by_phase.items() if name not in named]

        def imports_of(name: str) -> tuple[int, list[dict], list[dict]]:
            frozen, own = by_phase.get(name, ([], []))
            if not frozen or self._frozen is None:  # frozen loads are only there with self._frozen
                return self.phase_imports(own)
            part = self._frozen.imports_of(name, self)
            return merge_imports(part, self.phase_imports(own), self.watch) if own else part

        device_calls = self._device_call_summary()
        computed = self._computed_summary(device_calls)

        def phase(name: str, parent: str | None, start: float, duration: float) -> PhaseSummary:
            module_count, modules, watched = imports_of(name)
            return {"name": name, "parent": parent, "start": start, "duration": duration,
                    "module_count": module_count, "modules": modules, "watched": watched,
                    "device_calls": device_calls.get(name, []), "computed": computed.get(name, [])}

        spans += [(name, None, spans[-1][2] if spans else 0.0, 0.0) for name in device_calls
                  if name not in {span[0] for span in spans}]
        return Summary(
            device_calls_unavailable=self.device_log.unavailable,
            device_calls_dropped=self.device_log.dropped,
            records=dict(self.records),
            checks=tuple(self.checks),
            cann_mode=os.environ.get(ENV_MODE),
            isolation=self.isolation,
            baseline=self.baseline_label,
            preload=tuple(self.preload),
            blocked=tuple(self.blocker.blocked),
            watch=tuple(self.watch),
            inductor_cache=inductor_cache.state(self.cache_counters, inductor_cache.snapshot()),
            inductor_cache_policy=self.inductor_cache_policy,
            phases=tuple(phase(name, parent, start, duration) for name, parent, start, duration in spans),
        )

    # -- device calls -------------------------------------------------------
    def device_calls(self) -> list[DeviceCall]:
        """This test's device calls in order, each in its phase (calls made without the GIL placed by time)."""
        log = self.device_log
        log.take_queued()
        epoch = self.recorder._epoch
        return place_in_phases(log.calls[self.device_calls_before:], self._spans(),
                               lambda stamp: self.offset(stamp - epoch))

    def _device_call_summary(self) -> dict[str, list[dict]]:
        return summarise(self.device_calls()) if self.device_log.unavailable is None else {}

    def _spans(self) -> list[tuple[str, float, float | None]]:
        return [(span.name, self.offset(span.started), None if span.ended is None else self.offset(span.ended))
                for span in self.phases]

    def _computed_summary(self, device_calls: dict[str, list[dict]]) -> dict[str, list[dict]]:
        """Under --npu-lazy-cann=compute, per phase: what computed each operator and kernel, and the device calls
        the emulation refused (nothing computed them); empty in every other mode."""
        if os.environ.get(ENV_MODE) != "compute":
            return {}
        spans, epoch = self._spans(), self.recorder._epoch
        computed = compute_ledger.summarise(compute_ledger.LEDGER.since(self.computed_before),
                                            lambda stamp: phase_holding(spans, self.offset(stamp - epoch)))
        for phase, calls in device_calls.items():
            refused = [{"by": compute_ledger.REFUSED, "name": call["name"], "detail": call["where"],
                        "count": call["count"]} for call in calls if call["result"] == REFUSAL_RESULT]
            if refused:
                computed.setdefault(phase, []).extend(refused)
        return computed

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


def merge_imports(earlier: tuple[int, list[dict], list[dict]], later: tuple[int, list[dict], list[dict]],
                  watch: tuple[str, ...]) -> tuple[int, list[dict], list[dict]]:
    """One phase's :meth:`ProbeState.phase_imports` from those of its earlier and later loads: what it would be
    for all of them at once (a pattern's module is the one it names exactly, else its first load)."""
    before = {entry["pattern"]: entry for entry in earlier[2]}
    after = {entry["pattern"]: entry for entry in later[2]}
    watched = []
    for pattern in watch:
        first, then = before.get(pattern), after.get(pattern)
        if first is None or then is None:
            either = first or then
            if either:
                watched.append(either)
            continue
        chosen = then if first["module"] != pattern and then["module"] == pattern else first
        watched.append({**chosen, "count": first["count"] + then["count"]})
    return earlier[0] + later[0], [*earlier[1], *later[1]], watched


@dataclass
class FrozenImports:
    """A module zygote's loads by phase, with each phase's summary part per (watch, list_modules)."""

    #: how many import attempts there were when they were frozen: a child's own come after
    mark: int
    by_phase: dict[str, list[ImportRecord]] = field(default_factory=dict)
    parts: dict[tuple, tuple[int, list[dict], list[dict]]] = field(default_factory=dict)

    def imports_of(self, name: str, state: ProbeState) -> tuple[int, list[dict], list[dict]]:
        """:meth:`ProbeState.phase_imports` of a frozen phase, computed once per setting of what it reads.
        A module's entries keep their start: the waits a child adds come after every frozen load."""
        key = (name, state.watch, state.list_modules)
        if key not in self.parts:
            self.parts[key] = state.phase_imports(self.by_phase[name])
        return self.parts[key]


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
        source = trigger.source()
        if source:
            lines.append(f"      {source}")
    return "\n".join(lines)


def _explaining_record(records: list[ImportRecord], pattern: str) -> ImportRecord:
    """The package a pattern names explains best, though it loads after the submodule asked for."""
    return next((r for r in records if r.name == pattern), records[0])


def new_state(nodeid: str, isolation: str, baseline_label: str, preload=(), recorder: ImportRecorder = RECORDER,
              preload_source: str = "ini npu_lazy_preload", in_process_reason: str | None = None) -> ProbeState:
    """State for a test starting now: everything loaded so far is its baseline."""
    if not recorder.installed:
        recorder.install()
    recorder.sweep()
    DEVICE_CALLS.take_queued()
    return ProbeState(recorder=recorder, nodeid=nodeid, baseline_cutoff=recorder._now(),
                      isolation=isolation, baseline_label=baseline_label, preload=tuple(preload),
                      attempts_before=len(recorder.attempts), preload_source=preload_source,
                      in_process_reason=in_process_reason, device_calls_before=len(DEVICE_CALLS.calls),
                      computed_before=len(compute_ledger.LEDGER.entries))


_ACTIVE: ProbeState | None = None


def active_state() -> ProbeState | None:
    return _ACTIVE


def set_active_state(state: ProbeState | None) -> None:
    global _ACTIVE
    _ACTIVE = state

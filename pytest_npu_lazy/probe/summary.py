"""One test's summary: its phases, what each loaded and called, and how the test was run.

It is built once, where the facts are: :meth:`.state.ProbeState.summary`
in the process that ran the test, or :meth:`Summary.reached` in the pytest
process for a child that died before its teardown report (the phases it
streamed home, nothing they loaded). It travels as :meth:`Summary.to_dict`
(the teardown report's ``npu_lazy`` attribute, serialised by pytest and
pytest-xdist like any report attribute) and is read back with
:meth:`Summary.from_dict` once, by the reporter; the terminal summary, the
JSON report, JUnit properties and the budget gate all read that one object.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Iterable, Optional, TypedDict

#: The attributes a test's reports carry for the plugin, serialised with them from any child or worker:
#: the teardown report's :meth:`Summary.to_dict`; a failure of a test that could not be judged (shown as
#: ERROR); a broken guarantee as data (:func:`.fixture.broken_guarantee`)
SUMMARY_ATTRIBUTE = "npu_lazy"
ERROR_ATTRIBUTE = "npu_lazy_error"
VIOLATION_ATTRIBUTE = "npu_lazy_violation"

#: The modules of the deferred-loading guarantees: what a failing phase explains and the reports follow,
#: unless ini ``npu_lazy_watch`` names others.
DEFAULT_WATCH = ("torch._dynamo", "torch._inductor", "torch_npu._inductor", "triton")


class PhaseSummary(TypedDict, total=False):
    """One phase of a summary, as plain data (docs/reports.md describes each key)."""

    name: str
    parent: Optional[str]
    #: seconds from the test's start, waits of a spare child not counted
    start: float
    duration: float
    #: modules first loaded in the phase; None where a dead child could not say
    module_count: Optional[int]
    #: each module with importer, start and duration; empty unless a report of the run reads them
    modules: list
    #: per watched pattern with a first load here: the module that explains it and its import chain
    watched: list
    device_calls: list
    #: under --npu-lazy-cann=compute, what computed each operator and kernel: ``by``, ``name``, ``detail``, ``count``
    computed: list
    #: the phase was still open when the child died
    unfinished: bool


@dataclass(frozen=True)
class Summary:
    """What the reports know of one isolated test."""

    #: "fork", "spawn" or "in-process"
    isolation: str
    #: where the test started from, in words: "a zygote with preload ['torch'], ..."
    baseline: str
    preload: tuple[str, ...] = ()
    blocked: tuple[str, ...] = ()
    watch: tuple[str, ...] = DEFAULT_WATCH
    phases: tuple[PhaseSummary, ...] = ()
    #: "cold", "warm", "mixed", "uncached" or None (nothing compiled): the state the test's compilations met,
    #: from torch's counters; the budget compares like with like
    inductor_cache: Optional[str] = None
    #: the cache the plugin gave the test: "cold", "empty" or "shared" (probe/inductor_cache.py)
    inductor_cache_policy: Optional[str] = None
    #: why no device call could be recorded (None: they were)
    device_calls_unavailable: Optional[str] = None
    device_calls_dropped: int = 0
    #: what the test kept with ``npu_lazy.record``
    records: dict = field(default_factory=dict)
    #: each compiled call compared with eager (``npu_lazy.compile``): ``phase``, ``reference``, ``passed``, and per
    #: output and gradient what computed it (``by``: a Triton kernel in the interpreter, the host's ATen, a device)
    checks: tuple = ()
    #: the CANN mode the test ran under (--npu-lazy-cann): a compute pass is never read as a device pass
    cann_mode: Optional[str] = None
    #: the child died before its teardown report: the phases it reached, not what they loaded
    incomplete: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data, the inverse of :meth:`from_dict`."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("preload", "blocked", "watch", "phases", "checks"):
            data[name] = list(data[name])
        data["records"] = dict(self.records)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Summary":
        """Read a summary back; a key it lacks keeps its default (a summary written by hand, or by an older
        plugin), a key it does not know is ignored."""
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        for name in ("preload", "blocked", "watch", "phases", "checks"):
            if name in values:
                values[name] = tuple(values[name])
        values.setdefault("isolation", "fork")
        values.setdefault("baseline", "")
        return cls(**values)

    @classmethod
    def reached(cls, settings, phases: Iterable[PhaseSummary]) -> "Summary":
        """A dead child's summary: the test's ``settings`` (a TestSettings) and the phases it streamed home."""
        return cls(isolation=settings.isolation, baseline=settings.baseline.label,
                   preload=tuple(settings.baseline.preload), blocked=tuple(settings.block),
                   watch=tuple(settings.watch), phases=tuple(phases), incomplete=True)

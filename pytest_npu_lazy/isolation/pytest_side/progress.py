"""How far a child got, from the ``phase`` messages it streams: what a crashed or killed test still reports.

A child attaches its full summary (phases, modules, watched first loads) to
its teardown report. A child that segfaults or is killed at its timeout
never writes one; its phases reached it already, one message as each
starts and ends. From them the pytest process gives the reports it writes
for the dead child real durations, and a summary with the phases reached,
the last one open until the child died. What modules they loaded died with
the child: ``module_count`` is None there, and the budget gate skips the test.
"""

from __future__ import annotations

import time

from ...probe.summary import Summary
from ..messages import Phase

#: the report's ``when`` -> the runner phase it covers
RUNNER_PHASE_OF = {"setup": "setup", "call": "test", "teardown": "teardown"}


class PhaseProgress:
    """The phases one child reported, in the order they started."""

    def __init__(self) -> None:
        self.phases: dict[str, dict] = {}
        self._received: dict[str, float] = {}  # phase -> when its start arrived, on this process's clock

    def update(self, phase: Phase) -> None:
        """One Phase message: a start (duration None) or an end."""
        known = self.phases.setdefault(phase.name, {"parent": phase.parent, "start": phase.start,
                                                    "duration": phase.duration})
        if phase.duration is None:
            self._received.setdefault(phase.name, time.monotonic())
        else:
            known["duration"] = phase.duration

    def elapsed(self, name: str) -> float:
        """How long phase ``name`` ran: as reported when it ended, else from its start until now."""
        phase = self.phases.get(name)
        if phase is None:
            return 0.0
        if phase["duration"] is not None:
            return phase["duration"]
        return time.monotonic() - self._received.get(name, time.monotonic())

    def summary(self, settings) -> Summary:
        """The summary of a child that died: the test's ``settings`` and the phases it reached."""
        return Summary.reached(settings, [
            {"name": name, "parent": phase["parent"], "start": phase["start"], "duration": self.elapsed(name),
             "unfinished": phase["duration"] is None, "module_count": None, "modules": [], "watched": []}
            for name, phase in self.phases.items()])

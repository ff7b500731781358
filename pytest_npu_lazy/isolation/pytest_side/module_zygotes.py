"""Module zygotes as the pytest process keeps them: which tests share one, how many live, when each goes.

Tests share a module zygote when they are in the same file and their
settings would make the same import: the same baseline, blocks and tracked
functions (a different timeout or watch list changes nothing about the
import). A module zygote lives while its module's tests run: it is stopped
after the last of them where the pytest process knows which tests it runs
(not under pytest-xdist, whose workers learn their tests one at a time),
when more than ``limit`` are alive or their private memory passes
``memory_limit`` (least recently used first), and at the end of the session.
A module whose zygote could not be used (it died importing the module,
refused to fork, did not collect within the test's timeout) runs its tests
as before: each child imports and collects its own test, so the outcome is
the one an isolated test always had.

Where the pytest process knows the order of its tests, the module zygotes of
the next modules start while the current module's tests run (:meth:`ahead_of`),
so the first test of a module does not wait for its module's import and
collection, a wait the median cost per test hides and the session's wall
time does not.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Protocol

import pytest

from ...settings import Baseline, TestSettings
from ..target import Target


#: how far ahead module zygotes start: the modules whose first test is at most this many tests away
AHEAD_TESTS = 20


@dataclass
class ModuleRun:
    """Consecutive tests of one module zygote's, as they will run: its key, its first test, how many."""

    key: "ModuleKey"
    item: pytest.Item
    settings: TestSettings
    tests: int = 1


@dataclass(frozen=True)
class ModuleKey:
    baseline: Baseline
    path: str
    block: tuple[str, ...]
    track: tuple[str, ...]

    def describe(self) -> str:
        return f"module zygote for {self.path}"


def module_key(item: pytest.Item, settings: TestSettings) -> ModuleKey | None:
    """The module zygote ``item`` runs from; None for an item outside a plain file (its own collection)."""
    target = Target.of(item)
    if not target.names or "::" in target.argument or "[" in target.argument:  # pytest would parse those
        return None
    return ModuleKey(settings.baseline, target.argument, settings.block, settings.track)


def module_target(item: pytest.Item) -> Target:
    """The item's file as a target: collected whole, with every hook, as pytest collects a file argument."""
    target = Target.of(item)
    files = [node for node in item.listchain() if isinstance(node, pytest.File)]
    return Target(files[-1].nodeid, target.argument, (), {}, target.basetemp)


def private_bytes(pid: int) -> int:
    """Memory only this process holds (its copy-on-write pages written since the fork), from /proc."""
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith(("Private_Clean:", "Private_Dirty:")):
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return total


class _Zygote(Protocol):
    """What this registry does with a module zygote (handles.ZygoteHandle, which imports this module)."""

    def close(self) -> None: ...


class ModuleZygotes:
    """The live module zygotes of one pytest process (one per xdist worker), by key, least recently used first."""

    def __init__(self, limit: int, memory_limit: int, counting: bool) -> None:
        self.limit = limit
        self._memory_limit = memory_limit
        self.counting = counting
        self._live: OrderedDict[ModuleKey, _Zygote] = OrderedDict()
        self._unusable: set[ModuleKey] = set()
        self._remaining: Counter[ModuleKey] = Counter()
        #: counting: each module's tests in all, and the children its zygotes handed out so far (:meth:`spare_after`)
        self._expected: Counter[ModuleKey] = Counter()
        self._taken: Counter[ModuleKey] = Counter()
        self._memory: dict[ModuleKey, int] = {}
        #: module zygotes whose child runs a test now: stopping one would kill that test
        self._busy: set[ModuleKey] = set()
        #: the modules in the order their tests run (a module twice where a plugin reorders across files)
        self.runs: list[ModuleRun] = []
        self._run_at = 0

    # -- what the pool asks and tells about one key: the sets stay in here, each changed in one place -------

    def peek(self, key: ModuleKey):
        """The live zygote of ``key`` or None, without counting as a use (a look ahead is not one)."""
        return self._live.get(key)

    def usable(self, key: ModuleKey) -> bool:
        """Whether a zygote of ``key`` may serve its tests: not given up on, and never failed to start."""
        return key not in self._unusable

    def start_failed(self, key: ModuleKey) -> None:
        """Its zygote could not be started: this module's tests collect in their own children from now on."""
        self._unusable.add(key)

    def serving(self, key: ModuleKey) -> None:
        """A child of ``key``'s zygote runs a test now: stopping the zygote would kill that test (until
        :meth:`done_with`)."""
        self._busy.add(key)

    def seen_ready(self, key: ModuleKey) -> bool:
        """Whether ``key``'s zygote was seen ready before (and measured then: :meth:`measured`)."""
        return key in self._memory

    @property
    def enabled(self) -> bool:
        return self.limit > 0

    def expect(self, key: ModuleKey | None, item: pytest.Item, settings: TestSettings) -> None:
        """One more test of ``key`` will run here (counted at collection, when the process runs all it collected)."""
        if key is not None and self.counting:
            self._remaining[key] += 1
            self._expected[key] += 1
            if self.runs and self.runs[-1].key == key:
                self.runs[-1].tests += 1
            else:
                self.runs.append(ModuleRun(key, item, settings))

    def spare_after(self, key: ModuleKey | None) -> bool:
        """A child of ``key``'s zygote was just taken: whether to fork the next one ahead. Not after the module's
        last test where every test is known (counting): that child would be forked and killed unused, a fork and a
        child's start for nothing, one a module. A test run again (a rerun plugin) forks its child when it asks."""
        if key is None or not self.counting:
            return True
        self._taken[key] += 1
        return self._taken[key] < self._expected[key]

    def replan(self, upcoming: list[tuple[ModuleKey | None, pytest.Item, TestSettings]]) -> None:
        """Where tests arrive a batch at a time (a pytest-xdist worker, not counting): the runs as now known, the
        running test's first; what :meth:`ahead_of` reads. Counting never closes a zygote here: a later batch
        may bring more of a module's tests, so they go by the count and memory limits, as before."""
        if self.counting:
            return
        runs: list[ModuleRun] = []
        for key, item, settings in upcoming:
            if key is None:
                continue
            if runs and runs[-1].key == key:
                runs[-1].tests += 1
            else:
                runs.append(ModuleRun(key, item, settings))
        self.runs, self._run_at = runs, 0

    def ahead_of(self, key: ModuleKey) -> list[ModuleRun]:
        """The runs after this run of ``key``'s, nearest first, up to the first one more than
        :data:`AHEAD_TESTS` tests away; under pytest-xdist, of the tests its worker was sent (:meth:`replan`)."""
        for at in range(self._run_at, len(self.runs)):
            if self.runs[at].key == key:
                self._run_at = at
                break
        else:
            return []
        ahead, between = [], 0
        for index in range(at + 1, len(self.runs)):  # not a slice: that copies the rest at every test
            if between > AHEAD_TESTS:
                break
            ahead.append(self.runs[index])
            between += self.runs[index].tests
        return ahead

    def room_ahead(self) -> bool:
        """Whether one more may start before it is needed: without stopping one, under the count and, if it
        is as large as the largest so far, under the memory limit."""
        if len(self._live) >= self.limit:
            return False
        largest = max(self._memory.values(), default=0)
        return self._held() + largest <= self._memory_limit

    def _held(self) -> int:
        """The private memory the live ones hold, as last measured."""
        return sum(self._memory.get(key, 0) for key in self._live)

    def get(self, key: ModuleKey):
        zygote = self._live.get(key)
        if zygote is not None:
            self._live.move_to_end(key)
        return zygote

    def add(self, key: ModuleKey, zygote: _Zygote) -> None:
        self._live[key] = zygote

    def measured(self, key: ModuleKey, pid: int) -> None:
        """After its collection: what it holds; stop the least recently used while over a limit."""
        self._memory[key] = private_bytes(pid)
        while len(self._live) > self.limit or self._held() > self._memory_limit:
            if not self._stop_oldest(keep=key):
                break

    def room_for_one(self) -> None:
        """Before starting one: stop the least recently used so the new one fits the count."""
        while len(self._live) >= self.limit and self._stop_oldest():
            pass

    def _stop_oldest(self, keep: ModuleKey | None = None) -> bool:
        """Stop the least recently used one that serves no running test; False when there is none."""
        for key in self._live:
            if key != keep and key not in self._busy:
                self.close(key)
                return True
        return False

    def give_up(self, key: ModuleKey) -> None:
        """This module's tests collect in their own children from now on."""
        self.start_failed(key)
        self.close(key)

    def done_with(self, key: ModuleKey | None) -> None:
        """A test of ``key`` ended: after the last one its zygote goes."""
        self._busy.discard(key)
        if key is None or not self.counting or key not in self._remaining:
            return
        self._remaining[key] -= 1
        if self._remaining[key] <= 0:
            del self._remaining[key]
            self.close(key)

    def close(self, key: ModuleKey) -> None:
        zygote = self._live.pop(key, None)
        self._memory.pop(key, None)
        if zygote is not None:
            zygote.close()

    def shutdown(self) -> None:
        for key in list(self._live):
            self.close(key)

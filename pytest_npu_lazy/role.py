"""Which process of a run this is, decided once: every feature reads the answer instead of asking pytest-xdist,
the environment or the plugin manager itself.

One run of the plugin spans several processes, and each feature acts in some of them only: the reports are
written where pytest's reports are logged for good (the pytest process, or xdist's controller), zygotes are
forked where tests run (never in xdist's controller), a test child neither isolates nor reports, a worker ends
with its controller. Asked in each feature, the same question was answered three ways (xdist's ``workerinput``,
its ``dsession`` plugin, ``config.option.dist``) and the answers disagreed at the edges (``--dist load`` without
workers). Here it is asked once, as xdist's own ``is_xdist_worker`` / ``is_xdist_controller`` ask it, and kept in
the config's stash.

The role is decided at configure (xdist settles ``option.dist`` in its ``pytest_cmdline_main``, before it), and
changes once at most: a process forked to run one test (a test child, and a module zygote that prepares them)
becomes a child with :func:`become_isolated_child`. Imports nothing of the package: every layer reads it.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, replace
from typing import Any

import pytest

#: the descriptor of a spawned child's channel, in its environment (a fresh ``python -m pytest``)
CHILD_FD_ENV = "PYTEST_NPU_LAZY_CHILD_FD"
#: the file a mutation run's in-run plugin appends its events to; set by ``python -m pytest_npu_lazy.mutate``
MUTATION_RESULTS_ENV = "PYTEST_NPU_LAZY_MUTATE_RESULTS"


class Process(enum.Enum):
    """The kinds of process a pytest run of this plugin has."""

    #: a plain pytest process: collects, runs (or isolates) and reports its tests
    IN_PROCESS = "in-process"
    #: pytest-xdist's controller: collects nothing itself, runs no test, logs every worker's reports
    XDIST_CONTROLLER = "xdist controller"
    #: a pytest-xdist worker: runs tests, its reports are logged by the controller
    XDIST_WORKER = "xdist worker"
    #: a process forked from a zygote to run one test (or a module zygote preparing such children)
    ISOLATED_CHILD = "isolated child"
    #: a fresh ``python -m pytest`` started to run one test (spawn isolation)
    SPAWNED_CHILD = "spawned child"


@dataclass(frozen=True)
class Role:
    """This process's place in the run, and what follows from it."""

    process: Process
    #: the channel to the pytest process, in a spawned child
    child_fd: int | None = None
    #: where a mutation run's in-run plugin writes its events (None: not a mutation run)
    mutation_results: str | None = None

    @property
    def worker(self) -> bool:
        return self.process is Process.XDIST_WORKER

    @property
    def controller(self) -> bool:
        return self.process is Process.XDIST_CONTROLLER

    @property
    def child(self) -> bool:
        """Runs one test for another process: forked or spawned."""
        return self.process in (Process.ISOLATED_CHILD, Process.SPAWNED_CHILD)

    @property
    def reports(self) -> bool:
        """Where pytest's reports are logged for good: the reports are written here, once for the run."""
        return self.process in (Process.IN_PROCESS, Process.XDIST_CONTROLLER)

    @property
    def runs_tests(self) -> bool:
        """Runs tests itself (xdist's controller hands them to its workers)."""
        return not self.controller


_ROLE = pytest.StashKey[Role]()


def _decide(config: pytest.Config) -> Role:
    """The spawned child's descriptor leaves the environment here, so that a pytest the test starts itself
    is not taken for a spawned child too."""
    mutation_results = os.environ.get(MUTATION_RESULTS_ENV) or None
    fd = os.environ.pop(CHILD_FD_ENV, None)
    if fd is not None:
        return Role(Process.SPAWNED_CHILD, child_fd=int(fd), mutation_results=mutation_results)
    if hasattr(config, "workerinput"):
        return Role(Process.XDIST_WORKER, mutation_results=mutation_results)
    option = config.option
    if getattr(option, "dist", "no") != "no" and getattr(option, "tx", None):
        return Role(Process.XDIST_CONTROLLER, mutation_results=mutation_results)
    return Role(Process.IN_PROCESS, mutation_results=mutation_results)


def of(config: pytest.Config) -> Role:
    """This process's role: decided on the first question (at configure), the same answer after."""
    role = config.stash.get(_ROLE, None)
    if role is None:
        role = config.stash[_ROLE] = _decide(config)
    return role


def become_isolated_child(config: pytest.Config) -> None:
    """A process forked from a zygote now runs (or prepares) one test for the pytest process."""
    config.stash[_ROLE] = replace(of(config), process=Process.ISOLATED_CHILD)


def xdist_worker_input(config: pytest.Config) -> dict[str, Any] | None:
    """What xdist's controller handed this worker (``node.workerinput`` there); None outside a worker."""
    return getattr(config, "workerinput", None)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Decided before any feature's configure asks (each would decide the same on its first question)."""
    of(config)

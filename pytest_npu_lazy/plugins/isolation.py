"""The isolation plugin: marked tests run in clean interpreters, forked from zygotes or spawned.

In the pytest process (or an xdist worker) it registers the controller that
sends each isolated test to a child, and forks the root zygote once every
plugin's session start has run, before any test module is imported. In a
spawned child it registers the session that runs the one test it was started
for, and nothing else.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Iterator

import pytest

from .. import role
from ..errors import MarkerError
from ..settings import add_isolation_options, session_resolver

if TYPE_CHECKING:
    from ..isolation.pytest_side.pool import ZygotePool

#: the zygotes of this process, made at configure when isolation may be needed, forked from at session start
_POOL: pytest.StashKey[ZygotePool] = pytest.StashKey()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_isolation_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    this = role.of(config)
    if this.process is role.Process.SPAWNED_CHILD:
        from ..isolation.child_side.child import SpawnedSession

        assert this.child_fd is not None  # decided with the role
        config.pluginmanager.register(SpawnedSession(config, this.child_fd), "npu_lazy_spawned_session")
        return
    if this.worker:
        _end_with_controller()
    resolver = session_resolver(config)
    if resolver.isolate == "off":
        return
    from ..isolation.pytest_side.controller import IsolationController, Launcher
    from ..isolation.pytest_side.module_zygotes import ModuleZygotes
    from ..isolation.pytest_side.pool import ZygotePool
    from ..isolation.pytest_side.spawn import SpawnLauncher

    pool = config.stash[_POOL] = ZygotePool(session=None, module_zygotes=ModuleZygotes(
        resolver.module_zygotes, resolver.module_zygote_memory, counting=not this.worker))
    launchers: dict[str, Launcher] = {"fork": pool, "spawn": SpawnLauncher(config)}
    config.pluginmanager.register(IsolationController(config, resolver, launchers, worker=this.worker),
                                  "npu_lazy_controller")
    config.add_cleanup(pool.shutdown)


def _end_with_controller() -> None:
    """An xdist worker ends (SIGTERM, taking its zygotes along) the moment its controller dies.

    Left alone, a worker whose controller was killed (SIGTERM from CI, a
    timeout) finishes its test and then fails to send the results in
    xdist's session-finish hook wrapper: a PluggyTeardownRaisedWarning and an
    OSError per worker after the run already ended.
    """
    import signal

    from ..forks.processes import die_with_parent

    die_with_parent(signal.SIGTERM)
    if os.getppid() == 1:  # the controller was already gone
        os.kill(os.getpid(), signal.SIGTERM)


@pytest.hookimpl(wrapper=True)
def pytest_sessionstart(session: pytest.Session) -> Iterator[None]:
    """Fork the root zygote after every plugin's session start, before any test module is imported.

    The xdist controller and --collect-only never run a test here, so need no zygote.
    """
    result = yield
    pool = session.config.stash.get(_POOL, None)
    if pool is not None and role.of(session.config).runs_tests and not session.config.option.collectonly:
        from ..isolation.child_side.inherit import remember_pytest_process

        remember_pytest_process()  # what children restore: the handlers an in-process test sees
        pool.session = session
        pool.start_root()
    return result


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the zygotes the collected tests need, so their preloads overlap collection's end."""
    pool = session.config.stash.get(_POOL, None)
    if pool is None or pool.root_pid is None:
        return
    resolver = session_resolver(session.config)
    baselines = []
    for item in session.items:
        try:
            settings = resolver.for_item(item)
        except MarkerError:
            continue
        if settings.isolated and settings.isolation == "fork":
            pool.expect(item, settings)
            if settings.baseline not in baselines:
                baselines.append(settings.baseline)
    pool.warm(baselines)

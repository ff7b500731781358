"""pytest hooks of pytest-npu-lazy: options, markers and the fixture, wired to the modules that do the work.

Importing this module must stay cheap and must never import torch, torch_npu
or triton: the plugin exists to watch those imports.
"""

from __future__ import annotations

import os
from typing import Iterator

import pytest

from .probe import fixture as probe
from .errors import NpuLazyError
from .probe.recorder import RECORDER
from .settings import MARKER_HELP, MarkerError, Resolver, add_options, cann_mode, map_settings

_STATE_KEY = pytest.StashKey["_PluginState"]()
_CANN_KEY = pytest.StashKey["CannStatus"]()
_TRACER_KEY = pytest.StashKey["EvidenceTracer"]()


class _PluginState:
    """What this pytest process holds for the session."""

    def __init__(self, config: pytest.Config) -> None:
        from .reports.reporter import needs_module_lists

        self.resolver = Resolver(config, list_modules=needs_module_lists(config))
        self.pool = None  # ZygotePool, created at session start when isolation may be needed


def pytest_addoption(parser: pytest.Parser) -> None:
    from .reports.reporter import add_options as add_report_options

    add_options(parser)
    add_report_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Before any conftest runs: record imports, refuse a torch torch_npu cannot use, make torch_npu importable."""
    RECORDER.install(phase="pytest")
    _refuse_cuda_torch()
    _activate_cann(early_config)
    if getattr(early_config.known_args_namespace, "npu_lazy_take_map", False):
        _start_map_tracer(early_config)  # before conftests: what they import of torch_npu is measured too


def _start_map_tracer(config: pytest.Config) -> None:
    if _TRACER_KEY in config.stash:
        return
    from .selection.pytest_side import start_tracer
    from .selection.sources import SelectionError

    try:
        config.stash[_TRACER_KEY] = start_tracer(tuple(config.getini("npu_lazy_map_packages")))
    except SelectionError as exc:
        raise pytest.UsageError(f"pytest-npu-lazy: {exc}") from None


def _wire_selection(config: pytest.Config, reports: bool) -> None:
    """Taking a selection map, or selecting by a change with one. ``reports``: this process reports the run
    (not a spawned test child)."""
    settings = map_settings(config)
    controller = getattr(config.option, "dist", "no") != "no" and not hasattr(config, "workerinput")
    if settings.take:
        _start_map_tracer(config)  # loaded after the conftests (an ini file's -p, pytester)
        from .selection.pytest_side import MapTaker, MapWriter

        tracer = config.stash[_TRACER_KEY]
        if controller:
            tracer.coverage.stop()  # xdist's controller runs no test
        else:
            config.pluginmanager.register(MapTaker(tracer), "npu_lazy_map_taker")
        if reports and not hasattr(config, "workerinput"):
            config.pluginmanager.register(MapWriter(settings.path, settings.packages, list(config.invocation_params.args)),
                                          "npu_lazy_map_writer")
    if settings.changed is not None and reports:
        from .selection.map import SelectionMap
        from .selection.pytest_side import ChangeFilter, changes_for
        from .selection.sources import SelectionError

        try:
            change_filter = ChangeFilter(config, changes_for(config, settings.changed),
                                         SelectionMap.read(settings.path), settings.path, settings.ignore)
        except SelectionError as exc:
            raise pytest.UsageError(f"pytest-npu-lazy: {exc}") from None
        config.pluginmanager.register(change_filter, "npu_lazy_change_filter")


def _refuse_cuda_torch() -> None:
    """A CUDA torch beside torch_npu aborts the first ``import torch`` with a message that hides the cause."""
    import sys

    from .torch_build import problem

    text = problem(python=sys.executable)
    if text is not None:
        raise pytest.UsageError(f"pytest-npu-lazy: {text}")


def _activate_cann(config: pytest.Config) -> None:
    if _CANN_KEY in config.stash:
        return
    from .cann import CannError, activate

    try:
        status = config.stash[_CANN_KEY] = activate(cann_mode(config))
    except CannError as exc:
        raise pytest.UsageError(f"pytest-npu-lazy: {exc}") from None
    from .probe.device_calls import DEVICE_CALLS

    DEVICE_CALLS.start(lambda: RECORDER.phase, status.active)  # zygotes and children inherit it
    if status.active in ("emulate", "compute"):
        from .cann import triton_driver

        RECORDER.on_load("triton.backends", triton_driver.install)
    if status.active == "compute":
        from .cann import compute

        compute.install(RECORDER.on_load)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    RECORDER.install(phase="pytest")  # when loaded after conftests (pytester, -p in an ini file)
    if _CANN_KEY not in config.stash:
        _refuse_cuda_torch()
    _activate_cann(config)
    cann = config.stash[_CANN_KEY]
    from .isolation.messages import CHILD_FD_ENV
    from .reports import known_warnings
    from .reports.environment import NpuGate
    from .reports.reporter import Reporter

    known_warnings.hide(config, cann)  # the header says why; the user's own filters still win
    from .python_c import pool as run_python_zygotes

    run_python_zygotes.activate(config)  # run_python forks from zygotes while this session lasts
    config.add_cleanup(lambda: run_python_zygotes.deactivate(config))
    state = config.stash[_STATE_KEY] = _PluginState(config)
    fd = os.environ.pop(CHILD_FD_ENV, None)
    _wire_selection(config, reports=fd is None)
    gate = NpuGate(cann) if fd is None else None
    config.pluginmanager.register(Reporter(config, state.resolver, cann, gate), "npu_lazy_reporter")
    if fd is not None:
        from .isolation.child_side.child import SpawnedSession

        config.pluginmanager.register(SpawnedSession(config, int(fd)), "npu_lazy_spawned_session")
        return
    if hasattr(config, "workerinput"):
        _end_with_controller()
    config.pluginmanager.register(gate, "npu_lazy_npu_gate")
    if config.getoption("npu_lazy_require_npu") and not hasattr(config, "workerinput"):
        gate.require()
    if state.resolver.isolate == "off":
        return
    from .isolation.pytest_side.controller import IsolationController
    from .isolation.pytest_side.spawn import SpawnLauncher
    from .isolation.pytest_side.module_zygotes import ModuleZygotes
    from .isolation.pytest_side.pool import ZygotePool

    resolver = state.resolver
    state.pool = ZygotePool(session=None, module_zygotes=ModuleZygotes(
        resolver.module_zygotes, resolver.module_zygote_memory, counting=not hasattr(config, "workerinput")))
    launchers = {"fork": state.pool, "spawn": SpawnLauncher(config)}
    config.pluginmanager.register(IsolationController(config, state.resolver, launchers), "npu_lazy_controller")
    config.add_cleanup(state.pool.shutdown)


def _end_with_controller() -> None:
    """An xdist worker ends (SIGTERM, taking its zygotes along) the moment its controller dies.

    Left alone, a worker whose controller was killed (SIGTERM from CI, a
    timeout) finishes its test and then fails to send the results in
    xdist's session-finish hook wrapper: a PluggyTeardownRaisedWarning and an
    OSError per worker after the run already ended.
    """
    import signal

    from .forks.processes import die_with_parent

    die_with_parent(signal.SIGTERM)
    if os.getppid() == 1:  # the controller was already gone
        os.kill(os.getpid(), signal.SIGTERM)


def pytest_report_header(config: pytest.Config) -> list[str]:
    from .reports.environment import describe

    from .probe import inductor_cache

    gate = config.pluginmanager.get_plugin("npu_lazy_npu_gate")
    policy = config.stash[_STATE_KEY].resolver.inductor_cache  # said under --npu-lazy-isolate=off too: one header
    lines = describe(config.stash[_CANN_KEY], gate.answer if gate else None).header_lines(
        verbose=config.option.verbose > 0, inductor_cache=(policy, inductor_cache.DESCRIPTIONS[policy]))
    change_filter = config.pluginmanager.get_plugin("npu_lazy_change_filter")
    if change_filter is not None:
        lines.extend(change_filter.header())
    writer = config.pluginmanager.get_plugin("npu_lazy_map_writer")
    if writer is not None:  # the settings it was made with, not resolved a second time
        lines.append(f"npu_lazy: taking a selection map (lines of {', '.join(writer.packages)} each test runs, "
                     f"measured by coverage.py) for {writer.path}")
    return lines


def _runs_no_tests(config: pytest.Config) -> bool:
    """The xdist controller and --collect-only never run a test here, so need no zygote."""
    return config.pluginmanager.has_plugin("dsession") or config.option.collectonly


@pytest.hookimpl(wrapper=True)
def pytest_sessionstart(session: pytest.Session) -> Iterator[None]:
    """Fork the root zygote after every plugin's session start, before any test module is imported."""
    result = yield
    state = session.config.stash.get(_STATE_KEY, None)
    if state is not None and state.pool is not None and not _runs_no_tests(session.config):
        from .isolation.child_side.inherit import remember_pytest_process

        remember_pytest_process()  # what children restore: the handlers an in-process test sees
        state.pool.session = session
        state.pool.start_root()
    return result


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the zygotes the collected tests need, so their preloads overlap collection's end."""
    state = session.config.stash.get(_STATE_KEY, None)
    if state is None or state.pool is None or state.pool.root_pid is None:
        return
    baselines = []
    for item in session.items:
        try:
            settings = state.resolver.for_item(item)
        except MarkerError:
            continue
        if settings.isolated and settings.isolation == "fork":
            state.pool.expect(item, settings)
            if settings.baseline not in baselines:
                baselines.append(settings.baseline)
    state.pool.warm(baselines)


def _phase_switch(item: pytest.Item, when: str) -> None:
    state = probe.active_state()
    if state is not None and state.nodeid == item.nodeid:
        state.runner_phase(when)


# Plain hooks, not wrappers: a wrapper's frames would show in the native traceback of every failing test.
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _phase_switch(item, "setup")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    _phase_switch(item, "test")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    _phase_switch(item, "teardown")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[pytest.TestReport]:
    report = yield
    if call.excinfo is not None and call.excinfo.errisinstance(NpuLazyError):
        report.npu_lazy_error = True  # shown as ERROR: the test could not be judged
    violation = getattr(call.excinfo.value, probe.VIOLATION_ATTRIBUTE, None) if call.excinfo is not None else None
    if violation is not None:
        setattr(report, probe.VIOLATION_ATTRIBUTE, violation)  # serialised with the report, from any child
    return report


def pytest_report_teststatus(report: pytest.TestReport) -> tuple[str, str, str] | None:
    if getattr(report, "npu_lazy_error", False) and report.failed:
        return "error", "E", "ERROR"
    return None


@pytest.fixture
def npu_lazy(request: pytest.FixtureRequest) -> Iterator[probe.NpuLazy]:
    """Deferred-loading probe: phases, compile-vs-eager, assert_(not_)loaded, ran, block."""
    resolver = request.config.stash[_STATE_KEY].resolver
    with probe.probe_for(request.node, lambda: resolver.for_item(request.node), resolver.isolate) as lazy:
        yield lazy
